/* cache_stress.c - concurrent lookups, inserts, evictions and revalidations
 * of the file cache, built with -fsanitize=thread (`make tsan-test`).
 * Standalone because Criterion cannot start under TSan (Snaipe/Criterion#274). */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../src/fs/cache.h"

#define THREADS 4
#define FILES 48
#define ITERATIONS 20000

static int dir_fd;
static struct file_cache *fc;

static int reopen(const char *key, void *arg)
{
	(void)arg;
	return openat(dir_fd, key, O_RDONLY);
}

static void *worker(void *arg)
{
	long bad = 0;
	unsigned seed = (unsigned)(uintptr_t)arg;
	for (int i = 0; i < ITERATIONS; i++) {
		char name[16];
		snprintf(name, sizeof(name), "f%02d", rand_r(&seed) % FILES);
		struct cache_entry *e = cache_lookup(fc, name, strlen(name), i / 10, reopen, NULL);
		if (!e) {
			struct stat st;
			int fd = openat(dir_fd, name, O_RDONLY);
			if (fd >= 0 && fstat(fd, &st) == 0)
				e = cache_insert(fc, name, strlen(name), fd, &st, "text/plain", i / 10);
			if (fd >= 0)
				close(fd);
		}
		if (!e || e->len != 512 || e->data[0] != name[1] || e->data[511] != name[2])
			bad++;
		cache_release(e);
	}
	return (void *)bad;
}

int main(void)
{
	char dir[] = "/tmp/spindle-tsan-XXXXXX";
	if (!mkdtemp(dir))
		return 2;
	dir_fd = open(dir, O_PATH | O_DIRECTORY);
	for (int i = 0; i < FILES; i++) {
		char name[16], buf[512];
		snprintf(name, sizeof(name), "f%02d", i);
		memset(buf, name[1], sizeof(buf));
		buf[511] = name[2];
		int fd = openat(dir_fd, name, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		if (fd < 0 || write(fd, buf, sizeof(buf)) != (ssize_t)sizeof(buf))
			return 2;
		close(fd);
	}
	/* room for about a third of the files: constant eviction; 5 ms window: constant revalidation */
	fc = cache_new(16 * 2400, 4096, 5);
	pthread_t t[THREADS];
	long bad = 0;
	for (long i = 0; i < THREADS; i++)
		pthread_create(&t[i], NULL, worker, (void *)(i + 1));
	for (int i = 0; i < THREADS; i++) {
		void *r;
		pthread_join(t[i], &r);
		bad += (long)r;
	}
	struct cache_stats st;
	cache_get_stats(fc, &st);
	cache_free(fc);
	char cmd[64];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	if (system(cmd) != 0)
		return 2;
	printf("cache_stress: %d lookups, %llu hits, %llu misses, %llu evictions, %ld bad\n", THREADS * ITERATIONS,
	       (unsigned long long)st.hits, (unsigned long long)st.misses, (unsigned long long)st.evictions, bad);
	return bad ? 1 : 0;
}
