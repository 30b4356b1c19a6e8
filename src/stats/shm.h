/* shm.h - the layout of the statistics segment (/dev/shm/spindle-NAME),
 * shared by the server that writes it and every reader (spindle-stat, the
 * /metrics and status endpoints).
 *
 *     [header][cache blocks x ncaches][slots x nslots]
 *
 * Each slot is a cache-line-aligned block of counters written by one worker
 * (thread or process), so writers never share a line; readers sum the slots.
 * Counters are lock-free 64-bit atomics, process-shared because the mapping
 * is MAP_SHARED. Only ever add fields at the end of a struct, and bump
 * STATS_VERSION when a reader could misread the layout. */
#ifndef SPINDLE_STATS_SHM_H
#define SPINDLE_STATS_SHM_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "../fs/cache.h"

#define STATS_MAGIC 0x31544c53444e5053ULL /* "SPNDSLT1" little-endian */
#define STATS_VERSION 1
#define STATS_LINE 64
#define STATS_MAX_SLOTS 1024
/* Cache blocks: 2 * STATS_CACHE_HALF of them, at most STATS_CACHE_HALF per
 * generation; each generation gets blocks no other live one holds (even one
 * draining across several reloads), so no two share gauges. */
#define STATS_CACHE_HALF 512
/* Latency buckets: bucket i < STATS_LAT_BUCKETS - 1 counts requests that took
 * at most 2^i microseconds (and more than 2^(i-1)); the last one the rest
 * (over 2^26 us, about 67 s). */
#define STATS_LAT_BUCKETS 28
/* Queue wait and service time buckets (conn.h, request timing): a 1-2-5
 * ladder of upper bounds from 1 us to 10 s (stats_ladder_le_us), and a last
 * bucket for the rest. */
#define STATS_LADDER_BUCKETS 23
/* Sites counted apart ([site NAME] sections and the top level's "default"):
 * each name keeps its counter for the segment's life, across reloads that
 * add or remove sites. */
#define STATS_SITES_MAX 32
#define STATS_SITE_NAME 64

enum stats_method { STATS_GET, STATS_HEAD, STATS_OTHER, STATS_NMETHODS };
enum stats_code { STATS_200, STATS_206, STATS_304, STATS_400, STATS_404, STATS_500, STATS_NCODES };
extern const int stats_code_values[STATS_NCODES];

struct stats_slot {
	_Alignas(STATS_LINE) atomic_uint bound; /* a worker has bound itself to this slot */
	atomic_ullong accepted;         /* connections */
	atomic_ullong closed;           /* active = accepted - closed, summed over slots */
	atomic_ullong requests;         /* responses completed by this worker */
	atomic_ullong method[STATS_NMETHODS];
	atomic_ullong status_class[5];  /* 1xx .. 5xx */
	atomic_ullong code[STATS_NCODES];
	atomic_ullong bytes_sent;       /* body bytes */
	atomic_ullong keepalive_reuses; /* requests after the first on a connection */
	atomic_ullong cache_hits;
	atomic_ullong cache_misses;
	atomic_ullong timeouts;
	atomic_ullong errors;           /* 5xx responses + failed sends */
	atomic_ullong send_failures;
	atomic_ullong latency_ns_sum;
	atomic_ullong latency[STATS_LAT_BUCKETS];
	atomic_ullong tls_handshakes;         /* completed, resumed ones included */
	atomic_ullong tls_resumed;            /* of which resumed a session (a ticket) */
	atomic_ullong tls_handshake_failures; /* bad ClientHello, no shared cipher, left or timed out mid-way */
	/* added in version 1 after the fields above: readers step by the
	 * header's slot_size and look here only with STATS_HAS_TIMES, so a
	 * segment of an older build (smaller slots) reads as before, and an older
	 * reader skips these: where each request's time went (conn.h) */
	atomic_ullong queue_ns_sum;           /* readable -> picked up */
	atomic_ullong service_ns_sum;         /* picked up -> last byte */
	atomic_ullong queue[STATS_LADDER_BUCKETS];
	atomic_ullong service[STATS_LADDER_BUCKETS];
	/* added after the fields above (STATS_HAS_SITES): responses per site,
	 * by the header's site[] index */
	atomic_ullong site_requests[STATS_SITES_MAX];
	/* added after the times, the same way (STATS_HAS_SHED): requests
	 * answered 503 by the overload policy instead of being served */
	atomic_ullong shed;
	/* added later in version 1, the same way (STATS_HAS_HTTP2) */
	atomic_ullong http2_requests;         /* of the requests, those served on an HTTP/2 stream */
	/* added later in version 1, the same way (STATS_HAS_SHED_FULL): new
	 * connections refused at once because the server was full
	 * (overload = reject); `shed` above keeps its meaning, queue_wait */
	atomic_ullong shed_full;
	/* added later in version 1, the same way (STATS_HAS_SHED_CONNECTIONS):
	 * new connections refused at once at max_connections (overload = shed) */
	atomic_ullong shed_connections;
};

/* The gauges of one process's file cache. */
struct stats_cache_block {
	_Alignas(STATS_LINE) struct cache_gauges g;
};

/* The first fields keep their offsets in every version, so a newer spindle
 * can tell whether the segment's owner still lives. */
struct stats_header {
	uint64_t magic;          /* written last, with release order, once all else is set */
	uint32_t version;
	uint32_t header_size;
	uint64_t layout_size;    /* the whole segment, bytes */
	int32_t pid;             /* the creator: the process owning the listeners */
	uint32_t reserved;
	uint64_t pid_starttime;  /* /proc/PID/stat starttime: tells a reused pid apart */
	/* version 1 */
	int64_t start_unix_ns;   /* CLOCK_REALTIME at creation */
	int64_t start_mono_ns;   /* CLOCK_MONOTONIC at creation (system-wide) */
	atomic_ullong generation;/* bumped when the serving processes are replaced */
	atomic_uint next_proc;   /* per-connection processes number themselves from it */
	uint32_t nslots;
	uint32_t ncaches;
	uint32_t slot_size;
	uint64_t caches_off;
	uint64_t slots_off;
	int32_t port;            /* 0 when listen lines serve (bind is "" then) */
	int32_t workers;
	int32_t threads;
	int32_t cache_size_mb;
	char name[64];           /* the instance name (stats_name, or the port) */
	char model[32];
	char version_str[16];
	char bind[64];
	char root[512];
	/* added in version 1 after the fields above: readers check header_size
	 * (STATS_HAS_LISTEN), a segment of an older build has none */
	char listen[512];        /* every address served, "127.0.0.1:8080, unix:/run/s.sock tls" */
	/* added after listen (STATS_HAS_SITES): the sites' names, "" for an
	 * unused entry; written by the creator only, entries never reused */
	char site[STATS_SITES_MAX][STATS_SITE_NAME];
};

/* The header's fields up to root: what every version-1 segment has. */
#define STATS_HEADER_MIN (offsetof(struct stats_header, listen))
/* The slot's fields up to the timing histograms: what every version-1 segment has. */
#define STATS_SLOT_MIN (offsetof(struct stats_slot, queue_ns_sum))
#define STATS_HAS_SHED(h) ((h)->slot_size >= offsetof(struct stats_slot, shed) + sizeof(((struct stats_slot *)0)->shed))
#define STATS_HAS_TIMES(h) ((h)->slot_size >= offsetof(struct stats_slot, service) + sizeof(((struct stats_slot *)0)->service))
#define STATS_HAS_HTTP2(h) \
	((h)->slot_size >= offsetof(struct stats_slot, http2_requests) + sizeof(((struct stats_slot *)0)->http2_requests))
#define STATS_HAS_SHED_FULL(h) \
	((h)->slot_size >= offsetof(struct stats_slot, shed_full) + sizeof(((struct stats_slot *)0)->shed_full))
#define STATS_HAS_SHED_CONNECTIONS(h)                                    \
	((h)->slot_size >= offsetof(struct stats_slot, shed_connections) + \
				   sizeof(((struct stats_slot *)0)->shed_connections))
#define STATS_HAS_LISTEN(h) ((h)->header_size >= offsetof(struct stats_header, listen) + sizeof((h)->listen))
#define STATS_HAS_SITES(h)                                                                                  \
	((h)->header_size >= offsetof(struct stats_header, site) + sizeof((h)->site) &&                    \
	 (h)->slot_size >= offsetof(struct stats_slot, site_requests) + sizeof(((struct stats_slot *)0)->site_requests))

static inline struct stats_slot *stats_slot_at(const struct stats_header *h, uint32_t i)
{
	return (struct stats_slot *)((char *)h + h->slots_off + (uint64_t)i * h->slot_size);
}

static inline struct stats_cache_block *stats_cache_at(const struct stats_header *h, uint32_t i)
{
	return (struct stats_cache_block *)((char *)h + h->caches_off + (uint64_t)i * sizeof(struct stats_cache_block));
}

#endif
