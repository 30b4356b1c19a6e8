/* blocking.c - one connection, one thread of control: try the I/O, and when
 * the socket is not ready, sleep in poll() until it is or a deadline passes. */
#include "blocking.h"

#include <errno.h>
#include <poll.h>
#include <unistd.h>

#include "../tls/wire.h"
#include "../log/log.h"
#include "../server.h"
#include "io.h"

#define BLOCKING_WRITE_GRACE_MS 5 /* see serve(): then a pool parks a writer */
#define BLOCKING_BUDGET 16        /* reads/writes before the deadline is checked, and
				     a pool's worker gives the connection a turn back */

static enum blocking_end serve(const struct server *srv, int fd, struct wire *c, bool until_idle)
{
	int64_t drain_deadline = -1;
	/* Try the I/O before polling (the bytes are usually there); only a short
	 * read or write, or EAGAIN, says a direction is not ready. */
	bool can_read = true, can_write = true;
	int steps = 0;

	for (;;) {
		int64_t deadline;
		if (drain_deadline < 0 && server_stopping()) {
			wire_drain(c);
			drain_deadline = conn_now_ms() + srv->cfg->drain_timeout_ms;
		}
		enum conn_want want = wire_wants(c, &deadline);
		if (want == CONN_WANT_CLOSE)
			break;
		if (++steps % BLOCKING_BUDGET == 0) {
			/* A client that keeps bytes flowing (flooding while we
			 * linger after an error, or pipelining as fast as it
			 * reads) never lets the I/O say "not ready": its deadline
			 * still applies, and a pool worker serves the others too. */
			int64_t now = conn_now_ms();
			if (drain_deadline >= 0 && now >= drain_deadline)
				break;
			if (deadline >= 0 && now >= deadline) {
				wire_timeout(c);
				continue;
			}
			if (until_idle && drain_deadline < 0)
				return BLOCKING_YIELD;
		}
		bool *ready = want == CONN_WANT_WRITE ? &can_write : &can_read;
		if (*ready || want == CONN_WANT_SHUTDOWN) {
			enum io_result r = io_step(c, fd, want);
			if (r != IO_PROGRESS)
				*ready = false;
			if (r != IO_AGAIN)
				continue;
		}
		if (drain_deadline >= 0 && (deadline < 0 || drain_deadline < deadline))
			deadline = drain_deadline;
		int64_t now = conn_now_ms();
		if (deadline >= 0 && now >= deadline) {
			if (deadline == drain_deadline)
				break;
			wire_timeout(c);
			continue;
		}
		/* Waiting for the client to send, or to read what we sent: hand
		 * the connection back rather than sleep on it, so a slow or idle
		 * client holds no thread. That includes a linger (after an error
		 * response, up to 2 s of reading and dropping what the client
		 * still sends): a worker that slept through it let a burst of
		 * slow heads cut at once by header_timeout hold every thread for
		 * seconds. (While draining, the few that are left finish here,
		 * within the drain deadline.) */
		if (until_idle && want == CONN_WANT_READ && drain_deadline < 0)
			return BLOCKING_IDLE;
		if (until_idle && want == CONN_WANT_WRITE && drain_deadline < 0) {
			/* A client that reads at full speed empties the buffer
			 * within a few ms: wait that long here rather than make a
			 * fast download go round the poller every time. */
			struct pollfd w = { .fd = fd, .events = POLLOUT };
			if (poll(&w, 1, BLOCKING_WRITE_GRACE_MS) > 0) {
				can_write = true;
				continue;
			}
			return BLOCKING_WAIT_WRITE;
		}
		struct pollfd pfd[2] = {
			{ .fd = fd, .events = want == CONN_WANT_WRITE ? POLLOUT : POLLIN },
			{ .fd = srv->wake_fd, .events = POLLIN },
		};
		/* once draining, the stop eventfd stays readable: stop watching it */
		int n = poll(pfd, drain_deadline < 0 ? 2 : 1, deadline < 0 ? -1 : (int)(deadline - now + 1));
		if (n < 0 && errno != EINTR) {
			log_error("poll: %m");
			break;
		}
		if (n > 0 && pfd[0].revents & (POLLIN | POLLHUP | POLLERR))
			can_read = true;
		if (n > 0 && pfd[0].revents & (POLLOUT | POLLHUP | POLLERR))
			can_write = true;
	}
	close(fd);
	wire_free(c);
	return BLOCKING_CLOSED;
}

void blocking_serve(const struct server *srv, int fd, const struct sockaddr *peer, socklen_t peerlen,
		    int64_t accepted_ns)
{
	struct wire *c = wire_new(srv, server_tls_for(srv, fd), fd, peer, peerlen);

	if (!c) {
		log_error("out of memory for a connection");
		close(fd);
		return;
	}
	/* After this one, the thread waits for each request's bytes itself:
	 * they are picked up as they come (no stamp: no queue). */
	wire_readable(c, accepted_ns);
	serve(srv, fd, c, false);
}

enum blocking_end blocking_serve_until_idle(const struct server *srv, int fd, struct wire *c)
{
	return serve(srv, fd, c, true);
}
