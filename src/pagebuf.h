/* pagebuf.h - one-page buffers for what a connection holds only while a
 * request is in flight (its input buffer, its request and response state),
 * kept apart from the allocator's heap. Freed into a small per-thread cache;
 * beyond it they go straight back to the kernel (munmap). Buffers from the
 * heap that a burst of connections frees when it goes idle stay resident
 * wherever a long-lived struct lies above them (the allocator returns only
 * whole free pages, and malloc_trim leaves a thread arena's top alone);
 * these cannot. */
#ifndef SPINDLE_PAGEBUF_H
#define SPINDLE_PAGEBUF_H

#include <stddef.h>

#include "sanitizers.h"

#define PAGEBUF_SIZE 4096

/* Under AddressSanitizer the buffers are the heap's (aligned_alloc, no
 * cache), so that its redzones still catch a read past a buffer's end, which
 * the next page of a mapping would not. */
#ifdef SPINDLE_ASAN
#define PAGEBUF_FROM_HEAP 1
#endif

/* PAGEBUF_SIZE bytes, page-aligned, contents undefined; NULL when out of
 * memory. Any thread may give it back. */
void *pagebuf_get(void);
void pagebuf_put(void *p);

/* A buffer of pagebuf's (from pagebuf_get or here) of old_size bytes,
 * moved or grown to new_size, contents kept up to the smaller size: for
 * the rare buffer that outgrows a page (mremap, no copy). NULL when out of
 * memory, p untouched. Sizes need not be multiples of a page. */
void *pagebuf_resize(void *p, size_t old_size, size_t new_size);
/* Gives back a buffer of size bytes (a single page goes to the cache). */
void pagebuf_free(void *p, size_t size);

/* For a model whose threads or processes each serve one connection and
 * then end (thread, fork): their caches would start empty and end with
 * them, so every connection would map and unmap its pages; the heap keeps
 * them across connections, and a connection's memory goes with its thread
 * or process anyway. Called once, before the first buffer is taken. The
 * heap is used too where the kernel's page is not PAGEBUF_SIZE, and under
 * valgrind, whose memcheck cannot see inside pages cached here. */
void pagebuf_prefer_heap(void);

/* Unmaps the pages this thread's cache holds: when a burst is over. */
void pagebuf_trim(void);

/* Buffers this thread keeps for reuse instead of unmapping them: enough for
 * a loop's busy connections to come and go without a system call, little
 * enough (a megabyte per thread at most) that no burst leaves much behind. */
#define PAGEBUF_CACHE_MAX 64

#endif
