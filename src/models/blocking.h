/* blocking.h - serve one connection from the calling thread: the shared body
 * of the iterative, fork, thread, pool and prefork models. */
#ifndef SPINDLE_MODELS_BLOCKING_H
#define SPINDLE_MODELS_BLOCKING_H

#include <sys/socket.h>

struct server;
struct wire;

/* Takes ownership of fd (non-blocking); returns when the connection is closed.
 * accepted_ns: when accept() returned it (stats_clock_ns), the first request's
 * "readable" stamp: its queue wait runs from there to the first read. */
void blocking_serve(const struct server *srv, int fd, const struct sockaddr *peer, socklen_t peerlen,
		    int64_t accepted_ns);

enum blocking_end {
	BLOCKING_CLOSED, /* the socket is closed and the conn freed */
	BLOCKING_IDLE,   /* waiting for the client's bytes (a request's, or those a linger
			    drops), none readable now: fd and c go back to the caller */
	BLOCKING_WAIT_WRITE, /* a response is pending and the socket's send buffer
				is full: fd and c go back to the caller */
	BLOCKING_YIELD,  /* had its turn and still has work: the caller queues it behind
			    the others */
};

/* Serves c on fd (non-blocking) until it closes, goes idle or waits for the
 * client to read. Used by the pool, which parks such connections in a poller
 * rather than hold a thread for a client that is slow or silent. */
enum blocking_end blocking_serve_until_idle(const struct server *srv, int fd, struct wire *c);

#endif
