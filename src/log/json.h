/* json.h - JSON string escaping and the JSON access-log line. Pure: no I/O,
 * no allocation, no globals; log.c supplies the clock and writes the line. */
#ifndef SPINDLE_LOG_JSON_H
#define SPINDLE_LOG_JSON_H

#include <stddef.h>
#include <stdint.h>

#include "../span.h"

/* Appends s, escaped for the inside of a JSON string (RFC 8259 7), to
 * out[0..cap) and returns the bytes written. '"' and '\' are escaped with a
 * backslash, other control bytes (and DEL) as \u00XX; well-formed UTF-8 is
 * copied as is; every byte that is not part of a well-formed UTF-8 sequence
 * (stray continuation bytes, overlongs, surrogates, code points above
 * U+10FFFF, truncated sequences) becomes \ufffd, so the line is valid UTF-8
 * whatever the client sent. Never writes a partial escape or character: when
 * cap runs out, the output stops at a character boundary. */
size_t json_escape(char *out, size_t cap, const char *s, size_t len);

/* One request, as the JSON access log records it. Strings are raw bytes from
 * the request; json_access_line escapes them. */
struct json_access {
	const char *time;       /* RFC 3339 with milliseconds, e.g. 2026-11-22T19:22:38.123Z */
	const char *client;
	struct span method, target, protocol; /* empty when the request could not be parsed */
	int status;
	uint64_t bytes;         /* body bytes sent */
	uint64_t duration_us;   /* from the request head's arrival to the response's last byte */
	uint64_t queue_us;      /* from readable to picked up by the thread or loop that served it */
	bool shed;              /* answered 503 by the overload policy: "shed":"queue_wait" */
	const char *refused;    /* refused at once, no request read: its reason ("full", "connections")
				 * is the "shed" written, over queue_wait; NULL: not refused */
	uint64_t service_us;    /* from picked up to the response's last byte */
	uint64_t first_byte_us; /* from picked up to the response's first byte */
	struct span referer, user_agent; /* p == NULL: absent (written as null) */
	const char *model;
	long worker;            /* the serving thread's id (Linux TID) */
	const char *site;       /* the site that answered, or NULL: no "site" key (a server of one site) */
};

/* Writes one line ("{...}\n") into out[0..cap) and returns its length; cap
 * must be at least 1024. Long strings are cut (at a character boundary) so
 * the line always fits and is always one valid JSON object. */
size_t json_access_line(char *out, size_t cap, const struct json_access *a);

/* Splits a request line "METHOD SP TARGET SP PROTOCOL" into its three parts
 * (the target may contain no space; anything unparseable leaves target as
 * the whole line and the others empty). */
void json_split_request_line(struct span line, struct span *method, struct span *target,
			     struct span *protocol);

#endif
