/* test_site.c - the site handler over response values, in process: a parsed
 * request in, the value it fills out (status, fields in order, body source
 * and length), with no connection, session or bytes in between. HTTP
 * semantics (conditionals, ranges, redirects, method policy) are tested here
 * once; test_serialize.c turns values into bytes. */
#include <criterion/criterion.h>

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "../../src/fs/cache.h"
#include "../../src/http/date.h"
#include "../../src/http/response_value.h"
#include "../../src/site/site.h"
#include "testserver.h"

#define A_TXT "hello, world\n" /* 13 bytes */

static struct test_server ts;
static char a_etag[HTTP_ETAG_MAX];
static char a_lm[HTTP_DATE_LEN + 1];

static void setup_with(size_t cache_size)
{
	test_server_init(&ts);
	test_server_file(&ts, "a.txt", A_TXT, strlen(A_TXT));
	static char m[2000];
	memset(m, 'm', sizeof(m));
	test_server_file(&ts, "m.txt", m, sizeof(m));
	test_server_mkdir(&ts, "d");
	test_server_file(&ts, "d/index.html", "<p>d</p>\n", 9);
	ts.cfg.cache_size = cache_size;
	test_server_open(&ts);
	char path[128];
	struct stat st;
	snprintf(path, sizeof(path), "%s/a.txt", ts.dir);
	cr_assert_eq(stat(path, &st), 0);
	http_etag(a_etag, st.st_mtime, (uint64_t)st.st_size);
	http_date_format(st.st_mtime, a_lm);
}

static void setup_cached(void)
{
	setup_with(1 << 20);
}

static void setup_uncached(void)
{
	setup_with(0);
}

static void teardown(void)
{
	test_server_close(&ts);
}

/* The site's answer to raw request bytes (parsed whole, kept in buf). */
static char buf[4096];

static void respond(struct response *r, const char *raw)
{
	static struct http_request req;
	struct sockaddr_storage peer = { .ss_family = AF_INET };
	snprintf(buf, sizeof(buf), "%s", raw);
	cr_assert_gt(http_parse_request(buf, strlen(buf), &ts.srv.limits, &req), 0, "%s", raw);
	response_init(r);
	site_respond(server_default_site(&ts.srv), &req, &peer, r);
	cr_assert_not(r->broken);
}

/* The value's field names, in order, joined by spaces. */
static const char *names(const struct response *r)
{
	static char out[512];
	size_t n = 0;
	out[0] = '\0';
	for (size_t i = 0; i < r->nfields; i++)
		n += (size_t)snprintf(out + n, sizeof(out) - n, "%s%s", i ? " " : "", r->fields[i].name);
	return out;
}

static void expect_field(struct response *r, const char *name, const char *value)
{
	struct response_field *f = response_field_find(r, name);
	cr_assert_not_null(f, "no %s among %s", name, names(r));
	cr_assert_not_null(f->value, "%s has no value of its own", name);
	cr_assert_eq(f->len, strlen(value), "%s: %.*s", name, (int)f->len, f->value);
	cr_assert_eq(memcmp(f->value, value, f->len), 0, "%s: %.*s", name, (int)f->len, f->value);
}

TestSuite(site, .init = setup_cached, .fini = teardown);
TestSuite(site_uncached, .init = setup_uncached, .fini = teardown);

Test(site, get_file_is_a_200_from_the_cache)
{
	struct response r;
	respond(&r, "GET /a.txt HTTP/1.1\r\nHost: x\r\n\r\n");
	cr_assert_eq(r.status, 200);
	cr_assert_str_eq(names(&r), "Last-Modified ETag Accept-Ranges Content-Type Content-Length");
	expect_field(&r, "ETag", a_etag);
	expect_field(&r, "Last-Modified", a_lm);
	expect_field(&r, "Content-Type", "text/plain; charset=utf-8");
	cr_assert_eq(r.body.kind, RESPONSE_BODY_ENTRY);
	cr_assert_eq(response_length(&r), strlen(A_TXT));
	cr_assert_eq(memcmp(response_body_bytes(&r, 0), A_TXT, strlen(A_TXT)), 0);
	response_release(&r);
}

Test(site_uncached, get_small_file_is_read_into_memory)
{
	struct response r;
	respond(&r, "GET /a.txt HTTP/1.1\r\nHost: x\r\n\r\n");
	cr_assert_eq(r.status, 200);
	cr_assert_eq(r.body.kind, RESPONSE_BODY_MEMORY);
	cr_assert_eq(r.body.fd, -1, "the descriptor is closed once the bytes are read");
	cr_assert_eq(memcmp(response_body_bytes(&r, 0), A_TXT, strlen(A_TXT)), 0);
	response_release(&r);
}

Test(site_uncached, head_keeps_the_length_not_the_file)
{
	struct response r;
	respond(&r, "HEAD /a.txt HTTP/1.1\r\nHost: x\r\n\r\n");
	cr_assert_eq(r.status, 200);
	cr_assert_eq(r.body.kind, RESPONSE_BODY_NONE);
	cr_assert_eq(r.body.fd, -1);
	cr_assert_eq(response_length(&r), strlen(A_TXT), "Content-Length as for GET");
	response_release(&r);
}

Test(site_uncached, big_file_goes_from_its_descriptor)
{
	ts.cfg.sendfile_min = 4; /* a.txt is then "big" */
	struct response r;
	respond(&r, "GET /a.txt HTTP/1.1\r\nHost: x\r\n\r\n");
	cr_assert_eq(r.body.kind, RESPONSE_BODY_FILE);
	cr_assert_geq(r.body.fd, 0);
	cr_assert_null(response_body_bytes(&r, 0), "a file has no memory to point at");
	response_release(&r);
	cr_assert_eq(r.body.fd, -1, "released in one place");
}

Test(site, if_none_match_is_a_304_with_the_validators_only)
{
	char raw[256];
	snprintf(raw, sizeof(raw), "GET /a.txt HTTP/1.1\r\nHost: x\r\nIf-None-Match: %s\r\n\r\n", a_etag);
	struct response r;
	respond(&r, raw);
	cr_assert_eq(r.status, 304);
	cr_assert_str_eq(names(&r), "Last-Modified ETag");
	cr_assert_eq(response_length(&r), 0);
	response_release(&r);
}

Test(site, if_modified_since_later_is_a_304)
{
	char raw[256];
	snprintf(raw, sizeof(raw), "GET /a.txt HTTP/1.1\r\nHost: x\r\nIf-Modified-Since: %s\r\n\r\n", a_lm);
	struct response r;
	respond(&r, raw);
	cr_assert_eq(r.status, 304);
	response_release(&r);
}

Test(site, if_match_failing_is_a_412_page)
{
	struct response r;
	respond(&r, "GET /a.txt HTTP/1.1\r\nHost: x\r\nIf-Match: \"nope\"\r\n\r\n");
	cr_assert_eq(r.status, 412);
	cr_assert_str_eq(names(&r), "Content-Type Content-Length");
	cr_assert_eq(r.body.kind, RESPONSE_BODY_INLINE, "the built-in page");
	cr_assert_not_null(strstr(response_body_bytes(&r, 0), "412 Precondition Failed"));
	response_release(&r);
}

Test(site, one_range_is_a_206_over_the_same_body)
{
	struct response r;
	respond(&r, "GET /a.txt HTTP/1.1\r\nHost: x\r\nRange: bytes=1-4\r\n\r\n");
	cr_assert_eq(r.status, 206);
	cr_assert_str_eq(names(&r), "Last-Modified ETag Accept-Ranges Content-Range Content-Type Content-Length");
	expect_field(&r, "Content-Range", "bytes 1-4/13");
	cr_assert_eq(r.body.off, 1);
	cr_assert_eq(response_length(&r), 4);
	response_release(&r);
}

Test(site, several_ranges_are_multipart_pieces)
{
	struct response r;
	/* farther apart than a part head costs, so they are not merged */
	respond(&r, "GET /m.txt HTTP/1.1\r\nHost: x\r\nRange: bytes=0-0,1999-1999\r\n\r\n");
	cr_assert_eq(r.status, 206);
	struct response_field *ct = response_field_find(&r, "Content-Type");
	cr_assert(ct->len > 31 && memcmp(ct->value, "multipart/byteranges; boundary=", 31) == 0);
	cr_assert_eq(r.npieces, 5, "head, byte, head, byte, closing delimiter");
	cr_assert_null(r.pieces[1].p);
	cr_assert_eq(r.pieces[1].off, 0);
	cr_assert_eq(r.pieces[3].off, 1999);
	uint64_t total = 0;
	for (size_t i = 0; i < r.npieces; i++)
		total += r.pieces[i].len;
	cr_assert_eq(response_length(&r), total);
	cr_assert_not_null(strstr(r.pieces[2].p, "Content-Range: bytes 1999-1999/2000\r\n\r\n"));
	response_release(&r);
}

Test(site, overlapping_ranges_are_merged_into_one)
{
	struct response r;
	respond(&r, "GET /m.txt HTTP/1.1\r\nHost: x\r\nRange: bytes=0-9,5-20\r\n\r\n");
	cr_assert_eq(r.status, 206);
	expect_field(&r, "Content-Range", "bytes 0-20/2000");
	cr_assert_null(r.pieces);
	response_release(&r);
}

Test(site, unsatisfiable_range_is_a_416_naming_the_length)
{
	struct response r;
	respond(&r, "GET /a.txt HTTP/1.1\r\nHost: x\r\nRange: bytes=100-200\r\n\r\n");
	cr_assert_eq(r.status, 416);
	cr_assert_str_eq(names(&r), "Content-Type Content-Length Content-Range");
	expect_field(&r, "Content-Range", "bytes */13");
	response_release(&r);
}

Test(site, if_range_that_does_not_match_is_the_whole_file)
{
	struct response r;
	respond(&r, "GET /a.txt HTTP/1.1\r\nHost: x\r\nRange: bytes=1-4\r\nIf-Range: \"other\"\r\n\r\n");
	cr_assert_eq(r.status, 200);
	cr_assert_eq(response_length(&r), 13);
	response_release(&r);
}

Test(site, directory_without_slash_redirects)
{
	struct response r;
	respond(&r, "GET /d?x=1 HTTP/1.1\r\nHost: x\r\n\r\n");
	cr_assert_eq(r.status, 301);
	cr_assert_str_eq(names(&r), "Content-Type Content-Length Location");
	expect_field(&r, "Location", "/d/?x=1");
	response_release(&r);
}

Test(site, directory_is_answered_by_its_index)
{
	struct response r;
	respond(&r, "GET /d/ HTTP/1.1\r\nHost: x\r\n\r\n");
	cr_assert_eq(r.status, 200);
	expect_field(&r, "Content-Type", "text/html; charset=utf-8");
	cr_assert_eq(response_length(&r), 9);
	response_release(&r);
}

Test(site, missing_file_is_a_404_page)
{
	struct response r;
	respond(&r, "GET /nope.txt HTTP/1.1\r\nHost: x\r\n\r\n");
	cr_assert_eq(r.status, 404);
	cr_assert_eq(r.body.kind, RESPONSE_BODY_INLINE);
	response_release(&r);
}

Test(site, other_methods_are_refused_with_allow)
{
	struct response r;
	respond(&r, "DELETE /a.txt HTTP/1.1\r\nHost: x\r\n\r\n");
	cr_assert_eq(r.status, 405);
	expect_field(&r, "Allow", "GET, HEAD");
	response_release(&r);
	respond(&r, "FROB /a.txt HTTP/1.1\r\nHost: x\r\n\r\n");
	cr_assert_eq(r.status, 501);
	response_release(&r);
}

Test(site, redirect_https_keeps_host_and_target)
{
	ts.srv.top->redirect_https = true; /* the default site's, as config_top_site sets it */
	ts.cfg.redirect_https_port = 8443;
	struct response r;
	respond(&r, "GET /a.txt?q HTTP/1.1\r\nHost: example.org:8080\r\n\r\n");
	cr_assert_eq(r.status, 301);
	expect_field(&r, "Location", "https://example.org:8443/a.txt?q");
	response_release(&r);
	respond(&r, "GET / HTTP/1.1\r\nHost: a~b\r\n\r\n");
	cr_assert_eq(r.status, 400);
	cr_assert(r.linger, "a Host that cannot be trusted ends the connection");
	response_release(&r);
}
