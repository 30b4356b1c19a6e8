/* pool.c - pre-created worker threads fed by a bounded queue of connections
 * (the seeds' pre-created pool), with idle keep-alive connections parked in
 * a poller instead of holding a worker (Apache's event MPM).
 *
 * Why the poller: with one worker per connection, N idle keep-alive clients
 * occupy N workers, and with N >= threads a new client waits in the queue
 * until one of them times out (seconds). So a worker serves a connection only
 * while it has work: blocking_serve_until_idle() returns as soon as the
 * connection waits for the client's bytes with none readable (its next
 * request, the rest of a slowly sent head or body, or what it still sends
 * while the connection lingers after an error), or for room in a full send
 * buffer (a client slowly reading a response); the worker
 * then parks (fd, conn) in the pool's epoll set (EPOLLONESHOT, for reading or
 * writing) and takes the next item. The calling thread of pool_serve()
 * is both the listener and the poller: it waits on one epoll set holding the
 * listening socket, the stop eventfd, a "kick" eventfd and every parked
 * connection; a parked connection that becomes readable is queued as work
 * again, and one whose deadline (conn_wants) passes is timed out there and
 * closed (or queued, if the core still has a 408 to send). A worker is thus
 * held only while bytes are moving: a client that trickles its request or
 * sits idle holds none (a slow reader of a response still holds one, bounded
 * by send_timeout).
 *
 * Bounds: the listener accepts only while the queue holds fewer than
 * 2 x threads new connections (not yet served) and fewer than max_conns
 * connections are open; otherwise
 * it stops watching the listening socket (connections wait in the backlog)
 * and the first worker to make room writes the kick eventfd. Under
 * overload = reject it goes on accepting and refuses each newcomer at once
 * (overload_refuse), the queue staying as full as it was; under
 * overload = shed it does so at max_conns only (a full queue is left to the
 * shed rule, which judges each request by its wait); either way not while
 * another pool on the same listener is below that limit (prefork: struct
 * pool_room), which the kernel then hands the newcomer to. Parked
 * connections that wake, and busy ones that had their turn (a worker serves
 * a connection for a bounded number of reads and writes, then queues it
 * behind the others: BLOCKING_YIELD), are queued regardless: they are
 * already counted, and must not keep new clients in the backlog.
 *
 * Stop: the listener stops accepting, parked connections are closed (they are
 * idle), workers finish what they hold and what is queued (blocking_serve
 * drains: keep-alive off, idle closes), the listener waits for the open count
 * to reach 0 (or drain_timeout), then every worker is joined. */
#include "pool.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../tls/wire.h"
#include "../listen.h"
#include "../log/log.h"
#include "../overload.h"
#include "../server.h"
#include "../stats/stats.h"
#include "blocking.h"
#include "model.h"
#include "sweep.h"

#define POOL_STACK (256 * 1024)  /* see thread.c for the measurement */
#define POOL_QUEUE_PER_THREAD 2
#define POOL_SCAN_MS 250         /* how often parked connections' deadlines are checked */
#define POOL_ACCEPT_BATCH 64
#define POOL_EVENTS 256
#define POOL_EXIT_GRACE_MS 500   /* after drain_timeout: blocking_serve's own deadline fires */

/* One connection, wherever it is: queued, held by a worker, or parked. */
struct pitem {
	struct wire *c;
	int fd;
	bool armed;         /* in the epoll set (one-shot; re-armed with MOD) */
	bool parked;        /* on the idle list, owned by the poller */
	bool fresh;         /* accepted, not yet served: counts against qcap */
	int64_t deadline;   /* when parked: conn_wants' deadline */
	int64_t ready_ns;   /* stats: when it was queued, the "readable" stamp of its next request */
	struct pitem *next, *prev;
};

struct pool {
	const struct server *srv;
	int epfd;
	int kick_fd;            /* eventfd: a worker made room, or the drain ended */
	struct acceptor acc;
	bool listening;         /* the listener is in the epoll set (listener thread only) */
	bool listener_dead;     /* shut down under us: never watch it again */
	struct pool_room *room; /* the pools sharing the listener (prefork), or NULL */
	int id;                 /* this pool's slot in room */
	enum overload_limit said; /* what this pool last wrote there (listener thread only) */
	struct sweep sweep;     /* parked connections' deadlines; the drain time (listener thread only) */

	pthread_mutex_t mu;     /* guards everything below */
	pthread_cond_t work;    /* the queue is not empty */
	struct pitem *qhead, *qtail;
	int qlen;
	int qfresh, qcap;       /* queued and never served yet; the accept bound */
	struct pitem *idle;     /* parked connections */
	int nconns, max_conns;  /* open connections, in any place */
	bool paused;            /* the listener waits for room: kick it when the pool gets less full */
	enum overload_limit paused_at; /* how full it was then */
	bool draining;          /* stopping: idle connections close instead of parking */
	bool shutdown;          /* workers exit once the queue is empty */
	unsigned released;      /* parked connections that gave buffers back since the last sweep */
};

/* Tags in epoll_event.data.ptr for the descriptors that are not connections. */
static char tag_listener, tag_wake, tag_kick;

static void kick(struct pool *p)
{
	uint64_t one = 1;
	if (write(p->kick_fd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		log_error("pool: eventfd write: %s", strerror(errno));
}

/* How full the pool is: the limit a newcomer would meet. */
static enum overload_limit limit_locked(const struct pool *p)
{
	if (p->nconns >= p->max_conns)
		return OVERLOAD_AT_CAP;
	return p->qfresh >= p->qcap ? OVERLOAD_QUEUE_FULL : OVERLOAD_ROOM;
}

/* After a worker took an item or a connection closed. Any step down, not
 * only to room: under shed a pool at its cap refuses newcomers, and below it
 * (its queue still full) must stop, and stop reading as at its cap to the
 * other pools (room_say). */
static void made_room_locked(struct pool *p)
{
	if (p->paused && limit_locked(p) < p->paused_at) {
		p->paused = false;
		kick(p);
	}
	if (p->draining && p->nconns == 0)
		kick(p);
}

/* ready_ns: since when it has been ready (stats_clock_ns): its queue wait
 * starts there (see conn_readable). */
static void push_locked(struct pool *p, struct pitem *it, int64_t ready_ns)
{
	it->ready_ns = ready_ns;
	it->next = NULL;
	if (p->qtail)
		p->qtail->next = it;
	else
		p->qhead = it;
	p->qtail = it;
	p->qlen++;
	pthread_cond_signal(&p->work); /* one item, one worker */
}

static struct pitem *pop_locked(struct pool *p)
{
	struct pitem *it = p->qhead;
	if (it) {
		p->qhead = it->next;
		if (!p->qhead)
			p->qtail = NULL;
		p->qlen--;
		if (it->fresh) {
			it->fresh = false;
			p->qfresh--;
		}
		it->next = NULL;
	}
	return it;
}

static void unpark_locked(struct pool *p, struct pitem *it)
{
	if (it->prev)
		it->prev->next = it->next;
	else
		p->idle = it->next;
	if (it->next)
		it->next->prev = it->prev;
	it->next = it->prev = NULL;
	it->parked = false;
}

/* Closing also takes the socket out of the epoll set (it is never dup'ed). */
static void close_locked(struct pool *p, struct pitem *it)
{
	close(it->fd);
	wire_free(it->c);
	free(it);
	p->nconns--;
	p->released++; /* as a release: the sweep trims after a burst of closes too */
	made_room_locked(p);
}

static void requeue_locked(struct pool *p, struct pitem *it);

/* After a timeout or a drain told the core: closes the connection if that
 * ended it, else queues it for a worker (say, a 408 to send). */
static void settle_locked(struct pool *p, struct pitem *it)
{
	int64_t d;
	if (wire_wants(it->c, &d) == CONN_WANT_CLOSE)
		close_locked(p, it);
	else
		requeue_locked(p, it);
}

/* A worker gives back a connection that waits for the client (to send, or
 * to read). */
static void park_locked(struct pool *p, struct pitem *it, enum blocking_end why)
{
	bool for_write = why == BLOCKING_WAIT_WRITE;

	if (p->draining) {
		/* a worker waits out its drain grace: it may still send a request */
		wire_drain(it->c);
		settle_locked(p, it);
		return;
	}
	wire_wants(it->c, &it->deadline);
	if (!for_write)
		p->released += wire_release_idle(it->c); /* between requests, give the buffers back */
	/* Armed under the lock, so the poller cannot time it out or close it
	 * between the two steps. A one-shot registration fires once; arming
	 * checks readiness, so bytes (or send room) that came meanwhile are not
	 * missed. No EPOLLRDHUP for a writer: a client that half-closed may
	 * still read, and the flag would wake us at once, again and again. */
	struct epoll_event ev = {
		.events = (for_write ? EPOLLOUT : EPOLLIN | EPOLLRDHUP) | EPOLLONESHOT,
		.data.ptr = it,
	};
	if (epoll_ctl(p->epfd, it->armed ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, it->fd, &ev) < 0) {
		log_error("pool: epoll_ctl: %s: closing a connection", strerror(errno));
		close_locked(p, it);
		return;
	}
	it->armed = true;
	it->parked = true;
	it->prev = NULL;
	it->next = p->idle;
	if (p->idle)
		p->idle->prev = it;
	p->idle = it;
}

static void *pool_worker(void *arg)
{
	struct pool *p = arg;

	stats_bind_slot(stats_next_id()); /* stats: thread i of this process */
	pthread_mutex_lock(&p->mu);
	for (;;) {
		while (!p->qhead && !p->shutdown)
			pthread_cond_wait(&p->work, &p->mu);
		struct pitem *it = pop_locked(p);
		if (!it)
			break; /* shut down, and the queue is empty */
		made_room_locked(p);
		pthread_mutex_unlock(&p->mu);
		wire_readable(it->c, it->ready_ns); /* picked up: the core stamps the read */
		enum blocking_end end = blocking_serve_until_idle(p->srv, it->fd, it->c);
		pthread_mutex_lock(&p->mu);
		if (end == BLOCKING_CLOSED) {
			free(it);
			p->nconns--;
			made_room_locked(p);
		} else if (end == BLOCKING_YIELD) {
			push_locked(p, it, stats_clock_ns()); /* behind what waits: one flooder cannot hold a worker */
		} else {
			park_locked(p, it, end);
		}
	}
	pthread_mutex_unlock(&p->mu);
	return NULL;
}

static void listener_watch(struct pool *p, bool on)
{
	if (on == p->listening || (on && p->listener_dead))
		return;
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = &tag_listener };
	if (epoll_ctl(p->epfd, on ? EPOLL_CTL_ADD : EPOLL_CTL_DEL, p->acc.fd, &ev) < 0) {
		log_error("pool: epoll_ctl(listener): %s", strerror(errno));
		return;
	}
	p->listening = on;
}

struct pool_room *pool_room_new(int pools)
{
	size_t size = sizeof(struct pool_room) + (size_t)pools * sizeof(atomic_int);
	struct pool_room *room = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (room == MAP_FAILED) {
		log_error("pool: cannot map the table of pools with room: %s", strerror(errno));
		return NULL;
	}
	room->pools = pools;
	for (int i = 0; i < pools; i++)
		atomic_init(&room->limit[i], OVERLOAD_AT_CAP);
	return room;
}

void pool_room_free(struct pool_room *room)
{
	if (room)
		munmap(room, sizeof(struct pool_room) + (size_t)room->pools * sizeof(atomic_int));
}

void pool_room_gone(struct pool_room *room, int id)
{
	if (room && id >= 0 && id < room->pools)
		atomic_store(&room->limit[id], OVERLOAD_AT_CAP);
}

/* Says in the shared table how full this pool is (listener thread). */
static void room_say(struct pool *p, enum overload_limit at)
{
	if (p->room && at != p->said) {
		atomic_store(&p->room->limit[p->id], (int)at);
		p->said = at;
	}
}

/* Whether another pool on the listener is below the limit the policy
 * refuses at, and so takes the newcomer (under shed, one whose queue is
 * full takes it once the queue has room: a queue is no reason to refuse).
 * Sequentially consistent with room_say's store: two pools filling up at
 * once cannot each read the other as below it, which would leave newcomers
 * in the backlog with no pool watching to refuse them. */
static bool room_elsewhere(const struct pool *p)
{
	if (!p->room)
		return false;
	for (int i = 0; i < p->room->pools; i++)
		if (i != p->id && !overload_refuses(p->srv, (enum overload_limit)atomic_load(&p->room->limit[i])))
			return true;
	return false;
}

enum admit { POOL_ADMIT, POOL_REFUSE, POOL_LEAVE };

/* Watches the listener while the pool has room; else marks the listener
 * paused, so that the first worker to make it less full kicks it. Full at
 * a limit the policy refuses at, it watches on to refuse newcomers, unless
 * another pool on the listener can take them. */
static enum admit listener_update(struct pool *p)
{
	pthread_mutex_lock(&p->mu);
	enum overload_limit at = limit_locked(p);
	p->paused = at != OVERLOAD_ROOM;
	p->paused_at = at;
	pthread_mutex_unlock(&p->mu);
	room_say(p, at);
	bool refuse = overload_refuses(p->srv, at) && !room_elsewhere(p);
	/* out of descriptors with nothing to drop: the listener stays readable,
	 * so watching it now would spin; pool_loop wakes up when the pause ends */
	listener_watch(p, (at == OVERLOAD_ROOM || refuse) && acceptor_pause_ms(&p->acc) <= 0);
	return at == OVERLOAD_ROOM ? POOL_ADMIT : refuse ? POOL_REFUSE : POOL_LEAVE;
}

static void pool_accept(struct pool *p)
{
	for (int i = 0; i < POOL_ACCEPT_BATCH; i++) {
		enum admit admit = listener_update(p);
		if (admit == POOL_LEAVE)
			return;
		struct sockaddr_storage peer;
		socklen_t len;
		int fd = acceptor_accept(&p->acc, &peer, &len, SOCK_NONBLOCK);
		if (fd < 0) {
			if (fd == -EMFILE)
				continue; /* one dropped, and logged by the acceptor: look again */
			if (fd == -EINVAL) { /* shutdown() by a stop: nothing more will come */
				listener_watch(p, false);
				p->listener_dead = true;
			} else if (fd != -EAGAIN) {
				log_warn("pool: accept: %s", strerror(-fd));
			} else if (acceptor_pause_ms(&p->acc) > 0) {
				listener_watch(p, false);
			}
			return;
		}
		if (admit == POOL_REFUSE) {
			overload_refuse(p->srv, fd, (struct sockaddr *)&peer, len);
			continue;
		}
		struct pitem *it = calloc(1, sizeof(*it));
		if (it)
			it->c = wire_new(p->srv, server_tls_for(p->srv, fd), fd, (struct sockaddr *)&peer, len);
		if (!it || !it->c) {
			log_error("pool: out of memory for a connection");
			free(it);
			close(fd);
			return;
		}
		it->fd = fd;
		it->fresh = true;
		pthread_mutex_lock(&p->mu);
		p->nconns++;
		p->qfresh++;
		/* stamped as accepted, not at the batch's start: one that came
		 * during the batch, or while this thread was preempted in it,
		 * was not waiting then */
		push_locked(p, it, stats_clock_ns());
		pthread_mutex_unlock(&p->mu);
	}
}

/* A parked connection is readable (or hung up): it is work again. */
static void pool_wake(struct pool *p, struct pitem *it, int64_t batch_ns)
{
	pthread_mutex_lock(&p->mu);
	if (it->parked) {
		unpark_locked(p, it);
		push_locked(p, it, batch_ns);
	}
	pthread_mutex_unlock(&p->mu);
}

/* Takes a parked connection that still has something to do back to the queue. */
static void requeue_locked(struct pool *p, struct pitem *it)
{
	/* its one-shot registration may still be armed: disarm it, so no later
	 * event names an item a worker may free meanwhile (one never parked, or
	 * already disarmed, is not in the set) */
	if (it->armed && epoll_ctl(p->epfd, EPOLL_CTL_DEL, it->fd, NULL) < 0)
		log_error("pool: epoll_ctl(DEL): %s", strerror(errno));
	it->armed = false;
	push_locked(p, it, stats_clock_ns());
}

static void pool_scan(struct pool *p, int64_t now)
{
	pthread_mutex_lock(&p->mu);
	struct pitem *it = p->idle, *next;
	for (; it; it = next) {
		next = it->next;
		/* the sweep runs until the stop only: none is drained here */
		if (sweep_check(&p->sweep, it->deadline, now) != SWEEP_EXPIRED)
			continue;
		unpark_locked(p, it);
		wire_timeout(it->c);
		settle_locked(p, it);
	}
	unsigned released = p->released;
	p->released = 0;
	pthread_mutex_unlock(&p->mu);
	sweep_settle(&p->sweep, released); /* outside the lock: a trim takes a while */
}

static void pool_begin_stop(struct pool *p)
{
	sweep_begin_stop(&p->sweep, p->srv->cfg->drain_timeout_ms);
	listener_watch(p, false);
	room_say(p, OVERLOAD_AT_CAP); /* stopping: the other pools must take the newcomers */
	/* the stop eventfd stays readable from now on */
	if (epoll_ctl(p->epfd, EPOLL_CTL_DEL, p->srv->wake_fd, NULL) < 0)
		log_error("pool: epoll_ctl(DEL wake): %s", strerror(errno));
	pthread_mutex_lock(&p->mu);
	p->draining = true;
	while (p->idle) {
		struct pitem *it = p->idle;
		unpark_locked(p, it);
		wire_drain(it->c);
		settle_locked(p, it);
	}
	if (p->nconns > 0)
		log_info("pool: waiting for %d connection(s) to finish", p->nconns);
	pthread_mutex_unlock(&p->mu);
}

/* Waits for the open count to reach 0, or the drain time to pass. */
static void pool_wait_drained(struct pool *p)
{
	int64_t deadline = p->sweep.drain_deadline + POOL_EXIT_GRACE_MS;
	struct epoll_event events[POOL_EVENTS];

	for (;;) {
		pthread_mutex_lock(&p->mu);
		int n = p->nconns;
		pthread_mutex_unlock(&p->mu);
		int64_t left = deadline - conn_now_ms();
		if (n == 0 || left <= 0)
			return;
		/* only the kick eventfd is left to fire (nothing is parked) */
		if (epoll_wait(p->epfd, events, POOL_EVENTS, (int)left) < 0 && errno != EINTR) {
			log_error("pool: epoll_wait: %s", strerror(errno));
			return;
		}
		uint64_t v;
		ssize_t r = read(p->kick_fd, &v, sizeof(v));
		(void)r;
	}
}

/* The listener and poller: the calling thread, until a stop. */
static int pool_loop(struct pool *p)
{
	struct epoll_event events[POOL_EVENTS];

	sweep_init(&p->sweep, POOL_SCAN_MS);
	listener_update(p); /* watches it, and tells the other pools this one has room */
	if (!p->listening)
		return 1;
	while (!server_stopping()) {
		pthread_mutex_lock(&p->mu);
		bool any = p->nconns > 0 || p->released > 0; /* only this thread opens connections */
		pthread_mutex_unlock(&p->mu);
		int timeout = sweep_wait_ms(&p->sweep, any, acceptor_pause_ms(&p->acc));
		int n = epoll_wait(p->epfd, events, POOL_EVENTS, timeout);
		if (n < 0 && errno != EINTR) {
			log_error("pool: epoll_wait: %s", strerror(errno));
			return 1;
		}
		/* stats: one clock read per batch stamps every connection in it */
		int64_t batch_ns = n > 0 ? stats_clock_ns() : 0;
		for (int i = 0; i < n; i++) {
			void *tag = events[i].data.ptr;
			if (tag == &tag_listener) {
				pool_accept(p);
			} else if (tag == &tag_kick) {
				uint64_t v;
				ssize_t r = read(p->kick_fd, &v, sizeof(v));
				(void)r;
				listener_update(p);
			} else if (tag != &tag_wake) {
				pool_wake(p, tag, batch_ns);
			}
		}
		if (acceptor_pause_over(&p->acc))
			pool_accept(p); /* watch the listener again (if there is room), or pause again */
		int64_t now = conn_now_ms();
		if (sweep_due(&p->sweep, now))
			pool_scan(p, now);
	}
	return 0;
}

static int pool_init(struct pool *p, const struct server *srv, int nthreads, int max_conns,
		     struct pool_room *room, int id)
{
	p->srv = srv;
	p->room = room;
	p->id = id;
	p->said = OVERLOAD_AT_CAP; /* as the table starts; the listener's first update says otherwise */
	p->qcap = POOL_QUEUE_PER_THREAD * nthreads;
	p->max_conns = max_conns;
	p->epfd = p->kick_fd = -1;
	if (acceptor_init_set(&p->acc, srv->listen_fds, srv->nlisten) < 0) {
		log_error("pool: cannot watch the listeners: %s", strerror(errno));
		return -1;
	}
	if (pthread_mutex_init(&p->mu, NULL) || pthread_cond_init(&p->work, NULL)) {
		log_error("pool: cannot create a mutex or condition variable");
		return -1;
	}
	p->epfd = epoll_create1(EPOLL_CLOEXEC);
	p->kick_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (p->epfd < 0 || p->kick_fd < 0) {
		log_error("pool: epoll/eventfd: %s", strerror(errno));
		return -1;
	}
	struct epoll_event wev = { .events = EPOLLIN, .data.ptr = &tag_wake };
	struct epoll_event kev = { .events = EPOLLIN, .data.ptr = &tag_kick };
	if (epoll_ctl(p->epfd, EPOLL_CTL_ADD, srv->wake_fd, &wev) < 0 ||
	    epoll_ctl(p->epfd, EPOLL_CTL_ADD, p->kick_fd, &kev) < 0) {
		log_error("pool: epoll_ctl: %s", strerror(errno));
		return -1;
	}
	return 0;
}

int pool_serve(const struct server *srv, int nthreads, int max_conns, struct pool_room *room, int id)
{
	struct pool *p = calloc(1, sizeof(*p));
	pthread_t *tids = calloc((size_t)nthreads, sizeof(*tids));
	pthread_attr_t attr;
	int started = 0, rc = 0;

	if (!p || !tids) {
		log_error("pool: out of memory");
		free(p);
		free(tids);
		return 1;
	}
	if (pool_init(p, srv, nthreads, max_conns, room, id) < 0) {
		rc = 1;
		goto out;
	}
	if (pthread_attr_init(&attr) == 0) {
		pthread_attr_setstacksize(&attr, POOL_STACK);
		for (; started < nthreads; started++) {
			int err = pthread_create(&tids[started], &attr, pool_worker, p);
			if (err) {
				log_error("pool: pthread_create: %s (%d of %d threads running)", strerror(err),
					  started, nthreads);
				break;
			}
		}
		pthread_attr_destroy(&attr);
	}
	if (started == 0) {
		rc = 1;
		goto out;
	}
	rc = pool_loop(p);
	if (rc)
		server_request_stop(); /* a fatal error: drain what is open anyway */
	pool_begin_stop(p);
	pool_wait_drained(p);
out:
	pthread_mutex_lock(&p->mu);
	p->draining = p->shutdown = true;
	pthread_cond_broadcast(&p->work); /* shutdown: every worker must see it */
	pthread_mutex_unlock(&p->mu);
	for (int i = 0; i < started; i++)
		pthread_join(tids[i], NULL);
	/* no thread left: close what a fatal error left behind */
	for (struct pitem *it; (it = pop_locked(p)) || (it = p->idle);) {
		if (it->parked)
			unpark_locked(p, it);
		close(it->fd);
		wire_free(it->c);
		free(it);
	}
	acceptor_close(&p->acc);
	if (p->epfd >= 0)
		close(p->epfd);
	if (p->kick_fd >= 0)
		close(p->kick_fd);
	pthread_cond_destroy(&p->work);
	pthread_mutex_destroy(&p->mu);
	free(p);
	free(tids);
	return rc;
}

static int pool_run(struct server *srv)
{
	return pool_serve(srv, srv->cfg->threads, srv->cfg->max_connections, NULL, 0);
}

const struct model model_pool = {
	.name = "pool",
	.summary = "pre-created threads, bounded queue, idle keep-alive parked in a poller",
	.run = pool_run,
};
