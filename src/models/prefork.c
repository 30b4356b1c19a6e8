/* prefork.c - a master process and W worker processes, each a thread pool on
 * the one inherited listening socket (seed 004: 4 workers x 10 threads).
 *
 * The process running the model is the master: it creates no thread, forks
 * the workers (each then runs pool_serve(), which creates its threads),
 * restarts a worker that dies, and on stop forwards SIGTERM to each, waits up
 * to drain_timeout for them to drain, SIGKILLs stragglers and reaps them all.
 * SIGCHLD writes to a self-pipe the master polls; every wake-up reaps with
 * waitpid(-1, WNOHANG). Each worker gets max_connections / W connections. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
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
#include "model.h"
#include "pool.h"

#define PREFORK_RESTART_MIN_MS 1000 /* a worker is restarted at most once a second */
#define PREFORK_EXIT_GRACE_MS 1000  /* after drain_timeout: workers end their own drain first */

struct worker {
	pid_t pid;          /* 0: not running */
	int64_t started;
	int64_t restart_at; /* when not running */
};

static int sig_fd = -1; /* child_signals: SIGCHLD and SIGUSR1 arrive here */
static bool worker_failed; /* a worker crashed or exited non-zero (see CHILD_FAILURE_IS_FATAL) */

/* In a new worker (set up by child_fork, which also makes it die with the
 * serving process rather than serve on unsupervised beside a restarted one). */
static void worker_main(struct server *srv, int max_conns)
{
	int rc = pool_serve(srv, srv->cfg->threads, max_conns);
	exit(rc); /* a normal exit, so sanitizer builds check the worker for leaks */
}

static int spawn(struct server *srv, struct worker *w, int id, int max_conns)
{
	pid_t pid = child_fork(srv);

	if (pid == 0) {
		stats_process_start(srv, id); /* stats: worker id's slots and cache gauges */
		worker_main(srv, max_conns);
	}
	if (pid < 0) {
		log_error("prefork: fork worker %d: %s", id, strerror(errno));
		w->restart_at = conn_now_ms() + PREFORK_RESTART_MIN_MS;
		return -1;
	}
	w->pid = pid;
	w->started = conn_now_ms();
	return 0;
}

static int find(const struct worker *ws, int n, pid_t pid)
{
	for (int i = 0; i < n; i++)
		if (ws[i].pid == pid)
			return i;
	return -1;
}

/* child_kill: a SIGTERM passes a retirement on as one */
static void signal_all(const struct worker *ws, int n, int sig)
{
	for (int i = 0; i < n; i++) {
		if (ws[i].pid <= 0)
			continue;
		if (child_kill(ws[i].pid, sig) < 0 && errno != ESRCH)
			log_warn("prefork: kill %d: %s", (int)ws[i].pid, strerror(errno));
	}
}

/* Empties the self-pipe and reaps every exited worker; passes a SIGUSR1 on
 * to the workers. Returns how many run. */
static int reap(struct worker *ws, int n, bool stopping)
{
	bool reopen;
	int status, live = 0;
	pid_t pid;

	reopen = child_signals_drain();
	while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
		int i = find(ws, n, pid);
		if (i < 0)
			continue;
		ws[i].pid = 0;
		if (!child_exit_ok(status))
			worker_failed = true;
		if (stopping && WIFEXITED(status) && WEXITSTATUS(status) == 0)
			continue;
		int64_t now = conn_now_ms(), earliest = ws[i].started + PREFORK_RESTART_MIN_MS;
		ws[i].restart_at = now > earliest ? now : earliest;
		if (WIFSIGNALED(status))
			log_warn("prefork: worker %d (pid %d) killed by signal %d%s", i, (int)pid, WTERMSIG(status),
				 stopping ? "" : ": restarting it");
		else
			log_warn("prefork: worker %d (pid %d) exited with status %d%s", i, (int)pid,
				 WEXITSTATUS(status), stopping ? "" : ": restarting it");
	}
	if (pid < 0 && errno != ECHILD)
		log_error("prefork: waitpid: %s", strerror(errno));
	for (int i = 0; i < n; i++)
		live += ws[i].pid != 0;
	if (reopen)
		signal_all(ws, n, SIGUSR1);
	return live;
}

/* watch_stop: the serving loop waits for the stop eventfd too; the drain
 * must not (it stays readable once stopping, and the drain would spin).
 * Deciding it from server_stopping() here instead lost a stop that came
 * between the loop's check and this poll: no wake-up, workers never told. */
static void wait_events(const struct server *srv, bool watch_stop, int timeout_ms)
{
	struct pollfd pfd[2] = {
		{ .fd = sig_fd, .events = POLLIN },
		{ .fd = watch_stop ? srv->wake_fd : -1, .events = POLLIN }, /* poll() skips fd -1 */
	};
	int n = poll(pfd, 2, timeout_ms);
	if (n < 0 && errno != EINTR)
		log_error("prefork: poll: %s", strerror(errno));
}

static void drain_workers(const struct server *srv, struct worker *ws, int n)
{
	int64_t deadline = conn_now_ms() + srv->cfg->drain_timeout_ms + PREFORK_EXIT_GRACE_MS;
	int live = reap(ws, n, true);

	bool told_retire = server_retiring();
	signal_all(ws, n, SIGTERM);
	while (live > 0) {
		int64_t left = deadline - conn_now_ms();
		if (left <= 0)
			break;
		/* a stop may still come while retiring: look again now and then */
		wait_events(srv, false, child_drain_wait_ms(told_retire, left));
		if (told_retire && !server_retiring()) {
			signal_all(ws, n, SIGTERM); /* the workers' checks turn 503 too */
			told_retire = false;
		}
		live = reap(ws, n, true);
	}
	if (live > 0) {
		log_warn("prefork: drain timeout: killing %d worker(s)", live);
		signal_all(ws, n, SIGKILL);
	}
	while (live > 0) {
		int status;
		pid_t pid = waitpid(-1, &status, 0);
		if (pid < 0) {
			if (errno == EINTR)
				continue;
			if (errno != ECHILD)
				log_error("prefork: waitpid: %s", strerror(errno));
			break;
		}
		int i = find(ws, n, pid);
		if (i >= 0) {
			ws[i].pid = 0;
			live--;
		}
	}
}

static int prefork_run(struct server *srv)
{
	int n = srv->workers;
	int max_conns = (srv->cfg->max_connections + n - 1) / n;
	struct worker *ws = calloc((size_t)n, sizeof(*ws));
	int rc = 0;

	if (!ws) {
		log_error("prefork: out of memory");
		return 1;
	}
	sig_fd = child_signals_open();
	if (sig_fd < 0) {
		log_error("prefork: signal pipe: %s", strerror(errno));
		free(ws);
		return 1;
	}
	worker_failed = false;
	log_info("prefork: %d workers x %d threads", n, srv->cfg->threads);
	for (int i = 0; i < n && !server_stopping(); i++)
		spawn(srv, &ws[i], i, max_conns);
	while (!server_stopping()) {
		reap(ws, n, false);
		int64_t now = conn_now_ms(), next = -1;
		for (int i = 0; i < n && !server_stopping(); i++) {
			if (ws[i].pid != 0)
				continue;
			if (ws[i].restart_at <= now)
				spawn(srv, &ws[i], i, max_conns);
			if (ws[i].pid == 0 && (next < 0 || ws[i].restart_at < next))
				next = ws[i].restart_at;
		}
		wait_events(srv, true, next < 0 ? -1 : (int)(next > now ? next - now : 0));
	}
	drain_workers(srv, ws, n);
	child_signals_close();
	sig_fd = -1;
	free(ws);
	if (worker_failed && CHILD_FAILURE_IS_FATAL && rc == 0) {
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
