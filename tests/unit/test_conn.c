/* test_conn.c - the sans-I/O connection core driven directly, without sockets:
 * bytes in through conn_input_space/conn_input_done, bytes out through
 * conn_output/conn_output_done, and conn_timeout/conn_drain in every state,
 * over a real struct server and a temporary document root. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../../src/conn.h"
#include "../../src/http/date.h"
#include "testserver.h"

#define A_TXT "hello, world\n"
#define B_TXT "second file, a little longer than the first\n"

#define M_SIZE 8192
#define M_STEP 500 /* between one-byte ranges: more than a part head, so none merge */

static struct test_server ts;

static char m_byte(size_t i)
{
	return (char)('a' + i % 26);
}

static void setup_files(void)
{
	test_server_init(&ts);
	test_server_file(&ts, "a.txt", A_TXT, strlen(A_TXT));
	test_server_file(&ts, "b.txt", B_TXT, strlen(B_TXT));
	/* multipart tests need ranges farther apart than a part head, or they merge */
	static char m[M_SIZE];
	for (size_t i = 0; i < sizeof(m); i++)
		m[i] = m_byte(i);
	test_server_file(&ts, "m.txt", m, sizeof(m));
	test_server_mkdir(&ts, "dir");
	test_server_file(&ts, "dir/index.html", "<p>index</p>\n", 13);
}

static void setup(void)
{
	setup_files();
	test_server_open(&ts);
}

static void teardown(void)
{
	test_server_close(&ts);
}

/* ---- a driver that records everything ------------------------------- */

struct drive {
	struct conn *c;
	size_t in_chunk;  /* at most this many bytes per conn_input_done */
	size_t out_step;  /* at most this many bytes accepted per conn_output_done */
	char *out;        /* everything the core sent, in order */
	size_t outlen, outcap;
	int shutdowns;    /* CONN_WANT_SHUTDOWN seen */
	size_t fed;       /* input bytes the core took */
	bool used_file;   /* some output came as a file range */
};

static void drive_start(struct drive *d, size_t in_chunk, size_t out_step)
{
	memset(d, 0, sizeof(*d));
	d->c = conn_new(&ts.srv, NULL, 0);
	cr_assert_not_null(d->c);
	d->in_chunk = in_chunk;
	d->out_step = out_step;
}

static void drive_end(struct drive *d)
{
	conn_free(d->c);
	free(d->out);
	d->c = NULL;
	d->out = NULL;
}

static void record(struct drive *d, const void *p, size_t n)
{
	if (d->outlen + n > d->outcap) {
		d->outcap = (d->outlen + n) * 2;
		d->out = realloc(d->out, d->outcap);
		cr_assert_not_null(d->out);
	}
	memcpy(d->out + d->outlen, p, n);
	d->outlen += n;
}

/* Accepts up to out_step bytes of what conn_output() offers, as a socket would. */
static void send_some(struct drive *d)
{
	struct conn_output o;
	conn_output(d->c, &o);
	cr_assert_gt(o.total, 0, "the core wants WRITE but offers nothing");
	size_t want = o.total < d->out_step ? o.total : d->out_step, done = 0;
	if (o.iovcnt > 0) {
		for (int i = 0; i < o.iovcnt && done < want; i++) {
			size_t n = o.iov[i].iov_len < want - done ? o.iov[i].iov_len : want - done;
			record(d, o.iov[i].iov_base, n);
			done += n;
		}
	} else {
		cr_assert_geq(o.file_fd, 0);
		char buf[4096];
		size_t n = want < sizeof(buf) ? want : sizeof(buf);
		ssize_t got = pread(o.file_fd, buf, n, o.file_off);
		cr_assert_eq(got, (ssize_t)n, "pread of the file range");
		record(d, buf, n);
		done = n;
		d->used_file = true;
	}
	conn_output_done(d->c, done);
}

/* Runs the core until it wants input or to close; returns that want. */
static enum conn_want pump(struct drive *d)
{
	for (int guard = 0; guard < 10000000; guard++) {
		int64_t deadline;
		enum conn_want w = conn_wants(d->c, &deadline);
		if (w == CONN_WANT_WRITE) {
			send_some(d);
		} else if (w == CONN_WANT_SHUTDOWN) {
			d->shutdowns++;
			conn_shutdown_done(d->c);
		} else {
			return w;
		}
	}
	cr_assert_fail("the core never stops wanting to write");
	return CONN_WANT_CLOSE;
}

/* Feeds bytes in pieces of at most in_chunk, serving output in between. */
static enum conn_want feed(struct drive *d, const char *p, size_t len)
{
	size_t off = 0;
	while (off < len) {
		if (pump(d) != CONN_WANT_READ)
			break;
		struct iovec sp = conn_input_space(d->c);
		cr_assert_gt(sp.iov_len, 0, "READ wanted, but no space to read into");
		size_t n = len - off;
		if (n > d->in_chunk)
			n = d->in_chunk;
		if (n > sp.iov_len)
			n = sp.iov_len;
		memcpy(sp.iov_base, p + off, n);
		conn_input_done(d->c, (ssize_t)n);
		off += n;
	}
	d->fed += off;
	return pump(d);
}

static enum conn_want feeds(struct drive *d, const char *s)
{
	return feed(d, s, strlen(s));
}

static enum conn_want want_of(struct drive *d, int64_t *deadline)
{
	int64_t dl;
	return conn_wants(d->c, deadline ? deadline : &dl);
}

/* The output as a string with every Date value replaced by "X", so runs a
 * second apart compare equal. */
static char *normalized(const struct drive *d)
{
	char *s = malloc(d->outlen + 1);
	cr_assert_not_null(s);
	size_t o = 0;
	for (size_t i = 0; i < d->outlen;) {
		if (d->outlen - i >= 8 + HTTP_DATE_LEN && memcmp(d->out + i, "\r\nDate: ", 8) == 0) {
			memcpy(s + o, "\r\nDate: X", 9);
			o += 9;
			i += 8 + HTTP_DATE_LEN;
		} else {
			s[o++] = d->out[i++];
		}
	}
	s[o] = '\0';
	return s;
}

static size_t count(const char *hay, const char *needle)
{
	size_t n = 0;
	for (const char *p = hay; (p = strstr(p, needle)); p++)
		n++;
	return n;
}

/* Output of feeding `in` in one piece, accepting output whole. */
static char *run_whole(const char *in, size_t len, enum conn_want *end)
{
	struct drive d;
	drive_start(&d, len ? len : 1, SIZE_MAX);
	enum conn_want w = feed(&d, in, len);
	if (end)
		*end = w;
	char *s = normalized(&d);
	drive_end(&d);
	return s;
}

TestSuite(conn, .init = setup, .fini = teardown);

/* ---- requests and the exact bytes of responses ---------------------- */

Test(conn, one_get_exact_response)
{
	const char *req = "GET /a.txt HTTP/1.1\r\nHost: x\r\n\r\n";
	enum conn_want w;
	char *got = run_whole(req, strlen(req), &w);
	char want[1024];
	/* the validators, as the cache computes them from the file */
	struct stat st;
	char path[128], etag[64], lm[HTTP_DATE_LEN + 1];
	snprintf(path, sizeof(path), "%s/a.txt", ts.dir);
	cr_assert_eq(stat(path, &st), 0);
	snprintf(etag, sizeof(etag), "\"%llx-%llx\"", (unsigned long long)st.st_mtime,
		 (unsigned long long)st.st_size);
	http_date_format(st.st_mtime, lm);
	snprintf(want, sizeof(want),
		 "HTTP/1.1 200 OK\r\nServer: spindle/%s\r\nDate: X\r\nLast-Modified: %s\r\nETag: %s\r\n"
		 "Accept-Ranges: bytes\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %zu\r\n\r\n%s",
		 SPINDLE_VERSION, lm, etag, strlen(A_TXT), A_TXT);
	cr_assert_str_eq(got, want);
	cr_assert_eq(w, CONN_WANT_READ, "keep-alive: waits for the next request");
	free(got);
}

static const char pipelined[] =
	"GET /a.txt HTTP/1.1\r\nHost: x\r\n\r\n"
	"HEAD /b.txt HTTP/1.1\r\nHost: x\r\n\r\n"
	"GET /missing HTTP/1.1\r\nHost: x\r\n\r\n"
	"GET /dir/ HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";

static void check_pipelined_output(const char *s)
{
	const char *a = strstr(s, "HTTP/1.1 200 OK");
	cr_assert_not_null(a);
	const char *b = strstr(a + 1, "HTTP/1.1 200 OK");
	cr_assert_not_null(b);
	const char *c = strstr(b + 1, "HTTP/1.1 404 Not Found");
	cr_assert_not_null(c);
	const char *d = strstr(c + 1, "HTTP/1.1 200 OK");
	cr_assert_not_null(d);
	cr_assert_eq(count(s, "HTTP/1.1 "), 4, "four responses, in order:\n%s", s);
	cr_assert_eq(count(s, A_TXT), 1);
	cr_assert_eq(count(s, B_TXT), 0, "HEAD sends no body");
	cr_assert_eq(count(s, "<p>index</p>\n"), 1);
	cr_assert_eq(count(s, "Connection: close\r\n"), 1, "only the last one closes");
	cr_assert(strstr(d, "Connection: close\r\n"));
}

Test(conn, pipelined_split_at_every_byte_equals_fed_at_once)
{
	size_t len = strlen(pipelined);
	enum conn_want w;
	char *whole = run_whole(pipelined, len, &w);
	check_pipelined_output(whole);
	cr_assert_eq(w, CONN_WANT_CLOSE, "Connection: close and nothing unread: close");

	/* two pieces, split at every position */
	for (size_t k = 1; k < len; k++) {
		struct drive d;
		drive_start(&d, len, SIZE_MAX);
		feed(&d, pipelined, k);
		enum conn_want end = feed(&d, pipelined + k, len - k);
		char *s = normalized(&d);
		cr_assert_str_eq(s, whole, "split at %zu differs", k);
		cr_assert_eq(end, CONN_WANT_CLOSE, "split at %zu", k);
		cr_assert_eq(d.fed, len);
		free(s);
		drive_end(&d);
	}
	/* and one byte at a time */
	struct drive d;
	drive_start(&d, 1, SIZE_MAX);
	feed(&d, pipelined, len);
	char *s = normalized(&d);
	cr_assert_str_eq(s, whole, "fed a byte at a time");
	free(s);
	drive_end(&d);
	free(whole);
}

Test(conn, output_accepted_one_byte_at_a_time)
{
	size_t len = strlen(pipelined);
	char *whole = run_whole(pipelined, len, NULL);
	for (size_t step = 1; step <= 7; step++) {
		struct drive d;
		drive_start(&d, len, step);
		cr_assert_eq(feed(&d, pipelined, len), CONN_WANT_CLOSE);
		char *s = normalized(&d);
		cr_assert_str_eq(s, whole, "output accepted %zu bytes at a time differs", step);
		free(s);
		drive_end(&d);
	}
	free(whole);
}

/* Files too big for memory go out as a file range (sendfile) after the head. */
Test(conn_config, file_range_output_in_partial_steps, .init = setup_files, .fini = teardown)
{
	ts.cfg.cache_size = 0;
	ts.cfg.sendfile_min = 0;
	test_server_open(&ts);
	char big[10000];
	for (size_t i = 0; i < sizeof(big); i++)
		big[i] = (char)('a' + i % 26);
	test_server_file(&ts, "big.bin", big, sizeof(big));
	const char *req = "GET /big.bin HTTP/1.1\r\nHost: x\r\n\r\nGET /big.bin HTTP/1.1\r\nHost: x\r\nRange: bytes=9990-\r\n\r\n";

	struct drive d;
	drive_start(&d, 4096, 1);
	feeds(&d, req);
	cr_assert(d.used_file, "the body should come as a file range");
	char *s = normalized(&d);
	const char *body = strstr(s, "\r\n\r\n");
	cr_assert_not_null(body);
	cr_assert_eq(memcmp(body + 4, big, sizeof(big)), 0, "the file's bytes, in order, whole");
	const char *second = strstr(body + 4 + sizeof(big), "HTTP/1.1 206 Partial Content\r\n");
	cr_assert_not_null(second, "%s", body + 4 + sizeof(big));
	cr_assert(strstr(second, "Content-Range: bytes 9990-9999/10000\r\n"));
	cr_assert(strstr(second, "\r\n\r\n") != NULL);
	cr_assert_eq(memcmp(strstr(second, "\r\n\r\n") + 4, big + 9990, 10), 0);
	free(s);
	drive_end(&d);
}

/* The head and a file range: one packet, so the head is marked "more". */
Test(conn_config, head_before_file_range_is_marked_more, .init = setup_files, .fini = teardown)
{
	ts.cfg.cache_size = 0;
	ts.cfg.sendfile_min = 0;
	test_server_open(&ts);
	struct drive d;
	drive_start(&d, 4096, 1);
	struct iovec sp = conn_input_space(d.c);
	const char *req = "GET /b.txt HTTP/1.1\r\nHost: x\r\n\r\n";
	memcpy(sp.iov_base, req, strlen(req));
	conn_input_done(d.c, (ssize_t)strlen(req));
	cr_assert_eq(want_of(&d, NULL), CONN_WANT_WRITE);
	struct conn_output o;
	conn_output(d.c, &o);
	cr_assert_eq(o.iovcnt, 1);
	cr_assert(o.more);
	conn_output_done(d.c, o.total);
	conn_output(d.c, &o);
	cr_assert_eq(o.iovcnt, 0);
	cr_assert_geq(o.file_fd, 0);
	cr_assert_eq(o.file_off, 0);
	cr_assert_eq(o.file_len, strlen(B_TXT));
	conn_output_done(d.c, o.file_len);
	cr_assert_eq(want_of(&d, NULL), CONN_WANT_READ);
	drive_end(&d);
}

/* A request with a body: the body is discarded, the next request served. */
Test(conn, body_then_pipelined_request_split_at_every_byte)
{
	static const char in[] =
		"POST /a.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 11\r\n\r\nhello=world"
		"PUT /a.txt HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab\r\nc\r\n3;ext=1\r\nxyz\r\n0\r\nTrailer: t\r\n\r\n"
		"GET /b.txt HTTP/1.1\r\nHost: x\r\n\r\n";
	size_t len = strlen(in);
	enum conn_want w;
	char *whole = run_whole(in, len, &w);
	cr_assert_eq(count(whole, "HTTP/1.1 405 Method Not Allowed\r\n"), 2, "%s", whole);
	cr_assert_eq(count(whole, "Allow: GET, HEAD\r\n"), 2);
	cr_assert_eq(count(whole, B_TXT), 1, "%s", whole);
	cr_assert(strstr(whole, "405") < strstr(whole, B_TXT));
	cr_assert_eq(count(whole, "hello=world"), 0);
	cr_assert_eq(w, CONN_WANT_READ);
	for (size_t k = 1; k < len; k++) {
		struct drive d;
		drive_start(&d, len, SIZE_MAX);
		feed(&d, in, k);
		feed(&d, in + k, len - k);
		char *s = normalized(&d);
		cr_assert_str_eq(s, whole, "split at %zu differs", k);
		free(s);
		drive_end(&d);
	}
	free(whole);
}

/* A body longer than the input buffer, fed in small pieces, with the next
 * request right behind it. */
Test(conn, long_body_larger_than_the_buffer)
{
	size_t body = 20000;
	char head[128];
	int hn = snprintf(head, sizeof(head), "POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: %zu\r\n\r\n", body);
	const char *next = "GET /a.txt HTTP/1.1\r\nHost: x\r\n\r\n";
	size_t len = (size_t)hn + body + strlen(next);
	char *in = malloc(len);
	memcpy(in, head, (size_t)hn);
	memset(in + hn, 'B', body);
	memcpy(in + hn + body, next, strlen(next));
	for (size_t chunk = 1; chunk <= 4097; chunk += 4096) {
		struct drive d;
		drive_start(&d, chunk, SIZE_MAX);
		cr_assert_eq(feed(&d, in, len), CONN_WANT_READ);
		char *s = normalized(&d);
		cr_assert_eq(count(s, "HTTP/1.1 405"), 1, "chunk %zu: %s", chunk, s);
		cr_assert_eq(count(s, A_TXT), 1, "chunk %zu: %s", chunk, s);
		free(s);
		drive_end(&d);
	}
	free(in);
}

/* A head bigger than the first buffer grows it; one over max_head is 431. */
Test(conn, head_grows_the_buffer_up_to_max_head)
{
	char in[16384 + 200];
	size_t n = (size_t)sprintf(in, "GET /a.txt HTTP/1.1\r\nHost: x\r\n");
	while (n < 10000)
		n += (size_t)sprintf(in + n, "X-Pad: %0100d\r\n", 7);
	n += (size_t)sprintf(in + n, "\r\n");
	struct drive d;
	drive_start(&d, 100, SIZE_MAX);
	cr_assert_eq(feed(&d, in, n), CONN_WANT_READ);
	char *s = normalized(&d);
	cr_assert(strstr(s, "HTTP/1.1 200 OK\r\n"), "%s", s);
	cr_assert(strstr(s, A_TXT));
	free(s);
	drive_end(&d);

	n = (size_t)sprintf(in, "GET /a.txt HTTP/1.1\r\nHost: x\r\n");
	while (n < ts.cfg.max_head + 100)
		n += (size_t)sprintf(in + n, "X-Pad: %0100d\r\n", 7);
	drive_start(&d, 100, SIZE_MAX);
	feed(&d, in, n);
	s = normalized(&d);
	cr_assert(strncmp(s, "HTTP/1.1 431 ", 13) == 0, "%s", s);
	cr_assert(strstr(s, "Connection: close\r\n"));
	cr_assert_eq(d.shutdowns, 1, "the client may still be sending: half-close, then linger");
	free(s);
	drive_end(&d);
}

/* A malformed request: 400, and nothing pipelined behind it is answered. */
Test(conn, bad_request_loses_framing)
{
	const char *in = "GET /a.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n"
			 "GET /b.txt HTTP/1.1\r\nHost: x\r\n\r\n";
	enum conn_want w;
	char *s = run_whole(in, strlen(in), &w);
	cr_assert(strncmp(s, "HTTP/1.1 400 Bad Request\r\n", 26) == 0, "%s", s);
	cr_assert_eq(count(s, "HTTP/1.1 "), 1, "%s", s);
	cr_assert(strstr(s, "Connection: close\r\n"));
	cr_assert_eq(w, CONN_WANT_READ, "lingering: reading and dropping");
	free(s);
}

/* ---- errors mid-body ------------------------------------------------- */

Test(conn_config, body_over_max_body_is_413_and_close, .init = setup_files, .fini = teardown)
{
	ts.cfg.max_body = 100;
	test_server_open(&ts);
	/* declared too long: refused before any of it is read */
	struct drive d;
	drive_start(&d, 1, SIZE_MAX);
	feeds(&d, "POST /a.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 101\r\n\r\n");
	char *s = normalized(&d);
	cr_assert(strncmp(s, "HTTP/1.1 413 Content Too Large\r\n", 32) == 0, "%s", s);
	cr_assert(strstr(s, "Connection: close\r\n"));
	cr_assert_eq(d.shutdowns, 1);
	free(s);
	drive_end(&d);

	/* exactly max_body is fine */
	char in[512];
	int n = snprintf(in, sizeof(in), "POST /a.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n%0100d", 0);
	drive_start(&d, 1, SIZE_MAX);
	cr_assert_eq(feed(&d, in, (size_t)n), CONN_WANT_READ);
	s = normalized(&d);
	cr_assert(strncmp(s, "HTTP/1.1 405 ", 13) == 0, "%s", s);
	free(s);
	drive_end(&d);

	/* chunked: found too long as the chunks arrive */
	drive_start(&d, 1, SIZE_MAX);
	feeds(&d, "POST /a.txt HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
		  "40\r\n0123456789012345678901234567890123456789012345678901234567890123\r\n");
	cr_assert_eq(d.outlen, 0, "64 bytes are within the limit");
	feeds(&d, "40\r\n0123456789012345678901234567890123456789012345678901234567890123\r\n");
	s = normalized(&d);
	cr_assert(strncmp(s, "HTTP/1.1 413 ", 13) == 0, "%s", s);
	cr_assert(strstr(s, "Connection: close\r\n"));
	free(s);
	drive_end(&d);
}

Test(conn, bad_chunk_mid_body_is_400_and_close)
{
	struct drive d;
	drive_start(&d, 1, SIZE_MAX);
	feeds(&d, "POST /a.txt HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n");
	cr_assert_eq(d.outlen, 0);
	feeds(&d, "zz\r\n");
	char *s = normalized(&d);
	cr_assert(strncmp(s, "HTTP/1.1 400 Bad Request\r\n", 26) == 0, "%s", s);
	cr_assert(strstr(s, "Connection: close\r\n"));
	cr_assert_eq(d.shutdowns, 1);
	free(s);
	drive_end(&d);
}

Test(conn, peer_reset_mid_body_closes_silently)
{
	struct drive d;
	drive_start(&d, 1, SIZE_MAX);
	feeds(&d, "POST /a.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc");
	cr_assert_eq(want_of(&d, NULL), CONN_WANT_READ);
	conn_input_space(d.c);
	conn_input_done(d.c, -ECONNRESET);
	cr_assert_eq(want_of(&d, NULL), CONN_WANT_CLOSE);
	cr_assert_eq(d.outlen, 0);
	drive_end(&d);
}

Test(conn, eof_mid_head_closes_silently)
{
	struct drive d;
	drive_start(&d, 1, SIZE_MAX);
	feeds(&d, "GET /a.txt HTTP/1.1\r\nHo");
	conn_input_space(d.c);
	conn_input_done(d.c, 0);
	cr_assert_eq(want_of(&d, NULL), CONN_WANT_CLOSE);
	cr_assert_eq(d.outlen, 0);
	drive_end(&d);
}

Test(conn, send_failure_mid_response_closes)
{
	struct drive d;
	drive_start(&d, 4096, 5);
	struct iovec sp = conn_input_space(d.c);
	const char *req = "GET /a.txt HTTP/1.1\r\nHost: x\r\n\r\nGET /b.txt HTTP/1.1\r\nHost: x\r\n\r\n";
	memcpy(sp.iov_base, req, strlen(req));
	conn_input_done(d.c, (ssize_t)strlen(req));
	send_some(&d);
	cr_assert_eq(want_of(&d, NULL), CONN_WANT_WRITE);
	conn_output_failed(d.c);
	cr_assert_eq(want_of(&d, NULL), CONN_WANT_CLOSE, "the pipelined request is not answered");
	drive_end(&d);
}

/* ---- timeouts in every state ----------------------------------------- */

/* Time passes in real milliseconds: the core reads the monotonic clock. */
static void sleep_ms(int ms)
{
	struct timespec t = { ms / 1000, (long)(ms % 1000) * 1000000L };
	nanosleep(&t, NULL);
}

Test(conn, timeout_before_any_byte_closes_without_408)
{
	struct drive d;
	drive_start(&d, 1, SIZE_MAX);
	int64_t dl;
	cr_assert_eq(want_of(&d, &dl), CONN_WANT_READ);
	cr_assert_gt(dl, 0);
	conn_timeout(d.c);
	cr_assert_eq(pump(&d), CONN_WANT_CLOSE);
	cr_assert_eq(d.outlen, 0, "nothing was asked: nothing to answer");
	drive_end(&d);
}

Test(conn, timeout_mid_head_is_408_then_close)
{
	struct drive d;
	drive_start(&d, 1, SIZE_MAX);
	feeds(&d, "GET /a.txt HTTP/1.1\r\nHost");
	conn_timeout(d.c);
	enum conn_want w = pump(&d);
	char *s = normalized(&d);
	cr_assert(strncmp(s, "HTTP/1.1 408 Request Timeout\r\n", 30) == 0, "%s", s);
	cr_assert(strstr(s, "Connection: close\r\n"));
	cr_assert_eq(d.shutdowns, 1, "half-close, then linger");
	cr_assert_eq(w, CONN_WANT_READ);
	/* lingering: what still comes is dropped, the linger ends on its deadline */
	size_t before = d.outlen;
	feeds(&d, ": x\r\n\r\n");
	cr_assert_eq(d.outlen, before, "nothing is answered after a 408");
	int64_t dl;
	cr_assert_eq(want_of(&d, &dl), CONN_WANT_READ);
	cr_assert_gt(dl, 0);
	conn_timeout(d.c);
	cr_assert_eq(want_of(&d, NULL), CONN_WANT_CLOSE);
	free(s);
	drive_end(&d);
}

Test(conn, timeout_mid_body_is_408_then_close)
{
	struct drive d;
	drive_start(&d, 1, SIZE_MAX);
	feeds(&d, "POST /a.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc");
	cr_assert_eq(d.outlen, 0);
	conn_timeout(d.c);
	pump(&d);
	char *s = normalized(&d);
	cr_assert(strncmp(s, "HTTP/1.1 408 Request Timeout\r\n", 30) == 0, "%s", s);
	cr_assert(strstr(s, "Connection: close\r\n"));
	cr_assert_eq(count(s, "HTTP/1.1 "), 1);
	cr_assert_eq(d.shutdowns, 1);
	free(s);
	drive_end(&d);
}

Test(conn, timeout_mid_response_closes_without_more_output)
{
	struct drive d;
	drive_start(&d, 4096, 3);
	struct iovec sp = conn_input_space(d.c);
	const char *req = "GET /a.txt HTTP/1.1\r\nHost: x\r\n\r\n";
	memcpy(sp.iov_base, req, strlen(req));
	conn_input_done(d.c, (ssize_t)strlen(req));
	send_some(&d);
	cr_assert_eq(want_of(&d, NULL), CONN_WANT_WRITE);
	conn_timeout(d.c);
	cr_assert_eq(want_of(&d, NULL), CONN_WANT_CLOSE, "a stalled reader is dropped, not answered");
	drive_end(&d);
}

Test(conn, timeout_while_idle_keep_alive_closes_without_408)
{
	struct drive d;
	drive_start(&d, 4096, SIZE_MAX);
	cr_assert_eq(feeds(&d, "GET /a.txt HTTP/1.1\r\nHost: x\r\n\r\n"), CONN_WANT_READ);
	size_t before = d.outlen;
	conn_timeout(d.c);
	cr_assert_eq(pump(&d), CONN_WANT_CLOSE);
	cr_assert_eq(d.outlen, before, "an idle keep-alive connection is closed, not answered 408");
	drive_end(&d);
}

/* The header deadline is absolute: bytes trickling in do not move it. The
 * idle keep-alive deadline counts from the last response. */
Test(conn_config, deadlines_per_state, .init = setup_files, .fini = teardown)
{
	ts.cfg.header_timeout_ms = 5000;
	ts.cfg.keepalive_timeout_ms = 20000;
	ts.cfg.send_timeout_ms = 40000;
	test_server_open(&ts);
	/* each deadline is checked against clock readings taken just before
	 * and after the step that sets it: exact, however loaded the machine */
	struct drive d;
	int64_t t0 = conn_now_ms(), dl, dl2;
	drive_start(&d, 4096, SIZE_MAX);
	int64_t t1 = conn_now_ms();
	cr_assert_eq(want_of(&d, &dl), CONN_WANT_READ);
	cr_assert(dl >= t0 + 5000 && dl <= t1 + 5000, "fresh connection: header deadline, got %lld",
		  (long long)(dl - t0));

	feeds(&d, "GET /a.txt HTTP/1.1\r\n");
	want_of(&d, &dl);
	sleep_ms(30);
	feeds(&d, "Host: x\r\n");
	want_of(&d, &dl2);
	cr_assert_eq(dl2, dl, "trickling bytes must not extend the header deadline");

	t0 = conn_now_ms();
	feeds(&d, "\r\n");
	t1 = conn_now_ms();
	cr_assert_eq(want_of(&d, &dl), CONN_WANT_READ);
	cr_assert(dl >= t0 + 20000 && dl <= t1 + 20000, "idle keep-alive: %lld", (long long)(dl - t0));

	/* mid-response: the send timeout */
	d.out_step = 1;
	struct iovec sp = conn_input_space(d.c);
	const char *req = "GET /a.txt HTTP/1.1\r\nHost: x\r\n\r\n";
	memcpy(sp.iov_base, req, strlen(req));
	conn_input_done(d.c, (ssize_t)strlen(req));
	t0 = conn_now_ms();
	send_some(&d);
	t1 = conn_now_ms();
	cr_assert_eq(want_of(&d, &dl), CONN_WANT_WRITE);
	cr_assert(dl >= t0 + 40000 && dl <= t1 + 40000, "sending: %lld", (long long)(dl - t0));

	/* mid-body: absolute from the body's start */
	d.out_step = SIZE_MAX;
	pump(&d);
	feeds(&d, "POST /a.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\na");
	cr_assert_eq(want_of(&d, &dl), CONN_WANT_READ);
	sleep_ms(30);
	feeds(&d, "b");
	want_of(&d, &dl2);
	cr_assert_eq(dl2, dl, "trickling body bytes must not extend the deadline");
	drive_end(&d);
}

/* ---- draining (graceful stop) in every state -------------------------- */

Test(conn, drain_while_idle_gives_a_short_grace)
{
	struct drive d;
	drive_start(&d, 4096, SIZE_MAX);
	int64_t t0 = conn_now_ms(), dl;
	conn_drain(d.c);
	int64_t t1 = conn_now_ms();
	cr_assert_eq(want_of(&d, &dl), CONN_WANT_READ, "not closed at once: a request may be on its way");
	cr_assert(dl >= t0 + 1000 && dl <= t1 + 1000, "a second's grace: %lld", (long long)(dl - t0));
	/* a request within the grace is answered, with close */
	enum conn_want w = feeds(&d, "GET /a.txt HTTP/1.1\r\nHost: x\r\n\r\n");
	char *s = normalized(&d);
	cr_assert(strncmp(s, "HTTP/1.1 200 OK\r\n", 17) == 0, "%s", s);
	cr_assert(strstr(s, "Connection: close\r\n"));
	cr_assert(strstr(s, A_TXT));
	cr_assert_eq(w, CONN_WANT_CLOSE);
	free(s);
	drive_end(&d);

	/* no request within the grace: closed without a word */
	drive_start(&d, 4096, SIZE_MAX);
	conn_drain(d.c);
	conn_timeout(d.c);
	cr_assert_eq(pump(&d), CONN_WANT_CLOSE);
	cr_assert_eq(d.outlen, 0);
	drive_end(&d);
}

Test(conn, drain_between_keep_alive_requests)
{
	struct drive d;
	drive_start(&d, 4096, SIZE_MAX);
	feeds(&d, "GET /a.txt HTTP/1.1\r\nHost: x\r\n\r\n");
	int64_t t0 = conn_now_ms(), dl;
	conn_drain(d.c);
	int64_t t1 = conn_now_ms();
	cr_assert_eq(want_of(&d, &dl), CONN_WANT_READ);
	cr_assert(dl >= t0 + 1000 && dl <= t1 + 1000, "the drain grace replaces the keep-alive timeout: %lld",
		  (long long)(dl - t0));
	size_t before = d.outlen;
	conn_timeout(d.c);
	cr_assert_eq(pump(&d), CONN_WANT_CLOSE);
	cr_assert_eq(d.outlen, before);
	drive_end(&d);
}

Test(conn, drain_mid_head_answers_with_close)
{
	struct drive d;
	drive_start(&d, 4096, SIZE_MAX);
	feeds(&d, "GET /a.txt HTTP/1.1\r\nHo");
	conn_drain(d.c);
	int64_t dl;
	cr_assert_eq(want_of(&d, &dl), CONN_WANT_READ);
	enum conn_want w = feeds(&d, "st: x\r\n\r\n");
	char *s = normalized(&d);
	cr_assert(strncmp(s, "HTTP/1.1 200 OK\r\n", 17) == 0, "%s", s);
	cr_assert(strstr(s, "Connection: close\r\n"));
	cr_assert_eq(w, CONN_WANT_CLOSE);
	free(s);
	drive_end(&d);
}

Test(conn, drain_mid_body_answers_with_close)
{
	struct drive d;
	drive_start(&d, 4096, SIZE_MAX);
	feeds(&d, "POST /a.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nab");
	conn_drain(d.c);
	enum conn_want w = feeds(&d, "cdGET /a.txt HTTP/1.1\r\nHost: x\r\n\r\n");
	char *s = normalized(&d);
	cr_assert(strncmp(s, "HTTP/1.1 405 ", 13) == 0, "%s", s);
	cr_assert(strstr(s, "Connection: close\r\n"));
	cr_assert_eq(count(s, "HTTP/1.1 "), 1, "nothing after the draining response: %s", s);
	cr_assert_neq(w, CONN_WANT_WRITE);
	free(s);
	drive_end(&d);
}

/* A response already under way is finished whole; a request pipelined behind
 * it is still answered (with close), nothing after that. */
Test(conn, drain_mid_pipelined_response_finishes_then_grace)
{
	struct drive d;
	drive_start(&d, 4096, 4);
	struct iovec sp = conn_input_space(d.c);
	const char *req = "GET /a.txt HTTP/1.1\r\nHost: x\r\n\r\nGET /b.txt HTTP/1.1\r\nHost: x\r\n\r\n";
	memcpy(sp.iov_base, req, strlen(req));
	conn_input_done(d.c, (ssize_t)strlen(req));
	send_some(&d);
	conn_drain(d.c);
	enum conn_want w = pump(&d);
	char *s = normalized(&d);
	cr_assert_eq(count(s, A_TXT), 1, "the response under way is sent whole: %s", s);
	cr_assert_eq(count(s, B_TXT), 1, "%s", s);
	/* Both requests were buffered, so both responses were built (and
	 * gathered into one write) before the drain came: the second says
	 * keep-alive, and the connection is then idle while draining, so it
	 * gets the short grace (README) and closes when it runs out. */
	cr_assert(!strstr(s, "Connection: close"), "%s", s);
	cr_assert_eq(w, CONN_WANT_READ);
	int64_t deadline;
	int64_t now = conn_now_ms();
	cr_assert_eq(conn_wants(d.c, &deadline), CONN_WANT_READ);
	cr_assert(deadline > 0 && deadline <= now + 1000, "grace deadline %lld, now %lld", (long long)deadline,
		  (long long)now);
	conn_timeout(d.c);
	cr_assert_eq(conn_wants(d.c, &deadline), CONN_WANT_CLOSE);
	free(s);
	drive_end(&d);
}

Test(conn, drain_while_lingering_closes_at_once)
{
	struct drive d;
	drive_start(&d, 4096, SIZE_MAX);
	feeds(&d, "GET / HTTP/9.9\r\n\r\n");
	cr_assert_eq(d.shutdowns, 1);
	cr_assert_eq(want_of(&d, NULL), CONN_WANT_READ);
	conn_drain(d.c);
	cr_assert_eq(want_of(&d, NULL), CONN_WANT_CLOSE);
	drive_end(&d);
}

/* ---- buffers given back between requests ------------------------------ */

Test(conn, release_idle_then_serve_again)
{
	struct drive d;
	drive_start(&d, 4096, SIZE_MAX);
	feeds(&d, "GET /a.txt HTTP/1.1\r\nHost: x\r\n\r\n");
	conn_release_idle(d.c);
	feeds(&d, "GET /b.txt HTTP/1.1\r\nHost: x\r\n\r\n");
	char *s = normalized(&d);
	cr_assert_eq(count(s, "HTTP/1.1 200 OK\r\n"), 2);
	cr_assert(strstr(s, B_TXT));
	free(s);
	/* mid-head it must keep what arrived */
	feeds(&d, "GET /a.txt HTTP/1.1\r\n");
	conn_release_idle(d.c);
	feeds(&d, "Host: x\r\n\r\n");
	s = normalized(&d);
	cr_assert_eq(count(s, "HTTP/1.1 200 OK\r\n"), 3, "%s", s);
	free(s);
	drive_end(&d);
}

/* ---- validators end to end ------------------------------------------- */

static void last_modified_of(const char *name, char out[HTTP_DATE_LEN + 1], char *etag, size_t etaglen)
{
	struct stat st;
	char path[128];
	snprintf(path, sizeof(path), "%s/%s", ts.dir, name);
	cr_assert_eq(stat(path, &st), 0);
	http_date_format(st.st_mtime, out);
	snprintf(etag, etaglen, "\"%llx-%llx\"", (unsigned long long)st.st_mtime, (unsigned long long)st.st_size);
}

static char *ask(const char *req)
{
	return run_whole(req, strlen(req), NULL);
}

/* If-Range with a date: a file modified this second has only a weak
 * Last-Modified, so the whole file comes back; an older one gets its range. */
Test(conn, if_range_date_is_judged_against_the_clock)
{
	char lm[HTTP_DATE_LEN + 1], etag[64], req[512];
	struct timespec now[2] = { { 0, UTIME_NOW }, { 0, UTIME_NOW } };
	char path[128];
	snprintf(path, sizeof(path), "%s/a.txt", ts.dir);
	cr_assert_eq(utimensat(AT_FDCWD, path, now, 0), 0);
	last_modified_of("a.txt", lm, etag, sizeof(etag));
	snprintf(req, sizeof(req), "GET /a.txt HTTP/1.1\r\nHost: x\r\nRange: bytes=0-4\r\nIf-Range: %s\r\n\r\n", lm);
	char *s = ask(req);
	/* the file was touched a moment ago: unless a second boundary passed in
	 * between, its date is a weak validator and the answer is the whole file */
	if (strcmp(lm, http_date_now()) == 0)
		cr_assert(strncmp(s, "HTTP/1.1 200 OK\r\n", 17) == 0, "%s", s);
	free(s);

	/* another file (the first is cached with its old validators for a while),
	 * modified long ago */
	struct timespec old[2] = { { 1600000000, 0 }, { 1600000000, 0 } };
	snprintf(path, sizeof(path), "%s/b.txt", ts.dir);
	cr_assert_eq(utimensat(AT_FDCWD, path, old, 0), 0);
	last_modified_of("b.txt", lm, etag, sizeof(etag));
	snprintf(req, sizeof(req), "GET /b.txt HTTP/1.1\r\nHost: x\r\nRange: bytes=0-4\r\nIf-Range: %s\r\n\r\n", lm);
	s = ask(req);
	cr_assert(strncmp(s, "HTTP/1.1 206 Partial Content\r\n", 30) == 0, "%s", s);
	cr_assert(strstr(s, "\r\n\r\nsecon"));
	free(s);
	/* by entity tag; a different tag gets the whole file */
	snprintf(req, sizeof(req), "GET /b.txt HTTP/1.1\r\nHost: x\r\nRange: bytes=0-4\r\nIf-Range: %s\r\n\r\n", etag);
	s = ask(req);
	cr_assert(strncmp(s, "HTTP/1.1 206 ", 13) == 0, "%s", s);
	free(s);
	s = ask("GET /b.txt HTTP/1.1\r\nHost: x\r\nRange: bytes=0-4\r\nIf-Range: \"nope\"\r\n\r\n");
	cr_assert(strncmp(s, "HTTP/1.1 200 ", 13) == 0, "%s", s);
	free(s);
}

Test(conn, if_none_match_list_gives_304_without_body)
{
	char lm[HTTP_DATE_LEN + 1], etag[64], req[512];
	last_modified_of("a.txt", lm, etag, sizeof(etag));
	snprintf(req, sizeof(req), "GET /a.txt HTTP/1.1\r\nHost: x\r\nIf-None-Match: \"x\", W/%s\r\n\r\n", etag);
	char *s = ask(req);
	cr_assert(strncmp(s, "HTTP/1.1 304 Not Modified\r\n", 27) == 0, "%s", s);
	cr_assert_null(strstr(s, A_TXT));
	cr_assert_null(strstr(s, "Content-Length"), "%s", s);
	free(s);
	s = ask("GET /a.txt HTTP/1.1\r\nHost: x\r\nIf-None-Match: \"x\", \"y\"\r\n\r\n");
	cr_assert(strncmp(s, "HTTP/1.1 200 OK\r\n", 17) == 0, "%s", s);
	free(s);
}

/* Every copy of the (random) multipart boundary in s becomes "B...". */
static void unboundary(char *s)
{
	const char *at = strstr(s, "boundary=");
	cr_assert_not_null(at);
	char b[80];
	size_t n = strcspn(at + 9, "\r");
	cr_assert(n > 0 && n < sizeof(b));
	memcpy(b, at + 9, n);
	b[n] = '\0';
	for (char *p = s; (p = strstr(p, b)); p += n)
		memset(p, 'B', n);
}

Test(conn, multipart_ranges_output_one_byte_at_a_time)
{
	const char *req = "GET /m.txt HTTP/1.1\r\nHost: x\r\nRange: bytes=0-5,-5\r\n\r\n";
	char *whole = ask(req);
	cr_assert(strncmp(whole, "HTTP/1.1 206 ", 13) == 0, "%s", whole);
	cr_assert(strstr(whole, "Content-Type: multipart/byteranges; boundary="), "%s", whole);
	cr_assert(strstr(whole, "Content-Range: bytes 0-5/8192\r\n\r\nabcdef\r\n"), "%s", whole);
	cr_assert(strstr(whole, "Content-Range: bytes 8187-8191/8192\r\n\r\nxyzab\r\n"), "%s", whole);
	unboundary(whole);
	struct drive d;
	drive_start(&d, 4096, 1);
	feeds(&d, req);
	char *s = normalized(&d);
	unboundary(s);
	cr_assert_str_eq(s, whole);
	free(s);
	free(whole);
	drive_end(&d);
}

Test(conn, http10_closes_unless_keep_alive)
{
	enum conn_want w;
	const char *r1 = "GET /a.txt HTTP/1.0\r\n\r\n";
	char *s = run_whole(r1, strlen(r1), &w);
	cr_assert(strncmp(s, "HTTP/1.1 200 OK\r\n", 17) == 0, "%s", s);
	cr_assert(strstr(s, "Connection: close\r\n"));
	cr_assert_eq(w, CONN_WANT_CLOSE);
	free(s);
	const char *r2 = "GET /a.txt HTTP/1.0\r\nConnection: keep-alive\r\n\r\n";
	s = run_whole(r2, strlen(r2), &w);
	cr_assert(strstr(s, "Connection: keep-alive\r\n"), "%s", s);
	cr_assert_eq(w, CONN_WANT_READ);
	free(s);
}

/* Many pipelined requests, more than the input buffer holds: the buffer is
 * compacted between them and every request is answered, in order. */
Test(conn, pipelined_burst_larger_than_the_buffer)
{
	enum { N = 600 };
	char *in = malloc(N * 64), *p = in;
	for (int i = 0; i < N; i++)
		p += sprintf(p, "GET /%s HTTP/1.1\r\nHost: x\r\n\r\n", i % 3 == 2 ? "missing" : i % 3 ? "b.txt" : "a.txt");
	size_t len = (size_t)(p - in);
	cr_assert_gt(len, 4 * 4096);
	for (size_t chunk = 1000; chunk <= len; chunk += len - 1000) {
		struct drive d;
		drive_start(&d, chunk, 777);
		cr_assert_eq(feed(&d, in, len), CONN_WANT_READ);
		cr_assert_eq(d.fed, len);
		char *s = normalized(&d);
		cr_assert_eq(count(s, "HTTP/1.1 "), N, "chunk %zu: %zu responses", chunk, count(s, "HTTP/1.1 "));
		cr_assert_eq(count(s, A_TXT), N / 3);
		cr_assert_eq(count(s, B_TXT), N / 3);
		cr_assert_eq(count(s, "404 Not Found\r\n"), N / 3);
		/* in order: a, b, 404, a, b, 404 ... */
		const char *q = s;
		for (int i = 0; i < N; i++) {
			const char *want = i % 3 == 2 ? "404 Not Found" : i % 3 ? B_TXT : A_TXT;
			q = strstr(q, want);
			cr_assert_not_null(q, "response %d (%s) missing or out of order", i, want);
			q += strlen(want);
		}
		free(s);
		drive_end(&d);
	}
	free(in);
}

/* A head that fills the whole buffer at max_head without ending is refused
 * (431), never left waiting with no room to read into. */
Test(conn_config, incomplete_head_at_max_head_is_431, .init = setup_files, .fini = teardown)
{
	ts.cfg.max_head = 256;
	ts.cfg.max_request_line = 128;
	test_server_open(&ts);
	char in[256];
	size_t n = (size_t)sprintf(in, "GET /a.txt HTTP/1.1\r\nHost: x\r\nX-Pad: ");
	memset(in + n, 'p', sizeof(in) - n);
	for (size_t chunk = 1; chunk <= sizeof(in); chunk *= 16) {
		struct drive d;
		drive_start(&d, chunk, SIZE_MAX);
		feed(&d, in, sizeof(in));
		char *s = normalized(&d);
		cr_assert(strncmp(s, "HTTP/1.1 431 ", 13) == 0, "chunk %zu: %s", chunk, s);
		free(s);
		drive_end(&d);
	}
	/* a complete head of exactly max_head bytes is served */
	n = (size_t)sprintf(in, "GET /a.txt HTTP/1.1\r\nHost: x\r\nX-Pad: ");
	memset(in + n, 'p', sizeof(in) - n - 4);
	memcpy(in + sizeof(in) - 4, "\r\n\r\n", 4);
	struct drive d;
	drive_start(&d, 7, SIZE_MAX);
	feed(&d, in, sizeof(in));
	char *s = normalized(&d);
	cr_assert(strncmp(s, "HTTP/1.1 200 OK\r\n", 17) == 0, "%s", s);
	free(s);
	drive_end(&d);
}

/* If-Range with a Wednesday date ("Wed, ..." begins like a weak tag "W/"). */
Test(conn, if_range_date_on_a_wednesday)
{
	char path[128], lm[HTTP_DATE_LEN + 1], etag[64], req[512];
	snprintf(path, sizeof(path), "%s/b.txt", ts.dir);
	struct timespec wed[2] = { { 1700086400, 0 }, { 1700086400, 0 } }; /* Wed, 15 Nov 2023 */
	cr_assert_eq(utimensat(AT_FDCWD, path, wed, 0), 0);
	last_modified_of("b.txt", lm, etag, sizeof(etag));
	cr_assert(strncmp(lm, "Wed, ", 5) == 0, "%s", lm);
	snprintf(req, sizeof(req), "GET /b.txt HTTP/1.1\r\nHost: x\r\nRange: bytes=0-4\r\nIf-Range: %s\r\n\r\n", lm);
	char *s = ask(req);
	cr_assert(strncmp(s, "HTTP/1.1 206 Partial Content\r\n", 30) == 0, "%s", s);
	free(s);
}

/* max_ranges parts make more pieces than one conn_output() can describe
 * (CONN_IOV_MAX): the rest follows in the next, whole and in order. */
static void check_sixteen_parts(void);

Test(conn, multipart_with_more_pieces_than_one_output_holds)
{
	check_sixteen_parts();
}

/* The same, every part a file range between memory pieces. */
Test(conn_config, multipart_from_the_file, .init = setup_files, .fini = teardown)
{
	ts.cfg.cache_size = 0;
	ts.cfg.sendfile_min = 0;
	test_server_open(&ts);
	check_sixteen_parts();
}

static void check_sixteen_parts(void)
{
	char req[512];
	int n = snprintf(req, sizeof(req), "GET /m.txt HTTP/1.1\r\nHost: x\r\nRange: bytes=");
	for (int i = 0; i < 16; i++)
		n += snprintf(req + n, sizeof(req) - (size_t)n, "%s%d-%d", i ? "," : "", M_STEP * i, M_STEP * i);
	n += snprintf(req + n, sizeof(req) - (size_t)n, "\r\n\r\n");
	cr_assert_eq(ts.cfg.max_ranges, 16);
	char *whole = ask(req);
	cr_assert(strncmp(whole, "HTTP/1.1 206 ", 13) == 0, "%s", whole);
	cr_assert_eq(count(whole, "Content-Range: bytes "), 16, "%s", whole);
	for (int i = 0; i < 16; i++) {
		char part[64];
		snprintf(part, sizeof(part), "Content-Range: bytes %d-%d/%d\r\n\r\n%c\r\n", M_STEP * i, M_STEP * i,
			 M_SIZE, m_byte((size_t)(M_STEP * i)));
		cr_assert(strstr(whole, part), "part %d missing: %s", i, whole);
	}
	/* the declared length is what was sent */
	const char *cl = strstr(whole, "Content-Length: ");
	const char *body = strstr(whole, "\r\n\r\n") + 4;
	cr_assert_eq(strtoul(cl + 16, NULL, 10), strlen(body));
	unboundary(whole);
	struct drive d;
	drive_start(&d, 4096, 3);
	feeds(&d, req);
	char *s = normalized(&d);
	unboundary(s);
	cr_assert_str_eq(s, whole);
	free(s);
	free(whole);
	drive_end(&d);
}

/* ---- listings held by clients that do not read ------------------------ */

/* Sends req into c and leaves the response unsent (a client that never
 * reads); returns the head the core offers. */
static struct iovec request_unread(struct conn *c, const char *req)
{
	struct iovec sp = conn_input_space(c);
	cr_assert_geq(sp.iov_len, strlen(req));
	memcpy(sp.iov_base, req, strlen(req));
	conn_input_done(c, (ssize_t)strlen(req));
	int64_t dl;
	cr_assert_eq(conn_wants(c, &dl), CONN_WANT_WRITE);
	struct conn_output o;
	conn_output(c, &o);
	cr_assert_gt(o.iovcnt, 0);
	return o.iov[0];
}

static bool head_is(struct iovec head, const char *status_line)
{
	return head.iov_len >= strlen(status_line) && memcmp(head.iov_base, status_line, strlen(status_line)) == 0;
}

static struct conn *conn_from(const char *ipv4)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	cr_assert_eq(inet_pton(AF_INET, ipv4, &a.sin_addr), 1);
	struct conn *c = conn_new(&ts.srv, (struct sockaddr *)&a, sizeof(a));
	cr_assert_not_null(c);
	return c;
}

#define HELD_MAX 64

/* Listings for one client, held unread from held[n] on, until the next would
 * be refused; returns how many are held. */
static int fill_share(struct conn **held, int n, const char *req)
{
	for (;;) {
		cr_assert_lt(n, HELD_MAX, "one client held %d listings, none refused", n);
		struct conn *c = conn_from("192.0.2.1");
		bool ok = head_is(request_unread(c, req), "HTTP/1.1 200 OK\r\n");
		conn_free(c);
		if (!ok)
			return n;
		held[n++] = conn_from("192.0.2.1");
		cr_assert(head_is(request_unread(held[n - 1], req), "HTTP/1.1 200 OK\r\n"));
	}
}

/* A listing is built whole and held until sent, against the process's budget
 * (budget.h): it holds what its body takes, not the worst case, and less as
 * it is sent; past one client's share the next is 503 with Retry-After,
 * while another client is still served; and the bytes come back when a held
 * one goes. */
Test(conn_config, held_listings_are_bounded_by_a_budget, .init = setup_files, .fini = teardown)
{
	ts.cfg.autoindex = AUTOINDEX_HTML;
	test_server_open(&ts);
	test_server_mkdir(&ts, "big");
	char name[256] = "big/";
	memset(name + 4, 'n', 200);
	for (int i = 0; i < 2400; i++) { /* bound: 2400 x (9 x 205 + 160) > 4 MiB, the most one listing takes */
		snprintf(name + 204, sizeof(name) - 204, "%05d", i);
		test_server_file(&ts, name, "", 0);
	}
	const char *req = "GET /big/ HTTP/1.1\r\nHost: x\r\n\r\n";
	struct conn *held[HELD_MAX];
	int n = fill_share(held, 0, req);
	struct conn *c = conn_from("192.0.2.1");
	struct iovec head = request_unread(c, req);
	cr_assert(head_is(head, "HTTP/1.1 503 "), "%.*s", (int)head.iov_len, (char *)head.iov_base);
	cr_assert(memmem(head.iov_base, head.iov_len, "\r\nRetry-After: 1\r\n", 18) != NULL);
	conn_free(c);
	/* each held about 1.2 MB, its body, where the worst case would have let 4 (4 MiB each) */
	cr_assert_geq(n, 8, "one client's share held only %d listings of about 1.2 MB", n);

	c = conn_from("192.0.2.2");
	cr_assert(head_is(request_unread(c, req), "HTTP/1.1 200 OK\r\n"), "another client is refused too");
	conn_free(c);

	/* two readers take most of their listings: what they read comes back
	 * (the share had room for less than one listing's worst case: now it
	 * has room for it) */
	for (int i = 0; i < 2; i++) {
		struct conn_output o;
		conn_output(held[i], &o);
		conn_output_done(held[i], o.total - 1000); /* the head, and all but 1000 bytes of the body */
		conn_output(held[i], &o);
		cr_assert_eq(o.total, 1000, "the rest of the body is still there");
		cr_assert_eq(((char *)o.iov[0].iov_base)[999], '\n');
	}
	c = conn_from("192.0.2.1");
	cr_assert(head_is(request_unread(c, req), "HTTP/1.1 200 OK\r\n"), "listings sent but 1000 bytes held on to it all");
	conn_free(c);

	int m = fill_share(held, n, req);
	conn_free(held[2]); /* readers go: their listings' bytes come back */
	conn_free(held[3]);
	c = conn_from("192.0.2.1");
	cr_assert(head_is(request_unread(c, req), "HTTP/1.1 200 OK\r\n"));
	conn_free(c);
	for (int i = 0; i < m; i++)
		if (i != 2 && i != 3)
			conn_free(held[i]);
}
