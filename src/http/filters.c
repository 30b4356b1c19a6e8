/* filters.c - conditional requests and byte ranges as steps over a
 * response value; the multipart/byteranges body (RFC 9110 14.6). */
#include "filters.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "../outbuf.h"
#include "range.h"

int http_filter_conditional(const struct http_request *req, struct response *r)
{
	if (!r->has_validators)
		return 0;
	int pre = http_preconditions(req, &r->validators);
	if (pre == 412)
		return 412;
	if (pre == 304) {
		/* RFC 9110 15.4.5: the fields a 200 would carry for caches
		 * (validators, Vary, Cache-Control, Expires), no content */
		static const char *const keep[] = { "Last-Modified", "ETag", "Vary", "Cache-Control", "Expires", NULL };
		r->status = 304;
		response_fields_keep(r, keep);
		/* a descriptor goes now; a cached entry stays held: the
		 * validators the fields show live in it */
		if (r->body.kind == RESPONSE_BODY_FILE)
			response_body_drop(r);
		r->body.off = r->body.len = 0;
		r->ranges = false;
	}
	return 0;
}

#define MULTIPART_BOUNDARY_LEN 16

static size_t decimal_digits(uint64_t v)
{
	size_t n = 1;
	while (v >= 10) {
		v /= 10;
		n++;
	}
	return n;
}

/* "\r\n--B\r\nContent-Type: T\r\nContent-Range: bytes F-L/S\r\n\r\n",
 * sized from the real type, so a long one (.pptx) fits. */
size_t http_multipart_part_head_len(size_t mime_len, size_t first_digits, size_t last_digits, uint64_t size)
{
	return sizeof("\r\n--") - 1 + MULTIPART_BOUNDARY_LEN + sizeof("\r\nContent-Type: ") - 1 + mime_len +
	       sizeof("\r\nContent-Range: bytes ") - 1 + first_digits + 1 + last_digits + 1 +
	       decimal_digits(size) + sizeof("\r\n\r\n") - 1;
}

static void put_range(struct outbuf *b, uint64_t first, uint64_t last, uint64_t size)
{
	outbuf_u64(b, first);
	outbuf_put(b, "-", 1);
	outbuf_u64(b, last);
	outbuf_put(b, "/", 1);
	outbuf_u64(b, size);
}

/* A random boundary: it must not occur in the parts, and should not reveal
 * anything (an address, a counter) about the server. One xorshift state per
 * thread, seeded from the kernel once. */
static void multipart_boundary(char out[MULTIPART_BOUNDARY_LEN + 1])
{
	static _Thread_local uint64_t state;
	while (state == 0 && getrandom(&state, sizeof(state), 0) != sizeof(state))
		;
	state ^= state << 13;
	state ^= state >> 7;
	state ^= state << 17;
	snprintf(out, MULTIPART_BOUNDARY_LEN + 1, "%016llx", (unsigned long long)state);
}

/* The body becomes parts: a head for each range, its bytes, and the closing
 * delimiter; Content-Type names the boundary. */
static void multipart(struct response *r, struct response_field *ct, const struct byte_range *ranges, size_t n)
{
	uint64_t size = r->body.size;
	char boundary[MULTIPART_BOUNDARY_LEN + 1];
	multipart_boundary(boundary);

	size_t digits = decimal_digits(size);
	size_t cap = n * http_multipart_part_head_len(ct->len, digits, digits, size) + sizeof("\r\n----\r\n") - 1 +
		     MULTIPART_BOUNDARY_LEN;
	r->parts = malloc(cap);
	r->pieces = calloc(2 * n + 1, sizeof(*r->pieces));
	char *type = response_alloc(r, sizeof("multipart/byteranges; boundary=") + MULTIPART_BOUNDARY_LEN);
	if (!r->parts || !r->pieces || !type) {
		r->broken = true;
		return;
	}
	struct outbuf parts = { r->parts, 0, cap, false };
	for (size_t i = 0; i < n; i++) {
		size_t start = parts.len;
		outbuf_puts(&parts, "\r\n--");
		outbuf_puts(&parts, boundary);
		outbuf_puts(&parts, "\r\nContent-Type: ");
		outbuf_put(&parts, ct->value, ct->len);
		outbuf_puts(&parts, "\r\nContent-Range: bytes ");
		put_range(&parts, ranges[i].first, ranges[i].last, size);
		outbuf_puts(&parts, "\r\n\r\n");
		r->pieces[r->npieces++] = (struct response_piece){ r->parts + start, 0, parts.len - start };
		r->pieces[r->npieces++] = (struct response_piece){ NULL, ranges[i].first,
								   ranges[i].last - ranges[i].first + 1 };
	}
	size_t start = parts.len;
	outbuf_puts(&parts, "\r\n--");
	outbuf_puts(&parts, boundary);
	outbuf_puts(&parts, "--\r\n");
	r->pieces[r->npieces++] = (struct response_piece){ r->parts + start, 0, parts.len - start };
	if (parts.overflow) {
		r->broken = true;
		return;
	}
	int len = sprintf(type, "multipart/byteranges; boundary=%s", boundary);
	ct->value = type;
	ct->len = (size_t)len;
}

int http_filter_range(const struct http_request *req, struct response *r, size_t max_ranges, time_t now)
{
	if (!r->ranges || r->status != 200 || !r->has_validators || max_ranges == 0)
		return 0;
	if (!http_range_applies(req, &r->validators, now))
		return 0;
	uint64_t size = r->body.size;
	struct byte_range ranges[max_ranges];
	size_t n = 0;
	enum range_result rr = range_parse(req->range, size, ranges, max_ranges, &n);
	struct response_field *ct = response_field_find(r, "Content-Type");
	if (rr == RANGE_OK && n > 1) {
		/* Bound the cost (CVE-2011-3192): merge what overlaps or lies closer
		 * than one part head, and send the body once when the ranges add
		 * up to more than it. */
		uint64_t gap = http_multipart_part_head_len(ct ? ct->len : 0, 1, 1, size);
		rr = range_coalesce(ranges, &n, size, gap);
	}
	if (rr == RANGE_UNSATISFIABLE)
		return 416;
	if (rr != RANGE_OK)
		return 0;
	r->status = 206;
	if (n > 1 && ct) {
		multipart(r, ct, ranges, n);
		return 0;
	}
	char *cr = response_alloc(r, 3 * 20 + 8);
	if (!cr)
		return 0;
	struct outbuf b = { cr, 0, 3 * 20 + 8, false };
	outbuf_puts(&b, "bytes ");
	put_range(&b, ranges[0].first, ranges[0].last, size);
	response_field_insert(r, "Content-Type", "Content-Range", cr, b.len);
	r->body.off = ranges[0].first;
	r->body.len = ranges[0].last - ranges[0].first + 1;
	return 0;
}
