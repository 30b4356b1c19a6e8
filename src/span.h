/* span.h - borrowed byte ranges pointing into a buffer owned by someone else. */
#ifndef SPINDLE_SPAN_H
#define SPINDLE_SPAN_H

#include <stdbool.h>
#include <stddef.h>
#include <string.h>
#include <strings.h>

/* Valid only while the buffer it points into is unchanged (see http1/session.c: the
 * input buffer is compacted only after a response has been queued). */
struct span {
	const char *p;
	size_t len;
};

#define SPAN_LIT(s) ((struct span){ (s), sizeof(s) - 1 })

static inline bool span_eq_nocase(struct span a, const char *lit)
{
	size_t n = strlen(lit);
	return a.len == n && strncasecmp(a.p, lit, n) == 0;
}

static inline bool span_is_set(struct span a)
{
	return a.p != NULL;
}

#endif
