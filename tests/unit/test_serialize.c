/* test_serialize.c - response values to HTTP/1.1 bytes, in process: the
 * serializer alone (status line, Server, Date, fields in order,
 * Content-Length, Connection, the body's segments), and the filters over
 * hand-made values. */
#include <criterion/criterion.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../src/http/date.h"
#include "../../src/http/filters.h"
#include "../../src/http/response_value.h"
#include "../../src/http1/serialize.h"

static struct h1_out out;
static struct h1_seg segs[64];

static void setup(void)
{
	memset(&out, 0, sizeof(out));
	response_init(&out.resp);
	out.segs = segs;
	out.seg_max = 64;
	out.hdr = malloc(1024);
	out.hdr_cap = 1024;
}

static void teardown(void)
{
	h1_out_reset(&out);
	free(out.hdr);
}

TestSuite(serialize, .init = setup, .fini = teardown);

static const struct h1_framing keep = { "Server: t\r\n", false, true, false };

/* Everything the segments say, with the Date value blanked out. */
static char *bytes(size_t *len)
{
	static char b[8192];
	size_t n = 0;
	for (size_t i = 0; i < out.nsegs; i++) {
		const struct h1_seg *s = &out.segs[i];
		const char *p = s->p ? s->p : response_body_bytes(&out.resp, s->off);
		cr_assert_lt(n + s->len, sizeof(b));
		if (p)
			memcpy(b + n, p, s->len);
		else
			cr_assert_eq(pread(out.resp.body.fd, b + n, s->len, (off_t)s->off), (ssize_t)s->len);
		n += s->len;
	}
	b[n] = '\0';
	char *d = strstr(b, "\r\nDate: ");
	cr_assert_not_null(d);
	memset(d + 8, 'D', HTTP_DATE_LEN);
	*len = n;
	return b;
}

#define DATE "DDDDDDDDDDDDDDDDDDDDDDDDDDDDD"

Test(serialize, a_small_file_body_follows_its_head_in_one_buffer)
{
	struct response *r = &out.resp;
	r->status = 200;
	response_field_str(r, "Content-Type", "text/plain");
	response_content_length(r);
	response_body_memory(r, "hello", 5, NULL);
	r->body.follows_head = true;
	cr_assert_eq(h1_serialize(&out, &keep), 0);
	size_t n;
	cr_assert_str_eq(bytes(&n), "HTTP/1.1 200 OK\r\nServer: t\r\nDate: " DATE "\r\n"
				    "Content-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello");
	cr_assert_eq(out.nsegs, 1);
	cr_assert_eq(out.head_len, n - 5);
}

Test(serialize, head_request_gets_the_length_and_no_body)
{
	struct response *r = &out.resp;
	r->status = 200;
	response_content_length(r);
	response_body_memory(r, "hello", 5, NULL);
	struct h1_framing f = keep;
	f.head_request = true;
	cr_assert_eq(h1_serialize(&out, &f), 0);
	size_t n;
	cr_assert_str_eq(bytes(&n), "HTTP/1.1 200 OK\r\nServer: t\r\nDate: " DATE "\r\nContent-Length: 5\r\n\r\n");
}

Test(serialize, connection_field_follows_the_session)
{
	response_error(&out.resp, 404, "nf", 2);
	struct h1_framing f = keep;
	f.keep_alive = false;
	cr_assert_eq(h1_serialize(&out, &f), 0);
	size_t n;
	cr_assert_str_eq(bytes(&n), "HTTP/1.1 404 Not Found\r\nServer: t\r\nDate: " DATE "\r\n"
				    "Content-Type: text/html; charset=utf-8\r\nContent-Length: 2\r\n"
				    "Connection: close\r\n\r\nnf");
	cr_assert_eq(out.nsegs, 2, "an error page is a segment of its own");
	f.keep_alive = f.say_keep_alive = true;
	cr_assert_eq(h1_serialize(&out, &f), 0);
	cr_assert_not_null(strstr(bytes(&n), "Content-Length: 2\r\nConnection: keep-alive\r\n\r\nnf"));
}

Test(serialize, builtin_error_page_is_the_body)
{
	response_error(&out.resp, 400, NULL, 0);
	cr_assert_eq(h1_serialize(&out, &keep), 0);
	size_t n;
	char *b = bytes(&n);
	char page[256];
	size_t len = http_builtin_page(400, page, sizeof(page));
	cr_assert_eq(strcmp(b + n - len, page), 0);
	char cl[64];
	snprintf(cl, sizeof(cl), "Content-Length: %zu\r\n", len);
	cr_assert_not_null(strstr(b, cl));
}

Test(serialize, a_file_body_is_a_file_segment)
{
	char path[] = "/tmp/spindle-ser-XXXXXX";
	int fd = mkstemp(path);
	cr_assert_geq(fd, 0);
	unlink(path);
	cr_assert_eq(write(fd, "0123456789", 10), 10);
	struct response *r = &out.resp;
	r->status = 200;
	response_content_length(r);
	response_body_file(r, fd, 10);
	r->body.off = 2;
	r->body.len = 3;
	cr_assert_eq(h1_serialize(&out, &keep), 0);
	cr_assert_eq(out.nsegs, 2);
	cr_assert_null(out.segs[1].p);
	cr_assert_eq(out.segs[1].off, 2);
	size_t n;
	cr_assert_str_eq(bytes(&n), "HTTP/1.1 200 OK\r\nServer: t\r\nDate: " DATE "\r\nContent-Length: 3\r\n\r\n234");
}

Test(serialize, a_broken_value_is_refused)
{
	struct response *r = &out.resp;
	r->status = 200;
	for (int i = 0; i <= RESPONSE_FIELDS_MAX; i++)
		response_field_str(r, "X", "y");
	cr_assert(r->broken);
	cr_assert_lt(h1_serialize(&out, &keep), 0, "never sent with fields missing");
}

Test(serialize, a_long_field_grows_the_head_buffer)
{
	static char loc[3000];
	memset(loc, 'a', sizeof(loc) - 1);
	response_error(&out.resp, 301, "", 0);
	response_field_copy(&out.resp, "Location", loc, strlen(loc));
	cr_assert_eq(h1_serialize(&out, &keep), 0);
	cr_assert_gt(out.hdr_cap, 3000);
	size_t n;
	cr_assert_not_null(strstr(bytes(&n), loc));
}

/* ---- the filters over hand-made values ------------------------------ */

static struct http_request req;
static char raw[512];

static void parse(const char *text)
{
	static const struct http_limits lim = { 8192, 16384, 100 };
	snprintf(raw, sizeof(raw), "%s", text);
	cr_assert_gt(http_parse_request(raw, strlen(raw), &lim, &req), 0);
}

/* A 200 with validators, as the site makes one, over len bytes of BODY:
 * "0123456789" again and again. */
static char BODY[200];

static void file_value(struct response *r, size_t len)
{
	for (size_t i = 0; i < sizeof(BODY); i++)
		BODY[i] = (char)('0' + i % 10);
	r->status = 200;
	r->validators = (struct http_validators){ "\"e\"", 3, 1000 };
	r->has_validators = r->ranges = true;
	response_field_str(r, "Last-Modified", "then");
	response_field_str(r, "ETag", "\"e\"");
	response_field_str(r, "Cache-Control", "no-cache");
	response_field_str(r, "Accept-Ranges", "bytes");
	response_field_str(r, "Content-Type", "text/plain");
	response_content_length(r);
	response_body_memory(r, BODY, len, NULL);
}

Test(serialize, not_modified_keeps_what_caches_need)
{
	parse("GET / HTTP/1.1\r\nHost: x\r\nIf-None-Match: \"e\"\r\n\r\n");
	file_value(&out.resp, 10);
	cr_assert_eq(http_filter_conditional(&req, &out.resp), 0);
	cr_assert_eq(h1_serialize(&out, &keep), 0);
	size_t n;
	cr_assert_str_eq(bytes(&n), "HTTP/1.1 304 Not Modified\r\nServer: t\r\nDate: " DATE "\r\n"
				    "Last-Modified: then\r\nETag: \"e\"\r\nCache-Control: no-cache\r\n\r\n");
}

Test(serialize, precondition_failed_leaves_the_value_to_the_caller)
{
	parse("GET / HTTP/1.1\r\nHost: x\r\nIf-Match: \"x\"\r\n\r\n");
	file_value(&out.resp, 10);
	cr_assert_eq(http_filter_conditional(&req, &out.resp), 412);
	cr_assert_eq(out.resp.status, 200);
}

Test(serialize, one_range_adds_content_range_before_the_type)
{
	parse("GET / HTTP/1.1\r\nHost: x\r\nRange: bytes=-3\r\n\r\n");
	file_value(&out.resp, 10);
	cr_assert_eq(http_filter_range(&req, &out.resp, 16, 5000), 0);
	cr_assert_eq(h1_serialize(&out, &keep), 0);
	size_t n;
	cr_assert_str_eq(bytes(&n), "HTTP/1.1 206 Partial Content\r\nServer: t\r\nDate: " DATE "\r\n"
				    "Last-Modified: then\r\nETag: \"e\"\r\nCache-Control: no-cache\r\n"
				    "Accept-Ranges: bytes\r\nContent-Range: bytes 7-9/10\r\n"
				    "Content-Type: text/plain\r\nContent-Length: 3\r\n\r\n789");
}

Test(serialize, ranges_become_a_multipart_body)
{
	/* farther apart than a part head costs, so they are not merged */
	parse("GET / HTTP/1.1\r\nHost: x\r\nRange: bytes=0-0,199-199\r\n\r\n");
	file_value(&out.resp, 200);
	cr_assert_eq(http_filter_range(&req, &out.resp, 16, 5000), 0);
	struct response_field *ct = response_field_find(&out.resp, "Content-Type");
	char boundary[17];
	cr_assert_eq(ct->len, 31 + 16);
	memcpy(boundary, ct->value + 31, 16);
	boundary[16] = '\0';
	cr_assert_eq(h1_serialize(&out, &keep), 0);
	size_t n;
	char *b = bytes(&n);
	char want[1024];
	snprintf(want, sizeof(want),
		 "Content-Type: multipart/byteranges; boundary=%s\r\nContent-Length: %d\r\n\r\n"
		 "\r\n--%s\r\nContent-Type: text/plain\r\nContent-Range: bytes 0-0/200\r\n\r\n0"
		 "\r\n--%s\r\nContent-Type: text/plain\r\nContent-Range: bytes 199-199/200\r\n\r\n9"
		 "\r\n--%s--\r\n",
		 /* part heads of 80 and 84 bytes, a byte each, a 24-byte closing delimiter */
		 boundary, 81 + 85 + 24, boundary, boundary, boundary);
	cr_assert_not_null(strstr(b, want), "%s\n---\n%s", b, want);
	cr_assert_str_eq(strstr(b, want), want, "nothing after the closing delimiter");
}

Test(serialize, unsatisfiable_range_is_left_to_the_caller)
{
	parse("GET / HTTP/1.1\r\nHost: x\r\nRange: bytes=50-60\r\n\r\n");
	file_value(&out.resp, 10);
	cr_assert_eq(http_filter_range(&req, &out.resp, 16, 5000), 416);
	cr_assert_eq(out.resp.status, 200);
}

Test(serialize, range_on_a_value_without_ranges_is_ignored)
{
	parse("GET / HTTP/1.1\r\nHost: x\r\nRange: bytes=0-1\r\n\r\n");
	file_value(&out.resp, 10);
	out.resp.ranges = false; /* a listing */
	cr_assert_eq(http_filter_range(&req, &out.resp, 16, 5000), 0);
	cr_assert_eq(out.resp.status, 200);
	cr_assert_eq(response_length(&out.resp), 10);
}
