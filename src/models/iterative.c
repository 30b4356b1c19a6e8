/* iterative.c - one connection at a time, from start to end, in one thread
 * (the seeds' basic single-threaded server). */
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>

#include "../config.h"
#include "../listen.h"
#include "../log/log.h"
#include "../server.h"
#include "../stats/stats.h"
#include "blocking.h"
#include "model.h"

static int iterative_run(struct server *srv)
{
	struct acceptor acc;

	stats_bind_slot(0); /* stats */
	if (srv->cfg->overload == OVERLOAD_REJECT)
		log_warn("iterative: overload = reject has no effect: serving one connection at a time, this model "
			 "does not accept while it serves, so there is no cap to reach and no one to refuse");
	if (acceptor_init_set(&acc, srv->listen_fds, srv->nlisten) < 0) {
		log_error("iterative: cannot watch the listeners: %s", strerror(errno));
		return 1;
	}
	while (!server_stopping()) {
		struct sockaddr_storage peer;
		socklen_t len;
		int fd = acceptor_accept(&acc, &peer, &len, SOCK_NONBLOCK);
		if (fd == -EAGAIN) {
			acceptor_wait(&acc, srv->wake_fd);
			continue;
		}
		if (fd < 0) {
			if (fd != -EMFILE)
				log_warn("accept: %s", strerror(-fd));
			continue;
		}
		blocking_serve(srv, fd, (struct sockaddr *)&peer, len, stats_clock_ns());
	}
	acceptor_close(&acc);
	return 0;
}

const struct model model_iterative = {
	.name = "iterative",
	.summary = "one connection at a time, blocking I/O (a baseline: one slow client stalls every other)",
	.run = iterative_run,
};
