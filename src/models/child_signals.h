/* child_signals.h - SIGCHLD and SIGUSR1 for a serving process that forks
 * children (the fork and prefork models). Both arrive through a self-pipe
 * that the model's loop polls, so reaping and passing SIGUSR1 on to the
 * children happen in the loop, not in a signal handler. */
#ifndef SPINDLE_MODELS_CHILD_SIGNALS_H
#define SPINDLE_MODELS_CHILD_SIGNALS_H

#include <stdbool.h>

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

#endif
