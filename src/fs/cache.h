/* cache.h - an LRU of small files' contents and metadata, bounded in bytes.
 *
 * Knows nothing of HTTP beyond carrying the validators a response needs. A
 * lookup returns a referenced entry; eviction only drops the cache's own
 * reference, so a response still sending an evicted entry's bytes is safe.
 * Sharded: each shard has its own lock, hash table, LRU list and byte budget,
 * so threads looking up different files rarely contend. */
#ifndef SPINDLE_FS_CACHE_H
#define SPINDLE_FS_CACHE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <time.h>

struct cache_entry {
	/* immutable once published */
	const char *data;
	size_t len;
	time_t mtime;
	char etag[48];
	size_t etag_len;
	char last_modified[32];
	const char *mime;

	/* the caller's: a fact about the file it would rather not look up on
	 * every request (site/static.c: which precompressed sidecars exist), and when
	 * it was last worked out (0: never). The cache only zeroes them. */
	atomic_uint aux;
	atomic_llong aux_checked_ms;

	/* private to cache.c */
	atomic_int refs;
	atomic_llong checked_ms;  /* last time the file was compared with the disk */
	dev_t dev;
	ino_t ino;
	struct timespec mtim;
	uint64_t hash;
	struct cache_entry *hnext, *lru_prev, *lru_next;
	size_t keylen;
	char key[];
};

struct cache_stats {
	uint64_t hits, misses, evictions, entries, bytes;
};

struct file_cache;

/* Optional gauges the cache keeps up to date as it changes (the statistics
 * segment hands it a per-process block of shared memory). Written under a
 * shard lock, on insert and removal only: lookups never touch them. */
struct cache_gauges {
	atomic_llong bytes;      /* bytes held (contents + overhead) */
	atomic_llong entries;
	atomic_ullong evictions; /* entries dropped to make room */
};

/* max_bytes 0 disables the cache (every lookup misses, inserts are refused). */
struct file_cache *cache_new(size_t max_bytes, size_t max_file, int revalidate_ms);
void cache_free(struct file_cache *fc);

/* The entry for key (a canonical root-relative path), referenced, or NULL.
 * An entry older than the revalidation window is checked against the file
 * (reopened beneath root_fd with the given openat flags policy via reopen);
 * a changed file is dropped and reported as a miss. */
typedef int (*cache_reopen_fn)(const char *key, void *arg);
struct cache_entry *cache_lookup(struct file_cache *fc, const char *key, size_t keylen, int64_t now_ms,
				 cache_reopen_fn reopen, void *arg);

/* Reads the open regular file fd (described by st) into a new entry, inserts
 * it (replacing any older one) and returns it referenced; NULL when the file
 * is too big, the cache is off, or memory is short. The caller keeps fd. */
struct cache_entry *cache_insert(struct file_cache *fc, const char *key, size_t keylen, int fd,
				 const struct stat *st, const char *mime, int64_t now_ms);

void cache_release(struct cache_entry *e);

/* Sums of all shards (approximate while others insert). */
void cache_get_stats(struct file_cache *fc, struct cache_stats *out);

size_t cache_max_file(const struct file_cache *fc);

/* Points the cache at gauges (NULL: none). Zeroes them and then adds what the
 * cache holds now, so a process that inherited a cache across fork() can give
 * it gauges of its own. Call before any other thread uses the cache. */
void cache_set_gauges(struct file_cache *fc, struct cache_gauges *g);

#endif
