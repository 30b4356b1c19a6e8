/* notify.h - the service manager's notification protocol (systemd's
 * sd_notify(3)): one datagram of "KEY=value" lines to $NOTIFY_SOCKET. Only
 * the master speaks it; without NOTIFY_SOCKET every call does nothing. */
#ifndef SPINDLE_NOTIFY_H
#define SPINDLE_NOTIFY_H

#include <stdbool.h>

/* Connects to $NOTIFY_SOCKET when set: an absolute path, or '@name' for
 * the abstract namespace. 0, or -1 after logging why (spindle then runs
 * without notifications; the manager sees no READY=1 and says so). */
int notify_open(void);
/* Whether notifications go anywhere. */
bool notify_enabled(void);
/* Sends one message: "READY=1", "STOPPING=1", "STATUS=...". Never blocks
 * long: the manager's socket is a datagram socket; a lost status is fine. */
void notify_send(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* "RELOADING=1" with the MONOTONIC_USEC the protocol asks for. */
void notify_reloading(void);
/* In a forked serving process: its copy of the socket is not its to use. */
void notify_close(void);

#endif
