/* response.h - small HTTP response helpers: status texts, built-in error
 * pages, entity-tag comparison (RFC 9110 8.8.3, 13.1). Pure. */
#ifndef SPINDLE_HTTP_RESPONSE_H
#define SPINDLE_HTTP_RESPONSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "../span.h"

#define HTTP_ETAG_MAX 48

const char *http_status_text(int status);

/* Writes the built-in HTML page for status into out; returns its length. */
size_t http_builtin_page(int status, char *out, size_t cap);

/* Formats the strong validator for a file: "mtime-size" in hex, quoted. */
size_t http_etag(char out[HTTP_ETAG_MAX], time_t mtime, uint64_t size);

/* If-None-Match: true when the field is "*" or lists etag (weak comparison). */
bool http_etag_list_matches(struct span field, const char *etag, size_t etag_len);

/* If-Range (RFC 9110 13.1.5): true when the field is exactly etag (strong
 * comparison), or an HTTP-date equal to last_modified that is a strong
 * validator, i.e. at least a second older than now (8.8.2.2). */
bool http_if_range_matches(struct span field, const char *etag, size_t etag_len, time_t last_modified,
			   time_t now);

#endif
