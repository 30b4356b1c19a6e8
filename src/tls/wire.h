/* wire.h - the transport between a driver and the connection core.
 *
 * A driver (src/models/) does every system call on the bytes on the wire; a
 * wire turns them into the core's plaintext and back. Its interface is the
 * core's driver interface (conn.h) with the wire_ prefix, so the loop of any
 * model reads the same:
 *
 *     driver  <-- wire bytes -->  wire ([PROXY] plain | TLS)  <-- plaintext -->  core
 *
 * A plain wire forwards every call (sendfile stays intact). A TLS wire runs
 * OpenSSL over memory BIOs: received ciphertext goes into the BIO and comes
 * out as plaintext into conn_input_space(); the core's output (memory, or a
 * file range read with pread) goes through SSL_write and the driver sends the
 * records as memory. Handshake records, alerts and close_notify go out the
 * same way, so no model learns TLS and the core never learns a connection is
 * encrypted. A handshake counts against the core's header_timeout.
 *
 * With kernel TLS (ktls.h) a TLS 1.3 wire hands its transmit direction to the
 * socket before the first response; from then on it forwards the core's
 * output like a plain wire (sendfile again) while received records still go
 * through OpenSSL.
 *
 * On a listener with proxy_protocol, a PROXY header (net/proxy_protocol.h)
 * comes before either: the wire takes it from the first bytes, only from a
 * peer in real_ip_from, and tells the core the client it names
 * (conn_set_peer); the bytes after it go on as the connection's first. A
 * peer outside real_ip_from, a malformed header, or none within
 * header_timeout: the wire wants CLOSE, with a warning in the error log. */
#ifndef SPINDLE_TLS_WIRE_H
#define SPINDLE_TLS_WIRE_H

#include "../conn.h"

struct tls_context;
struct wire;

/* tls: the listener's TLS context, or NULL for plain TCP. sock: the
 * connection's socket; the wire never reads or writes it, but may hand its
 * TLS transmit direction to the kernel (ktls.h), and asks the server whether
 * its listener takes a PROXY header (server_proxy_for). */
struct wire *wire_new(const struct server *srv, const struct tls_context *tls, int sock, const struct sockaddr *peer,
		      socklen_t peerlen);
void wire_free(struct wire *w);
/* Makes the PROXY refusal log limit one for this process and every process
 * it forks from now on (call before forking the serving processes). */
void wire_share_limits(void);

struct iovec wire_input_space(struct wire *w);
void wire_input_done(struct wire *w, ssize_t n);
/* A TLS wire describes memory (iovcnt == 1), unless the kernel took its
 * transmit direction over: then it passes the core's output through. */
void wire_output(struct wire *w, struct conn_output *out);
void wire_output_done(struct wire *w, size_t n);
void wire_output_failed(struct wire *w);
void wire_shutdown_done(struct wire *w);
enum conn_want wire_wants(struct wire *w, int64_t *deadline_ms);
void wire_timeout(struct wire *w);
void wire_drain(struct wire *w);
bool wire_awaits_request(struct wire *w);
bool wire_release_idle(struct wire *w); /* conn_release_idle() and the wire's own buffers */
/* conn_readable(); a TLS wire keeps only stamps that come once its handshake
 * is done: the stamps time requests, and a handshake is none. */
void wire_readable(struct wire *w, int64_t ns);
/* conn_writing(); only where the socket's bytes are the core's (no TLS, or
 * kernel TLS): a user-space TLS wire's core is done when its bytes are
 * encrypted, before any write. */
void wire_writing(struct wire *w, int64_t ns);

/* OpenSSL's key-log callback for contexts with kernel TLS (context.c): takes
 * the server application traffic secret for the kernel. */
struct ssl_st;
void wire_ktls_keylog(const struct ssl_st *ssl, const char *line);

/* For unit tests only: replaces ktls_install_tx (NULL restores it). */
struct ktls_tx;
void wire_ktls_set_installer(int (*install)(int sock, const struct ktls_tx *tx));

#endif
