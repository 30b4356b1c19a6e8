/* fuzz_tls.h - what the TLS fuzz target needs beyond fuzz_conn.h: TLS
 * servers over the fuzz docroot, a random source that repeats itself, and a
 * driver that runs one TLS wire (src/tls/wire.h) as a model does.
 *
 * Why the random source: a client's second flight (Finished, then its
 * requests) is sealed under keys that depend on the server's random and key
 * share. With OpenSSL's randomness both change each run, and no recorded
 * session gets past the ClientHello. The fuzz build replaces OpenSSL's
 * RAND_METHOD with a counter-based generator restarted for each connection,
 * and makes the certificate from it too (fixed dates), so the server's
 * whole flight is the same in every run and a recorded client (seeds-tls/,
 * made by `fuzz_tls` with FUZZ_TLS_RECORD set) replays to the end. */
#ifndef SPINDLE_FUZZ_TLS_H
#define SPINDLE_FUZZ_TLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fuzz_conn.h"

struct tls_context;

/* Who draws random bytes: each side has its own stream, so an in-process
 * client (record mode) leaves the server's draws as they are on replay. */
enum fz_rand_stream { FZ_RAND_SERVER, FZ_RAND_CLIENT };

/* Installs the generator (once, before any OpenSSL object is made). */
void fz_rand_install(void);
/* Restarts both streams: the next connection draws what the last one did. */
void fz_rand_restart(void);
void fz_rand_use(enum fz_rand_stream s);

/* The TLS servers, made once: [0] no cache, TLS in user space; [1] with a
 * file cache and kernel TLS "on" (a fake installer stands for the kernel:
 * the wire then passes the core's output through, file ranges included). */
struct fz_tls_server {
	const struct server *srv;
	const struct tls_context *tls;
};
void fz_tls_servers_open(struct fz_tls_server out[2]);
/* Whether the fake kernel accepts the keys (else the wire stays in user space). */
void fz_tls_kernel_accepts(bool yes);

/* A peer that answers (record mode): `received` gets every byte the server
 * sends; `more` is asked for the client's next bytes once the given ones
 * are read, and returns false for none (then the driver sends EOF). */
struct fz_tls_peer {
	void (*received)(void *arg, const void *p, size_t n);
	bool (*more)(void *arg, const uint8_t **p, size_t *n);
	void *arg;
};

/* Runs one TLS connection to its end, as fz_drive does for the core: the
 * same control bytes (conn_driver.c), `payload` being the client's
 * ciphertext. Checks the wire's invariants as it goes; frees everything. */
void fz_tls_drive(const struct fz_tls_server *s, const uint8_t *ctl, size_t nctl, const uint8_t *payload,
		  size_t npayload, const struct fz_tls_peer *peer);

#endif
