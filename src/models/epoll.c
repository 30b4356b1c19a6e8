/* epoll.c - N event loops, one thread each, non-blocking and edge-triggered
 * (the seeds' reactor). Each loop has its own SO_REUSEPORT listener (plus a
 * share of any surplus ones), or all share one with EPOLLEXCLUSIVE
 * (reuseport = off). A socket is registered
 * once for both directions, when it first has to wait (most of those a
 * connection-per-request client opens never do); the loop remembers which
 * direction has readiness left, so no epoll_ctl is needed per request.
 *
 * Fairness: a connection gets at most EPOLL_BUDGET system calls per turn. One
 * with readiness left after that (a client flooding bytes, or pipelining
 * requests as fast as it reads the responses) goes on the loop's ready list
 * and gets its next turn after the other ready connections and the deadline
 * scan: edge-triggered epoll will not report it again, so the list is what
 * remembers it.
 *
 * Accepting is bounded the same way (as nginx and h2o bound theirs): a turn
 * takes at most EPOLL_ACCEPT_BATCH new connections, right after epoll_wait
 * returns, and serves them after the turn's other events. Accepting and
 * serving each at once, until the backlog was empty, never returned to
 * epoll_wait while clients reconnected as fast as they were answered: the
 * open connections' events waited, and every new connection was stamped
 * readable at a turn that began before it even connected. */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../tls/wire.h"
#include "../listen.h"
#include "../log/log.h"
#include "../overload.h"
#include "../server.h"
#include "../stats/stats.h"
#include "io.h"
#include "loops.h"
#include "model.h"
#include "slots.h"
#include "sweep.h"

#define EPOLL_EVENTS 256
#define EPOLL_SCAN_MS 200  /* how often deadlines are checked */
#define EPOLL_BACKLOG 4096 /* listen.c's listen() backlog */
#define EPOLL_BUDGET 16    /* reads/writes per connection per turn: 64 KiB to 1 MiB */
#define EPOLL_ACCEPT_BATCH 64 /* accepts per turn */

struct econn {
	struct wire *c;
	int fd;
	bool can_read, can_write;
	bool peer_fin;         /* EPOLLRDHUP came: the client's FIN is in, maybe behind unread bytes */
	bool queued;           /* on the loop's ready list */
	bool busy;             /* did I/O since the last deadline scan */
	bool registered;       /* in the epoll set (only once it first had to wait) */
	int64_t accepted_ns;   /* stats: when a batch took it, its first run's readable stamp */
	struct econn *prev, *next;
	struct econn *ready_next;
};

struct loop {
	const struct server *srv;
	int id;
	int epfd;
	struct acceptor acc;
	bool exclusive;        /* the listener is shared, registered with EPOLLEXCLUSIVE */
	struct econn *conns;   /* every open connection, for deadline scans */
	int nconns;
	struct econn *ready, *ready_tail; /* used up their budget with readiness left */
	struct conn_slots *slots; /* max_connections, shared by all loops */
	struct sweep sweep;    /* deadline sweeps; a stop's drain time */
	int64_t turn_ns;       /* stats: when this turn's events came (one clock read a turn) */
	struct econn *fresh[EPOLL_ACCEPT_BATCH]; /* accepted this turn, not yet run */
	int nfresh;
	bool accept_more;      /* the last batch was full: the backlog may hold more, which the
				* edge-triggered listener will not report again */
};

/* Tags in epoll_event.data.ptr for the non-connection descriptors. */
static char tag_listener, tag_wake, tag_slot;

static void ready_push(struct loop *lp, struct econn *e)
{
	if (e->queued)
		return;
	e->queued = true;
	e->ready_next = NULL;
	if (lp->ready_tail)
		lp->ready_tail->ready_next = e;
	else
		lp->ready = e;
	lp->ready_tail = e;
}

/* Rare (a queued connection closed by a deadline or a drain): a walk will do. */
static void ready_remove(struct loop *lp, struct econn *e)
{
	struct econn **pp = &lp->ready, *prev = NULL;
	for (; *pp; prev = *pp, pp = &(*pp)->ready_next) {
		if (*pp == e) {
			*pp = e->ready_next;
			if (lp->ready_tail == e)
				lp->ready_tail = prev;
			break;
		}
	}
	e->queued = false;
}

static void econn_close(struct loop *lp, struct econn *e)
{
	if (e->queued)
		ready_remove(lp, e);
	close(e->fd); /* also removes it from the epoll set, if it was in it */
	/* given back before wire_free counts the close: once the statistics
	 * show a connection closed, its slot is free to a newcomer */
	slots_give(lp->slots);
	wire_free(e->c);
	if (e->prev)
		e->prev->next = e->next;
	else
		lp->conns = e->next;
	if (e->next)
		e->next->prev = e->prev;
	free(e);
	lp->nconns--;
	sweep_closed(&lp->sweep);
}

/* Adds a connection to the epoll set when it first has to wait. Most
 * connections of a connection-per-request client never do (the listener
 * defers the accept until the request is there, the answer fits the socket
 * buffer, then close): for them the epoll_ctl, and the removal from the set
 * in close(), are saved.
 * Registering after EAGAIN loses no edge: EPOLL_CTL_ADD reports readiness
 * that is already there. */
static bool econn_register(struct loop *lp, struct econn *e)
{
	struct epoll_event ev = { .events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, .data.ptr = e };
	if (epoll_ctl(lp->epfd, EPOLL_CTL_ADD, e->fd, &ev) < 0) {
		log_error("epoll_ctl: %m");
		return false;
	}
	e->registered = true;
	return true;
}

/* Runs the connection until it waits for readiness it does not have, or
 * has had its turn (then it goes on the ready list). */
static void econn_run(struct loop *lp, struct econn *e)
{
	/* Readable since the turn began (or it was accepted): what it waited
	 * behind the others in this turn is its queue wait (see conn_readable). */
	wire_readable(e->c, e->accepted_ns ? e->accepted_ns : lp->turn_ns);
	e->accepted_ns = 0;
	for (int steps = 0;; steps++) {
		int64_t deadline;
		enum conn_want want = wire_wants(e->c, &deadline);
		if (want == CONN_WANT_CLOSE) {
			econn_close(lp, e);
			return;
		}
		bool *ready = want == CONN_WANT_WRITE ? &e->can_write : &e->can_read;
		if (!*ready && want != CONN_WANT_SHUTDOWN) {
			if (!e->registered && !econn_register(lp, e))
				econn_close(lp, e);
			return;
		}
		if (steps == EPOLL_BUDGET) {
			ready_push(lp, e);
			return;
		}
		enum io_result r = io_step(e->c, e->fd, want);
		e->busy = true;
		/* A read stops short at a FIN that came in with the bytes, and
		 * its edge is spent: the socket is not empty, the next recv
		 * returns the end of input at once (after which the core
		 * closes), rather than at the keep-alive timeout. */
		if (r == IO_AGAIN || (r == IO_DRAINED && !(want == CONN_WANT_READ && e->peer_fin)))
			*ready = false;
	}
}

/* Accepts a batch into lp->fresh without running any: what was queued when
 * the turn began is taken at its start, and served after the turn's other
 * events. Ends early at the connection cap (a freed slot wakes us) or when
 * the queue is empty; a full batch leaves accept_more set, for the next turn. */
static void loop_accept_batch(struct loop *lp)
{
	lp->accept_more = false;
	/* at the cap connections wait in the backlog, or are refused at once
	 * (overload = reject or shed): those take the slot after the accept,
	 * as in uring.c, which says why */
	bool refuses = overload_refuses(lp->srv, OVERLOAD_AT_CAP);
	/* dropped ones (out of descriptors) count too: the batch stays bounded */
	for (int n = 0; n < EPOLL_ACCEPT_BATCH; n++) {
		if (!refuses && !slots_take(lp->slots))
			return;
		struct sockaddr_storage peer;
		socklen_t len;
		int fd = acceptor_accept(&lp->acc, &peer, &len, SOCK_NONBLOCK);
		if (fd < 0) {
			if (!refuses)
				slots_give(lp->slots);
			/* -EMFILE: one was dropped, and the acceptor logged it */
			if (fd != -EMFILE && fd != -EAGAIN)
				log_warn("accept: %s", strerror(-fd));
			if (fd != -EMFILE)
				return;
			continue;
		}
		if (refuses && !slots_take(lp->slots)) {
			overload_refuse(lp->srv, fd, (struct sockaddr *)&peer, len);
			continue;
		}
		struct econn *e = calloc(1, sizeof(*e));
		if (e)
			e->c = wire_new(lp->srv, server_tls_for(lp->srv, fd), fd, (struct sockaddr *)&peer, len);
		if (!e || !e->c) {
			log_error("out of memory for a connection");
			free(e);
			close(fd);
			slots_give(lp->slots);
			return;
		}
		/* Stamped when accepted, not with the turn's start: the turn
		 * began before a connection that came during the batch, and the
		 * thread may have been preempted since. */
		e->accepted_ns = stats_clock_ns();
		e->fd = fd;
		e->can_read = true; /* the listener defers accepting until bytes come */
		e->can_write = true;
		e->next = lp->conns;
		if (lp->conns)
			lp->conns->prev = e;
		lp->conns = e;
		lp->nconns++;
		lp->fresh[lp->nfresh++] = e;
	}
	lp->accept_more = true;
}

/* Serves the connections the batch took, oldest first. */
static void loop_run_fresh(struct loop *lp)
{
	for (int i = 0; i < lp->nfresh; i++)
		econn_run(lp, lp->fresh[i]);
	lp->nfresh = 0;
}

static void loop_accept(struct loop *lp)
{
	if (!lp->sweep.stopping && !server_stopping())
		loop_accept_batch(lp);
	else
		lp->accept_more = false;
}

/* Expires deadlines, and ends connections still open when the drain time is up. */
static void loop_scan(struct loop *lp, int64_t now)
{
	struct econn *e = lp->conns, *next;
	unsigned released = 0;
	for (; e; e = next) {
		next = e->next;
		int64_t deadline;
		wire_wants(e->c, &deadline);
		switch (sweep_check(&lp->sweep, deadline, now)) {
		case SWEEP_DRAINED:
			econn_close(lp, e);
			break;
		case SWEEP_EXPIRED:
			wire_timeout(e->c);
			e->can_read = e->can_write = true; /* let it try what it wants now */
			econn_run(lp, e); /* may close it */
			break;
		case SWEEP_WAITING:
			/* Idle buffers go back once a connection has waited a whole
			 * scan interval, not each time it waits: a busy keep-alive
			 * client would free and allocate them again for every
			 * request. Only acts between requests. */
			if (!e->can_read && !e->busy)
				released += wire_release_idle(e->c);
			e->busy = false;
			break;
		}
	}
	sweep_settle(&lp->sweep, released);
}

static void loop_begin_stop(struct loop *lp)
{
	struct econn *e, *next;

	sweep_begin_stop(&lp->sweep, lp->srv->cfg->drain_timeout_ms);
	epoll_ctl(lp->epfd, EPOLL_CTL_DEL, lp->acc.fd, NULL);
	epoll_ctl(lp->epfd, EPOLL_CTL_DEL, lp->srv->wake_fd, NULL);
	/* With EPOLLEXCLUSIVE a connection wakes one waiter only, and a wake-up
	 * we spent as the stop came in (woken, but no longer accepting) left
	 * the connection queued with the next generation's loops not woken:
	 * unanswered until another one arrives. Our registration is gone now,
	 * so each such connection is in the queue: take them (at most a
	 * backlog's worth, all it can hold), answered drained below. */
	for (int n = 0; lp->exclusive && n < EPOLL_BACKLOG; n += EPOLL_ACCEPT_BATCH) {
		loop_accept_batch(lp);
		loop_run_fresh(lp);
		if (!lp->accept_more)
			break;
	}
	lp->accept_more = false;
	for (e = lp->conns; e; e = next) {
		next = e->next;
		wire_drain(e->c);
		econn_run(lp, e);
	}
}

static void *loop_main(void *arg)
{
	struct loop *lp = arg;
	struct epoll_event events[EPOLL_EVENTS];
	stats_bind_slot(lp->id); /* stats */
	sweep_init(&lp->sweep, EPOLL_SCAN_MS);

	while (!(lp->sweep.stopping && lp->nconns == 0)) {
		/* turns due: just collect new events; out of descriptors: see listen.h */
		int timeout = lp->ready || lp->accept_more ? 0
			      : sweep_wait_ms(&lp->sweep, lp->nconns > 0, acceptor_pause_ms(&lp->acc));
		bool stop_seen = false, accept_due = lp->accept_more;
		int n = epoll_wait(lp->epfd, events, EPOLL_EVENTS, timeout);
		if (n < 0 && errno != EINTR) {
			log_error("epoll_wait: %m");
			break;
		}
		lp->turn_ns = stats_clock_ns();
		for (int i = 0; i < n; i++) {
			void *tag = events[i].data.ptr;
			if (tag == &tag_slot)
				slots_woken(lp->slots, lp->id);
			if (tag == &tag_slot || tag == &tag_listener)
				accept_due = true;
		}
		/* first: those queued when the turn began are taken (and
		 * stamped) before the turn's work delays them */
		if (accept_due)
			loop_accept(lp);
		for (int i = 0; i < n; i++) {
			void *tag = events[i].data.ptr;
			if (tag == &tag_listener || tag == &tag_slot) {
				continue;
			} else if (tag == &tag_wake) {
				/* after the batch: draining may close connections that
				 * still have events further down this array */
				stop_seen = true;
			} else {
				struct econn *e = tag;
				uint32_t ev = events[i].events;
				if (ev & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))
					e->can_read = true;
				if (ev & (EPOLLRDHUP | EPOLLHUP))
					e->peer_fin = true;
				if (ev & (EPOLLOUT | EPOLLHUP | EPOLLERR))
					e->can_write = true;
				econn_run(lp, e);
			}
		}
		loop_run_fresh(lp);
		/* Those that used up their budget, in order; a connection that
		 * uses it up again is queued for the next round. */
		struct econn *e = lp->ready;
		lp->ready = lp->ready_tail = NULL;
		while (e) {
			struct econn *next = e->ready_next;
			e->queued = false;
			econn_run(lp, e);
			e = next;
		}
		if (stop_seen && !lp->sweep.stopping)
			loop_begin_stop(lp);
		/* the listener is edge-triggered: after a pause, no new edge may come
		 * for the connections that waited through it */
		if (acceptor_pause_over(&lp->acc) && !lp->sweep.stopping)
			lp->accept_more = true; /* taken at the next turn's start */
		int64_t now = conn_now_ms();
		if (sweep_due(&lp->sweep, now))
			loop_scan(lp, now);
	}
	return NULL;
}

static int loop_init(void *arg, const struct server *srv, int id, int nloops, struct conn_slots *slots)
{
	struct loop *lp = arg;
	struct epoll_event lev = { .events = EPOLLIN | EPOLLET, .data.ptr = &tag_listener };
	struct epoll_event wev = { .events = EPOLLIN, .data.ptr = &tag_wake };
	struct epoll_event sev = { .events = EPOLLIN, .data.ptr = &tag_slot };
	int shared;

	lp->srv = srv;
	lp->id = id;
	lp->slots = slots;
	lp->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (lp->epfd < 0)
		goto fail;
	/* the master may hold more listeners than we have loops (a reload to
	 * fewer workers): every one of them is accepted from by some loop */
	shared = acceptor_init_groups(&lp->acc, srv->listen_fds, srv->listen_group_len, srv->nlisten_groups, id,
				      nloops);
	if (shared < 0)
		goto fail;
	/* EPOLLEXCLUSIVE: a connection on a shared listener wakes one loop, not
	 * all (epoll refuses it on an epoll set of several listeners). */
	lp->exclusive = shared && nloops > 1 && lp->acc.nfds == 1;
	if (lp->exclusive)
		lev.events |= EPOLLEXCLUSIVE;
	if (epoll_ctl(lp->epfd, EPOLL_CTL_ADD, lp->acc.fd, &lev) < 0 ||
	    epoll_ctl(lp->epfd, EPOLL_CTL_ADD, srv->wake_fd, &wev) < 0 ||
	    epoll_ctl(lp->epfd, EPOLL_CTL_ADD, slots->wake_fds[id], &sev) < 0)
		goto fail;
	return 0;
fail:
	log_error("epoll loop %d: %m", id);
	return -1;
}

static int loop_fini(void *arg)
{
	struct loop *lp = arg;

	while (lp->conns)
		econn_close(lp, lp->conns);
	acceptor_close(&lp->acc);
	if (lp->epfd > 0)
		close(lp->epfd);
	return 0;
}

static const struct loop_ops epoll_loops = {
	.name = "epoll",
	.size = sizeof(struct loop),
	.init = loop_init,
	.main = loop_main,
	.fini = loop_fini,
};

static int epoll_run(struct server *srv)
{
	return loops_run(srv, &epoll_loops);
}

const struct model model_epoll = {
	.name = "epoll",
	.summary = "N edge-triggered event loops, one per core (the default)",
	.flags = MODEL_LISTENER_PER_WORKER,
	.run = epoll_run,
};
