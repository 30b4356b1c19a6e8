/* test_conn_gather.c - the connection core's output path, driven without sockets:
 * pipelined requests answered in one gathered write, partial
 * writes across response boundaries, each response finished once, in order. */
#include <criterion/criterion.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../src/config.h"
#include "../../src/conn.h"
#include "../../src/server.h"

static struct config cfg;
static struct server srv;
static struct site_config top;
static struct site site;
static char root[] = "/tmp/spindle-test-conn-XXXXXX";

static void setup(void)
{
	cr_assert(mkdtemp(root));
	char path[sizeof(root) + 16];
	snprintf(path, sizeof(path), "%s/a.txt", root);
	FILE *f = fopen(path, "w");
	cr_assert(f);
	fputs("Hello", f);
	fclose(f);
	config_defaults(&cfg);
	strcpy(cfg.root, root);
	srv.cfg = &cfg;
	config_top_site(&cfg, &top);
	cr_assert_eq(site_open(&site, &top, &cfg), 0);
	site.acme_fd = site.stats_index = -1;
	site.srv = &srv;
	srv.sites = (struct site_table){ &site, 1, false };
	srv.limits = (struct http_limits){ cfg.max_request_line, cfg.max_head, cfg.max_headers };
	strcpy(srv.server_header, "Server: spindle/test\r\n");
}

static void teardown(void)
{
	char path[sizeof(root) + 16];
	snprintf(path, sizeof(path), "%s/a.txt", root);
	unlink(path);
	rmdir(root);
	site_close(&site);
}

TestSuite(conn_gather, .init = setup, .fini = teardown);

static void feed(struct conn *c, const char *bytes)
{
	size_t len = strlen(bytes);
	while (len > 0) {
		struct iovec space = conn_input_space(c);
		cr_assert(space.iov_len > 0);
		size_t n = len < space.iov_len ? len : space.iov_len;
		memcpy(space.iov_base, bytes, n);
		conn_input_done(c, (ssize_t)n);
		bytes += n;
		len -= n;
	}
}

/* Plays a driver whose every write takes at most `chunk` bytes; returns
 * everything written (caller frees) and the number of writes. */
static char *drain_output(struct conn *c, size_t chunk, size_t *len, int *writes)
{
	size_t cap = 1 << 20, n = 0;
	char *out = malloc(cap);
	int64_t deadline;
	*writes = 0;
	while (conn_wants(c, &deadline) == CONN_WANT_WRITE) {
		struct conn_output o;
		conn_output(c, &o);
		cr_assert(o.iovcnt > 0, "only memory responses here");
		size_t want = o.total < chunk ? o.total : chunk, got = 0;
		for (int i = 0; i < o.iovcnt && got < want; i++) {
			size_t k = o.iov[i].iov_len < want - got ? o.iov[i].iov_len : want - got;
			cr_assert(n + k <= cap);
			memcpy(out + n, o.iov[i].iov_base, k);
			n += k;
			got += k;
		}
		conn_output_done(c, got);
		(*writes)++;
	}
	*len = n;
	return out;
}

static size_t count(const char *hay, size_t len, const char *needle)
{
	size_t k = 0, nl = strlen(needle);
	for (const char *p = hay; (p = memmem(p, len - (size_t)(p - hay), needle, nl)); p += nl)
		k++;
	return k;
}

Test(conn_gather, sixteen_pipelined_requests_leave_in_one_write)
{
	char reqs[16 * 64] = "";
	for (int i = 0; i < 16; i++)
		strcat(reqs, "GET /a.txt HTTP/1.1\r\nHost: x\r\n\r\n");
	struct conn *c = conn_new(&srv, NULL, 0);
	feed(c, reqs);

	struct conn_output o;
	conn_output(c, &o);
	cr_assert_eq(o.iovcnt, 16, "16 responses (each head with its small body) in one write, got %d iovecs",
		     o.iovcnt);
	cr_assert_eq(o.file_fd, -1);

	size_t len;
	int writes;
	char *out = drain_output(c, SIZE_MAX, &len, &writes);
	cr_assert_eq(writes, 1);
	cr_assert_eq(count(out, len, "HTTP/1.1 200 OK\r\n"), 16);
	cr_assert_eq(count(out, len, "\r\n\r\nHello"), 16);
	int64_t deadline;
	cr_assert_eq(conn_wants(c, &deadline), CONN_WANT_READ, "all answered: waits for more");
	cr_assert(conn_awaits_request(c));
	free(out);
	conn_free(c);
}

/* The parser takes a bare LF as a line end (RFC 9112 2.2), so heads ending
 * in "\n\n" (or a mix, "\n\r\n") are complete requests too: they are
 * answered in the same gathered write as CRLF ones, not one write each. */
Test(conn_gather, bare_lf_heads_leave_in_one_write)
{
	struct conn *c = conn_new(&srv, NULL, 0);
	feed(c, "GET /a.txt HTTP/1.1\nHost: x\n\n"
		"GET /a.txt HTTP/1.1\nHost: x\r\n\n"
		"GET /a.txt HTTP/1.1\r\nHost: x\n\r\n"
		"GET /a.txt HTTP/1.1\nHost: x\n\n");
	size_t len;
	int writes;
	char *out = drain_output(c, SIZE_MAX, &len, &writes);
	cr_assert_eq(count(out, len, "HTTP/1.1 200 OK\r\n"), 4);
	cr_assert_eq(writes, 1, "4 pipelined responses took %d writes", writes);
	free(out);
	conn_free(c);
}

/* Different built-in error pages in one batch: each parked response keeps
 * its own page, and a one-byte-at-a-time driver splits every boundary. */
Test(conn_gather, partial_writes_across_responses_keep_each_response_whole)
{
	static const char *const reqs[] = {
		"GET /a.txt HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET /missing HTTP/1.1\r\nHost: x\r\n\r\n",
		"BREW / HTTP/1.1\r\nHost: x\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
		"HEAD /a.txt HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET /a.txt HTTP/1.1\r\nHost: x\r\n\r\n",
	};
	static const int status[] = { 200, 404, 501, 405, 200, 200 };
	static const char *const body[] = { "Hello", "<h1>404 ", "<h1>501 ", "<h1>405 ", "", "Hello" };
	char all[1024] = "";
	for (size_t i = 0; i < 6; i++)
		strcat(all, reqs[i]);

	for (size_t chunk = 1; chunk <= 64; chunk *= 4) {
		struct conn *c = conn_new(&srv, NULL, 0);
		feed(c, all);
		size_t len;
		int writes;
		char *out = drain_output(c, chunk, &len, &writes);
		const char *p = out, *end = out + len;
		for (size_t i = 0; i < 6; i++) {
			char line[32];
			snprintf(line, sizeof(line), "HTTP/1.1 %d ", status[i]);
			cr_assert(end - p > 12 && memcmp(p, line, strlen(line)) == 0,
				  "chunk %zu: response %zu does not start with %s", chunk, i, line);
			const char *head_end = memmem(p, (size_t)(end - p), "\r\n\r\n", 4);
			cr_assert(head_end);
			const char *cl = memmem(p, (size_t)(head_end - p), "Content-Length: ", 16);
			cr_assert(cl);
			size_t blen = strtoul(cl + 16, NULL, 10);
			const char *b = head_end + 4;
			if (i == 4)
				blen = 0; /* HEAD: the length of the GET, no body */
			cr_assert((size_t)(end - b) >= blen);
			cr_assert(memmem(b, blen, body[i], strlen(body[i])) || !*body[i],
				  "chunk %zu: response %zu has the wrong body", chunk, i);
			p = b + blen;
		}
		cr_assert_eq(p, end, "chunk %zu: bytes after the last response", chunk);
		int64_t deadline;
		cr_assert_eq(conn_wants(c, &deadline), CONN_WANT_READ);
		free(out);
		conn_free(c);
	}
}

/* A response that closes the connection ends the batch: nothing after it is
 * answered, and the core then closes. */
Test(conn_gather, close_response_ends_the_batch)
{
	struct conn *c = conn_new(&srv, NULL, 0);
	feed(c, "GET /a.txt HTTP/1.1\r\nHost: x\r\n\r\n"
		"GET /a.txt HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
		"GET /a.txt HTTP/1.1\r\nHost: x\r\n\r\n");
	size_t len;
	int writes;
	char *out = drain_output(c, SIZE_MAX, &len, &writes);
	cr_assert_eq(writes, 1);
	cr_assert_eq(count(out, len, "HTTP/1.1 200 OK\r\n"), 2);
	int64_t deadline;
	enum conn_want w = conn_wants(c, &deadline);
	cr_assert(w == CONN_WANT_SHUTDOWN || w == CONN_WANT_CLOSE);
	free(out);
	conn_free(c);
}

/* Freeing a connection with responses still parked releases them (ASan). */
Test(conn_gather, free_with_parked_responses)
{
	struct conn *c = conn_new(&srv, NULL, 0);
	feed(c, "GET /a.txt HTTP/1.1\r\nHost: x\r\n\r\nGET /nope HTTP/1.1\r\nHost: x\r\n\r\n"
		"GET /a.txt HTTP/1.1\r\nHost: x\r\n\r\n");
	struct conn_output o;
	conn_output(c, &o);
	cr_assert_eq(o.iovcnt, 4, "a.txt: head and body in one buffer; the 404: head, then its page");
	conn_output_done(c, 3);
	conn_free(c);
}

/* ---- pipelined against alone, with a random driver ------------------- */

/* A driver that obeys conn_wants and moves random amounts each step: reads
 * of 1..rmax bytes from `in`, writes of 1..wmax bytes (memory or file).
 * Appends what the client would receive to *out; stops when the core closes
 * or waits for input that is not there. Sometimes it gives back an idle
 * connection's buffers before a read, as the epoll model does. */
struct sim {
	const char *in;
	size_t in_len, in_pos;
	char *out;
	size_t out_len, out_cap;
	unsigned seed;
	size_t rmax, wmax;
	int interrupt_at;   /* the step at which to call interrupt, or -1 */
	void (*interrupt)(struct conn *);
};

static size_t sim_rand(struct sim *s, size_t max)
{
	s->seed = s->seed * 1103515245u + 12345u;
	return 1 + (s->seed >> 8) % max;
}

static void sim_put(struct sim *s, const void *p, size_t n)
{
	if (s->out_len + n > s->out_cap) {
		s->out_cap = (s->out_len + n) * 2;
		s->out = realloc(s->out, s->out_cap);
		cr_assert(s->out);
	}
	memcpy(s->out + s->out_len, p, n);
	s->out_len += n;
}

static void sim_run(struct conn *c, struct sim *s)
{
	if (!s->out) { /* never NULL, even when nothing is sent */
		s->out_cap = 64;
		s->out = malloc(s->out_cap);
		cr_assert(s->out);
	}
	for (int steps = 0; steps < 1000000; steps++) {
		int64_t deadline;
		if (steps == s->interrupt_at)
			s->interrupt(c);
		enum conn_want w = conn_wants(c, &deadline);
		if (w == CONN_WANT_CLOSE)
			return;
		if (w == CONN_WANT_SHUTDOWN) {
			conn_shutdown_done(c);
			continue;
		}
		if (w == CONN_WANT_READ) {
			if (s->in_pos == s->in_len)
				return;
			/* as the epoll model does whenever it must wait for input */
			if (sim_rand(s, 3) == 1)
				conn_release_idle(c);
			struct iovec sp = conn_input_space(c);
			cr_assert(sp.iov_len > 0, "an empty input span while READ is wanted");
			size_t n = sim_rand(s, s->rmax);
			if (n > sp.iov_len)
				n = sp.iov_len;
			if (n > s->in_len - s->in_pos)
				n = s->in_len - s->in_pos;
			memcpy(sp.iov_base, s->in + s->in_pos, n);
			s->in_pos += n;
			conn_input_done(c, (ssize_t)n);
			continue;
		}
		struct conn_output o;
		conn_output(c, &o);
		cr_assert(o.total > 0, "WRITE wanted with nothing to write");
		size_t want = sim_rand(s, s->wmax), got = 0;
		if (want > o.total)
			want = o.total;
		if (o.iovcnt > 0) {
			for (int i = 0; i < o.iovcnt && got < want; i++) {
				size_t k = o.iov[i].iov_len < want - got ? o.iov[i].iov_len : want - got;
				sim_put(s, o.iov[i].iov_base, k);
				got += k;
			}
		} else {
			char buf[65536];
			if (want > sizeof(buf))
				want = sizeof(buf);
			ssize_t r = pread(o.file_fd, buf, want, o.file_off);
			cr_assert(r == (ssize_t)want);
			sim_put(s, buf, want);
			got = want;
		}
		conn_output_done(c, got);
	}
	cr_assert_fail("the driver did not finish");
}

/* Date values may differ between two runs: blank them; 100 Continue depends
 * on how the bytes arrive. */
static size_t sim_normalize(char *p, size_t n)
{
	static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
	char *q;
	if (n == 0)
		return 0; /* nothing was sent (p may be NULL) */
	for (q = p; (q = memmem(q, n - (size_t)(q - p), "\r\nDate: ", 8)); q += 8) {
		size_t left = n - (size_t)(q + 8 - p); /* a cut response may end inside it */
		memset(q + 8, 'D', left < 29 ? left : 29);
	}
	while ((q = memmem(p, n, cont, sizeof(cont) - 1))) {
		memmove(q, q + sizeof(cont) - 1, n - (size_t)(q - p) - (sizeof(cont) - 1));
		n -= sizeof(cont) - 1;
	}
	return n;
}

static char *sim_alone(const char *req, size_t len, size_t *out_len)
{
	struct sim s = { .in = req, .in_len = len, .seed = 1, .rmax = 1 << 20, .wmax = 1 << 20, .interrupt_at = -1 };
	struct conn *c = conn_new(&srv, NULL, 0);
	sim_run(c, &s);
	conn_free(c);
	*out_len = sim_normalize(s.out, s.out_len);
	return s.out;
}

#define PIPE_BIG 20000 /* over sendfile_min: sent from the file */

Test(conn_gather, random_pipelines_equal_requests_alone)
{
	/* a head that outgrows the first input buffer (the buffer grows, or is
	 * compacted, under a suspended parse) */
	static char grown[6200];
	snprintf(grown, sizeof(grown), "GET /a.txt HTTP/1.1\r\nHost: x\r\nX-Big: %06000d\r\n\r\n", 7);
	/* a body bigger than the input buffer: the head is moved to the front
	 * and parsed again (make_body_room) */
	static char big_body[9200];
	int hl = snprintf(big_body, sizeof(big_body), "GET /a.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 9000\r\n\r\n");
	memset(big_body + hl, 'b', 9000);
	big_body[hl + 9000] = '\0';
	const char *const menu[] = {
		grown,
		big_body,
		"GET /a.txt HTTP/1.1\r\nHost: x\r\n\r\n",
		"HEAD /a.txt HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET /missing HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET /missing HTTP/1.1\r\nHost: x\r\nUser-Agent: ua\r\nReferer: r\r\n\r\n",
		"HEAD /missing HTTP/1.1\r\nHost: x\r\n\r\n",
		"BREW / HTTP/1.1\r\nHost: x\r\n\r\n",
		"POST /a.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nbody",
		"GET /a.txt HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n0\r\n\r\n",
		"GET /a.txt HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\nabc",
		"GET /a.txt HTTP/1.1\r\nHost: x\r\nRange: bytes=1-3\r\n\r\n",
		"GET /a.txt HTTP/1.1\r\nHost: x\r\nRange: bytes=9-\r\n\r\n",
		"GET /a.txt HTTP/1.1\r\nHost: x\r\nIf-Match: \"no\"\r\n\r\n",
		"GET /big.bin HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET /big.bin HTTP/1.1\r\nHost: x\r\nRange: bytes=5-105\r\n\r\n",
		"HEAD /big.bin HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET /a.txt HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
		"\r\nGET /a.txt?q HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET /a.txt HTTP/1.1\r\nHost: x\r\nX-Long: "
		"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
		"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
		"\r\n\r\n",
	};
	enum { NMENU = sizeof(menu) / sizeof(menu[0]) };
	char path[sizeof(root) + 16];
	snprintf(path, sizeof(path), "%s/big.bin", root);
	FILE *f = fopen(path, "w");
	cr_assert(f);
	for (int i = 0; i < PIPE_BIG; i++)
		fputc('a' + i % 26, f);
	fclose(f);

	char *alone[NMENU];
	size_t alone_len[NMENU];
	for (size_t k = 0; k < NMENU; k++) {
		alone[k] = sim_alone(menu[k], strlen(menu[k]), &alone_len[k]);
		cr_assert(alone_len[k] > 12 && memcmp(alone[k], "HTTP/1.1 ", 9) == 0, "menu %zu", k);
	}
	for (unsigned seed = 1; seed <= 300; seed++) {
		unsigned r = seed * 2654435761u;
		size_t n = 1 + r % 60, in_len = 0, want_len = 0;
		static char in[60 * 9200], want[60 * 25000];
		for (size_t i = 0; i < n; i++) {
			r = r * 1103515245u + 12345u;
			size_t k = (r >> 8) % NMENU;
			memcpy(in + in_len, menu[k], strlen(menu[k]));
			in_len += strlen(menu[k]);
			memcpy(want + want_len, alone[k], alone_len[k]);
			want_len += alone_len[k];
		}
		/* small and large reads and writes, down to one byte */
		size_t sizes[] = { 1, 7, 300, 1 << 20 };
		struct sim s = { .in = in, .in_len = in_len, .seed = seed, .rmax = sizes[seed % 4],
				 .wmax = sizes[(seed / 4) % 4], .interrupt_at = -1 };
		struct conn *c = conn_new(&srv, NULL, 0);
		sim_run(c, &s);
		cr_assert_eq(s.in_pos, s.in_len, "seed %u: input left unread", seed);
		int64_t deadline;
		cr_assert_eq(conn_wants(c, &deadline), CONN_WANT_READ, "seed %u: still busy", seed);
		conn_free(c);
		size_t got_len = sim_normalize(s.out, s.out_len);
		size_t j = 0;
		while (j < got_len && j < want_len && s.out[j] == want[j])
			j++;
		cr_assert(got_len == want_len && j == want_len,
			  "seed %u (%zu requests, reads %zu, writes %zu): %zu bytes, want %zu, first difference at %zu: "
			  "got \"%.60s\" want \"%.60s\"",
			  seed, n, s.rmax, s.wmax, got_len, want_len, j, s.out + (j > 20 ? j - 20 : 0),
			  want + (j > 20 ? j - 20 : 0));
		free(s.out);
	}
	for (size_t k = 0; k < NMENU; k++)
		free(alone[k]);
	unlink(path);
}

/* Does got[*pos..] start with the response `want`, or (when `may_close`)
 * with it plus "Connection: close" in its head? Advances *pos; sets *closed
 * when that field was there. */
static bool sim_match(const char *got, size_t got_len, size_t *pos, const char *want, size_t want_len,
		      bool *closed)
{
	static const char field[] = "Connection: close\r\n";
	const char *g = got + *pos;
	size_t left = got_len - *pos;
	if (left >= want_len && memcmp(g, want, want_len) == 0) {
		*pos += want_len;
		return true;
	}
	const char *he = memmem(want, want_len, "\r\n\r\n", 4);
	if (!he)
		return false;
	size_t head = (size_t)(he - want) + 2, fl = sizeof(field) - 1;
	if (left < want_len + fl || memcmp(g, want, head) || memcmp(g + head, field, fl) ||
	    memcmp(g + head + fl, want + head, want_len - head))
		return false;
	*pos += want_len + fl;
	*closed = true;
	return true;
}

/* A graceful stop or a deadline at any point of a random pipeline: what was
 * sent is whole responses, each the one its request gets alone, in order;
 * after a stop the last of them may say "Connection: close" and nothing
 * follows it; after a deadline, at most a 408 follows (or the response
 * being written stops short: a send deadline closes). No leak, no stale
 * pointer (ASan), and the core ends closed or idle. */
Test(conn_gather, drain_or_deadline_anywhere_in_a_pipeline)
{
	static const char *const menu[] = {
		"GET /a.txt HTTP/1.1\r\nHost: x\r\n\r\n",
		"HEAD /a.txt HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET /missing HTTP/1.1\r\nHost: x\r\n\r\n",
		"BREW / HTTP/1.1\r\nHost: x\r\n\r\n",
		"POST /a.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nbody",
		"GET /a.txt HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n0\r\n\r\n",
		"GET /a.txt HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\nabc",
		"GET /a.txt HTTP/1.1\r\nHost: x\r\nRange: bytes=1-3\r\n\r\n",
	};
	enum { NMENU = sizeof(menu) / sizeof(menu[0]) };
	char *alone[NMENU];
	size_t alone_len[NMENU];
	for (size_t k = 0; k < NMENU; k++)
		alone[k] = sim_alone(menu[k], strlen(menu[k]), &alone_len[k]);

	for (unsigned seed = 1; seed <= 400; seed++) {
		unsigned r = seed * 2654435761u;
		size_t n = 1 + r % 30, in_len = 0, picks[30];
		static char in[30 * 200];
		for (size_t i = 0; i < n; i++) {
			r = r * 1103515245u + 12345u;
			picks[i] = (r >> 8) % NMENU;
			memcpy(in + in_len, menu[picks[i]], strlen(menu[picks[i]]));
			in_len += strlen(menu[picks[i]]);
		}
		size_t sizes[] = { 1, 7, 300, 1 << 20 };
		bool drain = seed % 2;
		struct sim s = { .in = in, .in_len = in_len, .seed = seed, .rmax = sizes[(seed / 2) % 4],
				 .wmax = sizes[(seed / 8) % 4], .interrupt_at = (int)(r % (4 * n + 8)),
				 .interrupt = drain ? conn_drain : conn_timeout };
		struct conn *c = conn_new(&srv, NULL, 0);
		sim_run(c, &s);
		int64_t deadline;
		enum conn_want end = conn_wants(c, &deadline);
		conn_free(c);

		size_t got_len = sim_normalize(s.out, s.out_len), pos = 0, i = 0;
		bool closed = false;
		while (i < n && pos < got_len && !closed &&
		       sim_match(s.out, got_len, &pos, alone[picks[i]], alone_len[picks[i]], &closed))
			i++;
		if (!drain && got_len - pos >= 13 && memcmp(s.out + pos, "HTTP/1.1 408 ", 13) == 0) {
			const char *he = memmem(s.out + pos, got_len - pos, "\r\n\r\n", 4);
			const char *cl = memmem(s.out + pos, got_len - pos, "Content-Length: ", 16);
			cr_assert(he && cl, "seed %u: a broken 408", seed);
			pos = (size_t)(he + 4 - s.out) + strtoul(cl + 16, NULL, 10);
			closed = true;
		} else if (!drain && i < n && got_len - pos < alone_len[picks[i]] &&
			   memcmp(s.out + pos, alone[picks[i]], got_len - pos) == 0) {
			pos = got_len; /* a send deadline cut the response being written */
			closed = true;
		} else if (!drain && got_len - pos < 25 &&
			   memcmp(s.out + pos, "HTTP/1.1 100 Continue\r\n\r\n", got_len - pos) == 0) {
			pos = got_len; /* or the interim response */
			closed = true;
		}
		cr_assert_eq(pos, got_len,
			     "seed %u (%s at step %d, %zu requests, reads %zu, writes %zu): after %zu whole "
			     "responses, at byte %zu of %zu: \"%.80s\"",
			     seed, drain ? "drain" : "deadline", s.interrupt_at, n, s.rmax, s.wmax, i, pos,
			     got_len, s.out + pos);
		if (closed || !drain)
			cr_assert(end == CONN_WANT_CLOSE || end == CONN_WANT_SHUTDOWN || end == CONN_WANT_READ,
				  "seed %u: ends wanting %d", seed, end);
		if (closed && drain)
			cr_assert(end != CONN_WANT_READ || s.in_pos == s.in_len, "seed %u", seed);
		free(s.out);
	}
	for (size_t k = 0; k < NMENU; k++)
		free(alone[k]);
}

/* Random pipelines with a few bytes changed at random (bad framing, bad
 * fields, bodies that lie): the core never breaks a response, never answers
 * out of nothing, and ends idle or closed (and, under ASan, touches no byte
 * it does not own). Each response is whole: a status line, a head, and the
 * body its Content-Length announces (none for HEAD, 1xx, 304). */
Test(conn_gather, mutated_pipelines_get_whole_responses)
{
	static const char *const menu[] = {
		"GET /a.txt HTTP/1.1\r\nHost: x\r\n\r\n",
		"HEAD /a.txt HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET /missing HTTP/1.1\r\nHost: x\r\n\r\n",
		"POST /a.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nbody",
		"GET /a.txt HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n0\r\n\r\n",
		"GET /a.txt HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\nabc",
		"GET /a.txt HTTP/1.1\r\nHost: x\r\nRange: bytes=1-3,0-0\r\nIf-Match: *\r\n\r\n",
		"GET /a.txt HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
	};
	enum { NMENU = sizeof(menu) / sizeof(menu[0]) };
	static const char junk[] = "\r\n :\t0x-,;\"*\x7f";

	for (unsigned seed = 1; seed <= 2000; seed++) {
		unsigned r = seed * 2654435761u;
		size_t n = 1 + r % 20, in_len = 0, heads = 0;
		static char in[20 * 200];
		for (size_t i = 0; i < n; i++) {
			r = r * 1103515245u + 12345u;
			const char *m = menu[(r >> 8) % NMENU];
			memcpy(in + in_len, m, strlen(m));
			in_len += strlen(m);
		}
		for (int k = 0; k < 3; k++) {
			r = r * 1103515245u + 12345u;
			in[(r >> 4) % in_len] = junk[(r >> 20) % (sizeof(junk) - 1)];
		}
		for (size_t i = 0; i + 1 < in_len; i++)
			heads += in[i] == '\n' && (in[i + 1] == '\n' || (in[i + 1] == '\r' && i + 2 < in_len && in[i + 2] == '\n'));
		size_t sizes[] = { 1, 7, 300, 1 << 20 };
		struct sim s = { .in = in, .in_len = in_len, .seed = seed, .rmax = sizes[seed % 4],
				 .wmax = sizes[(seed / 4) % 4], .interrupt_at = -1 };
		struct conn *c = conn_new(&srv, NULL, 0);
		sim_run(c, &s);
		int64_t deadline;
		enum conn_want end = conn_wants(c, &deadline);
		conn_free(c);
		cr_assert(end == CONN_WANT_READ || end == CONN_WANT_CLOSE, "seed %u: ends wanting %d", seed, end);

		/* whole responses, each started by a status line */
		const char *p = s.out, *e = s.out + s.out_len;
		size_t finals = 0;
		while (p < e) {
			cr_assert(e - p > 13 && memcmp(p, "HTTP/1.1 ", 9) == 0, "seed %u: not a status line at %zu: %.40s",
				  seed, (size_t)(p - s.out), p);
			int status = atoi(p + 9);
			const char *he = memmem(p, (size_t)(e - p), "\r\n\r\n", 4);
			cr_assert(he, "seed %u: a head cut short", seed);
			size_t blen = 0;
			const char *cl = memmem(p, (size_t)(he - p), "Content-Length: ", 16);
			if (status >= 200 && status != 304 && cl)
				blen = strtoul(cl + 16, NULL, 10);
			/* a HEAD's response has no body: known by the request, so
			 * accept a following status line (or the end) where the
			 * body would be */
			const char *b = he + 4;
			if (blen && (b == e || ((size_t)(e - b) >= 9 && memcmp(b, "HTTP/1.1 ", 9) == 0)))
				blen = 0;
			cr_assert((size_t)(e - b) >= blen, "seed %u: a body cut short", seed);
			p = b + blen;
			finals += status >= 200;
		}
		/* one more: a 400 for bytes refused before their head ended */
		cr_assert(finals <= heads + 1, "seed %u: %zu responses to %zu heads", seed, finals, heads);
		free(s.out);
	}
}

/* One buffer, one iovec: what the response to a small file from memory is */
static char *single_response(const char *request, size_t *len)
{
	struct conn *c = conn_new(&srv, NULL, 0);
	feed(c, request);
	struct conn_output o;
	conn_output(c, &o);
	cr_assert_eq(o.iovcnt, 1, "%s: the head and the small body share one buffer, got %d iovecs", request,
		     o.iovcnt);
	int writes;
	char *out = drain_output(c, SIZE_MAX, len, &writes);
	out[*len] = '\0';
	conn_free(c);
	return out;
}

Test(conn_gather, a_small_body_leaves_in_the_heads_buffer)
{
	size_t len;
	char *out = single_response("GET /a.txt HTTP/1.1\r\nHost: x\r\n\r\n", &len);
	cr_assert(strstr(out, "\r\nContent-Length: 5\r\n"));
	cr_assert(len > 9 && strcmp(out + len - 9, "\r\n\r\nHello") == 0, "%s", out);
	free(out);

	out = single_response("GET /a.txt HTTP/1.1\r\nHost: x\r\nRange: bytes=1-3\r\n\r\n", &len);
	cr_assert(strstr(out, "HTTP/1.1 206 "));
	cr_assert(strstr(out, "\r\nContent-Range: bytes 1-3/5\r\n"));
	cr_assert(len > 7 && strcmp(out + len - 7, "\r\n\r\nell") == 0, "%s", out);
	free(out);

	out = single_response("HEAD /a.txt HTTP/1.1\r\nHost: x\r\n\r\n", &len);
	cr_assert(strstr(out, "\r\nContent-Length: 5\r\n"));
	cr_assert(len > 4 && strcmp(out + len - 4, "\r\n\r\n") == 0, "HEAD: no body: %s", out);
	free(out);
}
