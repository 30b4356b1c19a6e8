/* overload.h - what a serving process does with requests it cannot serve in
 * time ([server] overload). `queue` lets them wait, as every server does;
 * `reject` answers a new connection 503 at once when the model is full (its
 * queue or max_connections) instead of leaving it in the backlog;
 * `shed` keeps the time requests wait for the server near overload_target by
 * answering 503 with Retry-After, cheaply, to those that waited longest once
 * the wait has stayed above it for an interval (CoDel's rule, over each
 * request's queue wait: conn.h, request timing), and at max_connections
 * answers a new connection 503 at once as `reject` does: there it would wait
 * in the backlog, where no request's wait is measured. */
#ifndef SPINDLE_OVERLOAD_H
#define SPINDLE_OVERLOAD_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

struct server;

enum overload_policy { OVERLOAD_QUEUE, OVERLOAD_REJECT, OVERLOAD_SHED };

/* How long the queue wait must stay above the target before shedding starts:
 * CoDel's interval, about a worst-case round trip. */
#define OVERLOAD_INTERVAL_MS 100

/* The controller, one per serving process and shared by its threads; its
 * fields are private to overload.c. */
struct overload {
	_Atomic int64_t above_since_ns; /* when the wait first went above the target, this streak; 0: it is below */
	_Atomic bool shedding;
	_Atomic uint64_t shed;          /* requests shed in this episode, for its log line */
	int64_t target_ns, interval_ns;
};

void overload_init(struct overload *o, int64_t target_ns, int64_t interval_ns);

/* A request starts after waiting wait_ns for the server (queue wait); now_ns
 * on the same clock. True: shed it. Logs when shedding starts and ends. */
bool overload_shed(struct overload *o, int64_t wait_ns, int64_t now_ns);

/* The serving process's controller, set up from its configuration. */
void overload_configure(enum overload_policy policy, int target_ms);
/* The session's question, as a request is handed to the site after waiting
 * wait_ns for the server: shed it? Nothing but a flag test under `queue`. */
bool overload_should_shed(int64_t wait_ns);

/* The limits a model can be full at, the softer first. */
enum overload_limit {
	OVERLOAD_ROOM,       /* none reached: it takes newcomers */
	OVERLOAD_QUEUE_FULL, /* its own queue of connections not yet picked up (pool, prefork) */
	OVERLOAD_AT_CAP,     /* max_connections open */
};

/* Whether a model full at limit goes on accepting and refuses each newcomer
 * (overload_refuse) rather than stop accepting. reject refuses at either
 * limit; shed only at the cap: a pool's queue it judges by the wait. */
bool overload_refuses(const struct server *srv, enum overload_limit limit);

/* A connection just accepted while the model is full (overload_refuses):
 * answers it 503 with Retry-After and Connection: close in one non-blocking
 * send, counts and logs it (reason "full" under reject, "connections" under
 * shed), and closes fd. Reads nothing but what already arrived (discarded unread,
 * so the close does not reset the answer away), opens no file, never blocks.
 * A model calls this and never formats HTTP itself. */
void overload_refuse(const struct server *srv, int fd, const struct sockaddr *peer, socklen_t len);

#endif
