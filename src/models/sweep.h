/* sweep.h - the clock of the event-driven models (epoll, uring, and pool's
 * poller): a sweep over the open connections every interval expires their
 * deadlines (conn_wants) and lets idle ones give their buffers back, and a
 * stop starts the drain time, after which the connections still open are
 * ended. The sweep says what is due for each connection; the model does it
 * with its own I/O. */
#ifndef SPINDLE_MODELS_SWEEP_H
#define SPINDLE_MODELS_SWEEP_H

#include <stdbool.h>
#include <stdint.h>

struct sweep {
	int interval_ms;
	int64_t next;           /* when the next sweep is due (conn_now_ms's clock) */
	bool stopping;          /* a stop began: connections drain, none is accepted */
	int64_t drain_deadline; /* ... and those still open then are ended */
	unsigned released;      /* idle connections that gave buffers back since the last trim */
	unsigned closed;        /* connections closed since the last sweep (sweep_closed) */
};

enum sweep_verdict {
	SWEEP_WAITING, /* its deadline is ahead: if it was idle the whole interval, its buffers can go */
	SWEEP_EXPIRED, /* its deadline passed: wire_timeout(), then let it do what it wants */
	SWEEP_DRAINED, /* the drain time is up: end it */
};

/* The first sweep is an interval from now. */
void sweep_init(struct sweep *s, int interval_ms);

/* How long the loop may sleep: until the next sweep if connections are open
 * or a trim may be due (0 if it is due), else for ever (-1); less if also_ms
 * (>= 0) is shorter. */
int sweep_wait_ms(const struct sweep *s, bool any_open, int also_ms);

/* True if a sweep is due at now; the next one is then an interval away. */
bool sweep_due(struct sweep *s, int64_t now);

/* What the sweep at now does with a connection whose deadline (from
 * wire_wants; -1: none) is given. */
enum sweep_verdict sweep_check(const struct sweep *s, int64_t deadline, int64_t now);

/* After a sweep that let `released` idle connections give their buffers
 * back: true (and the allocator's free pages, its thread arena's top and
 * the thread's cached pages go back to the kernel) once at least
 * SWEEP_TRIM_MIN have, when a sweep releases no more (the burst is over)
 * or SWEEP_TRIM_MAX have piled up. What connections free lies between the
 * long-lived structs of those that stay, or (all closed) in the arena's
 * top, where the allocator never trims on its own; a busy keep-alive
 * connection never releases, so a steady load never trims. */
#define SWEEP_TRIM_MIN 32
#define SWEEP_TRIM_MAX 4096
#define SWEEP_TOP_NUDGE (96 * 1024) /* a free this big trims a thread arena's top (sweep.c) */
bool sweep_settle(struct sweep *s, unsigned released);

/* A connection closed: it freed all it held, and the next sweep_settle
 * counts it as released (a burst of closes leaves the same holes). */
void sweep_closed(struct sweep *s);

/* A stop: the open connections get drain_ms to finish. */
void sweep_begin_stop(struct sweep *s, int drain_ms);

/* True once the drain time, and grace_ms after it, has passed. */
bool sweep_drain_over(const struct sweep *s, int64_t now, int grace_ms);

#endif
