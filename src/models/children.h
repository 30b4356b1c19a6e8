/* children.h - the children of a serving process that forks them (the fork
 * model's connections, prefork's workers): which are running, reaping those
 * that exit, passing a signal on to them all, and a stop's bounded drain
 * (SIGTERM, wait, SIGKILL the stragglers, reap them). SIGCHLD and SIGUSR1
 * come through child_signals' pipe, so all of it runs in the model's loop,
 * never in a signal handler. What a child is, and what its exit means (a
 * log line, a restart), stays with the model, in its exited() hook. */
#ifndef SPINDLE_MODELS_CHILDREN_H
#define SPINDLE_MODELS_CHILDREN_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

struct child {
	pid_t pid;
	int id; /* the model's name for it: prefork's worker index */
};

struct children {
	const char *model; /* starts the log lines: "fork", "prefork" */
	const char *noun;  /* the drain's word for them: "child(ren)" */
	int cap;           /* at most this many run at once */
	/* A child reaped (it has left the set), except those the drain's SIGKILL
	 * ends. owner is the model's, for the hook. */
	void (*exited)(struct children *ch, struct child kid, int status);
	void *owner;
	/* set by children_open() and after */
	struct child *run; /* the running children, unordered */
	int n;
	int sig_fd;        /* child_signals' pipe: poll it (children_wait does) */
	bool draining;     /* children_drain() has begun: exits are expected */
	bool failed;       /* one crashed or exited non-zero (see CHILD_FAILURE_IS_FATAL) */
};

/* Makes room for ch->cap children and opens child_signals' pipe (one set per
 * process). 0, or -1 after logging why. */
int children_open(struct children *ch);
void children_close(struct children *ch);

/* A child forked: one of the set now (there is room: n < cap). */
void children_add(struct children *ch, pid_t pid, int id);

/* Empties the signal pipe and reaps every child that has exited (each goes
 * to exited()); passes a SIGUSR1 that came on to the children left, which
 * hold their own descriptors for the log files. */
void children_reap(struct children *ch);

/* Sends sig to every child. A SIGTERM passes on how this process stops: a
 * reload's retirement stays one (the children's health checks keep answering
 * 200), anything else is a stop. */
void children_signal(const struct children *ch, int sig);

/* Sleeps until a child exits or SIGUSR1 comes, wake_fd or listen_fd is
 * readable (either may be -1: not watched), or timeout_ms passes (-1: no
 * limit). Then call children_reap(). */
void children_wait(const struct children *ch, int wake_fd, int listen_fd, int timeout_ms);

/* A stop: SIGTERM to every child, then waits for them until deadline (ms,
 * conn_now_ms's clock); SIGKILLs and reaps those still running then. */
void children_drain(struct children *ch, int64_t deadline);

#endif
