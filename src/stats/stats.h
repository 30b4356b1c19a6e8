/* stats.h - live statistics: the writer side.
 *
 * The process that owns the listeners creates one shared-memory segment per
 * instance (stats_open, from server_init, before anything forks). Every worker
 * thread or process binds itself to a slot of counters (stats_bind_slot) and
 * the connection core adds to "its" slot with relaxed atomic adds: no lock,
 * no system call. A thread that never bound itself counts into its process's
 * default slot. Readers (snapshot.h) sum the slots. */
#ifndef SPINDLE_STATS_STATS_H
#define SPINDLE_STATS_STATS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <time.h>

#include "shm.h"

struct server;
struct stats; /* the per-process handle, in struct server */

/* Creates /dev/shm/spindle-NAME, reclaiming a stale one (its creator is
 * gone); refuses (-1, after saying why) while another instance uses the name.
 * Falls back to private shared memory, with a warning, when /dev/shm is not
 * usable, so the endpoints still work. */
int stats_open(struct server *srv);
/* Unmaps; the creating process also removes the name. */
void stats_close(struct server *srv);

/* Binds the calling thread to slot id (offset by its process's base, modulo
 * the number of slots). */
void stats_bind_slot(int id);
/* A process-wide counter, for models that number their threads as they start. */
int stats_next_id(void);

/* In a freshly forked serving process. proc >= 0: worker proc of a prefork
 * model (its threads get slots proc*threads + t, its cache gauges of its
 * own); proc < 0: a process per connection (a slot from a shared counter;
 * its short-lived cache reports no gauges). */
#define STATS_PROC_PER_CONNECTION (-1)
void stats_process_start(struct server *srv, int proc);

/* In a freshly forked serving process: count in its own generation's
 * segment (the master's latest stats_open may have been another's, or been
 * closed since, when an older generation is restarted). */
void stats_serving_start(struct server *srv);

/* Tells readers every address the instance serves on (n of them; tls:
 * which serve HTTPS, or NULL). The creating process calls it once the
 * sockets are open: an inherited socket's address is only known then. */
struct listen_addr;
void stats_set_listen(const struct server *srv, const struct listen_addr *addrs, const bool *tls, int n);

/* The generation srv now serves (after a reload's start-up grace): a
 * segment that its configuration names differently (stats_name, or the
 * port with auto) takes that name now, counters and all. */
void stats_promote(const struct server *srv);

/* Gives each of srv's sites its per-site counter (site->stats_index): the
 * entry its name already has in the segment, or a free one. A server of one
 * site counts none apart. In the creating process, after stats_open(). */
void stats_register_sites(struct server *srv);

/* A new generation of serving processes (after a reload). */
void stats_new_generation(const struct server *srv);

/* A checked private copy of the segment (for the endpoints): what they read
 * is what was checked, whoever writes the segment meanwhile. NULL, with the
 * reason in err, without statistics or when the copy is inconsistent. */
struct stats_copy;
const struct stats_header *stats_snapshot(const struct server *srv, struct stats_copy *c, char *err,
					  size_t errlen);
/* Whether this server keeps statistics at all. */
bool stats_enabled(const struct server *srv);
/* May this client see the statistics endpoints (stats_allow)? */
bool stats_peer_allowed(const struct server *srv, const struct sockaddr_storage *peer);

/* ---- hooks for the connection core ---------------------------------- */

extern _Thread_local struct stats_slot *stats_thread_slot;
extern struct stats_slot *stats_process_slot;

static inline struct stats_slot *stats_here(void)
{
	struct stats_slot *s = stats_thread_slot;
	return s ? s : stats_process_slot;
}

#define STATS_ADD(s, field, n) atomic_fetch_add_explicit(&(s)->field, (n), memory_order_relaxed)

static inline void stats_conn_opened(void)
{
	struct stats_slot *s = stats_here();
	if (s)
		STATS_ADD(s, accepted, 1);
}

static inline void stats_conn_closed(void)
{
	struct stats_slot *s = stats_here();
	if (s)
		STATS_ADD(s, closed, 1);
}

static inline void stats_cache_lookup(bool hit)
{
	struct stats_slot *s = stats_here();
	if (s) {
		if (hit)
			STATS_ADD(s, cache_hits, 1);
		else
			STATS_ADD(s, cache_misses, 1);
	}
}

static inline void stats_timeout(void)
{
	struct stats_slot *s = stats_here();
	if (s)
		STATS_ADD(s, timeouts, 1);
}

/* A request served on an HTTP/2 stream (counted beside stats_response). */
static inline void stats_http2_request(void)
{
	struct stats_slot *s = stats_here();
	if (s)
		STATS_ADD(s, http2_requests, 1);
}

static inline void stats_send_failed(void)
{
	struct stats_slot *s = stats_here();
	if (s) {
		STATS_ADD(s, send_failures, 1);
		STATS_ADD(s, errors, 1);
	}
}

/* A request the overload policy answered 503 instead of serving it. */
static inline void stats_shed(void)
{
	struct stats_slot *s = stats_here();
	if (s)
		STATS_ADD(s, shed, 1);
}

/* A new connection the overload policy refused at once: the server was full. */
static inline void stats_shed_full(void)
{
	struct stats_slot *s = stats_here();
	if (s)
		STATS_ADD(s, shed_full, 1);
}

/* A new connection the overload policy refused at once at max_connections
 * (shed: past the cap it would wait in the backlog, where no wait is seen). */
static inline void stats_shed_connections(void)
{
	struct stats_slot *s = stats_here();
	if (s)
		STATS_ADD(s, shed_connections, 1);
}

/* A monotonic nanosecond clock reading (vDSO, no system call). */
static inline int64_t stats_clock_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* A response completed: its method (enum stats_method), status, body bytes,
 * nanoseconds since its request head arrived, and whether it was not the
 * connection's first. */
void stats_response(enum stats_method method, int status, uint64_t body_bytes, int64_t latency_ns, bool reused);

/* The same response's site (its stats_index, >= 0). */
void stats_site_response(int site);

/* The same response's queue wait and service time (conn.h, request timing). */
void stats_request_time(int64_t queue_ns, int64_t service_ns);

#endif
