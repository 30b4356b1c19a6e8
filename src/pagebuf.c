/* pagebuf.c - one-page buffers from mmap, with a per-thread cache (see the
 * header); from the heap under AddressSanitizer. */
#include "pagebuf.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* Under valgrind the heap's blocks too: memcheck cannot see a use after
 * give-back or a leak inside pages this file maps and caches itself. */
#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#define PAGEBUF_UNDER_VALGRIND() RUNNING_ON_VALGRIND
#endif
#endif
#ifndef PAGEBUF_UNDER_VALGRIND
#define PAGEBUF_UNDER_VALGRIND() 0
#endif

/* ThreadSanitizer (clang 14) does not intercept mremap: the range a
 * buffer moved away from keeps its accesses' history, and the next thread
 * handed a page there is reported racing with them. Under it a resize is
 * a new mapping, a copy and an munmap, all of which it sees. */
#ifdef SPINDLE_TSAN
#define PAGEBUF_NO_MREMAP 1
#endif

#ifdef PAGEBUF_FROM_HEAP

void pagebuf_prefer_heap(void)
{
}

void *pagebuf_get(void)
{
	return aligned_alloc(PAGEBUF_SIZE, PAGEBUF_SIZE);
}

void pagebuf_put(void *p)
{
	free(p);
}

void *pagebuf_resize(void *p, size_t old_size, size_t new_size)
{
	(void)old_size;
	return realloc(p, new_size);
}

void pagebuf_free(void *p, size_t size)
{
	(void)size;
	free(p);
}

void pagebuf_trim(void)
{
}

#else

/* The size of the mapping that holds n bytes. */
static size_t pagebuf_span(size_t n)
{
	return (n + PAGEBUF_SIZE - 1) & ~(size_t)(PAGEBUF_SIZE - 1);
}

/* The cached pages are linked through their first word. */
struct pagebuf_free {
	struct pagebuf_free *next;
};

static _Thread_local struct pagebuf_free *pagebuf_cache;
static _Thread_local unsigned pagebuf_ncached;

/* A thread that exits (the thread model's, one per connection) unmaps
 * what it cached: the key's destructor runs once the thread has cached a
 * page. */
static pthread_key_t pagebuf_key;
static pthread_once_t pagebuf_once = PTHREAD_ONCE_INIT;
static bool pagebuf_key_ok;

/* Set before the serving threads start and never changed after, so every
 * buffer is given back the way it was taken. */
static bool pagebuf_heap;
static pthread_once_t pagebuf_size_once = PTHREAD_ONCE_INIT;

static void pagebuf_size_check(void)
{
	if (sysconf(_SC_PAGESIZE) != PAGEBUF_SIZE || PAGEBUF_UNDER_VALGRIND())
		pagebuf_heap = true;
}

void pagebuf_prefer_heap(void)
{
	pagebuf_heap = true;
}

void pagebuf_trim(void)
{
	while (pagebuf_cache) {
		struct pagebuf_free *f = pagebuf_cache;
		pagebuf_cache = f->next;
		munmap(f, PAGEBUF_SIZE);
	}
	pagebuf_ncached = 0;
}

static void pagebuf_thread_exit(void *unused)
{
	(void)unused;
	pagebuf_trim();
}

static void pagebuf_key_init(void)
{
	pagebuf_key_ok = pthread_key_create(&pagebuf_key, pagebuf_thread_exit) == 0;
}

void *pagebuf_get(void)
{
	pthread_once(&pagebuf_size_once, pagebuf_size_check);
	if (pagebuf_heap)
		return aligned_alloc(PAGEBUF_SIZE, PAGEBUF_SIZE);
	struct pagebuf_free *f = pagebuf_cache;
	if (f) {
		pagebuf_cache = f->next;
		pagebuf_ncached--;
		return f;
	}
	void *p = mmap(NULL, PAGEBUF_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	return p == MAP_FAILED ? NULL : p;
}

void pagebuf_put(void *p)
{
	if (!p)
		return;
	if (pagebuf_heap) {
		free(p);
		return;
	}
	if (pagebuf_ncached < PAGEBUF_CACHE_MAX) {
		if (!pagebuf_cache) {
			/* the destructor runs only for a key set non-NULL */
			pthread_once(&pagebuf_once, pagebuf_key_init);
			if (!pagebuf_key_ok || pthread_setspecific(pagebuf_key, &pagebuf_cache) != 0) {
				munmap(p, PAGEBUF_SIZE);
				return;
			}
		}
		struct pagebuf_free *f = p;
		f->next = pagebuf_cache;
		pagebuf_cache = f;
		pagebuf_ncached++;
		return;
	}
	munmap(p, PAGEBUF_SIZE);
}

void *pagebuf_resize(void *p, size_t old_size, size_t new_size)
{
	if (pagebuf_heap)
		return realloc(p, new_size);
	size_t from = pagebuf_span(old_size), to = pagebuf_span(new_size);
	if (from == to)
		return p;
#ifdef PAGEBUF_NO_MREMAP
	void *q = mmap(NULL, to, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (q == MAP_FAILED)
		return NULL;
	memcpy(q, p, from < to ? from : to);
	munmap(p, from);
	return q;
#else
	void *q = mremap(p, from, to, MREMAP_MAYMOVE);
	return q == MAP_FAILED ? NULL : q;
#endif
}

void pagebuf_free(void *p, size_t size)
{
	if (!p)
		return;
	if (pagebuf_heap) {
		free(p);
		return;
	}
	size_t span = pagebuf_span(size);
	if (span == PAGEBUF_SIZE)
		pagebuf_put(p);
	else
		munmap(p, span);
}

#endif
