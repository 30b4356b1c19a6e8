/* loops.h - N event loops, one thread each, under one connection cap shared
 * by them all (slots.h): the skeleton of the epoll and uring models. The
 * model brings the loop (its state, its set-up, its thread, its clean-up);
 * this sets every loop up, runs their threads, stops the others if one
 * cannot start, waits for all and cleans up. */
#ifndef SPINDLE_MODELS_LOOPS_H
#define SPINDLE_MODELS_LOOPS_H

#include <stddef.h>

struct server;
struct conn_slots;

struct loop_ops {
	const char *name; /* for log lines: "epoll" */
	size_t size;      /* of the model's loop state; each starts zeroed */
	/* Sets loop id (of nloops) up before any thread starts: 0, or -1
	 * after logging why (no loop runs then). */
	int (*init)(void *loop, const struct server *srv, int id, int nloops, struct conn_slots *slots);
	void *(*main)(void *loop); /* the loop's thread: returns once it has drained */
	/* After every thread has ended, for each loop init was called for
	 * (even if it failed): closes what is left. Returns the loop's exit
	 * status (non-zero after a fatal error it logged). */
	int (*fini)(void *loop);
};

/* Runs min(srv->workers, SLOTS_MAX_LOOPS) loops until they return; 0, or 1
 * after a logged error. Creates threads: never fork() after calling it. */
int loops_run(const struct server *srv, const struct loop_ops *ops);

#endif
