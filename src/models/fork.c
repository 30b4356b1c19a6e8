/* fork.c - a process per connection (the seeds' fork server), capped.
 *
 * The parent only accepts, forks and reaps: it closes its copy of every
 * accepted socket right after fork(), so its descriptor count stays constant
 * however many children run. A child serves its one connection with
 * blocking_serve() and _exit()s (child_exit: LeakSanitizer first in sanitizer builds). SIGCHLD writes to a self-pipe that the accept
 * loop polls, and every wake-up reaps with waitpid(-1, WNOHANG), so the live
 * count is exact and no zombie outlives a poll. At max_connections live
 * children the parent stops accepting: new connections wait in the backlog.
 *
 * Stop: the parent stops accepting, forwards SIGTERM to every child (each
 * drains its current response), waits up to drain_timeout, then SIGKILLs and
 * reaps the stragglers. The parent never creates a thread, so fork() is safe. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../conn.h"
#include "../listen.h"
#include "../log/log.h"
#include "../server.h"
#include "../stats/stats.h"
#include "blocking.h"
#include "child_signals.h"
#include "model.h"

#define FORK_BACKOFF_MS 100  /* after fork() fails (EAGAIN: process limit) */
#define CAP_LOG_INTERVAL_MS 10000

struct children {
	pid_t *pids;  /* live children, unordered */
	int n, cap;
	bool failed;  /* a child crashed or exited non-zero (see CHILD_FAILURE_IS_FATAL) */
};

static int sig_fd = -1; /* child_signals: SIGCHLD and SIGUSR1 arrive here */

static void children_remove(struct children *ch, pid_t pid)
{
	for (int i = 0; i < ch->n; i++) {
		if (ch->pids[i] == pid) {
			ch->pids[i] = ch->pids[--ch->n];
			return;
		}
	}
}

/* child_kill: a SIGTERM passes a retirement on as one */
static void signal_all(const struct children *ch, int sig)
{
	for (int i = 0; i < ch->n; i++)
		if (child_kill(ch->pids[i], sig) < 0 && errno != ESRCH)
			log_warn("fork: kill %d: %s", (int)ch->pids[i], strerror(errno));
}

/* Empties the self-pipe and reaps every child that has exited; passes a
 * SIGUSR1 on to the children. */
static void reap(struct children *ch)
{
	bool reopen;
	int status;
	pid_t pid;

	reopen = child_signals_drain();
	while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
		if (!child_exit_ok(status)) {
			ch->failed = true;
			if (WIFSIGNALED(status))
				log_warn("fork: child %d killed by signal %d", (int)pid, WTERMSIG(status));
			else
				log_warn("fork: child %d exited with status %d", (int)pid, WEXITSTATUS(status));
		}
		children_remove(ch, pid);
	}
	if (pid < 0 && errno != ECHILD)
		log_error("fork: waitpid: %s", strerror(errno));
	if (reopen)
		signal_all(ch, SIGUSR1);
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

/* Sleeps until a child exits, a connection arrives (if listen_fd >= 0), a stop
 * is requested (if watch_stop), or timeout_ms passes. */
static void wait_events(const struct server *srv, int listen_fd, bool watch_stop, int timeout_ms)
{
	struct pollfd pfd[3] = {
		{ .fd = sig_fd, .events = POLLIN },
		{ .fd = watch_stop ? srv->wake_fd : -1, .events = POLLIN }, /* poll() skips fd -1 */
		{ .fd = listen_fd, .events = POLLIN },
	};
	int n = poll(pfd, 3, timeout_ms);
	if (n < 0 && errno != EINTR)
		log_error("fork: poll: %s", strerror(errno));
}

static void drain_children(const struct server *srv, struct children *ch)
{
	int64_t deadline = conn_now_ms() + srv->cfg->drain_timeout_ms;

	reap(ch);
	if (ch->n > 0)
		log_info("fork: waiting for %d connection(s) to finish", ch->n);
	bool told_retire = server_retiring();
	signal_all(ch, SIGTERM);
	while (ch->n > 0) {
		int64_t left = deadline - conn_now_ms();
		if (left <= 0)
			break;
		/* not the stop eventfd: it stays readable once stopping, and
		 * watching it here made the whole drain a busy loop; so a stop
		 * that may still come while retiring is looked for now and then */
		wait_events(srv, -1, false, child_drain_wait_ms(told_retire, left));
		if (told_retire && !server_retiring()) {
			signal_all(ch, SIGTERM); /* the children's checks turn 503 too */
			told_retire = false;
		}
		reap(ch);
	}
	if (ch->n > 0) {
		log_warn("fork: drain timeout: killing %d child(ren)", ch->n);
		signal_all(ch, SIGKILL);
	}
	while (ch->n > 0) {
		int status;
		pid_t pid = waitpid(-1, &status, 0);
		if (pid < 0) {
			if (errno == EINTR)
				continue;
			if (errno != ECHILD)
				log_error("fork: waitpid: %s", strerror(errno));
			break;
		}
		children_remove(ch, pid);
	}
}

static int fork_run(struct server *srv)
{
	struct children ch = { .cap = srv->cfg->max_connections };
	struct acceptor acc;
	int rc = 0;

	ch.pids = calloc((size_t)ch.cap, sizeof(*ch.pids));
	if (!ch.pids) {
		log_error("fork: out of memory for %d child slots", ch.cap);
		return 1;
	}
	sig_fd = child_signals_open();
	if (sig_fd < 0) {
		log_error("fork: signal pipe: %s", strerror(errno));
		free(ch.pids);
		return 1;
	}
	if (acceptor_init_set(&acc, srv->listen_fds, srv->nlisten) < 0) {
		log_error("fork: cannot watch the listeners: %s", strerror(errno));
		rc = 1;
		goto out;
	}
	int64_t cap_logged = -1;
	while (!server_stopping()) {
		reap(&ch);
		if (ch.n >= ch.cap) {
			int64_t now = conn_now_ms();
			if (cap_logged < 0 || now - cap_logged >= CAP_LOG_INTERVAL_MS) {
				log_warn("fork: %d live children (max_connections): new connections wait", ch.n);
				cap_logged = now;
			}
			wait_events(srv, -1, true, -1);
			continue;
		}
		struct sockaddr_storage peer;
		socklen_t len;
		int fd = acceptor_accept(&acc, &peer, &len, SOCK_NONBLOCK);
		if (fd == -EAGAIN) {
			int pause = acceptor_pause_ms(&acc); /* out of descriptors: not the listener */
			wait_events(srv, pause < 0 ? acc.fd : -1, true, pause);
			continue;
		}
		if (fd < 0) {
			/* -EMFILE: one was dropped, and the acceptor logged it */
			if (fd != -EMFILE && (fd != -EINVAL || !server_stopping())) { /* EINVAL: the listener was shut down */
				log_warn("fork: accept: %s", strerror(-fd));
				wait_events(srv, -1, true, FORK_BACKOFF_MS); /* ENOBUFS, ENOMEM...: do not spin */
			}
			continue;
		}
		int64_t accepted_ns = stats_clock_ns(); /* stats: the queue wait includes the fork */
		pid_t pid = child_fork(srv);
		if (pid == 0)
			child_main(srv, &acc, fd, &peer, len, accepted_ns);
		close(fd); /* the child has its own copy */
		if (pid < 0) {
			log_warn("fork: fork: %s: a connection was dropped", strerror(errno));
			wait_events(srv, -1, true, FORK_BACKOFF_MS);
			continue;
		}
		ch.pids[ch.n++] = pid;
	}
	acceptor_close(&acc);
	drain_children(srv, &ch);
out:
	child_signals_close();
	sig_fd = -1;
	free(ch.pids);
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
