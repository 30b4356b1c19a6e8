/* fuzz_parse.c - libFuzzer target for the request-head parser and the
 * chunked-body skipper: no crash, no over-read, and the invariants below. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/http/parse.h"

#define FZ_CHECK(cond) do { if (!(cond)) abort(); } while (0)

static void fz_span_inside(struct span s, const char *buf, size_t n)
{
	if (!s.p)
		return;
	FZ_CHECK(s.p >= buf && s.p <= buf + n && s.len <= (size_t)(buf + n - s.p));
}

/* The bytes arriving in three reads, the buffer moving in between: the
 * resumed parser gives the same answer at every step as a one-shot parse. */
static void fz_resumed(const char *data, size_t size, const struct http_limits *lim, int rc)
{
	struct http_parse_state st = { 0 };
	struct http_request r, one;
	size_t cuts[3] = { size / 3, size - size / 4, size };
	int got = 0;

	for (int i = 0; i < 3 && got == 0; i++) {
		char *copy = malloc(cuts[i] ? cuts[i] : 1);
		FZ_CHECK(copy);
		memcpy(copy, data, cuts[i]);
		got = http_parse_request_resume(copy, cuts[i], lim, &r, &st);
		FZ_CHECK(got == http_parse_request(data, cuts[i], lim, &one));
		if (got > 0)
			FZ_CHECK(r.target.p == copy + (one.target.p - data) && r.header_count == one.header_count &&
				 r.keep_alive == one.keep_alive && r.content_length == one.content_length);
		free(copy);
	}
	/* A prefix may be refused differently (a long line's 414 before the
	 * bytes that make it a 400), so only a complete run must match. */
	if (got == 0)
		FZ_CHECK(rc == 0);
}

/* Every value of a list field lies inside the head, and there are as many
 * as the parser counted lines. */
static void fz_list_inside(struct span field, unsigned lines, const char *name, const char *buf, size_t n)
{
	const char *cursor = NULL;
	struct span v;
	unsigned seen = 0;

	fz_span_inside(field, buf, n);
	while (http_field_lines_next(field, lines, name, &cursor, &v)) {
		fz_span_inside(v, buf, n);
		FZ_CHECK(++seen <= lines);
	}
	FZ_CHECK(seen == lines);
}

static int fz_parse(const char *data, size_t size, const struct http_limits *lim)
{
	struct http_request r;
	int rc = http_parse_request(data, size, lim, &r);

	fz_resumed(data, size, lim, rc);

	FZ_CHECK(rc == 0 || rc == -400 || rc == -414 || rc == -431 || rc == -501 || rc == -505 ||
		 (rc > 0 && (size_t)rc <= size && (size_t)rc <= lim->max_head));
	if (rc <= 0)
		return rc;

	size_t n = (size_t)rc;
	fz_span_inside(r.method_name, data, n);
	fz_span_inside(r.target, data, n);
	fz_span_inside(r.request_line, data, n);
	fz_span_inside(r.query, data, n);
	fz_span_inside(r.host, data, n);
	fz_span_inside(r.connection, data, n);
	fz_list_inside(r.if_none_match, r.if_none_match_lines, "if-none-match", data, n);
	fz_list_inside(r.if_match, r.if_match_lines, "if-match", data, n);
	fz_list_inside(r.expect, r.expect_lines, "expect", data, n);
	fz_span_inside(r.if_modified_since, data, n);
	fz_span_inside(r.range, data, n);
	fz_span_inside(r.if_range, data, n);
	fz_span_inside(r.user_agent, data, n);
	fz_span_inside(r.referer, data, n);
	/* The path of "http://host" is the constant "/" (RFC 9110 4.2.3). */
	if (!(r.path.len == 1 && r.path.p[0] == '/' && (r.path.p < data || r.path.p >= data + n)))
		fz_span_inside(r.path, data, n);
	FZ_CHECK(span_is_set(r.path) && span_is_set(r.target) && span_is_set(r.method_name));
	FZ_CHECK(r.request_line.len <= lim->max_request_line);
	FZ_CHECK(r.header_count <= lim->max_headers);
	FZ_CHECK(r.version_minor == 0 || r.version_minor == 1);
	FZ_CHECK(!(r.chunked && r.has_content_length));
	FZ_CHECK(r.method <= HTTP_METHOD_UNKNOWN);
	FZ_CHECK(http_method_name(r.method) != NULL);
	FZ_CHECK(r.version_minor == 0 || span_is_set(r.host));

	/* The head does not depend on what follows it, and one byte less of
	 * it is "need more". Fresh exact-size copies let ASan see over-reads. */
	char *copy = malloc(n);
	FZ_CHECK(copy);
	memcpy(copy, data, n);
	struct http_request r2;
	FZ_CHECK(http_parse_request(copy, n, lim, &r2) == rc);
	FZ_CHECK(r2.method == r.method && r2.keep_alive == r.keep_alive && r2.chunked == r.chunked &&
		 r2.content_length == r.content_length && r2.header_count == r.header_count);
	free(copy);
	copy = malloc(n - 1 ? n - 1 : 1);
	FZ_CHECK(copy);
	memcpy(copy, data, n - 1);
	FZ_CHECK(http_parse_request(copy, n - 1, lim, &r2) == 0);
	free(copy);
	return rc;
}

static void fz_chunked(const char *data, size_t size, size_t cut)
{
	struct http_chunked a = { 0 }, b = { 0 };
	size_t used_a = 0, used_b1 = 0, used_b2 = 0;
	enum http_chunked_result ra, rb;

	ra = http_chunked_skip(&a, data, size, &used_a);
	FZ_CHECK(used_a <= size);
	FZ_CHECK(ra != HTTP_CHUNKED_MORE || used_a == size);

	/* Same answer when the bytes arrive in two reads. */
	if (cut > size)
		cut = size;
	rb = http_chunked_skip(&b, data, cut, &used_b1);
	FZ_CHECK(used_b1 <= cut);
	if (rb == HTTP_CHUNKED_MORE) {
		rb = http_chunked_skip(&b, data + cut, size - cut, &used_b2);
		FZ_CHECK(used_b2 <= size - cut);
		used_b1 = cut + used_b2;
	}
	FZ_CHECK(ra == rb);
	if (ra == HTTP_CHUNKED_DONE)
		FZ_CHECK(used_a == used_b1 && a.total == b.total);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const struct http_limits normal = { 8192, 16384, 100 };
	static const struct http_limits tiny = { 40, 120, 4 };
	const char *buf = (const char *)data;

	int rn = fz_parse(buf, size, &normal);
	int rt = fz_parse(buf, size, &tiny);
	/* Looser limits never refuse what tighter ones accepted. */
	if (rt > 0)
		FZ_CHECK(rn == rt);

	/* The first byte picks where the chunked body is split. */
	if (size > 0)
		fz_chunked(buf + 1, size - 1, data[0]);
	return 0;
}
