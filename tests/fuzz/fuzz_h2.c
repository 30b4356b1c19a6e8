/* fuzz_h2.c - libFuzzer target for the HTTP/2 session behind conn.h: the
 * HTTP/2 preface, then the input as the client's frames, over the fuzz
 * docroot (conn_driver.c) with a file cache.
 *
 * Input layout: byte 0's low 5 bits pick the size of each read and each
 * write (fz_sizes: byte-at-a-time up to all there is), its bits 5-7 ask for
 * a drain halfway, conn_release_idle between reads, and a timeout at the
 * end; the rest is what the client sends after the preface. The driver then
 * finishes the connection (EOF, writes until close). conn.h's contract is
 * checked after every call; a violation is __builtin_trap(), and ASan and
 * UBSan watch the session and nghttp2 under it. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_conn.h"

#define H2F_STEPS_MAX 200000

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct server *srv;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	static struct config cfg;
	(void)argc, (void)argv;
	fz_docroot();
	fz_config(&cfg, true);
	cfg.http2 = true;
	srv = calloc(1, sizeof(*srv));
	FZ_CHECK(srv);
	FZ_CHECK(server_init(srv, &cfg, NULL) == 0);
	return 0;
}

/* Takes what the core offers to send, up to step bytes; false when it no
 * longer wants to write. */
static bool h2f_write(struct conn *c, size_t step, int *steps)
{
	for (;;) {
		FZ_CHECK(++*steps < H2F_STEPS_MAX);
		int64_t deadline;
		enum conn_want w = conn_wants(c, &deadline);
		if (w == CONN_WANT_SHUTDOWN) {
			FZ_CHECK(deadline == -1);
			conn_shutdown_done(c);
			continue;
		}
		if (w != CONN_WANT_WRITE)
			return w == CONN_WANT_READ;
		FZ_CHECK(deadline >= 0);
		struct conn_output o;
		conn_output(c, &o);
		/* memory, or a DATA payload from its file (sendfile), never nothing */
		FZ_CHECK(o.total > 0 && (o.iovcnt > 0 || (o.file_fd >= 0 && o.file_len == o.total)));
		size_t n = o.total < step ? o.total : step;
		conn_output_done(c, n);
	}
}

static void h2f_read(struct conn *c, const uint8_t *p, size_t n)
{
	struct iovec sp = conn_input_space(c);
	FZ_CHECK(sp.iov_len > 0); /* never empty while the core wants READ */
	if (n > sp.iov_len)
		n = sp.iov_len;
	memcpy(sp.iov_base, p, n);
	conn_input_done(c, (ssize_t)n);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const uint8_t preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
	if (size < 1)
		return 0;
	size_t step = fz_sizes[data[0] & 31];
	bool drain = data[0] & 0x20, release = data[0] & 0x40, timeout = data[0] & 0x80;
	const uint8_t *in = data + 1;
	size_t n = size - 1, fed = 0;
	int steps = 0;

	struct conn *c = conn_new(srv, NULL, 0);
	FZ_CHECK(c);
	h2f_read(c, preface, sizeof(preface) - 1);
	while (fed < n && h2f_write(c, step, &steps)) {
		if (drain && fed >= n / 2) {
			conn_drain(c);
			drain = false;
			continue;
		}
		if (release)
			conn_release_idle(c);
		size_t k = n - fed < step ? n - fed : step;
		struct iovec sp = conn_input_space(c);
		if (k > sp.iov_len)
			k = sp.iov_len;
		h2f_read(c, in + fed, k);
		fed += k;
	}
	if (timeout && h2f_write(c, step, &steps))
		conn_timeout(c);
	/* the natural end: the client closes, the core finishes and closes */
	while (h2f_write(c, step, &steps))
		conn_input_done(c, 0);
	int64_t deadline;
	FZ_CHECK(conn_wants(c, &deadline) == CONN_WANT_CLOSE);
	conn_free(c);
	return 0;
}
