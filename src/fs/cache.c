/* cache.c - sharded LRU file cache with reference-counted entries. */
#include "cache.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../http/date.h"
#include "../http/response.h"

#define CACHE_SHARDS 16
#define CACHE_MIN_BUCKETS 64

struct shard {
	pthread_mutex_t lock;
	struct cache_entry **buckets;
	size_t nbuckets, count;
	size_t bytes, max_bytes;
	struct cache_entry *lru_head, *lru_tail; /* head = most recently used */
	uint64_t hits, misses, evictions;
};

struct file_cache {
	size_t max_file;
	int revalidate_ms;
	struct cache_gauges *gauges; /* or NULL */
	struct shard shards[CACHE_SHARDS];
};

static uint64_t hash_key(const char *key, size_t len)
{
	uint64_t h = 0xcbf29ce484222325ULL; /* FNV-1a */
	for (size_t i = 0; i < len; i++) {
		h ^= (unsigned char)key[i];
		h *= 0x100000001b3ULL;
	}
	return h;
}

static size_t entry_cost(const struct cache_entry *e)
{
	return e->len + sizeof(*e) + e->keylen;
}

struct file_cache *cache_new(size_t max_bytes, size_t max_file, int revalidate_ms)
{
	struct file_cache *fc = calloc(1, sizeof(*fc));
	if (!fc)
		return NULL;
	fc->max_file = max_bytes ? max_file : 0;
	fc->revalidate_ms = revalidate_ms;
	for (int i = 0; i < CACHE_SHARDS; i++) {
		struct shard *s = &fc->shards[i];
		pthread_mutex_init(&s->lock, NULL);
		s->max_bytes = max_bytes / CACHE_SHARDS;
		s->nbuckets = CACHE_MIN_BUCKETS;
		s->buckets = calloc(s->nbuckets, sizeof(*s->buckets));
		if (!s->buckets) {
			cache_free(fc);
			return NULL;
		}
	}
	return fc;
}

static void entry_unref(struct cache_entry *e)
{
	if (atomic_fetch_sub_explicit(&e->refs, 1, memory_order_acq_rel) == 1)
		free(e); /* data lives in the same allocation */
}

void cache_release(struct cache_entry *e)
{
	if (e)
		entry_unref(e);
}

void cache_free(struct file_cache *fc)
{
	if (!fc)
		return;
	for (int i = 0; i < CACHE_SHARDS; i++) {
		struct shard *s = &fc->shards[i];
		for (struct cache_entry *e = s->lru_head, *next; e; e = next) {
			next = e->lru_next;
			entry_unref(e);
		}
		free(s->buckets);
		pthread_mutex_destroy(&s->lock);
	}
	free(fc);
}

size_t cache_max_file(const struct file_cache *fc)
{
	return fc ? fc->max_file : 0;
}

static struct shard *shard_for(struct file_cache *fc, uint64_t h)
{
	/* FNV-1a's top byte hardly changes with a key's last characters (f01,
	 * f02... all landed in one shard); a multiply by the golden ratio folds
	 * every bit into the middle ones, still independent of the bucket bits. */
	return &fc->shards[((h * 0x9E3779B97F4A7C15ULL) >> 32) % CACHE_SHARDS];
}

static void lru_unlink(struct shard *s, struct cache_entry *e)
{
	if (e->lru_prev)
		e->lru_prev->lru_next = e->lru_next;
	else
		s->lru_head = e->lru_next;
	if (e->lru_next)
		e->lru_next->lru_prev = e->lru_prev;
	else
		s->lru_tail = e->lru_prev;
	e->lru_prev = e->lru_next = NULL;
}

static void lru_push_front(struct shard *s, struct cache_entry *e)
{
	e->lru_prev = NULL;
	e->lru_next = s->lru_head;
	if (s->lru_head)
		s->lru_head->lru_prev = e;
	s->lru_head = e;
	if (!s->lru_tail)
		s->lru_tail = e;
}

static struct cache_entry **bucket_find(struct shard *s, uint64_t h, const char *key, size_t len)
{
	struct cache_entry **pp = &s->buckets[h & (s->nbuckets - 1)];
	for (; *pp; pp = &(*pp)->hnext)
		if ((*pp)->hash == h && (*pp)->keylen == len && memcmp((*pp)->key, key, len) == 0)
			return pp;
	return pp;
}

/* Relaxed: the gauges are statistics, ordered by nothing. */
static void gauges_add(struct cache_gauges *g, long long bytes, long long entries)
{
	if (!g)
		return;
	atomic_fetch_add_explicit(&g->bytes, bytes, memory_order_relaxed);
	atomic_fetch_add_explicit(&g->entries, entries, memory_order_relaxed);
}

/* Unlinks e from its shard (lock held) and drops the cache's reference. */
static void shard_remove(struct file_cache *fc, struct shard *s, struct cache_entry *e)
{
	gauges_add(fc->gauges, -(long long)entry_cost(e), -1);
	struct cache_entry **pp = bucket_find(s, e->hash, e->key, e->keylen);
	if (*pp == e)
		*pp = e->hnext;
	lru_unlink(s, e);
	s->count--;
	s->bytes -= entry_cost(e);
	entry_unref(e);
}

static void shard_grow(struct shard *s)
{
	size_t n = s->nbuckets * 2;
	struct cache_entry **b = calloc(n, sizeof(*b));
	if (!b)
		return;
	for (size_t i = 0; i < s->nbuckets; i++) {
		for (struct cache_entry *e = s->buckets[i], *next; e; e = next) {
			next = e->hnext;
			e->hnext = b[e->hash & (n - 1)];
			b[e->hash & (n - 1)] = e;
		}
	}
	free(s->buckets);
	s->buckets = b;
	s->nbuckets = n;
}

/* Same file, same contents? Inode, size and mtime (to the nanosecond). */
static bool entry_matches(const struct cache_entry *e, const struct stat *st)
{
	return e->dev == st->st_dev && e->ino == st->st_ino && (off_t)e->len == st->st_size &&
	       e->mtim.tv_sec == st->st_mtim.tv_sec && e->mtim.tv_nsec == st->st_mtim.tv_nsec;
}

struct cache_entry *cache_lookup(struct file_cache *fc, const char *key, size_t keylen, int64_t now_ms,
				 cache_reopen_fn reopen, void *arg)
{
	if (!fc || fc->max_file == 0)
		return NULL;
	uint64_t h = hash_key(key, keylen);
	struct shard *s = shard_for(fc, h);
	struct cache_entry *e;

	pthread_mutex_lock(&s->lock);
	e = *bucket_find(s, h, key, keylen);
	if (e) {
		if (s->lru_head != e) {
			lru_unlink(s, e);
			lru_push_front(s, e);
		}
		atomic_fetch_add_explicit(&e->refs, 1, memory_order_relaxed);
		s->hits++;
	} else {
		s->misses++;
	}
	pthread_mutex_unlock(&s->lock);
	if (!e)
		return NULL;

	/* Revalidate outside the lock: one thread per window does the stat. */
	long long checked = atomic_load_explicit(&e->checked_ms, memory_order_relaxed);
	if (now_ms - checked >= fc->revalidate_ms &&
	    atomic_compare_exchange_strong(&e->checked_ms, &checked, (long long)now_ms)) {
		struct stat st;
		int fd = reopen(key, arg);
		bool same = fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && entry_matches(e, &st);
		if (fd >= 0)
			close(fd);
		if (!same) {
			pthread_mutex_lock(&s->lock);
			if (*bucket_find(s, h, key, keylen) == e)
				shard_remove(fc, s, e);
			s->hits--; /* it was a miss after all */
			s->misses++;
			pthread_mutex_unlock(&s->lock);
			entry_unref(e);
			return NULL;
		}
	}
	return e;
}

struct cache_entry *cache_insert(struct file_cache *fc, const char *key, size_t keylen, int fd,
				 const struct stat *st, const char *mime, int64_t now_ms)
{
	if (!fc || (size_t)st->st_size > fc->max_file)
		return NULL;
	size_t len = (size_t)st->st_size;
	struct cache_entry *e = malloc(sizeof(*e) + keylen + 1 + len);
	if (!e)
		return NULL;
	memset(e, 0, sizeof(*e));
	char *data = e->key + keylen + 1;
	size_t off = 0;
	while (off < len) {
		ssize_t n = pread(fd, data + off, len - off, (off_t)off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) { /* error, or changed under us: don't cache a torn copy */
			free(e);
			return NULL;
		}
		off += (size_t)n;
	}
	memcpy(e->key, key, keylen);
	e->key[keylen] = '\0';
	e->keylen = keylen;
	e->data = data;
	e->len = len;
	e->mtime = st->st_mtime;
	e->mtim = st->st_mtim;
	e->dev = st->st_dev;
	e->ino = st->st_ino;
	e->mime = mime;
	e->etag_len = http_etag(e->etag, st->st_mtime, (uint64_t)len);
	http_date_format(st->st_mtime, e->last_modified);
	e->hash = hash_key(key, keylen);
	atomic_init(&e->refs, 2); /* the cache's and the caller's */
	atomic_init(&e->checked_ms, now_ms);
	atomic_init(&e->aux, 0);
	atomic_init(&e->aux_checked_ms, 0);

	struct shard *s = shard_for(fc, e->hash);
	size_t cost = entry_cost(e);
	pthread_mutex_lock(&s->lock);
	if (cost > s->max_bytes) {
		pthread_mutex_unlock(&s->lock);
		atomic_store(&e->refs, 1);
		return e; /* too big for a shard: serve it once, uncached */
	}
	struct cache_entry *old = *bucket_find(s, e->hash, key, keylen);
	if (old)
		shard_remove(fc, s, old);
	while (s->bytes + cost > s->max_bytes && s->lru_tail) {
		shard_remove(fc, s, s->lru_tail);
		s->evictions++;
		if (fc->gauges)
			atomic_fetch_add_explicit(&fc->gauges->evictions, 1, memory_order_relaxed);
	}
	if (s->count >= s->nbuckets * 2)
		shard_grow(s);
	struct cache_entry **head = &s->buckets[e->hash & (s->nbuckets - 1)];
	e->hnext = *head;
	*head = e;
	lru_push_front(s, e);
	s->count++;
	s->bytes += cost;
	gauges_add(fc->gauges, (long long)cost, 1);
	pthread_mutex_unlock(&s->lock);
	return e;
}

void cache_get_stats(struct file_cache *fc, struct cache_stats *out)
{
	memset(out, 0, sizeof(*out));
	if (!fc)
		return;
	for (int i = 0; i < CACHE_SHARDS; i++) {
		struct shard *s = &fc->shards[i];
		pthread_mutex_lock(&s->lock);
		out->hits += s->hits;
		out->misses += s->misses;
		out->evictions += s->evictions;
		out->entries += s->count;
		out->bytes += s->bytes;
		pthread_mutex_unlock(&s->lock);
	}
}

void cache_set_gauges(struct file_cache *fc, struct cache_gauges *g)
{
	if (!fc)
		return;
	fc->gauges = g;
	if (!g)
		return;
	atomic_store(&g->bytes, 0);
	atomic_store(&g->entries, 0);
	atomic_store(&g->evictions, 0);
	for (int i = 0; i < CACHE_SHARDS; i++) {
		struct shard *s = &fc->shards[i];
		pthread_mutex_lock(&s->lock);
		gauges_add(g, (long long)s->bytes, (long long)s->count);
		pthread_mutex_unlock(&s->lock);
	}
}
