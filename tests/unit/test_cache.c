/* test_cache.c - the LRU file cache: hits, revalidation, the byte bound, and
 * concurrent readers (run under TSan by `make tsan-unit`). */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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

Test(cache, byte_bound_holds_under_a_sweep_and_evicts_lru)
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
	/* the most recent file is still there, the first one long gone */
	struct cache_entry *e = cache_lookup(fc, "f399", 4, 1, reopen, NULL);
	cr_assert_not_null(e);
	cache_release(e);
	cr_assert_null(cache_lookup(fc, "f000", 4, 1, reopen, NULL));
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
