/* test_conn_gather.c - the connection core's output path, driven without sockets:
 * pipelined requests answered in one gathered write (issue 10), partial
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
	srv.cfg = &cfg;
	srv.root_fd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
	cr_assert(srv.root_fd >= 0);
	srv.limits = (struct http_limits){ cfg.max_request_line, cfg.max_head, cfg.max_headers };
	strcpy(srv.server_header, "Server: spindle/test\r\n");
}

static void teardown(void)
{
	char path[sizeof(root) + 16];
	snprintf(path, sizeof(path), "%s/a.txt", root);
	unlink(path);
	rmdir(root);
	close(srv.root_fd);
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
	cr_assert_eq(o.iovcnt, 32, "16 heads and 16 bodies in one write, got %d iovecs", o.iovcnt);
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
	cr_assert_eq(o.iovcnt, 6);
	conn_output_done(c, 3);
	conn_free(c);
}
