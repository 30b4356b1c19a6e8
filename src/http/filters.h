/* filters.h - the steps HTTP defines over any response with validators and
 * a body, whatever produced it: conditional requests (RFC 9110 13.2) and
 * byte ranges (14), as nginx's not-modified and range filters. Each rewrites
 * a response value in place, or returns the error status for the caller to
 * answer with (the site renders its own error pages). */
#ifndef SPINDLE_HTTP_FILTERS_H
#define SPINDLE_HTTP_FILTERS_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "parse.h"
#include "response_value.h"

/* RFC 9110 13.2.2 steps 1-4 against r's validators: a 304 rewrites r (the
 * fields a 304 keeps, no body); returns 412 when a precondition fails (r
 * untouched), else 0. */
int http_filter_conditional(const struct http_request *req, struct response *r);

/* Step 5 and the Range itself, for a 200 that allows ranges: one range
 * makes a 206 with Content-Range over the same body, several a
 * multipart/byteranges body (merged first where they overlap or lie close,
 * CVE-2011-3192). Returns 416 when nothing is satisfiable (r untouched),
 * else 0. now: for If-Range's one-second rule. */
int http_filter_range(const struct http_request *req, struct response *r, size_t max_ranges, time_t now);

/* Bytes of one multipart part head for a type of mime_len bytes and offsets
 * of the given decimal widths, in a representation of size bytes. */
size_t http_multipart_part_head_len(size_t mime_len, size_t first_digits, size_t last_digits, uint64_t size);

#endif
