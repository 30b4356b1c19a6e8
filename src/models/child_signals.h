/* child_signals.h - SIGCHLD and SIGUSR1 for a serving process that forks
 * children (the fork and prefork models). Both arrive through a self-pipe
 * that the model's loop polls, so reaping and passing SIGUSR1 on to the
 * children happen in the loop, not in a signal handler. */
#ifndef SPINDLE_MODELS_CHILD_SIGNALS_H
#define SPINDLE_MODELS_CHILD_SIGNALS_H

#include <stdbool.h>

#include "../sanitizers.h"

/* Creates the pipe and installs the handlers (SIGUSR1 also reopens this
 * process's logs). Returns the descriptor to poll, or -1 with errno set. */
int child_signals_open(void);
/* Restores the handlers that were there before and closes the pipe. */
void child_signals_close(void);
struct server;

/* fork() for a serving process's children (a fork connection, a prefork
 * worker). Stop signals are blocked across it, so before the child can handle
 * one it already dies with its parent (PDEATHSIG), has dropped the pipe above
 * and has a stop eventfd of its own: a stop sent to one child wakes that child
 * only, never its parent or siblings. Returns as fork() does. */
#include <sys/types.h>

pid_t child_fork(struct server *srv);
/* Empties the pipe; true when a SIGUSR1 came (pass it on to the children). */
bool child_signals_drain(void);

/* Test builds: a child that failed (crashed, or exited non-zero because a
 * sanitizer found a leak or UB) fails its parent's exit status too, and so the
 * serving process's and the master's, where production only logs it and serves
 * on. Sanitizer builds are test builds; -DSPINDLE_STRICT_EXIT makes any build one. */
#ifdef SPINDLE_SANITIZED
#define SPINDLE_STRICT_EXIT 1
#endif
#ifdef SPINDLE_STRICT_EXIT
#define CHILD_FAILURE_IS_FATAL true
#else
#define CHILD_FAILURE_IS_FATAL false
#endif

/* How a child reaped by waitpid() ended: false if it crashed or exited
 * non-zero. SIGKILL is not a failure: the parent's drain timeout (or a test)
 * sends it, and no sanitizer or crash ends a process with it. */
bool child_exit_ok(int status);

/* Ends a forked child that must not run the parent's atexit handlers or flush
 * the parent's stdio buffers (so _exit), after LeakSanitizer has checked it in
 * a sanitizer build (which _exit alone skips). */
_Noreturn void child_exit(int rc);

#endif
