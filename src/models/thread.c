/* thread.c - a detached thread per connection, with a small stack, capped
 * (the seeds' create-per-request server, bounded).
 *
 * The accepting thread counts live threads under a mutex; at max_connections
 * it stops accepting (connections wait in the backlog) until an ending thread
 * signals the condition variable, or under overload = reject or shed goes
 * on accepting and refuses each newcomer at once. On stop it waits for the
 * count to reach 0, up to drain_timeout (blocking_serve() ends its own
 * connection by then).
 *
 * Teardown never frees what a connection thread may still use: the threads
 * are detached, so the live count is the only way to know they are done.
 * Should any outlive the drain (a thread starved of CPU, a blocking call that
 * ignores the deadline), their sockets are shut down to end them; if even
 * that does not bring the count to zero, the process leaves with _exit()
 * before serving_main() frees the cache, error pages, stats mapping and root
 * descriptor under them: the kernel reclaims all of it, and the master,
 * which owns the statistics segment's name, removes that. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "../conn.h"
#include "../listen.h"
#include "../log/log.h"
#include "../overload.h"
#include "../pagebuf.h"
#include "../server.h"
#include "../stats/stats.h"
#include "../tls/context.h"
#include "blocking.h"
#include "model.h"

/* blocking_serve's deepest stack use, measured on a pattern-filled stack
 * with worst-case requests (max_ranges = 1000 and a 1000-part multipart
 * answer, a 4000-byte path, a 4000-byte redirect query), is 45 KiB at -O2;
 * 256 KiB leaves room for -O0 and sanitizer builds. Only the touched pages
 * cost memory. */
#define THREAD_STACK (256 * 1024)
#define THREAD_STOP_POLL_MS 100  /* how often a wait at the cap checks for a stop */
#define THREAD_SPAWN_BACKOFF_MS 100
#define THREAD_EXIT_GRACE_MS 500 /* after drain_timeout: blocking_serve's own deadline fires */
#define CAP_LOG_INTERVAL_MS 10000

struct tmodel {
	const struct server *srv;
	pthread_mutex_t mu;
	pthread_cond_t changed; /* signalled when a thread ends (one waiter: the acceptor) */
	int live;
	struct tjob *jobs;      /* the live threads' connections, under mu */
	int64_t cap_logged;     /* acceptor only: when the cap was last reported */
};

struct tjob {
	struct tmodel *tm;
	int fd;
	struct sockaddr_storage peer;
	socklen_t len;
	int64_t accepted_ns;      /* stats: its first request's "readable" stamp */
	struct tjob *prev, *next; /* in tm->jobs while its thread lives */
};

static void jobs_add_locked(struct tmodel *tm, struct tjob *job)
{
	job->prev = NULL;
	job->next = tm->jobs;
	if (tm->jobs)
		tm->jobs->prev = job;
	tm->jobs = job;
}

static void jobs_remove_locked(struct tmodel *tm, struct tjob *job)
{
	if (job->prev)
		job->prev->next = job->next;
	else
		tm->jobs = job->next;
	if (job->next)
		job->next->prev = job->prev;
}

static void *thread_main(void *arg)
{
	struct tjob *job = arg;
	struct tmodel *tm = job->tm;

	stats_bind_slot(stats_next_id()); /* stats: threads take slots round-robin */
	blocking_serve(tm->srv, job->fd, (struct sockaddr *)&job->peer, job->len, job->accepted_ns);
	/* once counted out, the process may leave before this thread has */
	tls_thread_done();
	pthread_mutex_lock(&tm->mu);
	jobs_remove_locked(tm, job);
	tm->live--;
	pthread_cond_signal(&tm->changed);
	pthread_mutex_unlock(&tm->mu);
	free(job);
	return NULL;
}

static struct timespec abs_after(int ms)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += ms / 1000;
	ts.tv_nsec += (long)(ms % 1000) * 1000000;
	if (ts.tv_nsec >= 1000000000) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000;
	}
	return ts;
}

/* Waits until fewer than max threads live, or a stop is requested. */
static void wait_below_cap(struct tmodel *tm, int max)
{
	bool logged = false;

	pthread_mutex_lock(&tm->mu);
	while (tm->live >= max && !server_stopping()) {
		int64_t now = conn_now_ms();
		if (!logged && (tm->cap_logged < 0 || now - tm->cap_logged >= CAP_LOG_INTERVAL_MS)) {
			log_warn("thread: %d live threads (max_connections): new connections wait", tm->live);
			tm->cap_logged = now;
		}
		logged = true;
		/* a signal handler cannot signal a condition variable: wake up now
		 * and then to see a stop */
		struct timespec ts = abs_after(THREAD_STOP_POLL_MS);
		pthread_cond_timedwait(&tm->changed, &tm->mu, &ts);
	}
	pthread_mutex_unlock(&tm->mu);
}

/* overload = reject or shed: the acceptor does not wait below the cap but
 * refuses what comes while it is reached. Only the acceptor adds threads, so
 * the count cannot grow between this look and its spawn. */
static bool at_cap(struct tmodel *tm, int max)
{
	pthread_mutex_lock(&tm->mu);
	bool full = tm->live >= max;
	pthread_mutex_unlock(&tm->mu);
	return full;
}

static int spawn(struct tmodel *tm, const pthread_attr_t *attr, int fd, const struct sockaddr_storage *peer,
		 socklen_t len)
{
	struct tjob *job = malloc(sizeof(*job));
	pthread_t tid;

	if (!job)
		return ENOMEM;
	*job = (struct tjob){ .tm = tm, .fd = fd, .peer = *peer, .len = len, .accepted_ns = stats_clock_ns() };
	pthread_mutex_lock(&tm->mu);
	tm->live++;
	jobs_add_locked(tm, job);
	pthread_mutex_unlock(&tm->mu);
	int err = pthread_create(&tid, attr, thread_main, job);
	if (err) {
		pthread_mutex_lock(&tm->mu);
		jobs_remove_locked(tm, job);
		tm->live--;
		pthread_mutex_unlock(&tm->mu);
		free(job);
	}
	return err;
}

/* Waits up to ms for the live count to reach 0; returns what is left. */
static int wait_live_locked(struct tmodel *tm, int ms)
{
	struct timespec ts = abs_after(ms);
	while (tm->live > 0)
		if (pthread_cond_timedwait(&tm->changed, &tm->mu, &ts) == ETIMEDOUT)
			break;
	return tm->live;
}

/* Returns how many threads are still running when the wait ends. */
static int wait_threads(struct tmodel *tm)
{
	pthread_mutex_lock(&tm->mu);
	if (tm->live > 0)
		log_info("thread: waiting for %d connection(s) to finish", tm->live);
	int left = wait_live_locked(tm, tm->srv->cfg->drain_timeout_ms + THREAD_EXIT_GRACE_MS);
	if (left > 0) {
		log_warn("thread: %d thread(s) still running after the drain timeout: shutting their "
			 "connections down", left);
		/* shutdown(), not close(): the fd stays the thread's, which closes
		 * it. Between that close() and the thread leaving this list the
		 * number may be reused, but only for a file (nothing else creates
		 * sockets now), where shutdown() fails with ENOTSOCK. */
		for (struct tjob *j = tm->jobs; j; j = j->next)
			shutdown(j->fd, SHUT_RDWR);
		left = wait_live_locked(tm, THREAD_EXIT_GRACE_MS);
	}
	pthread_mutex_unlock(&tm->mu);
	return left;
}

static int thread_run(struct server *srv)
{
	pthread_condattr_t cattr;
	pthread_attr_t attr;
	struct acceptor acc;
	int max = srv->cfg->max_connections;
	/* on the heap: threads that outlive a drain timeout still use it */
	struct tmodel *tm = calloc(1, sizeof(*tm));

	pagebuf_prefer_heap(); /* a thread per connection: see pagebuf.h */

	if (!tm) {
		log_error("thread: out of memory");
		return 1;
	}
	tm->srv = srv;
	tm->cap_logged = -1;
	if (pthread_mutex_init(&tm->mu, NULL) || pthread_condattr_init(&cattr) ||
	    pthread_condattr_setclock(&cattr, CLOCK_MONOTONIC) || pthread_cond_init(&tm->changed, &cattr)) {
		log_error("thread: cannot create a mutex or condition variable");
		free(tm);
		return 1;
	}
	pthread_condattr_destroy(&cattr);
	if (pthread_attr_init(&attr) || pthread_attr_setstacksize(&attr, THREAD_STACK) ||
	    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED)) {
		log_error("thread: cannot set thread attributes");
		pthread_cond_destroy(&tm->changed);
		pthread_mutex_destroy(&tm->mu);
		free(tm);
		return 1;
	}
	if (acceptor_init_set(&acc, srv->listen_fds, srv->nlisten) < 0) {
		log_error("thread: cannot watch the listeners: %s", strerror(errno));
		return 1;
	}
	bool refuses = overload_refuses(srv, OVERLOAD_AT_CAP);
	while (!server_stopping()) {
		if (!refuses)
			wait_below_cap(tm, max);
		if (server_stopping())
			break;
		struct sockaddr_storage peer;
		socklen_t len;
		int fd = acceptor_accept(&acc, &peer, &len, SOCK_NONBLOCK);
		if (fd == -EAGAIN) {
			acceptor_wait(&acc, srv->wake_fd);
			continue;
		}
		if (fd < 0) {
			/* -EMFILE: one was dropped, and the acceptor logged it */
			if (fd != -EMFILE && (fd != -EINVAL || !server_stopping())) { /* EINVAL: the listener was shut down */
				log_warn("thread: accept: %s", strerror(-fd));
				poll(NULL, 0, THREAD_SPAWN_BACKOFF_MS); /* ENOBUFS, ENOMEM...: do not spin */
			}
			continue;
		}
		if (refuses && at_cap(tm, max)) {
			overload_refuse(srv, fd, (struct sockaddr *)&peer, len);
			continue;
		}
		int err = spawn(tm, &attr, fd, &peer, len);
		if (err) {
			log_warn("thread: pthread_create: %s: a connection was dropped", strerror(err));
			close(fd);
			poll(NULL, 0, THREAD_SPAWN_BACKOFF_MS);
		}
	}
	acceptor_close(&acc);
	pthread_attr_destroy(&attr);
	int left = wait_threads(tm);
	if (left > 0) {
		/* see the top of the file: nothing they use may be freed */
		log_error("thread: %d connection thread(s) will not end: exiting without teardown", left);
		_exit(0);
	}
	pthread_cond_destroy(&tm->changed);
	pthread_mutex_destroy(&tm->mu);
	free(tm);
	return 0;
}

const struct model model_thread = {
	.name = "thread",
	.summary = "a detached thread per connection, small stacks, capped at max_connections",
	.run = thread_run,
};
