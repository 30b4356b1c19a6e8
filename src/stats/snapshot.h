/* snapshot.h - reading the statistics segment: attach (read-only), sum the
 * slots, and turn the latency histogram into percentiles. Shared by the
 * server's endpoints and spindle-stat, so all of them report the same numbers.
 * Needs nothing but libc. */
#ifndef SPINDLE_STATS_SNAPSHOT_H
#define SPINDLE_STATS_SNAPSHOT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shm.h"

/* Sums over every slot (and every cache block), read with relaxed loads:
 * each counter is exact, the set is not one instant (no reader can stop the
 * writers, and none needs to). */
struct stats_totals {
	uint64_t accepted, closed, requests;
	uint64_t method[STATS_NMETHODS];
	uint64_t status_class[5];
	uint64_t code[STATS_NCODES];
	uint64_t bytes_sent, keepalive_reuses;
	uint64_t cache_hits, cache_misses, cache_evictions;
	int64_t cache_bytes, cache_entries;
	uint64_t timeouts, errors, send_failures;
	uint64_t latency_ns_sum;
	uint64_t latency[STATS_LAT_BUCKETS];
	uint64_t tls_handshakes, tls_resumed, tls_handshake_failures;
	bool has_times;  /* the segment's slots hold the two below (STATS_HAS_TIMES) */
	uint64_t queue_ns_sum, service_ns_sum;
	uint64_t queue[STATS_LADDER_BUCKETS], service[STATS_LADDER_BUCKETS];
	bool has_sites;  /* STATS_HAS_SITES: site_requests holds, by the header's site[] index */
	uint64_t site_requests[STATS_SITES_MAX];
	bool has_shed;   /* the segment's slots count shed requests (STATS_HAS_SHED) */
	uint64_t shed;   /* reason queue_wait (overload = shed) */
	uint64_t shed_full; /* reason full (overload = reject); 0 from a segment whose slots predate it */
	uint64_t shed_connections; /* reason connections (overload = shed at max_connections); likewise */
	uint64_t http2_requests; /* 0 from a segment whose slots predate it (STATS_HAS_HTTP2) */
	int64_t active;  /* accepted - closed */
	int64_t taken_mono_ns;
};

void stats_sum(const struct stats_header *h, struct stats_totals *t);

/* The slot's completed requests; *bound says whether a worker ever used it. */
uint64_t stats_slot_requests(const struct stats_header *h, uint32_t i, bool *bound);

/* The q-quantile (0 < q < 1) of the histogram, in microseconds, interpolated
 * within its power-of-two bucket; 0 when empty. */
double stats_quantile_us(const uint64_t hist[STATS_LAT_BUCKETS], double q);

/* Upper bound of bucket i in microseconds (the last bucket: infinity). */
double stats_bucket_le_us(int i);

/* The queue wait and service time histograms: a 1-2-5 ladder. Bucket i <
 * STATS_LADDER_BUCKETS - 1 counts values above the bound of bucket i - 1 and
 * at most stats_ladder_le_us(i) (1, 2, 5, 10, 20, 50 ... 10,000,000 us); the
 * last one, everything above 10 s. */
int stats_ladder_bucket(int64_t ns);
double stats_ladder_le_us(int i); /* the last bucket: infinity */
/* The q-quantile (0 < q < 1) in microseconds, estimated from the buckets:
 * interpolated linearly within the bucket it falls in, so it is off by at most
 * that bucket's width (2x or 2.5x); in the last bucket, its lower bound (10 s:
 * "at least"). 0 when empty. */
double stats_ladder_quantile_us(const uint64_t hist[STATS_LADDER_BUCKETS], double q);

/* Checks that len bytes at h hold a segment this code can read; else
 * returns a reason. */
const char *stats_check(const struct stats_header *h, size_t len);

/* A reader's private copy of a segment: what it checks is what it reads,
 * whatever the segment's writer (or anyone who can write it) does meanwhile. */
struct stats_copy {
	void *buf;
	size_t cap, len;
};
#define STATS_MAX_SEGMENT (64u << 20) /* far above any layout this code writes */

/* Maps /dev/shm/spindle-NAME read-only, unchecked (stats_read_copy checks
 * each copy): the mapping, or NULL with a message in err. Unmap it with
 * stats_detach(). Reading it faults with SIGBUS should the segment shrink. */
const void *stats_map_segment(const char *name, size_t *len, char *err, size_t errlen);
/* Copies the mapping into c and checks the copy: the header at the start of
 * the copy, or NULL with the reason in err. */
const struct stats_header *stats_read_copy(const void *map, size_t len, struct stats_copy *c, char *err,
					   size_t errlen);
void stats_copy_free(struct stats_copy *c);

void stats_detach(const void *map, size_t len);

int64_t stats_mono_ns(void);

/* Who serves, in the model's own words: "2 event loops", "2 processes x 16
 * threads", "a thread per connection". */
void stats_concurrency(const struct stats_header *h, char *buf, size_t len);

#endif
