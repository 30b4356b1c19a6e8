/* cache_stress.c - concurrent lookups, inserts, evictions and revalidations
 * of the file cache, built with -fsanitize=thread (`make tsan-test`), while a
 * writer changes the files under the readers (in place, mtime only, and
 * renamed over with another size), so the revalidate-and-drop path races
 * lookups and inserts of the same keys.
 * Standalone because Criterion cannot start under TSan (Snaipe/Criterion#274). */
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
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
static atomic_int readers_left = THREADS;

/* A file's first byte is name[1] and its last name[2], in every version; the
 * versions differ in size (512 or 520) and in the bytes between. */
static int write_version(const char *path, const char *name, size_t size, char fill)
{
	char buf[520];
	memset(buf, fill, size);
	buf[0] = name[1];
	buf[size - 1] = name[2];
	int fd = openat(dir_fd, path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0 || write(fd, buf, size) != (ssize_t)size)
		return -1;
	close(fd);
	return 0;
}

struct changes {
	long in_place, mtime_only, renamed;
};

/* Until the readers finish (and at most 100000 times): change a file. An
 * in-place rewrite keeps size and inode but moves the mtime; a touch moves
 * only the mtime; a rename-over brings a new inode and the other size. None
 * truncates, so a reader never sees a file shorter than its fstat said. */
static void *writer(void *arg)
{
	struct changes *ch = arg;
	unsigned seed = 77;
	for (int i = 0; i < 100000 && atomic_load(&readers_left) > 0; i++) {
		char name[16], tmp[16];
		snprintf(name, sizeof(name), "f%02d", rand_r(&seed) % FILES);
		switch (i % 3) {
		case 0: { /* same bytes at both ends, new middle, same size */
			char mid[8];
			memset(mid, 'a' + i % 26, sizeof(mid));
			int fd = openat(dir_fd, name, O_WRONLY);
			if (fd >= 0 && pwrite(fd, mid, sizeof(mid), 100) == (ssize_t)sizeof(mid))
				ch->in_place++;
			if (fd >= 0)
				close(fd);
			break;
		}
		case 1: {
			struct timespec t[2] = { { 1600000000 + i, i }, { 1600000000 + i, i } };
			if (utimensat(dir_fd, name, t, 0) == 0)
				ch->mtime_only++;
			break;
		}
		case 2: {
			struct stat st;
			snprintf(tmp, sizeof(tmp), "t%s", name);
			if (fstatat(dir_fd, name, &st, 0) == 0 &&
			    write_version(tmp, name, st.st_size == 512 ? 520 : 512, 'r') == 0 &&
			    renameat(dir_fd, tmp, dir_fd, name) == 0)
				ch->renamed++;
			break;
		}
		}
		struct timespec pause = { 0, 200000 };
		nanosleep(&pause, NULL);
	}
	return NULL;
}

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
		if (!e || (e->len != 512 && e->len != 520) || e->data[0] != name[1] ||
		    e->data[e->len - 1] != name[2])
			bad++;
		cache_release(e);
	}
	atomic_fetch_sub(&readers_left, 1);
	return (void *)bad;
}

int main(void)
{
	char dir[] = "/tmp/spindle-tsan-XXXXXX";
	if (!mkdtemp(dir))
		return 2;
	dir_fd = open(dir, O_PATH | O_DIRECTORY);
	for (int i = 0; i < FILES; i++) {
		char name[16];
		snprintf(name, sizeof(name), "f%02d", i);
		if (write_version(name, name, 512, name[1]) < 0)
			return 2;
	}
	/* each shard holds about three of these files: the fuller shards evict
	 * constantly, yet most lookups hit and so revalidate; 5 ms window:
	 * constant revalidation */
	fc = cache_new(16 * 2400, 4096, 5);
	pthread_t t[THREADS], w;
	struct changes ch = { 0 };
	long bad = 0;
	pthread_create(&w, NULL, writer, &ch);
	for (long i = 0; i < THREADS; i++)
		pthread_create(&t[i], NULL, worker, (void *)(i + 1));
	for (int i = 0; i < THREADS; i++) {
		void *r;
		pthread_join(t[i], &r);
		bad += (long)r;
	}
	pthread_join(w, NULL);
	struct cache_stats st;
	cache_get_stats(fc, &st);
	cache_free(fc);
	char cmd[64];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	if (system(cmd) != 0)
		return 2;
	printf("cache_stress: %d lookups, %llu hits, %llu misses, %llu evictions, %ld bad; "
	       "files changed %ld in place, %ld mtime only, %ld renamed over\n",
	       THREADS * ITERATIONS, (unsigned long long)st.hits, (unsigned long long)st.misses,
	       (unsigned long long)st.evictions, bad, ch.in_place, ch.mtime_only, ch.renamed);
	/* the point is the race: a run in which the writer changed nothing proves nothing */
	if (ch.in_place == 0 || ch.mtime_only == 0 || ch.renamed == 0)
		return 3;
	return bad ? 1 : 0;
}
