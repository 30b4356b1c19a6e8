/* test_cache.c - the LRU file cache: hits, revalidation, the byte bound, and
 * concurrent readers (the TSan run is tests/tsan/cache_stress.c, `make tsan-test`). */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../../src/fs/cache.h"

static char dir[] = "/tmp/spindle-cache-XXXXXX";
static int dir_fd = -1;

static void setup(void)
{
	strcpy(dir, "/tmp/spindle-cache-XXXXXX");
	cr_assert_not_null(mkdtemp(dir));
	dir_fd = open(dir, O_PATH | O_DIRECTORY);
	cr_assert_geq(dir_fd, 0);
}

static void teardown(void)
{
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	cr_assert_eq(system(cmd), 0);
	close(dir_fd);
}

static void write_file(const char *name, const char *content, size_t len)
{
	int fd = openat(dir_fd, name, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	cr_assert_geq(fd, 0);
	cr_assert_eq(write(fd, content, len), (ssize_t)len);
	close(fd);
}

static int reopen(const char *key, void *arg)
{
	(void)arg;
	return openat(dir_fd, key, O_RDONLY);
}

/* Opens name and inserts it, like the core does on a miss. */
static struct cache_entry *load(struct file_cache *fc, const char *name, int64_t now)
{
	struct stat st;
	int fd = openat(dir_fd, name, O_RDONLY);
	cr_assert_geq(fd, 0);
	cr_assert_eq(fstat(fd, &st), 0);
	struct cache_entry *e = cache_insert(fc, name, strlen(name), fd, &st, "text/plain", now);
	close(fd);
	return e;
}

TestSuite(cache, .init = setup, .fini = teardown);

Test(cache, second_lookup_hits_with_same_bytes)
{
	struct file_cache *fc = cache_new(1 << 20, 1 << 16, 1000);
	write_file("a.txt", "hello", 5);
	cr_assert_null(cache_lookup(fc, "a.txt", 5, 0, reopen, NULL));
	struct cache_entry *e = load(fc, "a.txt", 0);
	cr_assert_not_null(e);
	cache_release(e);
	e = cache_lookup(fc, "a.txt", 5, 10, reopen, NULL);
	cr_assert_not_null(e);
	cr_assert_eq(e->len, 5);
	cr_assert_eq(memcmp(e->data, "hello", 5), 0);
	cr_assert_eq(e->etag[0], '"');
	cache_release(e);
	struct cache_stats st;
	cache_get_stats(fc, &st);
	cr_assert_eq(st.hits, 1);
	cr_assert_eq(st.misses, 1);
	cr_assert_eq(st.entries, 1);
	cache_free(fc);
}

Test(cache, changed_file_is_dropped_after_the_window)
{
	struct file_cache *fc = cache_new(1 << 20, 1 << 16, 1000);
	write_file("a.txt", "one", 3);
	cache_release(load(fc, "a.txt", 0));
	write_file("a.txt", "three", 5); /* size changes, so the check cannot miss it */
	struct cache_entry *e = cache_lookup(fc, "a.txt", 5, 500, reopen, NULL);
	cr_assert_not_null(e, "within the window the old copy may be served");
	cache_release(e);
	cr_assert_null(cache_lookup(fc, "a.txt", 5, 1000, reopen, NULL), "after the window it must be dropped");
	cache_free(fc);
}

Test(cache, deleted_file_is_dropped)
{
	struct file_cache *fc = cache_new(1 << 20, 1 << 16, 0);
	write_file("gone.txt", "x", 1);
	cache_release(load(fc, "gone.txt", 0));
	cr_assert_eq(unlinkat(dir_fd, "gone.txt", 0), 0);
	cr_assert_null(cache_lookup(fc, "gone.txt", 8, 1, reopen, NULL));
	cache_free(fc);
}

Test(cache, too_big_files_are_not_cached)
{
	struct file_cache *fc = cache_new(1 << 20, 4, 1000);
	write_file("big.txt", "12345", 5);
	cr_assert_null(load(fc, "big.txt", 0));
	cache_free(fc);
}

Test(cache, disabled_cache_never_holds_anything)
{
	struct file_cache *fc = cache_new(0, 1 << 16, 1000);
	write_file("a.txt", "x", 1);
	cr_assert_null(load(fc, "a.txt", 0));
	cr_assert_null(cache_lookup(fc, "a.txt", 5, 0, reopen, NULL));
	cache_free(fc);
}

Test(cache, byte_bound_holds_under_a_sweep)
{
	const size_t bound = 64 * 1024;
	struct file_cache *fc = cache_new(bound, 8192, 100000);
	char buf[3000];
	memset(buf, 'z', sizeof(buf));
	for (int i = 0; i < 400; i++) {
		char name[32];
		snprintf(name, sizeof(name), "f%03d", i);
		write_file(name, buf, sizeof(buf));
		struct cache_entry *e = load(fc, name, 0);
		cr_assert_not_null(e);
		cache_release(e);
		struct cache_stats st;
		cache_get_stats(fc, &st);
		cr_assert_leq(st.bytes, bound, "cache holds %llu bytes, bound %zu", (unsigned long long)st.bytes, bound);
	}
	struct cache_stats st;
	cache_get_stats(fc, &st);
	cr_assert_gt(st.evictions, 300);
	/* the most recent file is still there, the first one long gone (order of
	 * use is tested on its own below: this sweep never touches an entry twice) */
	struct cache_entry *e = cache_lookup(fc, "f399", 4, 1, reopen, NULL);
	cr_assert_not_null(e);
	cache_release(e);
	cr_assert_null(cache_lookup(fc, "f000", 4, 1, reopen, NULL));
	cache_free(fc);
}

/* Do a and b share a shard? Found through the public interface: in a cache
 * whose every shard holds one entry, b evicts a only when they share one. */
static bool same_shard(const char *a, const char *b, size_t size)
{
	size_t cost = size + sizeof(struct cache_entry) + strlen(a) + 8;
	struct file_cache *probe = cache_new(16 * (cost + cost / 2), 4096, 100000);
	cache_release(load(probe, a, 0));
	cache_release(load(probe, b, 0));
	struct cache_stats st;
	cache_get_stats(probe, &st);
	cache_free(probe);
	return st.evictions == 1;
}

/* n names "lruN" (files of size bytes, written here) that share one shard. */
static void same_shard_names(char names[][16], int n, size_t size)
{
	char buf[4096];
	memset(buf, 'l', size);
	int found = 0;
	for (int i = 0; found < n && i < 2000; i++) {
		char name[16];
		snprintf(name, sizeof(name), "lru%d", i);
		write_file(name, buf, size);
		if (found == 0 || same_shard(names[0], name, size))
			strcpy(names[found++], name);
	}
	cr_assert_eq(found, n);
}

static bool cached(struct file_cache *fc, const char *name, int64_t now)
{
	struct cache_entry *e = cache_lookup(fc, name, strlen(name), now, reopen, NULL);
	cache_release(e);
	return e != NULL;
}

/* Least recently *used*, not least recently inserted: the first entry, used
 * again just before the shard overflows, must survive, and the second,
 * inserted later but never used since, must go. A FIFO cache evicts the first
 * one and fails here. */
Test(cache, evicts_least_recently_used_not_first_inserted)
{
	char names[4][16];
	char buf[1000];
	memset(buf, 'l', sizeof(buf));
	same_shard_names(names, 4, sizeof(buf));
	/* room in the shard for three entries, not four */
	size_t cost = sizeof(buf) + sizeof(struct cache_entry) + strlen(names[0]) + 8;
	struct file_cache *fc = cache_new(16 * (3 * cost + cost / 2), 4096, 100000);
	for (int i = 0; i < 3; i++)
		cache_release(load(fc, names[i], 0));
	cr_assert(cached(fc, names[0], 1), "touch the oldest entry");
	cache_release(load(fc, names[3], 2)); /* one must go */
	struct cache_stats st;
	cache_get_stats(fc, &st);
	cr_assert_eq(st.evictions, 1);
	cr_assert(cached(fc, names[0], 3), "%s was used most recently but one: kept", names[0]);
	cr_assert_not(cached(fc, names[1], 3), "%s was the least recently used: evicted", names[1]);
	cr_assert(cached(fc, names[2], 3));
	cr_assert(cached(fc, names[3], 3));
	cache_free(fc);
}

/* The other half: without the touch, insertion order decides. */
Test(cache, evicts_the_oldest_when_nothing_was_used)
{
	char names[4][16];
	char buf[1000];
	memset(buf, 'l', sizeof(buf));
	same_shard_names(names, 4, sizeof(buf));
	size_t cost = sizeof(buf) + sizeof(struct cache_entry) + strlen(names[0]) + 8;
	struct file_cache *fc = cache_new(16 * (3 * cost + cost / 2), 4096, 100000);
	for (int i = 0; i < 4; i++)
		cache_release(load(fc, names[i], 0));
	cr_assert_not(cached(fc, names[0], 1));
	cr_assert(cached(fc, names[1], 1));
	cache_free(fc);
}

/* Keys that differ only in their last characters (f00, f01, ... as in any
 * directory of numbered files) must spread over the shards: each shard has
 * 1/16 of the byte budget, so keys piling into one shard make the cache hold
 * a sixteenth of what it may, and evict while it is nearly empty. */
Test(cache, similar_keys_spread_over_shards)
{
	char buf[1000];
	memset(buf, 's', sizeof(buf));
	size_t cost = sizeof(buf) + sizeof(struct cache_entry) + 3 + 8;
	/* room for 48 such files 2.7 times over, 8 per shard */
	struct file_cache *fc = cache_new(16 * (8 * cost + cost / 2), 4096, 100000);
	for (int i = 0; i < 48; i++) {
		char name[16];
		snprintf(name, sizeof(name), "f%02d", i);
		write_file(name, buf, sizeof(buf));
		cache_release(load(fc, name, 0));
	}
	struct cache_stats st;
	cache_get_stats(fc, &st);
	cr_assert_eq(st.evictions, 0, "%llu of 48 small files evicted from a cache with room for 128",
		     (unsigned long long)st.evictions);
	cr_assert_eq(st.entries, 48);
	cache_free(fc);
}

/* Revalidation must not drop what did not change, or every drop test below
 * would pass against a cache that drops everything. */
Test(cache, unchanged_file_survives_revalidation)
{
	struct file_cache *fc = cache_new(1 << 20, 1 << 16, 1000);
	write_file("a.txt", "same", 4);
	cache_release(load(fc, "a.txt", 0));
	cr_assert(cached(fc, "a.txt", 1000));
	cr_assert(cached(fc, "a.txt", 5000));
	struct cache_stats st;
	cache_get_stats(fc, &st);
	cr_assert_eq(st.hits, 2);
	cache_free(fc);
}

static void set_mtime(const char *name, time_t sec, long nsec)
{
	struct timespec t[2] = { { sec, nsec }, { sec, nsec } };
	cr_assert_eq(utimensat(dir_fd, name, t, 0), 0);
}

/* Same size, same inode, only the modification time moves (a rewrite with
 * same-length content, or touch): dropped after the window. */
Test(cache, mtime_only_change_is_dropped)
{
	struct file_cache *fc = cache_new(1 << 20, 1 << 16, 1000);
	write_file("a.txt", "abc", 3);
	set_mtime("a.txt", 1600000000, 0);
	cache_release(load(fc, "a.txt", 0));
	cr_assert(cached(fc, "a.txt", 1000), "unchanged: kept");
	set_mtime("a.txt", 1600000000, 1); /* one nanosecond */
	cr_assert_not(cached(fc, "a.txt", 2000), "a nanosecond's difference is a different file");
	cache_release(load(fc, "a.txt", 2000));
	set_mtime("a.txt", 1600000001, 1); /* one second, same size */
	cr_assert_not(cached(fc, "a.txt", 3000));
	cache_free(fc);
}

/* Another file renamed over the name (how deployments replace files): same
 * size, same mtime, only the inode differs. */
Test(cache, rename_over_is_dropped)
{
	struct file_cache *fc = cache_new(1 << 20, 1 << 16, 1000);
	write_file("a.txt", "old", 3);
	set_mtime("a.txt", 1600000000, 0);
	cache_release(load(fc, "a.txt", 0));
	write_file("a.new", "new", 3); /* made while a.txt exists: a different inode */
	set_mtime("a.new", 1600000000, 0);
	cr_assert_eq(renameat(dir_fd, "a.new", dir_fd, "a.txt"), 0);
	cr_assert_not(cached(fc, "a.txt", 1000), "a different inode is a different file");
	struct cache_entry *e = load(fc, "a.txt", 1000);
	cr_assert_eq(memcmp(e->data, "new", 3), 0);
	cache_release(e);
	cr_assert(cached(fc, "a.txt", 1001));
	cache_free(fc);
}

/* cache_max_file is the largest size cached: equal is in, one more is out. */
Test(cache, max_file_boundary)
{
	struct file_cache *fc = cache_new(1 << 20, 4, 1000);
	write_file("four", "1234", 4);
	write_file("five", "12345", 5);
	cache_release(load(fc, "four", 0));
	cr_assert(cached(fc, "four", 1), "exactly cache_max_file bytes: cached");
	cr_assert_null(load(fc, "five", 0));
	cr_assert_not(cached(fc, "five", 1));
	cr_assert_eq(cache_max_file(fc), 4);
	cache_free(fc);
}

Test(cache, evicted_entry_stays_valid_while_referenced)
{
	struct file_cache *fc = cache_new(16 * 4096, 4096, 100000);
	char buf[3000];
	memset(buf, 'q', sizeof(buf));
	write_file("held", buf, sizeof(buf));
	struct cache_entry *held = load(fc, "held", 0);
	for (int i = 0; i < 200; i++) { /* evict everything, "held" included */
		char name[32];
		snprintf(name, sizeof(name), "e%03d", i);
		write_file(name, buf, sizeof(buf));
		cache_release(load(fc, name, 0));
	}
	cr_assert_eq(held->len, sizeof(buf));
	cr_assert_eq(held->data[0], 'q'); /* ASan would flag a use-after-free here */
	cr_assert_eq(held->data[sizeof(buf) - 1], 'q');
	cache_release(held);
	cache_free(fc);
}

struct reader_arg {
	struct file_cache *fc;
	int iterations;
	int found;
};

static void *reader(void *p)
{
	struct reader_arg *a = p;
	for (int i = 0; i < a->iterations; i++) {
		char name[16];
		snprintf(name, sizeof(name), "c%02d", i % 32);
		struct cache_entry *e = cache_lookup(a->fc, name, strlen(name), i, reopen, NULL);
		if (!e)
			e = load(a->fc, name, i);
		if (e && e->len == 100 && e->data[99] == 'c')
			a->found++;
		cache_release(e);
	}
	return NULL;
}

Test(cache, concurrent_readers_and_inserters)
{
	/* small bound: lookups, inserts, evictions and revalidations all race */
	struct file_cache *fc = cache_new(16 * 1024, 4096, 50);
	char buf[100];
	memset(buf, 'c', sizeof(buf));
	for (int i = 0; i < 32; i++) {
		char name[16];
		snprintf(name, sizeof(name), "c%02d", i);
		write_file(name, buf, sizeof(buf));
	}
	pthread_t t[4];
	struct reader_arg args[4];
	for (int i = 0; i < 4; i++) {
		args[i] = (struct reader_arg){ fc, 3000, 0 };
		pthread_create(&t[i], NULL, reader, &args[i]);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(t[i], NULL);
		cr_assert_eq(args[i].found, 3000);
	}
	cache_free(fc);
}
