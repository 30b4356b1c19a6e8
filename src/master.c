/* master.c - the supervising process.
 *
 * A small single-threaded loop that owns the listening sockets, the
 * configuration and the shared state, and runs the serving process (a
 * "generation") that executes the chosen model. It restarts a serving process
 * that dies, replaces it on SIGHUP with one built from the re-read
 * configuration on the same sockets (so a reload may change the model), and on
 * SIGTERM/SIGINT stops listening, lets the serving processes drain and exits.
 * It is a child subreaper, so even the orphans of a killed serving process are
 * reaped here: no zombies. The listening sockets are one set for the master's
 * life (listen.h): a reload to more workers adds sockets, one to fewer steers
 * new connections away from the surplus instead of closing them. Nothing here forks after threads exist: the master
 * never starts a thread. */
#include "master.h"

#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "conn.h"
#include "listen.h"
#include "listeners.h"
#include "log/log.h"
#include "models/child_signals.h" /* child_exit_ok, CHILD_FAILURE_IS_FATAL */
#include "models/model.h"
#include "notify.h"
#include "overload.h"
#include "pidfile.h"
#include "privs.h"
#include "server.h"
#include "stats/snapshot.h"
#include "stats/stats.h"

#define MAX_GENERATIONS 8
#define STARTUP_GRACE_MS 300   /* a new generation must live this long before the old one drains */
#define RESTART_BACKOFF_MS 1000
#define KILL_MARGIN_MS 2000    /* after drain_timeout, before SIGKILL */
#define PORT_FREE_WAIT_MS 1000 /* how long a start waits for a busy port */
#define STATUS_INTERVAL_MS 2000 /* how often the service manager hears the request count */

enum gen_state { GEN_FREE, GEN_STARTING, GEN_SERVING, GEN_DRAINING };

struct generation {
	enum gen_state state;
	pid_t pid;
	struct config cfg;
	struct server srv;
	int64_t started_ms;
	int64_t kill_at_ms;  /* draining: SIGKILL after this */
	int serial;
	bool promoted;       /* has served past its start-up grace (and retired the older ones) */
	struct privs privs;  /* whom its serving process runs as */
};

struct master {
	struct generation gens[MAX_GENERATIONS];
	struct listeners listeners; /* per address; each generation accepts from its own ones */
	int current;          /* index of the generation that should be serving */
	int sigfd;
	int reopen_fds[2];    /* [0] the master reads log requests on, [1] every serving process asks on (log.c) */
	int pid_fd;           /* holds the pid file's lock (-1: no pid_file) */
	char pid_file[4096];  /* the start's: a reload does not move it */
	sigset_t blocked;
	bool stopping;
	bool reload_pending;  /* a SIGHUP found no free generation: reload once one frees */
	int64_t respawn_at_ms; /* a crashed serving process is restarted at this time (0: none) */
	int64_t stop_kill_at_ms; /* stopping: orphans still alive then are killed */
	int serial;
	int exit_code;
	bool ever_served;     /* some serving process got past its start-up grace */
	bool child_failed;    /* a serving process crashed or exited non-zero (not SIGKILL) */
	config_builder build;
	void *build_arg;
	bool reloading;       /* the service manager was told RELOADING=1 and awaits READY=1 */
	int64_t status_at_ms; /* when STATUS= is next refreshed */
};

/* ---- serving processes ---------------------------------------------- */

/* What the stop handler of a serving process needs to refuse new
 * connections itself when its master is gone (set before the handler). */
static pid_t serving_pid, serving_master_pid;
static const struct server *serving_srv;
static unsigned orphan_exit_s; /* an orphan's whole drain: drain_timeout + margin */

static void on_stop(int sig, siginfo_t *info, void *ucontext)
{
	(void)ucontext;
	/* The master died (this is the parent-death signal): nobody else will
	 * shut the listeners down, and this process keeps its copies open
	 * while it drains, so they stay in the SO_REUSEPORT group and a new
	 * master on the same port, joining that group, gets its connections
	 * steered to them, where nobody accepts. Shutting a listener down
	 * removes it from the group for every holder (as begin_stop does).
	 * Only the serving process itself: its workers (prefork) inherit this
	 * handler but have another parent. getpid, getppid and shutdown are
	 * async-signal-safe. */
	if (serving_srv && getpid() == serving_pid && getppid() != serving_master_pid) {
		const int *fd = serving_srv->listen_fds;
		for (int g = 0; g < serving_srv->nlisten_groups; fd += serving_srv->listen_group_len[g++])
			for (int i = 0; i < serving_srv->listen_group_len[g] && !serving_srv->listen_group_inherited[g]; i++)
				shutdown(fd[i], SHUT_RD); /* an inherited one queues for our next start */
	}
	/* An orphan (its master, or for a worker or per-connection child its
	 * serving process, is gone) has nobody to SIGKILL it when a drain
	 * hangs: SIGALRM's default action ends it then. alarm is
	 * async-signal-safe. */
	if (serving_srv && getppid() != (getpid() == serving_pid ? serving_master_pid : serving_pid))
		alarm(orphan_exit_s);
	server_stop_from_signal(sig, info); /* a reload's retirement, or a stop */
}

static void on_reopen(int sig)
{
	(void)sig;
	log_reopen();
}

/* In the child: the signal handling of a serving process. */
static void serving_signals(const sigset_t *blocked)
{
	struct sigaction sa = { 0 };

	sigemptyset(&sa.sa_mask);
	/* no SA_RESTART: blocking calls return EINTR and see the stop flag */
	sa.sa_sigaction = on_stop;
	sa.sa_flags = SA_SIGINFO; /* a retirement is a SIGTERM with a value */
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sa.sa_handler = on_reopen;
	sa.sa_flags = SA_RESTART;
	sigaction(SIGUSR1, &sa, NULL);
	sa.sa_handler = SIG_IGN;
	sigaction(SIGHUP, &sa, NULL); /* reloads are the master's business */
	sa.sa_handler = SIG_DFL;
	sa.sa_flags = 0;
	sigaction(SIGCHLD, &sa, NULL);
	sigprocmask(SIG_UNBLOCK, blocked, NULL);
}

static void serving_main(struct master *m, struct generation *g, pid_t master_pid)
{
	close(m->sigfd);
	close(m->reopen_fds[0]);
	if (m->pid_fd >= 0)
		close(m->pid_fd); /* the lock is the master's alone */
	log_reopen_via(m->reopen_fds[1]);
	notify_close();
	/* The master's copies of the other live generations (their roots,
	 * statistics mappings, caches) are none of this process's business:
	 * kept, they would pin an old root and segment for its whole life. */
	for (int i = 0; i < MAX_GENERATIONS; i++)
		if (&m->gens[i] != g && m->gens[i].state != GEN_FREE)
			server_close(&m->gens[i].srv);
	listeners_forget_unused(&m->listeners, (int)(g - m->gens));
	stats_serving_start(&g->srv);
	overload_configure(g->cfg.overload, g->cfg.overload_target_ms);
	/* The stop flag and eventfd are reset while the stop signals are still
	 * blocked (as fork() left them): a SIGTERM sent right after the fork
	 * (SIGHUP then SIGTERM to the master) stays pending until the unblock
	 * and then sets them, instead of landing before the reset and being
	 * forgotten, which left this process serving until SIGKILL. */
	if (server_enter_serving(&g->srv) < 0)
		_exit(1);
	/* Landlock first: it looks the logs' directories up with our rights */
	if (privs_landlock(&g->cfg, server_default_site(&g->srv)->root_fd, g->srv.acme_fd) < 0 || privs_drop(&g->privs) < 0)
		_exit(1);
	serving_pid = getpid();
	serving_master_pid = master_pid;
	orphan_exit_s = (unsigned)((g->cfg.drain_timeout_ms + KILL_MARGIN_MS) / 1000 + 1);
	serving_srv = &g->srv;
	/* A serving process whose master is gone must not serve on, unsupervised. */
	prctl(PR_SET_PDEATHSIG, SIGTERM);
	serving_signals(&m->blocked);
	if (getppid() != master_pid)
		_exit(1);
	/* The first serving process's start-up failures (the model refused)
	 * reach stderr too, for as long as the master counts them as such. */
	log_echo_errors(log_echoing_errors() ? STARTUP_GRACE_MS : 0);
	int rc = g->srv.model->run(&g->srv);
	server_close(&g->srv);
	log_close();
	/* exit(), not _exit(): the model has released everything by now, and a
	 * sanitizer build checks this process for leaks at exit (the master
	 * writes nothing through stdio, so nothing is flushed twice). */
	exit(rc);
}

static int spawn(struct master *m, int idx)
{
	struct generation *g = &m->gens[idx];
	pid_t master_pid = getpid();
	pid_t pid = fork();

	if (pid < 0) {
		log_error("fork: %m");
		return -1;
	}
	if (pid == 0)
		serving_main(m, g, master_pid);
	g->pid = pid;
	/* A start proves itself during a grace, and only then retires the
	 * older generations; a restart of one that did so just serves. One
	 * that crashed within its grace starts over: marked serving, it would
	 * never retire the generation it was meant to replace. */
	g->state = g->promoted ? GEN_SERVING : GEN_STARTING;
	g->started_ms = conn_now_ms();
	log_info("generation %d: serving process %d runs the %s model", g->serial, (int)pid, g->srv.model->name);
	return 0;
}

/* ---- generations ---------------------------------------------------- */

static int gen_alloc(struct master *m)
{
	for (int i = 0; i < MAX_GENERATIONS; i++)
		if (m->gens[i].state == GEN_FREE)
			return i;
	return -1;
}

/* How many listeners a generation wants new connections spread over: one
 * per event loop for the models that accept on their own socket, else one. */
static int gen_listeners_wanted(const struct generation *g)
{
	bool per_worker = (g->srv.model->flags & MODEL_LISTENER_PER_WORKER) && g->cfg.reuseport;
	return per_worker ? g->srv.workers : 1;
}

static void gen_release(struct master *m, struct generation *g);

/* The configuration's line for an address, which holds its options (an
 * inherited socket without a line has none), or NULL. */
static const struct listen_addr *line_for(const struct listen_addr *lines, int n, const struct listen_addr *a)
{
	for (int i = 0; i < n; i++)
		if (listen_addr_same(&lines[i], a))
			return &lines[i];
	return NULL;
}

/* Builds a generation's server on the master's listeners, first adding the
 * ones it wants beyond those the master has. New ones get no connection
 * until the generation is promoted (the steering still excludes them), so a
 * generation that fails to start strands nobody on them. */
static int gen_init(struct master *m, int idx, const struct config *cfg)
{
	struct generation *g = &m->gens[idx];
	const struct model *model = model_find(cfg->model);

	if (config_copy(&g->cfg, cfg) < 0) {
		log_error("out of memory for the configuration's sites");
		return -1;
	}
	if (privs_resolve(cfg, &g->privs) < 0 || privs_check(cfg, &g->privs) < 0) {
		config_free(&g->cfg);
		return -1;
	}
	if (server_init(&g->srv, &g->cfg, model) < 0) {
		server_close(&g->srv);
		config_free(&g->cfg);
		return -1;
	}
	struct listen_addr addrs[CONFIG_MAX_LISTEN];
	char failed[256];
	int naddrs = listeners_wanted(&m->listeners, cfg, addrs);
	int err = naddrs < 0 ? -EINVAL
		: listeners_open(&m->listeners, addrs, naddrs, gen_listeners_wanted(g), idx,
				 m->serial == 0 ? PORT_FREE_WAIT_MS : 0, failed, sizeof(failed));
	if (naddrs < 0)
		snprintf(failed, sizeof(failed), "%s:%d", cfg->bind, cfg->port);
	if (err == 0 && listeners_fill(&m->listeners, idx, g->srv.listen_fds, g->srv.listen_group_len,
				       &g->srv.nlisten_groups, SERVER_MAX_LISTENERS) < 0) {
		err = -E2BIG;
		snprintf(failed, sizeof(failed), "%d addresses with %d sockets each (at most %d sockets in all)",
			 naddrs, gen_listeners_wanted(g), SERVER_MAX_LISTENERS);
		log_error("cannot listen on %s: %s", failed, strerror(-err));
	}
	if (err < 0) {
		if (naddrs < 0) /* the others said why already (and to stderr, at start) */
			log_error("cannot listen on %s: %s", failed, strerror(-err));
		gen_release(m, g);
		return -1;
	}
	/* all of them, also those beyond its workers: connections queued there
	 * before a reload to fewer workers are still accepted */
	g->srv.nlisten = 0;
	for (int i = 0; i < g->srv.nlisten_groups; i++)
		g->srv.nlisten += g->srv.listen_group_len[i];
	struct listen_addr served[SERVER_MAX_ADDRESSES];
	int k = 0;
	for (int i = 0; i < LISTENERS_MAX && k < SERVER_MAX_ADDRESSES; i++) {
		const struct listener *l = &m->listeners.l[i];
		if (l->set.n && (l->users & (1u << idx))) {
			served[k] = l->set.addr;
			g->srv.listen_group_inherited[k] = l->inherited;
			/* tls, proxy_protocol, http2_only: this configuration's line
			 * for the address (a reload may add or drop them on a socket
			 * that stays, and an inherited socket comes without
			 * options), or for tls, tls = on */
			const struct listen_addr *line = line_for(addrs, naddrs, &l->set.addr);
			g->srv.listen_group_tls[k] = (line && line->tls) || cfg->tls;
			g->srv.listen_group_proxy[k] = line && line->proxy_protocol;
			g->srv.listen_group_h2_only[k] = line && line->http2_only;
			served[k].http2_only = line && line->http2_only; /* for spindle-stat, as the line says now */
			socklen_t alen = sizeof(g->srv.listen_group_addr[k]);
			if (getsockname(l->set.fds[0], (struct sockaddr *)&g->srv.listen_group_addr[k], &alen) < 0)
				memset(&g->srv.listen_group_addr[k], 0, sizeof(g->srv.listen_group_addr[k]));
			k++;
		}
	}
	/* spindle-stat shows these, inherited sockets included */
	stats_set_listen(&g->srv, served, g->srv.listen_group_tls, k);
	g->serial = ++m->serial;
	g->pid = -1;
	g->promoted = false;
	return 0;
}

static void gen_release(struct master *m, struct generation *g)
{
	server_close(&g->srv);
	config_free(&g->cfg);
	listeners_release(&m->listeners, (int)(g - m->gens)); /* a removed address closes with its last user */
	g->state = GEN_FREE;
	g->pid = -1;
}

/* retire: a newer generation took over (health checks stay 200); otherwise
 * the instance stops (they turn 503). */
static void gen_drain(struct master *m, struct generation *g, bool retire)
{
	if (g->pid <= 0) { /* between a crash and its restart: nothing to drain */
		gen_release(m, g);
		return;
	}
	g->state = GEN_DRAINING;
	g->kill_at_ms = conn_now_ms() + g->cfg.drain_timeout_ms + KILL_MARGIN_MS;
	if (g->pid > 0 && server_send_stop(g->pid, retire) < 0 && errno != ESRCH)
		log_error("kill %d: %m", (int)g->pid);
	(void)m;
}

/* ---- the service manager --------------------------------------------- */

/* STATUS= for `systemctl status`: the model serving and the requests served
 * so far (from the statistics, when they are kept). */
static void notify_status(struct master *m)
{
	struct generation *g = &m->gens[m->current];
	struct stats_copy copy = { 0 };
	char why[128];

	if (!notify_enabled() || g->state == GEN_FREE)
		return;
	const struct stats_header *h = stats_snapshot(&g->srv, &copy, why, sizeof(why));
	if (h) {
		struct stats_totals t;
		stats_sum(h, &t);
		notify_send("STATUS=serving with the %s model, %llu requests served", g->srv.model->name,
			    (unsigned long long)t.requests);
	} else {
		notify_send("STATUS=serving with the %s model", g->srv.model->name);
	}
	stats_copy_free(&copy);
	m->status_at_ms = conn_now_ms() + STATUS_INTERVAL_MS;
}

/* READY=1: at start once the first serving process got past its start-up
 * grace, and after a reload once its outcome is known (the new generation
 * serves, or the old one serves on). */
static void notify_ready(struct master *m)
{
	notify_send("READY=1");
	m->reloading = false;
	notify_status(m);
}

/* ---- orphans ---------------------------------------------------------- */

/* Descendants reparented to the master (a subreaper) that no generation owns,
 * e.g. workers of a serving process that was killed. Sends them sig (0: just
 * counts them). */
static int signal_orphans(struct master *m, int sig)
{
	DIR *d = opendir("/proc");
	struct dirent *de;
	pid_t self = getpid();
	int n = 0;

	if (!d)
		return 0;
	while ((de = readdir(d))) {
		char path[64], buf[512];
		pid_t pid = (pid_t)atoi(de->d_name);
		if (pid <= 0)
			continue;
		snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
		FILE *f = fopen(path, "r");
		if (!f)
			continue;
		size_t len = fread(buf, 1, sizeof(buf) - 1, f);
		fclose(f);
		buf[len] = '\0';
		const char *p = strrchr(buf, ')'); /* the name may hold spaces and parentheses */
		char state;
		int ppid;
		if (!p || sscanf(p + 1, " %c %d", &state, &ppid) != 2 || ppid != self || state == 'Z')
			continue;
		bool owned = false;
		for (int i = 0; i < MAX_GENERATIONS; i++)
			owned |= m->gens[i].state != GEN_FREE && m->gens[i].pid == pid;
		if (owned)
			continue;
		n++;
		if (sig)
			kill(pid, sig);
	}
	closedir(d);
	return n;
}

/* ---- events ---------------------------------------------------------- */

static struct generation *gen_by_pid(struct master *m, pid_t pid)
{
	for (int i = 0; i < MAX_GENERATIONS; i++)
		if (m->gens[i].state != GEN_FREE && m->gens[i].pid == pid)
			return &m->gens[i];
	return NULL;
}

static void describe_exit(int status, char *buf, size_t len)
{
	if (WIFSIGNALED(status))
		snprintf(buf, len, "killed by signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
	else
		snprintf(buf, len, "exited with status %d", WEXITSTATUS(status));
}

static void begin_stop(struct master *m);

static void on_child_exit(struct master *m, pid_t pid, int status)
{
	struct generation *g = gen_by_pid(m, pid);
	char how[96];

	if (!g)
		return; /* an orphan of a dead serving process, reaped as subreaper */
	describe_exit(status, how, sizeof(how));
	bool current = g == &m->gens[m->current];
	bool early_failure = g->state == GEN_STARTING && WIFEXITED(status) && WEXITSTATUS(status) != 0;
	/* A model that cannot start (io_uring refused) exits 1 and is reported
	 * as a refused start; a sanitizer finding exits otherwise (LSan 23) or by
	 * a signal, and that, like any failure while serving, fails the exit. */
	bool refused_start = early_failure && WEXITSTATUS(status) == 1;
	if (!child_exit_ok(status) && !refused_start)
		m->child_failed = true;

	if (g->state == GEN_DRAINING || m->stopping) {
		bool clean = WIFEXITED(status) && WEXITSTATUS(status) == 0;
		if (clean)
			log_info("generation %d (pid %d) finished: %s", g->serial, (int)pid, how);
		else
			log_error("generation %d (pid %d) did not finish cleanly: %s", g->serial, (int)pid, how);
		/* the final stop reports it (a sanitizer's leak report, a crash) */
		if (!clean && m->stopping && m->exit_code == 0)
			m->exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
		gen_release(m, g);
		return;
	}
	if (early_failure && g->serial == 1 && !m->ever_served) {
		/* the first start failed (say, io_uring refused): no silent retry loop */
		log_error("serving process %d %s at start-up; stopping (its reason is above)", (int)pid, how);
		m->exit_code = WEXITSTATUS(status);
		g->pid = -1;
		begin_stop(m);
		return;
	}
	if (early_failure) {
		/* a reload's new generation could not start: keep an older one
		 * that serves, or else one still in its own start-up grace (a
		 * reload right after the start), which then takes over as if
		 * this reload never happened; with neither, restart this one */
		int keep = -1;
		for (int i = 0; i < MAX_GENERATIONS; i++) {
			struct generation *o = &m->gens[i];
			if (o == g)
				continue;
			if (o->state == GEN_SERVING || (o->state == GEN_STARTING && keep < 0))
				keep = i;
		}
		if (keep >= 0) {
			log_error("reload: the new serving process %s at start-up; still serving with the "
				  "previous configuration", how);
			gen_release(m, g);
			m->current = keep;
			if (m->reloading && m->gens[keep].state == GEN_SERVING)
				notify_ready(m);
			return;
		}
		current = true;
		g->state = GEN_SERVING;
	}
	if (current) {
		log_warn("serving process %d %s: restarting it", (int)pid, how);
		g->pid = -1;
		int64_t now = conn_now_ms();
		/* one that keeps dying at once is restarted at most once a second */
		m->respawn_at_ms = now - g->started_ms < RESTART_BACKOFF_MS ? now + RESTART_BACKOFF_MS : now;
		g->state = GEN_SERVING;
		return;
	}
	log_warn("generation %d (pid %d) %s", g->serial, (int)pid, how);
	gen_release(m, g);
}

static void reap(struct master *m)
{
	int status;
	pid_t pid;

	while ((pid = waitpid(-1, &status, WNOHANG)) > 0)
		on_child_exit(m, pid, status);
}

static bool reload_spawn_with(struct master *m, int idx, const struct config *new_cfg);

/* Starts generation idx from the re-read configuration; false when it
 * cannot, and the current one serves on. */
static bool reload_spawn(struct master *m, int idx)
{
	struct config cfg;

	memset(&cfg, 0, sizeof(cfg)); /* a build that fails early leaves it so: config_free() below */
	int built = m->build(&cfg, m->build_arg);
	bool ok = built == 0 && reload_spawn_with(m, idx, &cfg);
	if (built < 0)
		log_error("reload: the new configuration is invalid (see above); still serving with the old one");
	config_free(&cfg); /* the generation has a copy of its own */
	return ok;
}

/* reload_spawn() with the configuration read. */
static bool reload_spawn_with(struct master *m, int idx, const struct config *new_cfg)
{
	struct generation *cur = &m->gens[m->current];

	if (strcmp(new_cfg->pid_file, m->pid_file))
		log_warn("reload: pid_file changed: it stays %s until a restart", m->pid_file[0] ? m->pid_file : "off");
	if (new_cfg->reuseport != cur->cfg.reuseport) {
		log_error("reload: reuseport cannot change without a restart; still serving with the old configuration");
		return false;
	}
	if (gen_init(m, idx, new_cfg) < 0) {
		log_error("reload: cannot set up the new configuration; still serving with the old one");
		return false;
	}
	struct generation *g = &m->gens[idx];
	/* the logs may have moved: the new generation inherits freshly opened ones */
	if (log_open(&g->cfg) < 0) {
		log_error("reload: cannot open the new configuration's logs (see above); still serving with the "
			  "old one");
		gen_release(m, g);
		return false;
	}
	if (spawn(m, idx) < 0) {
		gen_release(m, g);
		return false;
	}
	m->current = idx;
	/* the old generation drains once the new one has proved it starts (tick) */
	return true;
}

static void reload(struct master *m)
{
	int idx = gen_alloc(m);
	if (idx < 0) {
		/* Refusing it would drop the edit that came with this SIGHUP for
		 * good; the configuration is read again when a slot frees. */
		log_info("reload: %d generations still starting or draining; reloading once one has finished",
			 MAX_GENERATIONS);
		m->reload_pending = true;
		return;
	}
	log_info("reload: reading the configuration again");
	notify_reloading();
	m->reloading = true;
	if (!reload_spawn(m, idx) && m->gens[m->current].state == GEN_SERVING)
		notify_ready(m);
}

static void begin_stop(struct master *m)
{
	if (m->stopping)
		return;
	log_info("stopping: draining in-flight requests");
	notify_send("STOPPING=1");
	m->stopping = true;
	listeners_refuse(&m->listeners);
	int64_t kill_at = conn_now_ms() + KILL_MARGIN_MS;
	for (int i = 0; i < MAX_GENERATIONS; i++) {
		struct generation *g = &m->gens[i];
		if (g->state == GEN_FREE)
			continue;
		gen_drain(m, g, false);
		if (g->state == GEN_DRAINING && g->kill_at_ms > kill_at)
			kill_at = g->kill_at_ms;
	}
	signal_orphans(m, SIGTERM); /* they drain like any serving process */
	m->stop_kill_at_ms = kill_at;
}

static void forward(struct master *m, int sig)
{
	for (int i = 0; i < MAX_GENERATIONS; i++)
		if (m->gens[i].state != GEN_FREE && m->gens[i].pid > 0)
			kill(m->gens[i].pid, sig);
}

/* New connections go to the listeners the serving generation wants from now
 * on; the others only drain what was queued on them before. */
static void steer(struct master *m, struct generation *g)
{
	int n = gen_listeners_wanted(g);
	int err = listeners_steer(&m->listeners, n);
	if (err < 0)
		log_warn("cannot steer connections to %d listeners per address (%s): the kernel spreads them over all",
			 n, strerror(-err));
}

/* Time-driven work: promote a started generation, kill stragglers, respawn. */
static void tick(struct master *m)
{
	int64_t now = conn_now_ms();

	for (int i = 0; i < MAX_GENERATIONS; i++) {
		struct generation *g = &m->gens[i];
		if (g->state == GEN_STARTING && now - g->started_ms >= STARTUP_GRACE_MS) {
			bool first = !m->ever_served;
			if (first)
				log_echo_errors(0); /* started: errors go to error_log alone */
			g->state = GEN_SERVING;
			g->promoted = true;
			m->ever_served = true;
			if (i != m->current) { /* overtaken by a newer reload */
				gen_drain(m, g, true);
				continue;
			}
			steer(m, g);
			stats_promote(&g->srv);
			for (int j = 0; j < MAX_GENERATIONS; j++)
				if (j != i && (m->gens[j].state == GEN_SERVING || m->gens[j].state == GEN_STARTING))
					gen_drain(m, &m->gens[j], true);
			if (first || m->reloading)
				notify_ready(m);
			/* addresses this configuration removed: refused from now on,
			 * closed once the generations draining on them are gone */
			listeners_refuse_unused(&m->listeners, i);
		}
		if (g->state == GEN_DRAINING && g->pid > 0 && now >= g->kill_at_ms) {
			log_warn("generation %d (pid %d) did not drain in time: killing it", g->serial, (int)g->pid);
			kill(g->pid, SIGKILL);
			g->kill_at_ms = now + KILL_MARGIN_MS;
		}
	}
	struct generation *cur = &m->gens[m->current];
	if (!m->stopping && m->respawn_at_ms && now >= m->respawn_at_ms && cur->state != GEN_FREE && cur->pid < 0) {
		m->respawn_at_ms = 0;
		if (spawn(m, m->current) < 0) /* fork failed: try again later */
			m->respawn_at_ms = now + RESTART_BACKOFF_MS;
	}
	if (!m->stopping && m->ever_served && notify_enabled() && now >= m->status_at_ms)
		notify_status(m);
	if (m->stopping && m->stop_kill_at_ms && now >= m->stop_kill_at_ms) {
		signal_orphans(m, SIGKILL);
		m->stop_kill_at_ms = now + KILL_MARGIN_MS;
	}
}

static bool children_left(struct master *m)
{
	for (int i = 0; i < MAX_GENERATIONS; i++)
		if (m->gens[i].state != GEN_FREE)
			return true;
	return signal_orphans(m, 0) > 0; /* reaped by reap() as they exit */
}

int master_run(const struct config *cfg, config_builder build, void *build_arg)
{
	static struct master m; /* generations hold big configs: not on the stack */
	struct sigaction ign = { .sa_handler = SIG_IGN };

	m.build = build;
	m.build_arg = build_arg;
	m.current = 0;
	/* sendfile() cannot take MSG_NOSIGNAL: a reset peer must not kill anyone */
	sigaction(SIGPIPE, &ign, NULL);
	sigemptyset(&m.blocked);
	sigaddset(&m.blocked, SIGTERM);
	sigaddset(&m.blocked, SIGINT);
	sigaddset(&m.blocked, SIGHUP);
	sigaddset(&m.blocked, SIGUSR1);
	sigaddset(&m.blocked, SIGCHLD);
	sigprocmask(SIG_BLOCK, &m.blocked, NULL);
	m.sigfd = signalfd(-1, &m.blocked, SFD_CLOEXEC | SFD_NONBLOCK);
	if (m.sigfd < 0) {
		log_error("signalfd: %m");
		return 1;
	}
	if (socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, m.reopen_fds) < 0) {
		log_error("socketpair: %m");
		close(m.sigfd);
		return 1;
	}
	prctl(PR_SET_CHILD_SUBREAPER, 1);
	notify_open();

	m.listeners.reuseport = cfg->reuseport; /* a reload cannot change it */
	/* With SO_REUSEPORT, binding where another process (of the same user)
	 * listens succeeds: the sockets join its group, the steering program set
	 * here replaces its own, and one of the two gets nothing while both look
	 * healthy. So a new address must be free first (listeners_open). */
	m.pid_fd = -1;
	if (listeners_inherit(&m.listeners) < 0 || gen_init(&m, 0, cfg) < 0) {
		listeners_close(&m.listeners);
		return 1;
	}
	/* once it listens: a pid in the file is a master that can be signalled */
	snprintf(m.pid_file, sizeof(m.pid_file), "%s", cfg->pid_file);
	if (m.pid_file[0] && (m.pid_fd = pidfile_claim(m.pid_file)) < 0) {
		gen_release(&m, &m.gens[0]);
		listeners_close(&m.listeners);
		return 1;
	}
	steer(&m, &m.gens[0]);
	privs_warn_root(cfg);
	char where[1024];
	struct listen_addr addrs[LISTENERS_MAX];
	int naddrs = 0;
	for (int i = 0; i < LISTENERS_MAX; i++)
		if (m.listeners.l[i].set.n)
			addrs[naddrs++] = m.listeners.l[i].set.addr;
	listeners_describe(addrs, naddrs, where, sizeof(where));
	log_info("spindle %s (master %d) listening on %s with the %s model, root %s", SPINDLE_VERSION,
		 (int)getpid(), where, cfg->model, cfg->root);
	if (spawn(&m, 0) < 0)
		begin_stop(&m);

	while (!m.stopping || children_left(&m)) {
		int timeout = 100; /* ticks for start-up grace, drain deadlines, respawns */
		struct pollfd pfd[2] = { { .fd = m.sigfd, .events = POLLIN },
					 { .fd = m.reopen_fds[0], .events = POLLIN } };
		if (poll(pfd, 2, timeout) < 0 && errno != EINTR) {
			log_error("poll: %m");
			break;
		}
		struct signalfd_siginfo si;
		while (read(m.sigfd, &si, sizeof(si)) == sizeof(si)) {
			switch (si.ssi_signo) {
			case SIGCHLD:
				break; /* reaped below */
			case SIGHUP:
				if (!m.stopping)
					reload(&m);
				break;
			case SIGUSR1:
				log_reopen();
				forward(&m, SIGUSR1); /* they ask for the new files: answered below */
				break;
			default: /* SIGTERM, SIGINT */
				begin_stop(&m);
				break;
			}
		}
		if (pfd[1].revents & POLLIN)
			log_answer_reopen(m.reopen_fds[0]);
		reap(&m);
		tick(&m);
		if (m.reload_pending && !m.stopping && gen_alloc(&m) >= 0) {
			m.reload_pending = false;
			reload(&m);
		}
	}
	listeners_close(&m.listeners);
	for (int i = 0; i < MAX_GENERATIONS; i++)
		if (m.gens[i].state != GEN_FREE)
			gen_release(&m, &m.gens[i]);
	close(m.sigfd);
	close(m.reopen_fds[0]);
	close(m.reopen_fds[1]);
	pidfile_release(m.pid_file, m.pid_fd);
	if (m.child_failed && CHILD_FAILURE_IS_FATAL && m.exit_code == 0) {
		log_error("a serving process failed while running (see above): exiting with status 1");
		m.exit_code = 1;
	}
	log_info("stopped");
	notify_close();
	return m.exit_code;
}
