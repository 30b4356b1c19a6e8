/* test_pagebuf.c - one-page buffers outside the heap (src/pagebuf.c): what
 * is given back is reused from the thread's cache up to its cap, and
 * really unmapped beyond it and on a trim; a buffer that outgrows a page
 * keeps its bytes. Under AddressSanitizer the buffers are the heap's (so
 * that its redzones guard them): there the contents are checked, and the
 * mapping in the plain build. */
#include <criterion/criterion.h>

#include <malloc.h>

#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../../src/pagebuf.h"

#ifndef PAGEBUF_FROM_HEAP
/* Whether the page at p is mapped: mincore fails with ENOMEM on a hole. */
static bool mapped(void *p)
{
	unsigned char v;
	return mincore(p, PAGEBUF_SIZE, &v) == 0;
}
#endif

Test(pagebuf, a_page_is_aligned_and_writable)
{
	char *p = pagebuf_get();
	cr_assert_not_null(p);
	cr_assert_eq((uintptr_t)p % (uintptr_t)sysconf(_SC_PAGESIZE), 0);
	memset(p, 'x', PAGEBUF_SIZE);
	pagebuf_put(p);
	pagebuf_trim();
}

#ifndef PAGEBUF_FROM_HEAP
Test(pagebuf, a_page_given_back_is_reused_from_the_cache)
{
	pagebuf_trim();
	char *p = pagebuf_get();
	cr_assert_not_null(p);
	pagebuf_put(p);
	cr_assert_eq(pagebuf_get(), p, "the page just given back comes first");
	pagebuf_put(p);
	pagebuf_trim();
}

Test(pagebuf, pages_beyond_the_cap_and_on_a_trim_go_back_to_the_kernel)
{
	pagebuf_trim();
	enum { N = PAGEBUF_CACHE_MAX + 8 };
	void *pages[N];
	for (int i = 0; i < N; i++) {
		pages[i] = pagebuf_get();
		cr_assert_not_null(pages[i]);
		memset(pages[i], 1, PAGEBUF_SIZE);
	}
	for (int i = 0; i < N; i++)
		pagebuf_put(pages[i]);
	for (int i = 0; i < PAGEBUF_CACHE_MAX; i++)
		cr_assert(mapped(pages[i]), "page %d is cached", i);
	for (int i = PAGEBUF_CACHE_MAX; i < N; i++)
		cr_assert(!mapped(pages[i]), "page %d, beyond the cap, is unmapped", i);
	pagebuf_trim();
	for (int i = 0; i < PAGEBUF_CACHE_MAX; i++)
		cr_assert(!mapped(pages[i]), "page %d is unmapped by the trim", i);
}
#endif

Test(pagebuf, a_buffer_grown_past_a_page_keeps_its_bytes_and_is_freed_whole)
{
	char *p = pagebuf_get();
	cr_assert_not_null(p);
	for (size_t i = 0; i < PAGEBUF_SIZE; i++)
		p[i] = (char)(i * 7);
	char *q = pagebuf_resize(p, PAGEBUF_SIZE, 4 * PAGEBUF_SIZE + 100);
	cr_assert_not_null(q);
	for (size_t i = 0; i < PAGEBUF_SIZE; i++)
		cr_assert_eq(q[i], (char)(i * 7), "byte %zu kept", i);
	memset(q + PAGEBUF_SIZE, 'y', 3 * PAGEBUF_SIZE + 100);
	char *r = pagebuf_resize(q, 4 * PAGEBUF_SIZE + 100, 5 * PAGEBUF_SIZE);
	cr_assert_not_null(r);
	cr_assert_eq(r[4 * PAGEBUF_SIZE + 99], 'y', "the grown bytes kept too");
#ifndef PAGEBUF_FROM_HEAP
	cr_assert_eq(r, q, "within its pages: no move");
#endif
	pagebuf_free(r, 5 * PAGEBUF_SIZE);
#ifndef PAGEBUF_FROM_HEAP
	for (int i = 0; i < 5; i++)
		cr_assert(!mapped(r + (size_t)i * PAGEBUF_SIZE), "page %d of the grown buffer unmapped", i);
#endif
}

/* Criterion runs each test in a process of its own, so the switch stays here. */
Test(pagebuf, a_thread_per_connection_takes_its_pages_from_the_heap)
{
	pagebuf_prefer_heap();
	char *p = pagebuf_get();
	cr_assert_not_null(p);
	cr_assert_eq((uintptr_t)p % PAGEBUF_SIZE, 0);
	/* only the heap's blocks have a usable size (a mapping would crash) */
	cr_assert_geq(malloc_usable_size(p), (size_t)PAGEBUF_SIZE);
	memset(p, 'x', PAGEBUF_SIZE);
	char *q = pagebuf_resize(p, PAGEBUF_SIZE, 3 * PAGEBUF_SIZE);
	cr_assert_not_null(q);
	cr_assert_eq(q[PAGEBUF_SIZE - 1], 'x');
	cr_assert_geq(malloc_usable_size(q), (size_t)(3 * PAGEBUF_SIZE));
	pagebuf_free(q, 3 * PAGEBUF_SIZE);
}
