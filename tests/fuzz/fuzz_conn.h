/* fuzz_conn.h - what the connection-core fuzz targets share: a temporary
 * document root, servers built over it, and a driver that records every byte
 * a connection sends, response by response.
 *
 * conn_driver.c includes src/http1/session.c itself (the Makefile links every core
 * source but that one), so the harness can check the state machine's own
 * bookkeeping (state, bytes sent of the current response, its status and
 * head length) against what actually went out. */
#ifndef SPINDLE_FUZZ_CONN_H
#define SPINDLE_FUZZ_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "../../src/config.h"
#include "../../src/conn.h"
#include "../../src/server.h"

#define FZ_CHECK(cond) do { if (!(cond)) __builtin_trap(); } while (0)

/* Every response a connection sent, whole: bytes plus what the core said
 * about it when its last byte went. */
struct fz_response {
	char *bytes;
	size_t len;
	size_t head_len;
	int status;
	bool head_request; /* a HEAD: no body whatever Content-Length says */
	bool keep_alive;
};

/* Creates the docroot once (files named by fz_root_file()); returns its path. */
const char *fz_docroot(void);
/* Writes `size` bytes of the docroot's "range.bin", byte i being fz_pattern(i). */
void fz_set_range_file(uint64_t size);
static inline unsigned char fz_pattern(uint64_t i)
{
	return (unsigned char)((i * 131u + (i >> 8) * 7u + 3u) & 0xff);
}

/* The fuzz servers' configuration over the docroot (small limits);
 * `cache` picks a file cache or none. */
void fz_config(struct config *cfg, bool cache);
/* A server with that configuration. */
struct server *fz_server(struct config *cfg, bool cache);
/* A control byte's amount (its high 5 bits): bytes 1..4096 on a rough log
 * scale; the last one means "all there is". */
extern const size_t fz_sizes[32];
/* The two servers every target drives (cache on, cache off), made once and
 * closed at exit. */
void fz_servers_open(const struct server **cached, const struct server **plain);

/* Finds "Name: value\r\n" (case-sensitive, as the core writes it) in a head. */
bool fz_header(const char *head, size_t len, const char *name, const char **value, size_t *vlen);
/* Parses a decimal at p (len bytes, all digits), false on anything else or overflow. */
bool fz_u64(const char *p, size_t len, uint64_t *out);

/* Checks one finished response: status line, head length, Content-Length
 * against the body that went out, Connection: close against keep-alive. */
void fz_check_response(const struct fz_response *r);

typedef void (*fz_response_fn)(const struct fz_response *r, void *arg);

/* Runs one connection to its end. `payload` is what the client sends;
 * each control byte is one driver action (low 3 bits: what, high 5: how
 * much, see conn_driver.c). When the controls run out, the driver does the
 * natural thing: reads what is left, writes everything, then sends EOF.
 * Every invariant is checked as it goes; each finished response is checked
 * and handed to `fn` (may be NULL). Frees everything. */
uint64_t fz_multipart_gap(const char *mime, uint64_t size);
void fz_drive(const struct server *srv, const uint8_t *ctl, size_t nctl, const uint8_t *payload,
	      size_t npayload, fz_response_fn fn, void *arg);

/* What a driver does to one connection, for fz_run: the core's own
 * actions (fz_drive), or a TLS wire's over it (tls_driver.c). Each checks
 * its invariants; output_failed is called only while WRITE is wanted,
 * input_end (0: EOF, -ECONNRESET) and release_idle only while READ. */
struct fz_ops {
	enum conn_want (*wants)(void *drv, int64_t *deadline);
	void (*write)(void *drv, size_t limit);
	/* reads up to limit of the client's bytes; with none left, EOF if asked */
	void (*read)(void *drv, size_t limit, bool eof_when_empty);
	void (*shutdown_done)(void *drv);
	void (*timeout)(void *drv, enum conn_want was);
	void (*drain)(void *drv);
	void (*output_failed)(void *drv);
	void (*input_end)(void *drv, ssize_t how);
	void (*release_idle)(void *drv);
};

/* Runs a connection to its end: each control byte one action (low 3 bits:
 * what, high 5: how much), then the natural end (write all, read all, EOF).
 * Traps on a livelock. */
void fz_run(const struct fz_ops *ops, void *drv, const uint8_t *ctl, size_t nctl);

/* A recv of the client's bytes: copies what is left of payload after *fed,
 * at most limit and what space holds, and advances *fed; returns how many. */
size_t fz_recv(struct iovec space, const uint8_t *payload, size_t npayload, size_t *fed, size_t limit);

/* The lowest free descriptor now; fz_check_no_fd_leak traps unless it is
 * the same again (a connection closed everything it opened). */
int fz_fd_probe(void);
void fz_check_no_fd_leak(int probe);

#endif
