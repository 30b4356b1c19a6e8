/* overload.c - the overload policy's controller (see the header). Shared by
 * the threads of one serving process through relaxed atomics: two threads
 * that race on a transition at worst shed one request more or fewer. */
#include "overload.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>

#include "config.h"
#include "http/date.h"
#include "http2/session.h"
#include "log/log.h"
#include "server.h"
#include "stats/stats.h"

#define OVERLOAD_REFUSE_READS 4 /* x 4 KiB at most discarded before a refusal */

static struct overload process_overload;
static bool process_sheds;

void overload_init(struct overload *o, int64_t target_ns, int64_t interval_ns)
{
	atomic_store_explicit(&o->above_since_ns, 0, memory_order_relaxed);
	atomic_store_explicit(&o->shedding, false, memory_order_relaxed);
	atomic_store_explicit(&o->shed, 0, memory_order_relaxed);
	o->target_ns = target_ns;
	o->interval_ns = interval_ns;
}

bool overload_shed(struct overload *o, int64_t wait_ns, int64_t now_ns)
{
	if (wait_ns < o->target_ns) {
		/* one request served within the target ends the episode */
		atomic_store_explicit(&o->above_since_ns, 0, memory_order_relaxed);
		if (atomic_exchange_explicit(&o->shedding, false, memory_order_relaxed)) {
			uint64_t n = atomic_exchange_explicit(&o->shed, 0, memory_order_relaxed);
			log_info("overload: a request waited %lld ms, under the %lld ms target: no longer shedding "
				 "(%llu shed)", (long long)(wait_ns / 1000000), (long long)(o->target_ns / 1000000),
				 (unsigned long long)n);
		}
		return false;
	}
	if (atomic_load_explicit(&o->shedding, memory_order_relaxed)) {
		atomic_fetch_add_explicit(&o->shed, 1, memory_order_relaxed);
		return true;
	}
	/* This request has been waiting over the target since `began`, so the
	 * oldest waiting request has too: the wait was above the target from
	 * then at the latest. Checked only as requests start, which a busy
	 * server does rarely, the streak is dated from the evidence, not from
	 * when a thread next got to look. */
	int64_t began = now_ns - (wait_ns - o->target_ns);
	int64_t since = atomic_load_explicit(&o->above_since_ns, memory_order_relaxed);
	while (since == 0 || began < since) {
		if (atomic_compare_exchange_weak_explicit(&o->above_since_ns, &since, began, memory_order_relaxed,
							  memory_order_relaxed)) {
			since = began;
			break;
		}
	}
	if (now_ns - since < o->interval_ns)
		return false;
	if (!atomic_exchange_explicit(&o->shedding, true, memory_order_relaxed))
		log_warn("overload: requests have waited over the %lld ms target for %lld ms: answering those that "
			 "waited longer with 503", (long long)(o->target_ns / 1000000),
			 (long long)((now_ns - since) / 1000000));
	atomic_fetch_add_explicit(&o->shed, 1, memory_order_relaxed);
	return true;
}

void overload_configure(enum overload_policy policy, int target_ms)
{
	process_sheds = policy == OVERLOAD_SHED;
	overload_init(&process_overload, (int64_t)target_ms * 1000000, (int64_t)OVERLOAD_INTERVAL_MS * 1000000);
}

bool overload_should_shed(int64_t wait_ns)
{
	return process_sheds && overload_shed(&process_overload, wait_ns, stats_clock_ns());
}

bool overload_refuses(const struct server *srv, enum overload_limit limit)
{
	switch (srv->cfg->overload) {
	case OVERLOAD_REJECT:
		return limit != OVERLOAD_ROOM;
	case OVERLOAD_SHED:
		/* past the cap a connection would wait in the backlog, unseen by
		 * the wait rule; a pool's own queue is where that rule looks */
		return limit == OVERLOAD_AT_CAP;
	case OVERLOAD_QUEUE:
		break;
	}
	return false;
}

/* "192.0.2.1", "2001:db8::1" or "unix:", as the session logs a peer. */
static void refuse_peer_text(const struct sockaddr *sa, socklen_t len, char *buf, size_t cap)
{
	if (sa && sa->sa_family == AF_INET && len >= sizeof(struct sockaddr_in))
		inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, buf, (socklen_t)cap);
	else if (sa && sa->sa_family == AF_INET6 && len >= sizeof(struct sockaddr_in6))
		inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, buf, (socklen_t)cap);
	else
		snprintf(buf, cap, "%s", sa && sa->sa_family == AF_UNIX ? "unix:" : "-");
}

/* Written here, by the core, rather than by handing the connection to a
 * session with a flag: a session would allocate buffers, arm timeouts and
 * parse a request, the very work a full server must not take on, and a
 * driver at its cap has no room to hold the connection anyway. So the
 * answer is fixed bytes and one send() that either fits the empty socket
 * buffer or is dropped; the models only call this, never format HTTP. Which
 * bytes depends on the first ones the client sent: a client speaking
 * HTTP/2 by prior knowledge gets HTTP/2's refusal (it could not read an
 * HTTP/1.1 answer), as does every client of an http2_only listener, any
 * other an HTTP/1.1 503. A TLS listener's connection is closed without a
 * word: the answer would cost a handshake, and the client sees the refusal
 * as a failed connection. */
void overload_refuse(const struct server *srv, int fd, const struct sockaddr *peer, socklen_t len)
{
	static const char body[] = "503 Service Unavailable: the server is full; retry in a second.\n";
	char buf[512], scratch[4096];
	bool tls = server_tls_for(srv, fd) != NULL, h2 = false;

	if (!tls) {
		/* what the client already sent (a request head, usually all of
		 * it: listeners defer accept until bytes come): left unread, it
		 * would turn the close into a reset that can discard the answer
		 * before the client reads it. Bounded: a client streaming a body
		 * must not hold the accepting thread. The first read also tells
		 * the protocol: "PRI " begins nothing but the HTTP/2 preface. */
		ssize_t got = recv(fd, scratch, sizeof(scratch), MSG_DONTWAIT);
		h2 = srv->cfg->http2 && ((got >= 4 && h2_preface(scratch, (size_t)got) >= 0) ||
					 server_h2_only_for(srv, fd));
		for (int i = 1; i < OVERLOAD_REFUSE_READS && got > 0; i++)
			got = recv(fd, scratch, sizeof(scratch), MSG_DONTWAIT);
		size_t n = h2 ? h2_refusal(buf, sizeof(buf))
			      : (size_t)snprintf(buf, sizeof(buf),
						 "HTTP/1.1 503 Service Unavailable\r\n"
						 "Date: %s\r\n"
						 "Retry-After: 1\r\n"
						 "Connection: close\r\n"
						 "Content-Type: text/plain\r\n"
						 "Content-Length: %zu\r\n"
						 "\r\n%s",
						 http_date_now(), sizeof(body) - 1, body);
		ssize_t w = send(fd, buf, n, MSG_DONTWAIT | MSG_NOSIGNAL);
		(void)w;
		shutdown(fd, SHUT_WR);
	}
	close(fd);
	/* shed refuses at max_connections only (overload_refuses) */
	bool at_cap = srv->cfg->overload == OVERLOAD_SHED;
	if (at_cap)
		stats_shed_connections();
	else
		stats_shed_full();
	if (log_access_enabled()) {
		char text[64];
		refuse_peer_text(peer, len, text, sizeof(text));
		struct access_entry e = {
			.peer = text,
			.status = 503, /* over TLS: the answer it stands for, none sent */
			.bytes = tls || h2 ? 0 : sizeof(body) - 1,
			.shed = true,
			.refused = at_cap ? "connections" : "full",
		};
		log_access(&e);
	}
}
