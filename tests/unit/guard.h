/* guard.h - test inputs placed against an inaccessible page, so a parser that
 * reads past the end of its input faults instead of passing by luck (as
 * h2o/picohttpparser's test.c does). */
#ifndef SPINDLE_TEST_GUARD_H
#define SPINDLE_TEST_GUARD_H

#include <criterion/criterion.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../../src/span.h"

/* Copies s[0..n) to the very end of a page followed by a PROT_NONE one. */
static inline struct span guarded(const char *s, size_t n)
{
	size_t pg = (size_t)sysconf(_SC_PAGESIZE);
	char *m = mmap(NULL, 2 * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	cr_assert(m != MAP_FAILED);
	cr_assert(n <= pg);
	cr_assert(mprotect(m + pg, pg, PROT_NONE) == 0);
	memcpy(m + pg - n, s, n);
	return (struct span){ m + pg - n, n };
}

static inline void unguard(struct span s)
{
	size_t pg = (size_t)sysconf(_SC_PAGESIZE);
	munmap((char *)s.p + s.len - pg, 2 * pg); /* the input ends where the guard page starts */
}

#endif
