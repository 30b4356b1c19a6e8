/* prefork.c - a master process and W worker processes, each a thread pool on
 * the one inherited listening socket (seed 004: 4 workers x 10 threads).
 *
 * The process running the model is the master: it creates no thread, forks
 * the workers (each then runs pool_serve(), which creates its threads),
 * restarts a worker that dies, and on stop forwards SIGTERM to each, waits up
 * to drain_timeout for them to drain, SIGKILLs stragglers and reaps them all.
 * SIGCHLD writes to a self-pipe the master polls; every wake-up reaps with
 * waitpid(-1, WNOHANG). Each worker gets max_connections / W connections.
 *
 * The workers share one listener, and say in a table the master maps
 * before forking them (struct pool_room) how full each is: under
 * overload = reject a full worker leaves newcomers to one with room, and
 * refuses only when none has; under shed likewise at its share of
 * max_connections, refusing only when every worker is at its share (nginx
 * stops accepting in a worker at worker_connections for the same reason:
 * the kernel hands the connection to another). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../conn.h"
#include "../log/log.h"
#include "../server.h"
#include "../stats/stats.h"
#include "child_signals.h"
#include "children.h"
#include "model.h"
#include "pool.h"

#define PREFORK_RESTART_MIN_MS 1000 /* a worker is restarted at most once a second */
#define PREFORK_EXIT_GRACE_MS 1000  /* after drain_timeout: workers end their own drain first */

struct worker {
	pid_t pid;          /* 0: not running */
	struct pool_room *room; /* the table of workers with room, one for all */
	int64_t started;
	int64_t restart_at; /* when not running */
};

/* In a new worker (set up by child_fork, which also makes it die with the
 * serving process rather than serve on unsupervised beside a restarted one). */
static void worker_main(struct server *srv, int max_conns, struct pool_room *room, int id)
{
	int rc = pool_serve(srv, srv->cfg->threads, max_conns, room, id);
	exit(rc); /* a normal exit, so sanitizer builds check the worker for leaks */
}

static int spawn(struct server *srv, struct children *ch, int id, int max_conns)
{
	struct worker *w = (struct worker *)ch->owner + id;
	pid_t pid = child_fork(srv);

	if (pid == 0) {
		stats_process_start(srv, id); /* stats: worker id's slots and cache gauges */
		worker_main(srv, max_conns, w->room, id);
	}
	if (pid < 0) {
		log_error("prefork: fork worker %d: %s", id, strerror(errno));
		w->restart_at = conn_now_ms() + PREFORK_RESTART_MIN_MS;
		return -1;
	}
	w->pid = pid;
	w->started = conn_now_ms();
	children_add(ch, pid, id);
	return 0;
}

/* A reaped worker: restarted (not at once after a start) unless it ended as
 * a stop asked. */
static void worker_exited(struct children *ch, struct child kid, int status)
{
	struct worker *w = (struct worker *)ch->owner + kid.id;
	bool stopping = ch->draining;

	w->pid = 0;
	pool_room_gone(w->room, kid.id); /* killed while it had room: it takes nothing now */
	if (stopping && WIFEXITED(status) && WEXITSTATUS(status) == 0)
		return;
	int64_t now = conn_now_ms(), earliest = w->started + PREFORK_RESTART_MIN_MS;
	w->restart_at = now > earliest ? now : earliest;
	if (WIFSIGNALED(status))
		log_warn("prefork: worker %d (pid %d) killed by signal %d%s", kid.id, (int)kid.pid, WTERMSIG(status),
			 stopping ? "" : ": restarting it");
	else
		log_warn("prefork: worker %d (pid %d) exited with status %d%s", kid.id, (int)kid.pid,
			 WEXITSTATUS(status), stopping ? "" : ": restarting it");
}

static int prefork_run(struct server *srv)
{
	int n = srv->workers;
	int max_conns = (srv->cfg->max_connections + n - 1) / n;
	struct worker *ws = calloc((size_t)n, sizeof(*ws));
	struct children ch = { .model = "prefork", .noun = "worker(s)", .cap = n, .exited = worker_exited,
			       .owner = ws };
	int rc = 0;

	struct pool_room *room = pool_room_new(n);
	if (!ws || !room) {
		log_error("prefork: out of memory");
		free(ws);
		pool_room_free(room);
		return 1;
	}
	for (int i = 0; i < n; i++)
		ws[i].room = room;
	if (children_open(&ch) < 0) {
		free(ws);
		pool_room_free(room);
		return 1;
	}
	log_info("prefork: %d workers x %d threads", n, srv->cfg->threads);
	for (int i = 0; i < n && !server_stopping(); i++)
		spawn(srv, &ch, i, max_conns);
	while (!server_stopping()) {
		children_reap(&ch);
		int64_t now = conn_now_ms(), next = -1;
		for (int i = 0; i < n && !server_stopping(); i++) {
			if (ws[i].pid != 0)
				continue;
			if (ws[i].restart_at <= now)
				spawn(srv, &ch, i, max_conns);
			if (ws[i].pid == 0 && (next < 0 || ws[i].restart_at < next))
				next = ws[i].restart_at;
		}
		/* the stop eventfd too: deciding from server_stopping() whether to
		 * watch it lost a stop that came between the loop's check and the
		 * poll (no wake-up, workers never told) */
		children_wait(&ch, srv->wake_fd, -1, next < 0 ? -1 : (int)(next > now ? next - now : 0));
	}
	/* the workers end their own drain first */
	children_drain(&ch, conn_now_ms() + srv->cfg->drain_timeout_ms + PREFORK_EXIT_GRACE_MS);
	children_close(&ch);
	free(ws);
	pool_room_free(room);
	if (ch.failed && CHILD_FAILURE_IS_FATAL && rc == 0) {
		log_error("prefork: a worker failed (see above): exiting with status 1");
		rc = 1;
	}
	return rc;
}

const struct model model_prefork = {
	.name = "prefork",
	.summary = "a master and N worker processes, each a thread pool",
	.run = prefork_run,
};
