/* fork.c - a process per connection (the seeds' fork server), capped.
 *
 * The parent only accepts, forks and reaps: it closes its copy of every
 * accepted socket right after fork(), so its descriptor count stays constant
 * however many children run. A child serves its one connection with
 * blocking_serve() and _exit()s (child_exit: LeakSanitizer first in sanitizer builds). SIGCHLD writes to a self-pipe that the accept
 * loop polls, and every wake-up reaps with waitpid(-1, WNOHANG), so the live
 * count is exact and no zombie outlives a poll. At max_connections live
 * children the parent stops accepting: new connections wait in the backlog
 * (or, overload = reject or shed, are accepted and refused at once, unforked).
 *
 * Stop: the parent stops accepting, forwards SIGTERM to every child (each
 * drains its current response), waits up to drain_timeout, then SIGKILLs and
 * reaps the stragglers. The parent never creates a thread, so fork() is safe. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../conn.h"
#include "../listen.h"
#include "../log/log.h"
#include "../overload.h"
#include "../pagebuf.h"
#include "../server.h"
#include "../stats/stats.h"
#include "blocking.h"
#include "child_signals.h"
#include "children.h"
#include "model.h"

#define FORK_BACKOFF_MS 100  /* after fork() fails (EAGAIN: process limit) */
#define CAP_LOG_INTERVAL_MS 10000

/* A reaped child: a connection ended. Only a failure is worth a line. */
static void fork_child_exited(struct children *ch, struct child kid, int status)
{
	(void)ch;
	if (child_exit_ok(status))
		return;
	if (WIFSIGNALED(status))
		log_warn("fork: child %d killed by signal %d", (int)kid.pid, WTERMSIG(status));
	else
		log_warn("fork: child %d exited with status %d", (int)kid.pid, WEXITSTATUS(status));
}

/* The stop: every child finishes its response, within drain_timeout. */
static void fork_drain(const struct server *srv, struct children *ch)
{
	int64_t deadline = conn_now_ms() + srv->cfg->drain_timeout_ms;

	children_reap(ch);
	if (ch->n > 0)
		log_info("fork: waiting for %d connection(s) to finish", ch->n);
	children_drain(ch, deadline);
}

/* In the child (set up by child_fork): serve the one connection. */
static void child_main(struct server *srv, struct acceptor *acc, int fd, struct sockaddr_storage *peer,
		       socklen_t len, int64_t accepted_ns)
{
	stats_process_start(srv, STATS_PROC_PER_CONNECTION); /* stats */
	acceptor_close(acc);
	server_close_listeners(srv); /* the child has no use for them */
	blocking_serve(srv, fd, (struct sockaddr *)peer, len, accepted_ns);
	child_exit(0);
}

static int fork_run(struct server *srv)
{
	struct children ch = { .model = "fork", .noun = "child(ren)", .cap = srv->cfg->max_connections,
			       .exited = fork_child_exited };
	struct acceptor acc;
	int64_t cap_logged = -1;
	bool refuses = overload_refuses(srv, OVERLOAD_AT_CAP);
	int rc = 0;

	pagebuf_prefer_heap(); /* a process per connection: see pagebuf.h */

	if (children_open(&ch) < 0)
		return 1;
	if (acceptor_init_set(&acc, srv->listen_fds, srv->nlisten) < 0) {
		log_error("fork: cannot watch the listeners: %s", strerror(errno));
		rc = 1;
		goto out;
	}
	while (!server_stopping()) {
		children_reap(&ch);
		bool full = ch.n >= ch.cap;
		if (full && !refuses) {
			int64_t now = conn_now_ms();
			if (cap_logged < 0 || now - cap_logged >= CAP_LOG_INTERVAL_MS) {
				log_warn("fork: %d live children (max_connections): new connections wait", ch.n);
				cap_logged = now;
			}
			children_wait(&ch, srv->wake_fd, -1, -1);
			continue;
		}
		struct sockaddr_storage peer;
		socklen_t len;
		int fd = acceptor_accept(&acc, &peer, &len, SOCK_NONBLOCK);
		if (fd == -EAGAIN) {
			int pause = acceptor_pause_ms(&acc); /* out of descriptors: not the listener */
			children_wait(&ch, srv->wake_fd, pause < 0 ? acc.fd : -1, pause);
			continue;
		}
		if (fd < 0) {
			/* -EMFILE: one was dropped, and the acceptor logged it */
			if (fd != -EMFILE && (fd != -EINVAL || !server_stopping())) { /* EINVAL: the listener was shut down */
				log_warn("fork: accept: %s", strerror(-fd));
				children_wait(&ch, srv->wake_fd, -1, FORK_BACKOFF_MS); /* ENOBUFS, ENOMEM...: do not spin */
			}
			continue;
		}
		if (full) { /* overload = reject or shed: no fork for it */
			overload_refuse(srv, fd, (struct sockaddr *)&peer, len);
			continue;
		}
		int64_t accepted_ns = stats_clock_ns(); /* stats: the queue wait includes the fork */
		pid_t pid = child_fork(srv);
		if (pid == 0)
			child_main(srv, &acc, fd, &peer, len, accepted_ns);
		close(fd); /* the child has its own copy */
		if (pid < 0) {
			log_warn("fork: fork: %s: a connection was dropped", strerror(errno));
			children_wait(&ch, srv->wake_fd, -1, FORK_BACKOFF_MS);
			continue;
		}
		children_add(&ch, pid, 0);
	}
	acceptor_close(&acc);
	fork_drain(srv, &ch);
out:
	children_close(&ch);
	if (ch.failed && CHILD_FAILURE_IS_FATAL && rc == 0) {
		log_error("fork: a child failed (see above): exiting with status 1");
		rc = 1;
	}
	return rc;
}

const struct model model_fork = {
	.name = "fork",
	.summary = "a process per connection, capped at max_connections",
	.run = fork_run,
};
