/* pidfile.h - the master's process id in a file (`pid_file`), for an
 * operator's `kill -HUP $(cat FILE)` and a service manager's PIDFile=.
 *
 * The file is locked (flock) for the master's life: a second instance given
 * the same file finds it locked and refuses to start, while a file left by a
 * crashed one (nobody holds the lock) is taken over. */
#ifndef SPINDLE_PIDFILE_H
#define SPINDLE_PIDFILE_H

/* Whether path may become the pid file (pidfile_claim's checks, without
 * creating or writing it: --check). 0, or -1 after logging why. */
int pidfile_check(const char *path);
/* Creates or takes over path and writes this process's id to it. Returns
 * the descriptor holding the lock, or -1 after logging why. */
int pidfile_claim(const char *path);
/* Removes path and lets the lock go (at exit). */
void pidfile_release(const char *path, int fd);

#endif
