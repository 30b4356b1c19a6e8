/* test_h2_session.c - the HTTP/2 session through conn.h, without sockets:
 * the preface and a request as raw frames (HPACK by hand, static table and
 * literals only), fed in pieces as small as one byte, and the frames the
 * core sends back read as a client would. */
#include <criterion/criterion.h>
#include <unistd.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/conn.h"
#include "testserver.h"

#define A_TXT "hello, world\n"
#define BIG_SIZE (4 << 20)
#define MID_SIZE 40000 /* three DATA frames of 16 KiB or less: all of them sent from the file */

static struct test_server ts;

static void setup(void)
{
	test_server_init(&ts);
	test_server_file(&ts, "a.txt", A_TXT, strlen(A_TXT));
	static char big[BIG_SIZE];
	for (size_t i = 0; i < sizeof(big); i++)
		big[i] = (char)(i * 7 + i / 4096);
	test_server_file(&ts, "big.bin", big, sizeof(big));
	test_server_open(&ts);
}

static void teardown(void)
{
	test_server_close(&ts);
}

struct drive {
	struct conn *c;
	unsigned char out[1 << 16];
	size_t outlen;
	int shutdowns;
	bool discard;     /* count what is sent, keep none of it */
	size_t total;     /* bytes sent */
	size_t max_write; /* the largest output offered at once */
	size_t cut;       /* non-zero: each write takes at most this many bytes (a full socket) */
	size_t stop_at;   /* non-zero: pump() returns once this many bytes are sent (a stalled client) */
	size_t file_writes; /* writes of a file range */
};

static enum conn_want pump(struct drive *d)
{
	for (int guard = 0; guard < 100000; guard++) {
		int64_t deadline;
		enum conn_want w = conn_wants(d->c, &deadline);
		if (w == CONN_WANT_WRITE) {
			if (d->stop_at && d->total >= d->stop_at)
				return w;
			struct conn_output o;
			conn_output(d->c, &o);
			cr_assert_gt(o.total, 0, "the core wants WRITE but offers nothing");
			if (o.total > d->max_write)
				d->max_write = o.total;
			size_t take = d->cut && d->cut < o.total ? d->cut : o.total;
			d->total += take;
			if (o.iovcnt == 0) { /* a DATA payload from its file: what sendfile would send */
				cr_assert_geq(o.file_fd, 0, "neither memory nor a file range");
				cr_assert_eq(o.file_len, o.total);
				d->file_writes++;
				if (!d->discard) {
					cr_assert_leq(d->outlen + take, sizeof(d->out));
					cr_assert_eq(pread(o.file_fd, d->out + d->outlen, take, o.file_off), (ssize_t)take);
					d->outlen += take;
				}
				conn_output_done(d->c, take);
				continue;
			}
			if (d->discard) {
				conn_output_done(d->c, take);
				continue;
			}
			size_t n = 0;
			for (int i = 0; i < o.iovcnt && n < take; i++) {
				size_t k = o.iov[i].iov_len < take - n ? o.iov[i].iov_len : take - n;
				cr_assert_leq(d->outlen + k, sizeof(d->out));
				memcpy(d->out + d->outlen, o.iov[i].iov_base, k);
				d->outlen += k;
				n += k;
			}
			conn_output_done(d->c, n);
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

static void feed(struct drive *d, const unsigned char *p, size_t len, size_t chunk)
{
	for (size_t off = 0; off < len;) {
		cr_assert_eq(pump(d), CONN_WANT_READ);
		struct iovec sp = conn_input_space(d->c);
		cr_assert_gt(sp.iov_len, 0);
		size_t n = len - off < chunk ? len - off : chunk;
		if (n > sp.iov_len)
			n = sp.iov_len;
		memcpy(sp.iov_base, p + off, n);
		conn_input_done(d->c, (ssize_t)n);
		off += n;
	}
	pump(d);
}

/* The client's first flight: preface, empty SETTINGS, and one GET with
 * END_STREAM for path on stream 1. */
static size_t request(unsigned char *buf, const char *path)
{
	static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
	size_t n = 0, plen = strlen(path);
	memcpy(buf, preface, 24);
	n = 24;
	static const unsigned char settings[9] = { 0, 0, 0, 4, 0, 0, 0, 0, 0 };
	memcpy(buf + n, settings, 9);
	n += 9;
	/* :method GET (2), :scheme http (6), :path literal (name 4), :authority "a" (name 1) */
	unsigned char block[64];
	size_t b = 0;
	block[b++] = 0x82;
	block[b++] = 0x86;
	block[b++] = 0x04;
	block[b++] = (unsigned char)plen;
	memcpy(block + b, path, plen);
	b += plen;
	block[b++] = 0x01;
	block[b++] = 0x01;
	block[b++] = 'a';
	unsigned char hd[9] = { 0, 0, (unsigned char)b, 1, 0x05 /* END_STREAM | END_HEADERS */, 0, 0, 0, 1 };
	memcpy(buf + n, hd, 9);
	n += 9;
	memcpy(buf + n, block, b);
	return n + b;
}

struct frame {
	unsigned type, flags;
	uint32_t stream;
	const unsigned char *payload;
	size_t len;
};

/* The n-th frame of type on stream in what the core sent; false if none. */
static bool find_frame(const struct drive *d, unsigned type, uint32_t stream, struct frame *f)
{
	for (size_t i = 0; i + 9 <= d->outlen;) {
		size_t len = (size_t)d->out[i] << 16 | (size_t)d->out[i + 1] << 8 | d->out[i + 2];
		uint32_t sid = ((uint32_t)d->out[i + 5] << 24 | (uint32_t)d->out[i + 6] << 16 |
				(uint32_t)d->out[i + 7] << 8 | d->out[i + 8]) & 0x7fffffffu;
		if (d->out[i + 3] == type && sid == stream && i + 9 + len <= d->outlen) {
			*f = (struct frame){ d->out[i + 3], d->out[i + 4], sid, d->out + i + 9, len };
			return true;
		}
		i += 9 + len;
	}
	return false;
}

TestSuite(h2_session, .init = setup, .fini = teardown);

static void serves_a_file(size_t chunk, bool h2_only)
{
	struct drive *d = calloc(1, sizeof(*d));
	unsigned char req[128];
	size_t n = request(req, "/a.txt");
	d->c = conn_new(&ts.srv, NULL, 0);
	cr_assert_not_null(d->c);
	if (h2_only)
		conn_set_h2_only(d->c);
	feed(d, req, n, chunk);
	struct frame f;
	cr_assert(find_frame(d, 4, 0, &f), "no SETTINGS from the server");
	cr_assert(find_frame(d, 1, 1, &f), "no HEADERS on stream 1");
	cr_assert(find_frame(d, 0, 1, &f), "no DATA on stream 1");
	cr_assert_eq(f.len, strlen(A_TXT));
	cr_assert_eq(memcmp(f.payload, A_TXT, f.len), 0);
	cr_assert(f.flags & 0x01, "the DATA frame ends the stream");
	int64_t deadline;
	cr_assert_eq(conn_wants(d->c, &deadline), CONN_WANT_READ);
	cr_assert(conn_awaits_request(d->c));
	/* no stream open: an idle connection's buffers go */
	cr_assert(conn_release_idle(d->c));
	conn_free(d->c);
	free(d);
}

Test(h2_session, preface_and_request_in_one_read)
{
	serves_a_file(1 << 16, false);
}

/* The preface split over reads: its first 18 bytes alone would parse as an
 * HTTP/1.1 head, which the session must not answer. */
Test(h2_session, preface_and_request_one_byte_per_read)
{
	serves_a_file(1, false);
}

/* HTTP/2 or nothing (an http2_only listener, or ALPN h2): the preface is
 * taken as on any connection, whole or a byte at a time. */
Test(h2_session, h2_only_serves_the_preface)
{
	serves_a_file(1 << 16, true);
	serves_a_file(1, true);
}

/* ... and anything else is a connection error (RFC 9113 3.4): the server's
 * preface (SETTINGS) then GOAWAY naming no stream with PROTOCOL_ERROR, a
 * half-close, and never an HTTP/1.1 answer. */
static void h2_only_refuses(const char *bytes, size_t chunk)
{
	struct drive *d = calloc(1, sizeof(*d));
	d->c = conn_new(&ts.srv, NULL, 0);
	cr_assert_not_null(d->c);
	conn_set_h2_only(d->c);
	feed(d, (const unsigned char *)bytes, strlen(bytes), chunk);
	cr_assert_geq(d->outlen, 9, "nothing sent for '%s'", bytes);
	cr_expect_null(memmem(d->out, d->outlen, "HTTP/1", 6), "an HTTP/1.1 answer: %.*s", (int)d->outlen,
		       (const char *)d->out);
	cr_expect_eq(d->out[3], 4, "the first frame is not SETTINGS");
	struct frame f;
	cr_assert(find_frame(d, 7, 0, &f), "no GOAWAY for '%s'", bytes);
	cr_assert_eq(f.len, 8, "GOAWAY with debug data");
	static const unsigned char last0_protocol_error[8] = { 0, 0, 0, 0, 0, 0, 0, 1 };
	cr_expect_eq(memcmp(f.payload, last0_protocol_error, 8), 0, "not last stream 0, PROTOCOL_ERROR");
	cr_expect_eq(d->shutdowns, 1, "half-closed after the GOAWAY");
	/* what the client still sends is read and dropped, then its close ends it */
	conn_input_done(d->c, 0);
	cr_expect_eq(pump(d), CONN_WANT_CLOSE);
	conn_free(d->c);
	free(d);
}

Test(h2_session, h2_only_answers_anything_else_with_goaway)
{
	static const char *const openings[] = {
		"GET /a.txt HTTP/1.1\r\nHost: a\r\n\r\n",
		"INVALID CONNECTION PREFACE\r\n\r\n",         /* h2spec's 3.5/2 */
		"PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n",             /* the preface's last line wrong */
		"PRI * HTTP/1.1\r\n",
	};
	for (size_t i = 0; i < sizeof(openings) / sizeof(openings[0]); i++) {
		h2_only_refuses(openings[i], 1 << 16);
		h2_only_refuses(openings[i], 1);
	}
}

/* A preface begun and never ended: header_timeout closes the connection
 * without a word, where HTTP/1.1 would answer 408. */
Test(h2_session, h2_only_timeout_in_the_preface_closes_quietly)
{
	struct drive *d = calloc(1, sizeof(*d));
	d->c = conn_new(&ts.srv, NULL, 0);
	conn_set_h2_only(d->c);
	feed(d, (const unsigned char *)"PRI * HTTP/2.0\r\n", 16, 16);
	cr_assert_eq(d->outlen, 0);
	conn_timeout(d->c);
	cr_expect_eq(pump(d), CONN_WANT_CLOSE);
	cr_expect_eq(d->outlen, 0, "answered: %.*s", (int)d->outlen, (const char *)d->out);
	conn_free(d->c);
	free(d);
}

/* A client whose windows allow the whole file at once: the session still
 * hands it out a bounded write at a time, never the window's worth in one
 * buffer. */
Test(h2_session, a_wide_window_is_sent_in_bounded_writes)
{
	struct drive *d = calloc(1, sizeof(*d));
	unsigned char req[160];
	size_t n = request(req, "/big.bin");
	/* SETTINGS_INITIAL_WINDOW_SIZE 2^31-1 in place of the empty SETTINGS,
	 * then the connection window opened as far */
	static const unsigned char settings[15] = { 0, 0, 6, 4, 0, 0, 0, 0, 0, 0, 4, 0x7f, 0xff, 0xff, 0xff };
	static const unsigned char wu[13] = { 0, 0, 4, 8, 0, 0, 0, 0, 0, 0x7f, 0xff, 0, 0 };
	unsigned char flight[200];
	memcpy(flight, req, 24);
	memcpy(flight + 24, settings, sizeof(settings));
	memcpy(flight + 24 + sizeof(settings), wu, sizeof(wu));
	memcpy(flight + 24 + sizeof(settings) + sizeof(wu), req + 33, n - 33);
	size_t len = n - 33 + 24 + sizeof(settings) + sizeof(wu);
	d->discard = true;
	d->c = conn_new(&ts.srv, NULL, 0);
	feed(d, flight, len, len);
	cr_assert_gt(d->total, BIG_SIZE, "the whole file went out");
	cr_assert_leq(d->max_write, 128 * 1024, "one write of %zu bytes", d->max_write);
	conn_free(d->c);
	free(d);
}

Test(h2_session, drain_sends_goaway_then_closes)
{
	struct drive *d = calloc(1, sizeof(*d));
	unsigned char req[128];
	size_t n = request(req, "/a.txt");
	ts.cfg.drain_timeout_ms = 200; /* the final GOAWAY at most half of it later */
	d->c = conn_new(&ts.srv, NULL, 0);
	feed(d, req, n, sizeof(req));
	d->outlen = 0;
	conn_drain(d->c);
	enum conn_want w = pump(d);
	struct frame f;
	/* first the notice: no new streams, the last one not named yet */
	cr_assert(find_frame(d, 7, 0, &f), "no GOAWAY notice");
	cr_assert_eq(f.len, 8);
	cr_assert(f.payload[0] == 0x7f && f.payload[1] == 0xff && f.payload[2] == 0xff && f.payload[3] == 0xff,
		  "the notice names stream 2^31-1");
	cr_assert_eq(d->shutdowns, 0, "open until the last stream is named");
	int64_t deadline;
	conn_wants(d->c, &deadline);
	cr_assert(deadline >= 0 && deadline <= conn_now_ms() + 100, "the last stream is named within half the drain time");
	/* then, when that deadline comes, the GOAWAY naming the last stream taken */
	while (conn_now_ms() < deadline)
		usleep(1000);
	d->outlen = 0;
	conn_timeout(d->c);
	w = pump(d);
	cr_assert(find_frame(d, 7, 0, &f), "no final GOAWAY");
	cr_assert_eq(f.len, 8);
	cr_assert_eq(f.payload[3], 1, "GOAWAY names stream 1 as the last one taken");
	cr_assert_eq(d->shutdowns, 1, "half-closed after the GOAWAY");
	cr_assert_eq(w, CONN_WANT_READ, "lingers, reading what the client still sends");
	conn_input_done(d->c, 0);
	cr_assert_eq(pump(d), CONN_WANT_CLOSE);
	conn_free(d->c);
	free(d);
}

Test(h2_session, off_answers_the_preface_as_http1)
{
	test_server_close(&ts);
	test_server_init(&ts);
	ts.cfg.http2 = false;
	test_server_open(&ts);
	struct drive *d = calloc(1, sizeof(*d));
	unsigned char req[128];
	size_t n = request(req, "/a.txt");
	d->c = conn_new(&ts.srv, NULL, 0);
	feed(d, req, n, sizeof(req));
	cr_assert_geq(d->outlen, 12);
	cr_assert_eq(memcmp(d->out, "HTTP/1.1 505", 12), 0, "%.*s", (int)d->outlen, (const char *)d->out);
	conn_free(d->c);
	free(d);
}

/* The server again, without its file cache: a file's bytes come from the
 * file, as sendfile sends them, not from memory. */
static void reopen_without_cache(void)
{
	test_server_close(&ts);
	test_server_init(&ts);
	ts.cfg.cache_size = 0;
	static char mid[MID_SIZE];
	for (size_t i = 0; i < sizeof(mid); i++)
		mid[i] = (char)((i + 1) * 7 + (i + 1) / 4096);
	test_server_file(&ts, "mid.bin", mid, sizeof(mid));
	test_server_open(&ts);
}

/* The first flight for path with the client's windows wide open. */
static size_t wide_request(unsigned char *flight, const char *path)
{
	unsigned char req[160];
	size_t n = request(req, path);
	static const unsigned char settings[15] = { 0, 0, 6, 4, 0, 0, 0, 0, 0, 0, 4, 0x7f, 0xff, 0xff, 0xff };
	static const unsigned char wu[13] = { 0, 0, 4, 8, 0, 0, 0, 0, 0, 0x7f, 0xff, 0, 0 };
	memcpy(flight, req, 24);
	memcpy(flight + 24, settings, sizeof(settings));
	memcpy(flight + 24 + sizeof(settings), wu, sizeof(wu));
	memcpy(flight + 24 + sizeof(settings) + sizeof(wu), req + 33, n - 33);
	return n - 33 + 24 + sizeof(settings) + sizeof(wu);
}

/* The DATA payloads of stream in what the core sent, joined; *ended: one
 * of them had END_STREAM. */
static size_t data_of(const struct drive *d, uint32_t stream, unsigned char *body, size_t cap, bool *ended)
{
	size_t got = 0;
	*ended = false;
	for (size_t i = 0; i + 9 <= d->outlen;) {
		size_t len = (size_t)d->out[i] << 16 | (size_t)d->out[i + 1] << 8 | d->out[i + 2];
		uint32_t sid = ((uint32_t)d->out[i + 5] << 24 | (uint32_t)d->out[i + 6] << 16 |
				(uint32_t)d->out[i + 7] << 8 | d->out[i + 8]) & 0x7fffffffu;
		if (i + 9 + len > d->outlen)
			break;
		if (d->out[i + 3] == 0 && sid == stream) {
			cr_assert_leq(got + len, cap);
			memcpy(body + got, d->out + i + 9, len);
			got += len;
			*ended = *ended || (d->out[i + 4] & 0x01);
		}
		i += 9 + len;
	}
	return got;
}

/* A socket that takes a few bytes at a time cuts the frame header before a
 * payload sent from the file, and the payload itself, anywhere: the client
 * still reads every frame whole and the body byte-exact. */
Test(h2_session, a_file_payload_goes_out_whole_through_partial_writes)
{
	static const size_t cuts[] = { 1, 5, 9, 10, 4095, 4097, 16393, 70000 };
	static unsigned char body[MID_SIZE + 1], want[MID_SIZE];
	for (size_t i = 0; i < MID_SIZE; i++)
		want[i] = (unsigned char)((i + 1) * 7 + (i + 1) / 4096);
	reopen_without_cache();
	for (size_t k = 0; k < sizeof(cuts) / sizeof(cuts[0]); k++) {
		struct drive *d = calloc(1, sizeof(*d));
		unsigned char flight[200];
		size_t len = wide_request(flight, "/mid.bin");
		d->cut = cuts[k];
		d->c = conn_new(&ts.srv, NULL, 0);
		feed(d, flight, len, len);
		bool ended;
		size_t got = data_of(d, 1, body, sizeof(body), &ended);
		cr_assert_eq(got, MID_SIZE, "cut %zu: %zu bytes of the body", cuts[k], got);
		cr_assert_eq(memcmp(body, want, MID_SIZE), 0, "cut %zu: the body differs", cuts[k]);
		cr_assert(ended, "cut %zu: the stream never ended", cuts[k]);
		cr_assert_geq(d->file_writes, 3, "cut %zu: the payloads did not come from the file", cuts[k]);
		int64_t deadline;
		cr_assert_eq(conn_wants(d->c, &deadline), CONN_WANT_READ);
		cr_assert(conn_release_idle(d->c));
		conn_free(d->c);
		free(d);
	}
}

/* A client that stops reading while a payload is half out of its file:
 * the idle release leaves the connection alone, a drain waits for the
 * payload, the timeout then closes, and the connection is freed with the
 * payload still half out (its stream closed or not). */
Test(h2_session, a_connection_stalled_inside_a_file_payload)
{
	static const size_t stops[] = { 20, 16000, 16384 + 9 + 100, 2 * 16384 + 4000 };
	reopen_without_cache();
	for (size_t k = 0; k < sizeof(stops) / sizeof(stops[0]); k++) {
		for (int drain = 0; drain < 2; drain++) {
			struct drive *d = calloc(1, sizeof(*d));
			unsigned char flight[200];
			size_t len = wide_request(flight, "/mid.bin");
			d->cut = 999;
			d->stop_at = stops[k];
			d->discard = true;
			d->c = conn_new(&ts.srv, NULL, 0);
			feed(d, flight, len, len);
			int64_t deadline;
			cr_assert_eq(conn_wants(d->c, &deadline), CONN_WANT_WRITE, "stop %zu", stops[k]);
			cr_assert(stops[k] < 16384 || d->file_writes > 0, "stop %zu: no file range yet", stops[k]);
			cr_assert_not(conn_awaits_request(d->c));
			cr_assert_not(conn_release_idle(d->c), "stop %zu: buffers released under a write", stops[k]);
			if (drain) {
				conn_drain(d->c);
				cr_assert_eq(conn_wants(d->c, &deadline), CONN_WANT_WRITE);
			}
			conn_timeout(d->c);
			cr_assert_eq(conn_wants(d->c, &deadline), CONN_WANT_CLOSE, "stop %zu", stops[k]);
			conn_free(d->c);
			free(d);
		}
	}
}

/* The bytes of a dynamic table size update opening a header block (RFC
 * 7541 6.3: 001xxxxx and the integer's continuation bytes), or 0. */
static size_t size_update_len(const unsigned char *p, size_t len)
{
	if (len == 0 || (p[0] & 0xe0) != 0x20)
		return 0;
	size_t n = 1;
	if ((p[0] & 0x1f) == 0x1f)
		while (n < len && (p[n++] & 0x80))
			;
	return n;
}

/* An HPACK string length (RFC 7541 5.1, 7-bit prefix, no Huffman). */
static size_t hpack_len(unsigned char *p, size_t len)
{
	if (len < 127) {
		p[0] = (unsigned char)len;
		return 1;
	}
	size_t n = 0;
	p[n++] = 127;
	for (len -= 127; len >= 128; len >>= 7)
		p[n++] = (unsigned char)(len % 128 + 128);
	p[n++] = (unsigned char)len;
	return n;
}

/* A GET of /a.txt on stream id, its request about `size` bytes: a query of
 * about size / 4 bytes in :path and a field "x-big" of the rest. */
static size_t request_sized(unsigned char *buf, uint32_t id, size_t size)
{
	static unsigned char block[8192];
	size_t b = 0, qlen = size / 4, vlen = size - qlen;
	block[b++] = 0x82; /* :method GET */
	block[b++] = 0x86; /* :scheme http */
	block[b++] = 0x04; /* :path, a literal */
	b += hpack_len(block + b, 7 + qlen);
	memcpy(block + b, "/a.txt?", 7);
	memset(block + b + 7, 'q', qlen);
	b += 7 + qlen;
	block[b++] = 0x01; /* :authority "a" */
	block[b++] = 0x01;
	block[b++] = 'a';
	block[b++] = 0x00; /* x-big, a new name */
	block[b++] = 5;
	memcpy(block + b, "x-big", 5);
	b += 5;
	b += hpack_len(block + b, vlen);
	memset(block + b, 'v', vlen);
	b += vlen;
	unsigned char hd[9] = { (unsigned char)(b >> 16), (unsigned char)(b >> 8), (unsigned char)b, 1, 0x05,
				(unsigned char)(id >> 24), (unsigned char)(id >> 16), (unsigned char)(id >> 8),
				(unsigned char)id };
	memcpy(buf, hd, 9);
	memcpy(buf + 9, block, b);
	return 9 + b;
}

/* A stream keeps a usual request in room of its own and takes the heap for
 * what does not fit (a long :path, many field bytes, the head they make); a
 * session reuses the streams it is done with. Requests small and large, in
 * two rounds on one connection, are each answered as a lone one is. */
Test(h2_session, requests_small_and_large_on_reused_streams)
{
	static const size_t sizes[] = { 40, 3000, 60, 1400, 600, 5000, 40, 1100 };
	const size_t n = sizeof(sizes) / sizeof(sizes[0]);
	struct drive *d = calloc(1, sizeof(*d));
	static unsigned char buf[1 << 16];
	d->c = conn_new(&ts.srv, NULL, 0);
	cr_assert_not_null(d->c);
	size_t len = request(buf, "/a.txt"); /* preface, SETTINGS, stream 1 */
	for (size_t round = 0; round < 2; round++) {
		for (size_t i = 0; i < n; i++)
			len += request_sized(buf + len, (uint32_t)(3 + 2 * (round * n + i)), sizes[i]);
		feed(d, buf, len, 1 << 14);
		len = 0;
	}
	for (uint32_t id = 1; id <= 3 + 2 * (2 * n - 1); id += 2) {
		struct frame f;
		cr_assert(find_frame(d, 1, id, &f), "no HEADERS on stream %u", id);
		size_t k = size_update_len(f.payload, f.len);
		cr_assert_eq(f.payload[k], 0x88, "stream %u: not :status 200 (0x%02x)", id, f.payload[k]);
		cr_assert(find_frame(d, 0, id, &f), "no DATA on stream %u", id);
		cr_assert_eq(f.len, strlen(A_TXT), "stream %u", id);
		cr_assert_eq(memcmp(f.payload, A_TXT, f.len), 0, "stream %u", id);
	}
	cr_assert(conn_release_idle(d->c));
	conn_free(d->c);
	free(d);
}

/* A connection's first responses put nothing in HPACK's encoder table (an
 * idle connection that asked little holds none, as nginx's); a busy one's
 * later responses send their constant fields as table indexes. Twenty GETs
 * on one connection: the first two header blocks are the same length (the
 * second could use no entry of the first's), the twentieth is less than
 * half of the first. */
Test(h2_session, a_busy_connection_earns_an_encoder_table)
{
	const uint32_t n = 20;
	struct drive *d = calloc(1, sizeof(*d));
	static unsigned char buf[1 << 14];
	d->c = conn_new(&ts.srv, NULL, 0);
	cr_assert_not_null(d->c);
	size_t len = request(buf, "/a.txt"); /* preface, SETTINGS, stream 1 */
	feed(d, buf, len, 1 << 14);
	size_t first = 0, second = 0;
	for (uint32_t i = 1; i < n; i++) { /* one at a time: each answered before the next */
		len = request_sized(buf, 1 + 2 * i, 40);
		feed(d, buf, len, 1 << 14);
	}
	for (uint32_t i = 0; i < n; i++) {
		struct frame f;
		cr_assert(find_frame(d, 1, 1 + 2 * i, &f), "no HEADERS on stream %u", 1 + 2 * i);
		size_t k = size_update_len(f.payload, f.len);
		cr_assert_eq(f.payload[k], 0x88, "stream %u: not :status 200", 1 + 2 * i);
		if (i == 0)
			first = f.len - k;
		else if (i == 1)
			second = f.len;
		else if (i == n - 1)
			cr_assert_lt(f.len * 2, first, "the 20th response's fields took %zu bytes, the first's %zu", f.len,
				     first);
	}
	cr_assert_eq(second, first, "the second response used the table: %zu bytes against %zu", second, first);
	conn_free(d->c);
	free(d);
}
