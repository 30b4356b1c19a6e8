/* blocking.c - one connection, one thread of control: try the I/O, and when
 * the socket is not ready, sleep in poll() until it is or a deadline passes. */
#include "blocking.h"

#include <errno.h>
#include <poll.h>
#include <unistd.h>

#include "../conn.h"
#include "../log/log.h"
#include "../server.h"
#include "io.h"

static enum blocking_end serve(const struct server *srv, int fd, struct conn *c, bool until_idle)
{
	int64_t drain_deadline = -1;
	/* Try the I/O before polling (the bytes are usually there); only a short
	 * read or write, or EAGAIN, says a direction is not ready. */
	bool can_read = true, can_write = true;

	for (;;) {
		int64_t deadline;
		if (drain_deadline < 0 && server_stopping()) {
			conn_drain(c);
			drain_deadline = conn_now_ms() + srv->cfg->drain_timeout_ms;
		}
		enum conn_want want = conn_wants(c, &deadline);
		if (want == CONN_WANT_CLOSE)
			break;
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
			conn_timeout(c);
			continue;
		}
		/* Waiting for the client to send: hand the connection back rather
		 * than sleep on it, so a slow or idle client holds no thread. */
		if (until_idle && want == CONN_WANT_READ && conn_awaits_request(c))
			return BLOCKING_IDLE;
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
	conn_free(c);
	return BLOCKING_CLOSED;
}

void blocking_serve(const struct server *srv, int fd, const struct sockaddr *peer, socklen_t peerlen)
{
	struct conn *c = conn_new(srv, peer, peerlen);

	if (!c) {
		log_error("out of memory for a connection");
		close(fd);
		return;
	}
	serve(srv, fd, c, false);
}

enum blocking_end blocking_serve_until_idle(const struct server *srv, int fd, struct conn *c)
{
	return serve(srv, fd, c, true);
}
