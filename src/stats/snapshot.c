/* snapshot.c - summing the statistics segment for readers. */
#include "snapshot.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

const int stats_code_values[STATS_NCODES] = { 200, 206, 304, 400, 404, 500 };

#define LOAD(x) atomic_load_explicit(&(x), memory_order_relaxed)

int64_t stats_mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void stats_sum(const struct stats_header *h, struct stats_totals *t)
{
	memset(t, 0, sizeof(*t));
	t->taken_mono_ns = stats_mono_ns();
	t->has_times = STATS_HAS_TIMES(h);
	t->has_sites = STATS_HAS_SITES(h);
	t->has_shed = STATS_HAS_SHED(h);
	for (uint32_t i = 0; i < h->nslots; i++) {
		struct stats_slot *s = stats_slot_at(h, i);
		t->accepted += LOAD(s->accepted);
		t->closed += LOAD(s->closed);
		t->requests += LOAD(s->requests);
		for (int k = 0; k < STATS_NMETHODS; k++)
			t->method[k] += LOAD(s->method[k]);
		for (int k = 0; k < 5; k++)
			t->status_class[k] += LOAD(s->status_class[k]);
		for (int k = 0; k < STATS_NCODES; k++)
			t->code[k] += LOAD(s->code[k]);
		t->bytes_sent += LOAD(s->bytes_sent);
		t->keepalive_reuses += LOAD(s->keepalive_reuses);
		t->cache_hits += LOAD(s->cache_hits);
		t->cache_misses += LOAD(s->cache_misses);
		t->timeouts += LOAD(s->timeouts);
		t->errors += LOAD(s->errors);
		t->send_failures += LOAD(s->send_failures);
		t->latency_ns_sum += LOAD(s->latency_ns_sum);
		for (int k = 0; k < STATS_LAT_BUCKETS; k++)
			t->latency[k] += LOAD(s->latency[k]);
		t->tls_handshakes += LOAD(s->tls_handshakes);
		t->tls_resumed += LOAD(s->tls_resumed);
		t->tls_handshake_failures += LOAD(s->tls_handshake_failures);
		if (t->has_shed)
			t->shed += LOAD(s->shed);
		if (STATS_HAS_SHED_FULL(h))
			t->shed_full += LOAD(s->shed_full);
		if (STATS_HAS_SHED_CONNECTIONS(h))
			t->shed_connections += LOAD(s->shed_connections);
		if (STATS_HAS_HTTP2(h))
			t->http2_requests += LOAD(s->http2_requests);
		if (!t->has_times)
			continue; /* an older build's slots end before them */
		if (t->has_sites)
			for (int k = 0; k < STATS_SITES_MAX; k++)
				t->site_requests[k] += LOAD(s->site_requests[k]);
		t->queue_ns_sum += LOAD(s->queue_ns_sum);
		t->service_ns_sum += LOAD(s->service_ns_sum);
		for (int k = 0; k < STATS_LADDER_BUCKETS; k++) {
			t->queue[k] += LOAD(s->queue[k]);
			t->service[k] += LOAD(s->service[k]);
		}
	}
	for (uint32_t i = 0; i < h->ncaches; i++) {
		struct stats_cache_block *c = stats_cache_at(h, i);
		t->cache_bytes += LOAD(c->g.bytes);
		t->cache_entries += LOAD(c->g.entries);
		t->cache_evictions += LOAD(c->g.evictions);
	}
	/* closed is read after accepted: a connection opening and closing in
	 * between could make this -1 for a moment */
	t->active = (int64_t)(t->accepted - t->closed);
	if (t->active < 0)
		t->active = 0;
}

uint64_t stats_slot_requests(const struct stats_header *h, uint32_t i, bool *bound)
{
	struct stats_slot *s = stats_slot_at(h, i);
	if (bound)
		*bound = LOAD(s->bound) != 0;
	return LOAD(s->requests);
}

double stats_bucket_le_us(int i)
{
	if (i >= STATS_LAT_BUCKETS - 1)
		return INFINITY;
	return (double)(1ULL << i);
}

double stats_quantile_us(const uint64_t hist[STATS_LAT_BUCKETS], double q)
{
	uint64_t total = 0;
	for (int i = 0; i < STATS_LAT_BUCKETS; i++)
		total += hist[i];
	if (total == 0)
		return 0;
	double rank = q * (double)total, seen = 0;
	for (int i = 0; i < STATS_LAT_BUCKETS; i++) {
		if (hist[i] == 0 || seen + (double)hist[i] < rank) {
			seen += (double)hist[i];
			continue;
		}
		double lo = i == 0 ? 0 : (double)(1ULL << (i - 1));
		double hi = i == STATS_LAT_BUCKETS - 1 ? lo * 2 : (double)(1ULL << i);
		return lo + (hi - lo) * ((rank - seen) / (double)hist[i]);
	}
	return stats_bucket_le_us(STATS_LAT_BUCKETS - 2);
}

/* 1, 2, 5 x 10^k ns for k = 3 .. 10: 1 us .. 10 s. */
static const int64_t ladder_le_ns[STATS_LADDER_BUCKETS - 1] = {
	1000, 2000, 5000,                         /* 1 us */
	10000, 20000, 50000,
	100000, 200000, 500000,
	1000000, 2000000, 5000000,                /* 1 ms */
	10000000, 20000000, 50000000,
	100000000, 200000000, 500000000,
	1000000000, 2000000000, 5000000000,       /* 1 s */
	10000000000,
};

int stats_ladder_bucket(int64_t ns)
{
	/* most values are small: a linear walk from the bottom ends early */
	int i = 0;
	while (i < STATS_LADDER_BUCKETS - 1 && ns > ladder_le_ns[i])
		i++;
	return i;
}

double stats_ladder_le_us(int i)
{
	if (i < 0 || i >= STATS_LADDER_BUCKETS - 1)
		return INFINITY;
	return (double)ladder_le_ns[i] / 1000;
}

double stats_ladder_quantile_us(const uint64_t hist[STATS_LADDER_BUCKETS], double q)
{
	uint64_t total = 0;
	for (int i = 0; i < STATS_LADDER_BUCKETS; i++)
		total += hist[i];
	if (total == 0)
		return 0;
	double rank = q * (double)total, seen = 0;
	for (int i = 0; i < STATS_LADDER_BUCKETS; i++) {
		if (hist[i] == 0 || seen + (double)hist[i] < rank) {
			seen += (double)hist[i];
			continue;
		}
		double lo = i == 0 ? 0 : stats_ladder_le_us(i - 1);
		if (i == STATS_LADDER_BUCKETS - 1)
			return lo; /* no upper bound to interpolate to */
		double hi = stats_ladder_le_us(i);
		return lo + (hi - lo) * ((rank - seen) / (double)hist[i]);
	}
	return stats_ladder_le_us(STATS_LADDER_BUCKETS - 2);
}

/* Every offset and length comes from a segment that its writer (or anyone
 * able to write it) may have filled with anything: each is bounded before it
 * is multiplied or added, so no sum can wrap around. */
const char *stats_check(const struct stats_header *h, size_t len)
{
	if (len < sizeof(struct stats_header))
		return "the segment is too small to be a spindle statistics segment";
	if (__atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) != STATS_MAGIC)
		return "not a spindle statistics segment (or not initialised yet)";
	if (h->version != STATS_VERSION)
		return "written by a different spindle version (layout mismatch)";
	uint64_t layout = h->layout_size, coff = h->caches_off, soff = h->slots_off;
	uint32_t nslots = h->nslots, ncaches = h->ncaches, slot_size = h->slot_size;
	if (h->header_size < STATS_HEADER_MIN || layout > len || h->header_size > layout ||
	    nslots == 0 || nslots > STATS_MAX_SLOTS || ncaches > 2 * STATS_CACHE_HALF ||
	    slot_size < STATS_SLOT_MIN || slot_size > 65536 || slot_size % STATS_LINE != 0 ||
	    coff % STATS_LINE != 0 || soff % STATS_LINE != 0 || coff < h->header_size)
		return "the segment's layout is inconsistent";
	/* both spans are small now: at most 1024 x 64 KiB */
	uint64_t cspan = (uint64_t)ncaches * sizeof(struct stats_cache_block);
	uint64_t sspan = (uint64_t)nslots * slot_size;
	if (coff > layout || cspan > layout - coff || soff > layout || sspan > layout - soff ||
	    coff + cspan > soff)
		return "the segment's layout is inconsistent";
	return NULL;
}

const void *stats_map_segment(const char *name, size_t *len, char *err, size_t errlen)
{
	char shm[128];
	struct stat st;

	snprintf(shm, sizeof(shm), "/spindle-%s", name);
	int fd = shm_open(shm, O_RDONLY | O_NOFOLLOW | O_CLOEXEC, 0);
	if (fd < 0) {
		if (errno == ENOENT)
			snprintf(err, errlen, "no spindle instance named '%s' (/dev/shm%s does not exist)", name, shm);
		else
			snprintf(err, errlen, "/dev/shm%s: %s", shm, strerror(errno));
		return NULL;
	}
	if (fstat(fd, &st) < 0 || st.st_size < (off_t)sizeof(struct stats_header) ||
	    (uint64_t)st.st_size > STATS_MAX_SEGMENT) {
		snprintf(err, errlen, "/dev/shm%s: not a spindle statistics segment (size %lld)", shm,
			 (long long)st.st_size);
		close(fd);
		return NULL;
	}
	void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (p == MAP_FAILED) {
		snprintf(err, errlen, "/dev/shm%s: mmap: %s", shm, strerror(errno));
		return NULL;
	}
	*len = (size_t)st.st_size;
	return p;
}

const struct stats_header *stats_read_copy(const void *map, size_t len, struct stats_copy *c, char *err,
					   size_t errlen)
{
	size_t words = len / sizeof(uint64_t);
	if (words * sizeof(uint64_t) > c->cap) {
		/* aligned like the mapping it stands for: the counters are atomics */
		void *p = aligned_alloc(STATS_LINE, (len + STATS_LINE - 1) / STATS_LINE * STATS_LINE);
		if (!p) {
			snprintf(err, errlen, "out of memory for a %zu-byte segment", len);
			return NULL;
		}
		free(c->buf);
		c->buf = p;
		c->cap = len;
	}
	/* Word by word with relaxed atomic loads, as the writers' counters are
	 * 64-bit atomics: memcpy() or read(2) may copy them in pieces and tear
	 * a value that is being incremented. */
	const _Atomic uint64_t *src = map;
	uint64_t *dst = c->buf;
	for (size_t i = 0; i < words; i++)
		dst[i] = atomic_load_explicit(&src[i], memory_order_relaxed);
	c->len = words * sizeof(uint64_t);
	const char *why = stats_check(c->buf, c->len);
	if (why) {
		snprintf(err, errlen, "%s", why);
		return NULL;
	}
	return c->buf;
}

void stats_copy_free(struct stats_copy *c)
{
	free(c->buf);
	*c = (struct stats_copy){ 0 };
}

void stats_detach(const void *map, size_t len)
{
	if (map)
		munmap((void *)map, len);
}

/* "1 thread", "16 threads" */
static const char *plural(char *buf, size_t len, long long n, const char *one, const char *many)
{
	snprintf(buf, len, "%lld %s", n, n == 1 ? one : many);
	return buf;
}

/* `workers` are event loops under epoll and uring, processes under
 * prefork; `threads` size the pools of pool and prefork; the other models
 * take neither. The name comes from the segment: an unknown one gets the
 * numbers alone. */
void stats_concurrency(const struct stats_header *h, char *buf, size_t len)
{
	char a[48], b[48];
	char model[sizeof(h->model) + 1];
	snprintf(model, sizeof(model), "%.*s", (int)sizeof(h->model), h->model);
	if (!strcmp(model, "epoll") || !strcmp(model, "uring"))
		snprintf(buf, len, "%s", plural(a, sizeof(a), h->workers, "event loop", "event loops"));
	else if (!strcmp(model, "prefork"))
		snprintf(buf, len, "%s x %s", plural(a, sizeof(a), h->workers, "process", "processes"),
			 plural(b, sizeof(b), h->threads, "thread", "threads"));
	else if (!strcmp(model, "pool"))
		snprintf(buf, len, "%s", plural(a, sizeof(a), h->threads, "thread", "threads"));
	else if (!strcmp(model, "iterative"))
		snprintf(buf, len, "one connection at a time");
	else if (!strcmp(model, "thread"))
		snprintf(buf, len, "a thread per connection");
	else if (!strcmp(model, "fork"))
		snprintf(buf, len, "a process per connection");
	else
		snprintf(buf, len, "%s, %s", plural(a, sizeof(a), h->workers, "worker", "workers"),
			 plural(b, sizeof(b), h->threads, "thread", "threads"));
}
