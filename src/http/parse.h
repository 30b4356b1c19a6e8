/* parse.h - HTTP/1.x request-head parser and chunked-body skipper (RFC 9112).
 *
 * Pure functions over a byte buffer: no I/O, no allocation, no globals. The
 * spans in struct http_request point back into the caller's buffer. */
#ifndef SPINDLE_HTTP_PARSE_H
#define SPINDLE_HTTP_PARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../span.h"

enum http_method {
	HTTP_GET,
	HTTP_HEAD,
	HTTP_POST,
	HTTP_PUT,
	HTTP_DELETE,
	HTTP_CONNECT,
	HTTP_OPTIONS,
	HTTP_TRACE,
	HTTP_PATCH,
	HTTP_METHOD_UNKNOWN, /* a syntactically valid token we do not know -> 501 */
};

struct http_limits {
	size_t max_request_line; /* longer -> 414 */
	size_t max_head;         /* request line + headers; longer -> 431 */
	size_t max_headers;      /* number of header fields; more -> 431 */
};

struct http_request {
	enum http_method method;
	struct span method_name; /* as sent, for the access log */
	struct span target;      /* request-target as sent, for the access log */
	struct span path;        /* origin-form path (absolute-form: its path part); no query */
	struct span query;       /* after '?', excluding it; p == NULL when absent */
	int version_minor;       /* HTTP/1.0 -> 0, HTTP/1.1 (and 1.x, x>1) -> 1 */
	struct span request_line;/* for the access log: method SP target SP version */

	/* Selected header values, whitespace-trimmed; p == NULL when absent. */
	struct span host;        /* from Host, or the authority of an absolute-form target */
	struct span connection;
	struct span if_modified_since;
	struct span range;
	struct span if_range;
	struct span if_unmodified_since;

	/* List fields, which may come on several field lines that RFC 9110
	 * 5.3 makes one comma-joined list. The span runs from the first line's
	 * value to the end of the last line's (other fields may lie between);
	 * *_lines counts the lines. Read them with http_field_lines_next(). */
	struct span if_match;
	unsigned if_match_lines;
	struct span if_none_match;
	unsigned if_none_match_lines;
	struct span expect;
	unsigned expect_lines;
	struct span accept_encoding; /* picks the precompressed sidecar */
	unsigned accept_encoding_lines;

	struct span user_agent;
	struct span referer;
	struct span origin;      /* CORS: Origin, and a preflight's Access-Control-Request-* */
	struct span acr_method;
	struct span acr_headers;

	bool keep_alive;         /* HTTP/1.1 unless "close"; HTTP/1.0 only with "keep-alive" */
	bool has_content_length;
	uint64_t content_length;
	bool chunked;            /* Transfer-Encoding: chunked */
	size_t header_count;

	/* Not parsed: the session sets it when the overload policy sheds this
	 * request (overload.h); the site then answers 503 without serving it. */
	bool shed;
	/* Not parsed: the session sets it when the request came over TLS, so
	 * that redirect_https moves only plain HTTP requests. */
	bool tls;
};

/* Where an incomplete parse stopped, so the next call with more bytes scans
 * only the new ones (picohttpparser's last_len idea, taken to the byte): a
 * client trickling its head one byte per packet costs O(n), not O(n^2).
 * Offsets only, relative to buf, so the caller may move its buffer between
 * calls. The fields are private to parse.c. */
struct http_parse_state {
	unsigned phase;
	size_t pos;          /* where the scan resumes; bytes before it are checked */
	size_t line;         /* the request line's first byte */
	size_t tok;          /* the token being scanned: target, version or field name */
	size_t val;          /* a field value's first byte */
	size_t nlen;         /* the field name's length, in the value phase */
	size_t mlen, tlen;   /* method and target lengths */
	unsigned host, content_length, transfer_encoding;
	bool range_dup, ims_dup, ius_dup, close, keep_alive;
	struct span te;
};

/* Parses one request head at the start of buf[0..len).
 * Returns the number of bytes the head occupies (including the final empty
 * line and any empty lines skipped before the request line) when complete,
 * 0 when more bytes are needed and no limit has been exceeded yet, or a
 * negative HTTP status when the request must be refused:
 *   -400 malformed request line or header, bare CR, obs-fold, whitespace before
 *        a colon, missing Host in HTTP/1.1, duplicate Host, Content-Length with
 *        Transfer-Encoding, duplicate or invalid Content-Length, Transfer-Encoding
 *        in HTTP/1.0
 *   -414 request line longer than lim->max_request_line
 *   -431 head longer than lim->max_head, or more than lim->max_headers fields
 *   -501 a Transfer-Encoding other than "chunked". An unknown but valid method
 *        token is NOT an error: the parse succeeds with method ==
 *        HTTP_METHOD_UNKNOWN so the core can log the request, then answers 501.
 *   -505 HTTP major version other than 1 (e.g. HTTP/2.0, HTTP/0.9)
 * Incomplete input that already breaks a limit returns the error, so a caller
 * whose buffer holds max_head bytes always gets a final answer. */
int http_parse_request(const char *buf, size_t len, const struct http_limits *lim,
		       struct http_request *req);

/* The same parse, resumed: st (zeroed before a head's first call) remembers
 * how far earlier calls got, and only bytes after that are scanned. Call
 * again with the same bytes plus what arrived since (the buffer may have
 * moved), the same req and st. Every call returns exactly what
 * http_parse_request would return for buf[0..len); *req is valid only when
 * the result is > 0. After any non-zero result *st is zeroed again, ready
 * for the next head. */
int http_parse_request_resume(const char *buf, size_t len, const struct http_limits *lim,
			      struct http_request *req, struct http_parse_state *st);

/* Skips a chunked request body (RFC 9112 7.1) incrementally, chunk data,
 * extensions and trailers included. Zero-initialise before the first call. */
struct http_chunked {
	int state;
	uint64_t remaining;  /* bytes left in the current chunk */
	uint64_t total;      /* data bytes seen so far */
	size_t line_len;     /* length of the size/trailer line so far (bounded) */
};

enum http_chunked_result {
	HTTP_CHUNKED_MORE = 0,  /* consumed everything given, need more */
	HTTP_CHUNKED_DONE = 1,  /* body ended; *consumed tells where */
	HTTP_CHUNKED_ERROR = -1,/* malformed (-> 400 and close) */
};

/* Consumes up to len bytes of chunked body; sets *consumed. */
enum http_chunked_result http_chunked_skip(struct http_chunked *st, const char *buf, size_t len,
					   size_t *consumed);

/* Walks a list field recorded as in struct http_request: each call sets
 * *value to the next field line's value (trimmed) and returns true; false
 * after the last. *cursor starts NULL. `name` is the field name; with
 * lines <= 1 the span is the one value (so a span built by hand works). */
bool http_field_lines_next(struct span field, unsigned lines, const char *name, const char **cursor,
			   struct span *value);

/* Steps through the members of one comma-separated list value (RFC 9110
 * 5.6.1): sets *member to the next non-empty one, whitespace-trimmed, and
 * advances *p; false when none is left before end. */
bool http_list_member_next(const char **p, const char *end, struct span *member);

const char *http_method_name(enum http_method m);

enum http_expectation {
	HTTP_EXPECT_NONE,     /* no Expect, or one ignored (from HTTP/1.0) */
	HTTP_EXPECT_CONTINUE, /* 100-continue */
	HTTP_EXPECT_UNKNOWN,  /* anything else: 417 */
};

/* What the request's Expect fields ask for (RFC 9110 10.1.1). */
enum http_expectation http_expectation(const struct http_request *r);

#endif
