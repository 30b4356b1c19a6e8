/* iterative.c - one connection at a time, from start to end, in one thread
 * (the seeds' basic single-threaded server). */
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>

#include "../listen.h"
#include "../log/log.h"
#include "../server.h"
#include "blocking.h"
#include "model.h"

static int iterative_run(struct server *srv)
{
	struct acceptor acc;

	acceptor_init(&acc, srv->listen_fds[0]);
	while (!server_stopping()) {
		struct sockaddr_storage peer;
		socklen_t len;
		int fd = acceptor_accept(&acc, &peer, &len, SOCK_NONBLOCK);
		if (fd == -EAGAIN) {
			struct pollfd pfd[2] = { { .fd = acc.fd, .events = POLLIN },
						 { .fd = srv->wake_fd, .events = POLLIN } };
			poll(pfd, 2, -1);
			continue;
		}
		if (fd < 0) {
			if (fd != -EMFILE)
				log_warn("accept: %s", strerror(-fd));
			continue;
		}
		blocking_serve(srv, fd, (struct sockaddr *)&peer, len);
	}
	acceptor_close(&acc);
	return 0;
}

const struct model model_iterative = {
	.name = "iterative",
	.summary = "one connection at a time, blocking I/O (the seeds' basic server)",
	.run = iterative_run,
};
