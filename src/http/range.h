/* range.h - Range header parsing (RFC 9110 14.2). Pure. */
#ifndef SPINDLE_HTTP_RANGE_H
#define SPINDLE_HTTP_RANGE_H

#include <stddef.h>
#include <stdint.h>

#include "../span.h"

struct byte_range {
	uint64_t first;   /* inclusive */
	uint64_t last;    /* inclusive */
};

enum range_result {
	RANGE_IGNORE,         /* absent, not "bytes=", syntactically invalid, or too many
	                         ranges: serve the whole representation (200) */
	RANGE_OK,             /* *count >= 1 satisfiable ranges, clamped to size, in request order */
	RANGE_UNSATISFIABLE,  /* valid syntax, but no range overlaps the file -> 416
	                         (on an empty file a non-zero suffix is satisfiable,
	                         RFC 9110 14.1.1, yet selects nothing: RANGE_IGNORE) */
};

/* Parses a Range header value against a representation of `size` bytes.
 * Unsatisfiable ranges in a list are dropped; if none remain the result is
 * RANGE_UNSATISFIABLE. More than `max` ranges -> RANGE_IGNORE (CVE-2011-3192).
 * Offsets are checked for overflow. */
enum range_result range_parse(struct span value, uint64_t size, struct byte_range *out, size_t max,
			      size_t *count);

/* Bounds what a range set can cost (RFC 9110 14.2, 14.6). When the ranges
 * (each already clamped to size) add up to more than size -> RANGE_IGNORE:
 * serve the whole representation once, as nginx does. Otherwise merges
 * those that overlap, touch, or are separated by fewer than `gap` bytes (the
 * caller passes what one more multipart part header would cost, so merging
 * never makes the response bigger), each merged range in the place of the
 * earliest that fed it, so the parts keep the request's order (RFC 9110
 * 15.3.7.2); sets *count to what remains and returns RANGE_OK. No allocation:
 * more than RANGE_COALESCE_MAX ranges are RANGE_IGNORE. */
#define RANGE_COALESCE_MAX 1000 /* the largest max_ranges (config.c); more -> RANGE_IGNORE */

enum range_result range_coalesce(struct byte_range *r, size_t *count, uint64_t size, uint64_t gap);

#endif
