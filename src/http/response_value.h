/* response_value.h - a response as a value: a status, header fields in
 * order, and a body source that the value owns and lets go of in one place
 * (response_release).
 *
 * A site handler fills one; filters (filters.h) rewrite it, as nginx's
 * not-modified and range filters do; a session serializes it (the HTTP/1.1
 * one: http1/serialize.h). Nothing here knows a connection, a socket or a
 * protocol's framing: Date, Server and Connection are the session's.
 *
 * Fields point into memory that outlives serialization (static text, the
 * configuration, a cached entry the value holds, or the value's own store),
 * so they are read only before the value is serialized. After that only the
 * body is read, through response_body_bytes(), and the value may be moved
 * (copied as a struct): nothing a session reads then points into it. */
#ifndef SPINDLE_HTTP_RESPONSE_VALUE_H
#define SPINDLE_HTTP_RESPONSE_VALUE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "response.h"

struct cache_entry;

/* A file's response has at most 10 fields; a built-in error page (under
 * 180 bytes) and a file's computed values (under 180) fit the store. Small
 * enough that a session's h1_out stays in malloc's per-thread cache. */
#define RESPONSE_FIELDS_MAX 16
#define RESPONSE_STORE 256

struct response_field {
	const char *name;
	const char *value;   /* NULL: Content-Length, the body's length, written by the serializer */
	size_t len;
};

enum response_body_kind {
	RESPONSE_BODY_NONE,     /* nothing to send: a 304, a HEAD, a response not yet filled */
	RESPONSE_BODY_INLINE,   /* a few bytes in the value's own store (a built-in error page) */
	RESPONSE_BODY_MEMORY,   /* bytes that outlive the value (a custom error page), or owned */
	RESPONSE_BODY_ENTRY,    /* a cached file's contents, the reference held */
	RESPONSE_BODY_FILE,     /* an open file, the descriptor owned: sent from it */
	RESPONSE_BODY_LISTING,  /* owned memory counted in the listing budget (budget.h) */
};

/* A piece of a multipart body: memory (a part head), or p == NULL: bytes
 * [off, off + len) of the body source. */
struct response_piece {
	const char *p;
	uint64_t off, len;
};

struct response {
	int status;
	bool close;              /* the connection closes after it */
	bool linger;             /* ... and framing is in doubt: the client may still be sending */
	bool broken;             /* a field or value did not fit: the session answers 500 instead */
	bool no_server;          /* the session's Server field is left out (a [headers] rule) */
	bool shed;               /* the overload policy answered it (overload.h): not served */

	/* what filters read: the selected representation's validators, whether
	 * Range may apply, whether the answer varies with Accept-Encoding */
	struct http_validators validators;
	bool has_validators;
	bool ranges;
	bool vary;

	struct response_field fields[RESPONSE_FIELDS_MAX];
	size_t nfields;
	/* "Name: value\r\n" lines written after the fields (owned): what
	 * [headers] rules add, as many as match, without taking field slots */
	char *lines;
	size_t lines_len;

	struct {
		enum response_body_kind kind;
		const char *p;       /* MEMORY, LISTING: byte `shift` of the body */
		char *owned;         /* freed on release (MEMORY, LISTING) */
		struct cache_entry *entry;
		int fd;
		uint64_t size;       /* the representation's length */
		uint64_t off, len;   /* the window sent (a single range), without pieces */
		size_t inline_at;    /* INLINE: where in store */
		uint64_t shift;      /* LISTING: bytes already sent and given back from the front */
		size_t reserved;     /* LISTING: bytes held in the budget */
		uint64_t client;     /* LISTING: whose budget share (budget_client) */
		bool follows_head;   /* small memory that may be copied right after the head (a file's) */
	} body;

	/* multipart/byteranges: the body as pieces (owned), part heads in parts */
	struct response_piece *pieces;
	size_t npieces;
	char *parts;

	char store[RESPONSE_STORE];
	size_t stored;
	char *heap;              /* one value too long for the store (a Location) */
};

/* An empty value: no status, no fields, no body. */
void response_init(struct response *r);
/* Lets go of everything the value owns (memory, cache reference,
 * descriptor, listing budget) and empties it. */
void response_release(struct response *r);

/* Fields, in the order they are sent. A field that does not fit marks the
 * value broken (checked once, by the serializer), like outbuf's overflow. */
void response_field(struct response *r, const char *name, const char *value, size_t len);
void response_field_str(struct response *r, const char *name, const char *value);
/* A copy of value, kept in the response. */
void response_field_copy(struct response *r, const char *name, const char *value, size_t len);
/* "Name: value\r\n" lines (static text), one field each. */
void response_field_lines(struct response *r, const char *lines);
/* Content-Length: the length of what the body carries (response_length). */
void response_content_length(struct response *r);
struct response_field *response_field_find(struct response *r, const char *name);
/* Inserts before the field named `before` (at the end without one). */
void response_field_insert(struct response *r, const char *before, const char *name, const char *value,
			   size_t len);
/* Appends "name: value\r\n" to r->lines (see there); broken when out of memory. */
void response_line_add(struct response *r, const char *name, const char *value);
/* Drops every field named name. */
void response_field_remove(struct response *r, const char *name);
/* Keeps only the fields whose names are listed (NULL-terminated). */
void response_fields_keep(struct response *r, const char *const *names);

/* n bytes that live as long as the value's fields, or NULL (broken). */
char *response_alloc(struct response *r, size_t n);

/* An error or redirect: status, an HTML page (page, or the built-in one
 * when page is NULL), Content-Type and Content-Length. Callers add fields
 * after it (Location, Allow, Retry-After). Releases what r held. */
void response_error(struct response *r, int status, const char *page, size_t page_len);

/* Body sources; each takes over what it is given. */
void response_body_memory(struct response *r, const char *p, size_t len, char *owned);
void response_body_entry(struct response *r, struct cache_entry *e);
void response_body_file(struct response *r, int fd, uint64_t size);
void response_body_listing(struct response *r, char *owned, size_t len, size_t reserved, uint64_t client);
/* Lets go of the source, keeping the length the fields announce (a HEAD). */
void response_body_drop(struct response *r);

/* Bytes the body carries: the window, or every piece. */
uint64_t response_length(const struct response *r);
/* Body bytes from offset off of the representation, or NULL for a file
 * (sent from body.fd). */
const char *response_body_bytes(const struct response *r, uint64_t off);
/* The body has been sent up to offset upto: a listing gives back the
 * memory behind it (moving the rest to the front), so a client that reads
 * slowly holds less and less. Offsets stay valid. */
void response_body_sent(struct response *r, uint64_t upto);

#endif
