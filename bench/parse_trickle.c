/* parse_trickle.c - CPU per request head when the head arrives one byte per
 * read: the cost a trickling client imposes on the parser.
 *
 *   make build/parse_trickle && build/parse_trickle [--oneshot] [--heads N]
 *
 * The head is 16 KiB (realistic fields of about 60 bytes, max_headers raised
 * to fit them), fed with len = 1, 2, ..., n as a connection's reads would
 * extend its buffer. Default: http_parse_request_resume, as src/conn.c calls
 * it. --oneshot: http_parse_request from the start on every read, as conn.c
 * did before the resumable parser; built against an older parse.c with
 * -DPT_NO_RESUME it measures the old parser itself. CPU time is the
 * process's (CLOCK_PROCESS_CPUTIME_ID), so other load on the machine slows
 * the figures less than wall time would. A plain C program, not a Criterion
 * test, so it runs without the test harness and prints numbers to compare. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../src/http/parse.h"

#define PT_HEAD 16384

static double pt_cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

int main(int argc, char **argv)
{
	static char head[PT_HEAD];
	const struct http_limits lim = { 8192, PT_HEAD, 1000 };
	struct http_request req;
	int oneshot = 0, heads = 0;
	size_t n;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--oneshot") == 0)
			oneshot = 1;
		else if (strcmp(argv[i], "--heads") == 0 && i + 1 < argc)
			heads = atoi(argv[++i]);
		else {
			fprintf(stderr, "usage: %s [--oneshot] [--heads N]\n", argv[0]);
			return 2;
		}
	}
#ifdef PT_NO_RESUME
	oneshot = 1;
#endif
	if (heads <= 0)
		heads = oneshot ? 5 : 500;

	n = (size_t)snprintf(head, sizeof(head), "GET /index.html HTTP/1.1\r\nHost: example.com\r\n");
	for (int f = 0; n + 2 * 64 < PT_HEAD; f++)
		n += (size_t)snprintf(head + n, sizeof(head) - n, "X-Field-%04d: a value of a fairly usual length\r\n", f);
	/* one last field padded so the head is exactly 16 KiB */
	n += (size_t)snprintf(head + n, sizeof(head) - n, "X-Pad: ");
	memset(head + n, 'a', PT_HEAD - 4 - n);
	n = PT_HEAD - 4;
	memcpy(head + n, "\r\n\r\n", 4);
	n += 4;

	double t0 = pt_cpu_ns();
	for (int h = 0; h < heads; h++) {
		int rc = 0;
#ifndef PT_NO_RESUME
		struct http_parse_state st = { 0 };
#endif
		for (size_t len = 1; len <= n && rc == 0; len++) {
#ifndef PT_NO_RESUME
			if (!oneshot)
				rc = http_parse_request_resume(head, len, &lim, &req, &st);
			else
#endif
				rc = http_parse_request(head, len, &lim, &req);
		}
		if (rc != (int)n) {
			fprintf(stderr, "parse_trickle: head of %zu bytes parsed as %d\n", n, rc);
			return 1;
		}
	}
	double per_head = (pt_cpu_ns() - t0) / heads;
	printf("%s: %zu-byte head, 1 byte per read, %d heads: %.1f us CPU per head (%.1f ns per read)\n",
	       oneshot ? "re-parse from the start" : "resumed parse", n, heads, per_head / 1e3, per_head / (double)n);
	return 0;
}
