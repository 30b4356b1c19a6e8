/* fuzz_conn.h - what the connection-core fuzz targets share: a temporary
 * document root, servers built over it, and a driver that records every byte
 * a connection sends, response by response.
 *
 * conn_driver.c includes src/conn.c itself (the Makefile links every core
 * source but that one), so the harness can check the state machine's own
 * bookkeeping (state, bytes sent of the current response, its status and
 * head length) against what actually went out. */
#ifndef SPINDLE_FUZZ_CONN_H
#define SPINDLE_FUZZ_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../../src/config.h"
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

#endif
