/* response.h - small HTTP response helpers: status texts, built-in error
 * pages, entity-tag comparison (RFC 9110 8.8.3, 13.1) and the order in which
 * preconditions are evaluated (13.2.2). Pure. */
#ifndef SPINDLE_HTTP_RESPONSE_H
#define SPINDLE_HTTP_RESPONSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "../span.h"
#include "parse.h"

#define HTTP_ETAG_MAX 48

const char *http_status_text(int status);

/* Writes the built-in HTML page for status into out; returns its length. */
size_t http_builtin_page(int status, char *out, size_t cap);

/* Formats the strong validator for a file: "mtime-size" in hex, quoted. */
size_t http_etag(char out[HTTP_ETAG_MAX], time_t mtime, uint64_t size);

/* If-None-Match: true when the field is "*" or lists etag (weak comparison). */
bool http_etag_list_matches(struct span field, const char *etag, size_t etag_len);

/* If-Match: true when the field is "*" or lists etag (strong comparison:
 * a W/ tag never matches). */
bool http_etag_list_matches_strong(struct span field, const char *etag, size_t etag_len);

/* The selected representation's validators. */
struct http_validators {
	const char *etag;
	size_t etag_len;
	time_t mtime;
};

/* RFC 9110 13.2.2 steps 1-4, in that order: If-Match (412 when false), else
 * If-Unmodified-Since (412); then If-None-Match (304 for GET/HEAD, else 412),
 * else If-Modified-Since for GET/HEAD (304). Returns 0 when the request goes
 * on, or the status to answer with. Invalid dates are ignored. */
int http_preconditions(const struct http_request *r, const struct http_validators *v);

/* Step 5: whether the Range header is to be honoured: GET (or HEAD) with a
 * Range, and any If-Range matches. Call only after http_preconditions() == 0. */
bool http_range_applies(const struct http_request *r, const struct http_validators *v, time_t now);

/* If-Range (RFC 9110 13.1.5): true when the field is exactly etag (strong
 * comparison), or an HTTP-date equal to last_modified that is a strong
 * validator, i.e. at least a second older than now (8.8.2.2). */
bool http_if_range_matches(struct span field, const char *etag, size_t etag_len, time_t last_modified,
			   time_t now);

#endif
