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
/* In a freshly forked child: the same, so the child starts clean. */
void child_signals_in_child(void);
/* Empties the pipe; true when a SIGUSR1 came (pass it on to the children). */
bool child_signals_drain(void);

#endif
