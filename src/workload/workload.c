/* workload.c - seed 002's delay + shared-bucket endpoint (see workload.h). */
#include "workload.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "../log/log.h"
#include "../server.h"

/* A delay is bounded so one request cannot pin a worker for minutes. */
#define WORKLOAD_MAX_DELAY_US (60ull * 1000 * 1000)

/* One cache line per bucket, so neighbouring buckets' locks do not false-share. */
struct bucket {
	pthread_mutex_t lock;
	uint64_t count;
} __attribute__((aligned(64)));

struct workload_shm {
	pthread_mutex_t global;  /* used instead of the bucket locks when bucket_lock = global */
	/* Units of work completed (delay and hold), for the lab's check that CPU
	 * work served per second never exceeds the cores (atomic: no lock). */
	uint64_t delay_units;
	uint64_t hold_units;
	struct bucket buckets[];
};

struct workload {
	struct workload_shm *shm;  /* MAP_SHARED: inherited by every forked process */
	size_t map_len;
	uint32_t nbuckets;
	bool global_lock;
	enum delay_kind kind;
	uint64_t unit_us;
	const char *path;
	size_t path_len;
};

static int mutex_init_shared(pthread_mutex_t *m)
{
	pthread_mutexattr_t a;
	int err = pthread_mutexattr_init(&a);
	if (err)
		return -err;
	err = pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
	/* Robust: a fork-model child killed while holding a lock must not wedge
	 * every later request on that bucket. */
	if (!err)
		err = pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
	if (!err)
		err = pthread_mutex_init(m, &a);
	pthread_mutexattr_destroy(&a);
	return -err;
}

static void mutex_lock_robust(pthread_mutex_t *m)
{
	/* EOWNERDEAD: the previous owner died inside the critical section; the
	 * count is a single store, so it is consistent either way. */
	if (pthread_mutex_lock(m) == EOWNERDEAD)
		pthread_mutex_consistent(m);
}

int workload_new(const struct config *cfg, struct workload **out)
{
	*out = NULL;
	if (!cfg->workload)
		return 0;
	struct workload *w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->nbuckets = (uint32_t)cfg->buckets;
	w->global_lock = cfg->bucket_global_lock;
	w->unit_us = (uint64_t)cfg->work_unit_us;
	w->kind = cfg->delay_kind;
	w->path = cfg->workload_path;
	w->path_len = strlen(cfg->workload_path);
	w->map_len = sizeof(struct workload_shm) + (size_t)w->nbuckets * sizeof(struct bucket);
	/* Anonymous and shared: made before any fork, so fork/prefork children
	 * see the same pages; nothing to unlink if we crash. */
	void *p = mmap(NULL, w->map_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED) {
		int err = errno;
		log_error("workload: mmap %zu bytes: %s", w->map_len, strerror(err));
		free(w);
		return -err;
	}
	w->shm = p;
	int err = mutex_init_shared(&w->shm->global);
	for (uint32_t i = 0; !err && i < w->nbuckets; i++)
		err = mutex_init_shared(&w->shm->buckets[i].lock);
	if (err) {
		log_error("workload: process-shared mutex: %s", strerror(-err));
		munmap(p, w->map_len);
		free(w);
		return err;
	}
	*out = w;
	return 0;
}

void workload_free(struct workload *w)
{
	if (!w)
		return;
	/* No pthread_mutex_destroy: other processes may still map the pages. */
	munmap(w->shm, w->map_len);
	free(w);
}

#define WORKLOAD_SPIN_ROUND 16384 /* about 10-20 us of user time per round */

static uint64_t clock_us(clockid_t clock)
{
	struct timespec ts;
	clock_gettime(clock, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* Spins until `clock` has advanced by us. With CLOCK_THREAD_CPUTIME_ID only
 * the time this thread is actually on a CPU counts, so N threads sharing one
 * core take N times as long (a wall-clock loop would let every preempted
 * thread finish its "CPU work" on time). */
static void spin_on(clockid_t clock, uint64_t us)
{
	/* A thread's CPU clock is read by a system call (no vDSO): read back to
	 * back, the work was 90% kernel time and 2,800 system calls per 2 ms
	 * request, which is no handler's profile. Rounds of user-space work
	 * (10-20 us each, the overshoot at most one) between reads. */
	volatile uint64_t sink = 0;
	uint64_t end = clock_us(clock) + us;
	while (clock_us(clock) < end)
		for (unsigned i = 0; i < WORKLOAD_SPIN_ROUND; i++)
			sink += i;
	(void)sink;
}

static void sleep_us(uint64_t us)
{
	struct timespec until;
	clock_gettime(CLOCK_MONOTONIC, &until);
	until.tv_sec += (time_t)(us / 1000000u);
	until.tv_nsec += (long)(us % 1000000u) * 1000;
	if (until.tv_nsec >= 1000000000L) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000L;
	}
	/* Absolute deadline: a signal (EINTR) resumes without stretching the wait. */
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, NULL) == EINTR)
		;
}

static void work_for_us(enum delay_kind kind, uint64_t us)
{
	if (us == 0)
		return;
	switch (kind) {
	case DELAY_CPU: spin_on(CLOCK_THREAD_CPUTIME_ID, us); break;
	case DELAY_WALL: spin_on(CLOCK_MONOTONIC, us); break;
	case DELAY_SLEEP: sleep_us(us); break;
	}
}

uint64_t workload_bump(struct workload *w, uint32_t b, uint64_t hold_us)
{
	pthread_mutex_t *m = w->global_lock ? &w->shm->global : &w->shm->buckets[b].lock;
	mutex_lock_robust(m);
	work_for_us(w->kind, hold_us);
	uint64_t v = ++w->shm->buckets[b].count;
	pthread_mutex_unlock(m);
	return v;
}

uint64_t workload_total(struct workload *w)
{
	uint64_t sum = 0;
	for (uint32_t b = 0; b < w->nbuckets; b++) {
		pthread_mutex_t *m = w->global_lock ? &w->shm->global : &w->shm->buckets[b].lock;
		mutex_lock_robust(m);
		sum += w->shm->buckets[b].count;
		pthread_mutex_unlock(m);
	}
	return sum;
}

static int parse_u64(const char *p, size_t n, uint64_t *v)
{
	if (n == 0 || n > 9)
		return -1;
	uint64_t x = 0;
	for (size_t i = 0; i < n; i++) {
		if (p[i] < '0' || p[i] > '9')
			return -1;
		x = x * 10 + (uint64_t)(p[i] - '0');
	}
	*v = x;
	return 0;
}

/* One "key=digits" field of the query. */
struct query_key {
	const char *name;
	const char *twice;       /* the reasons given back to the client */
	const char *not_number;
};

static const struct query_key key_delay = { "delay", "delay given twice", "delay is not a decimal number" };
static const struct query_key key_bucket = { "bucket", "bucket given twice", "bucket is not a decimal number" };
static const struct query_key key_hold = { "hold", "hold given twice", "hold is not a decimal number" };

/* Returns 1 when the field is `key` (stored in *out), 0 when it is another
 * key, -1 on error (*why set): each key at most once. */
static int take_field(const char *k, size_t klen, const char *v, size_t vlen, const struct query_key *key,
		      uint64_t *out, bool *seen, const char **why)
{
	if (klen != strlen(key->name) || memcmp(k, key->name, klen) != 0)
		return 0;
	if (*seen) {
		*why = key->twice;
		return -1;
	}
	if (parse_u64(v, vlen, out) < 0) {
		*why = key->not_number;
		return -1;
	}
	*seen = true;
	return 1;
}

int workload_parse_query(const char *q, size_t len, struct work_query *out, const char **why)
{
	bool have_delay = false, have_bucket = false, have_hold = false;
	*out = (struct work_query){ 0 };
	size_t i = 0;
	while (q && i < len) {
		size_t end = i;
		while (end < len && q[end] != '&')
			end++;
		const char *eq = memchr(q + i, '=', end - i);
		size_t klen = eq ? (size_t)(eq - (q + i)) : end - i;
		const char *val = eq ? eq + 1 : q + end;
		size_t vlen = (size_t)(q + end - val);
		if (take_field(q + i, klen, val, vlen, &key_delay, &out->delay, &have_delay, why) < 0 ||
		    take_field(q + i, klen, val, vlen, &key_bucket, &out->bucket, &have_bucket, why) < 0 ||
		    take_field(q + i, klen, val, vlen, &key_hold, &out->hold, &have_hold, why) < 0)
			return -1;
		i = end + 1;
	}
	if (!have_delay) {
		*why = "missing delay";
		return -1;
	}
	if (!have_bucket) {
		*why = "missing bucket";
		return -1;
	}
	return 0;
}

static bool text_response(struct dyn_response *out, int status, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static bool text_response(struct dyn_response *out, int status, const char *fmt, ...)
{
	char buf[160];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	if (n < 0)
		n = 0;
	if ((size_t)n >= sizeof(buf))
		n = sizeof(buf) - 1;
	*out = (struct dyn_response){ .status = status, .content_type = "text/plain; charset=utf-8" };
	out->body = malloc((size_t)n + 1);
	if (!out->body) {
		out->status = 500;  /* the core sends an empty 500 */
		return true;
	}
	memcpy(out->body, buf, (size_t)n);
	out->len = (size_t)n;
	return true;
}

bool workload_endpoint(const struct server *srv, const struct sockaddr_storage *peer,
		       const struct http_request *req, struct dyn_response *out)
{
	(void)peer;
	struct workload *w = srv->workload;
	if (!w || req->path.len != w->path_len || memcmp(req->path.p, w->path, w->path_len) != 0)
		return false;

	if (req->query.len == 6 && !memcmp(req->query.p, "totals", 6))
		return text_response(out, 200, "total %llu buckets %u delay_units %llu hold_units %llu\n",
				     (unsigned long long)workload_total(w), w->nbuckets,
				     (unsigned long long)__atomic_load_n(&w->shm->delay_units, __ATOMIC_RELAXED),
				     (unsigned long long)__atomic_load_n(&w->shm->hold_units, __ATOMIC_RELAXED));

	struct work_query wq;
	const char *why = NULL;
	if (workload_parse_query(req->query.p, req->query.len, &wq, &why) < 0)
		return text_response(out, 400, "workload: %s (want ?delay=N&bucket=B[&hold=H])\n", why);
	if (wq.bucket >= w->nbuckets)
		return text_response(out, 400, "workload: bucket %llu out of range (0..%u)\n",
				     (unsigned long long)wq.bucket, w->nbuckets - 1);
	/* delay and hold are < 10^9 (parse_u64) and unit_us <= 10^7: no overflow. */
	if ((wq.delay + wq.hold) * w->unit_us > WORKLOAD_MAX_DELAY_US)
		return text_response(out, 400, "workload: delay+hold %llu x %llu us exceeds 60 s\n",
				     (unsigned long long)(wq.delay + wq.hold), (unsigned long long)w->unit_us);

	work_for_us(w->kind, wq.delay * w->unit_us);
	uint64_t v = workload_bump(w, (uint32_t)wq.bucket, wq.hold * w->unit_us);
	__atomic_fetch_add(&w->shm->delay_units, wq.delay, __ATOMIC_RELAXED);
	__atomic_fetch_add(&w->shm->hold_units, wq.hold, __ATOMIC_RELAXED);
	return text_response(out, 200, "%llu\n", (unsigned long long)v);
}
