/* session.h - the HTTP/2 session (RFC 9113): the second implementation of
 * the connection core behind conn.h, over nghttp2's buffer API.
 *
 * The HTTP/1.1 session (http1/session.c) owns every struct conn. When a
 * connection's first bytes are the HTTP/2 connection preface (by prior
 * knowledge on a plain listener, or after ALPN chose "h2" on a TLS one) it
 * creates one of these, hands it the bytes it holds, and from then on
 * forwards each conn.h call to the h2_ function of the same name. Drivers
 * and the TLS wire see one struct conn throughout. */
#ifndef SPINDLE_HTTP2_SESSION_H
#define SPINDLE_HTTP2_SESSION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "../conn.h"

#define H2_PREFACE "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
#define H2_PREFACE_LEN 24

struct h2_session;

/* 1: buf starts with the whole preface; 0: buf is a proper prefix of it
 * (more bytes decide); -1: buf is not HTTP/2. */
int h2_preface(const char *buf, size_t len);

/* What a client that sent the preface gets from a server too full to take
 * it (overload = reject): the server's connection preface (an empty
 * SETTINGS, RFC 9113 3.4), then GOAWAY naming stream 0 with REFUSED_STREAM
 * and a few words of debug data. Last stream 0 says no request was
 * processed, so every one is safe to retry (8.7); the code says why. Fixed
 * bytes: the refusal needs no session. Returns the length written, 0 when
 * cap is too small. */
size_t h2_refusal(char *buf, size_t cap);

/* peer: the client's address as text, which must outlive the session (the
 * struct conn's), for the access log. NULL when out of memory. */
struct h2_session *h2_session_new(const struct server *srv, const char *peer, const struct sockaddr *peer_addr,
				  socklen_t peerlen);
/* The connection is TLS (tls) and its SNI named this site (conn_set_tls_site). */
void h2_session_set_tls_site(struct h2_session *s, bool tls, int sni_site);
/* The bytes received so far, preface first; ready_ns: since when they were
 * readable (conn_readable), 0 for now. */
void h2_session_start(struct h2_session *s, const char *buf, size_t len, int64_t ready_ns);
void h2_session_free(struct h2_session *s);

/* conn.h's calls, with the same contract. */
struct iovec h2_input_space(struct h2_session *s);
void h2_input_done(struct h2_session *s, ssize_t n);
void h2_output(struct h2_session *s, struct conn_output *out);
void h2_output_done(struct h2_session *s, size_t n);
void h2_output_failed(struct h2_session *s);
void h2_shutdown_done(struct h2_session *s);
enum conn_want h2_wants(const struct h2_session *s, int64_t *deadline_ms);
void h2_timeout(struct h2_session *s);
void h2_drain(struct h2_session *s);
bool h2_awaits_request(const struct h2_session *s);
bool h2_release_idle(struct h2_session *s);
void h2_readable(struct h2_session *s, int64_t ns);

#endif
