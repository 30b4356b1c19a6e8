/* conn.h - the sans-I/O connection core: the contract between a driver
 * (src/models/) and a session. The HTTP/1.1 session (http1/session.c)
 * implements it; it hands each request to the site (site/site.h) and
 * serializes the response value it gets back (http1/serialize.h). A
 * connection that opens with the HTTP/2 preface it hands to the HTTP/2
 * session (http2/session.h), behind the same calls.
 *
 * A driver owns the socket and does every system call; the core owns the
 * HTTP state. The loop, in any model:
 *
 *     switch (conn_wants(c, &deadline)) {
 *     case CONN_WANT_READ:     n = recv(fd, span); conn_input_done(c, n or -errno);
 *     case CONN_WANT_WRITE:    conn_output(c, &out); writev or sendfile;
 *                              conn_output_done(c, sent) or conn_output_failed(c);
 *     case CONN_WANT_SHUTDOWN: shutdown(fd, SHUT_WR); conn_shutdown_done(c);
 *     case CONN_WANT_CLOSE:    close(fd); conn_free(c);
 *     }
 *     on reaching deadline: conn_timeout(c);   on graceful stop: conn_drain(c);
 */
#ifndef SPINDLE_CONN_H
#define SPINDLE_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

struct server;
struct conn;

enum conn_want {
	CONN_WANT_READ,
	CONN_WANT_WRITE,
	CONN_WANT_SHUTDOWN, /* half-close, then keep reading (and discarding) until EOF or deadline */
	CONN_WANT_CLOSE,
};

#define CONN_IOV_MAX 32

/* What to send next: memory (iovcnt > 0), or else a file range. */
struct conn_output {
	struct iovec iov[CONN_IOV_MAX];
	int iovcnt;
	int file_fd;
	off_t file_off;
	size_t file_len;
	size_t total;       /* bytes this output describes */
	bool more;          /* memory now, file bytes right after: send with MSG_MORE */
};

struct conn *conn_new(const struct server *srv, const struct sockaddr *peer, socklen_t peerlen);
void conn_free(struct conn *c);
/* The client is someone other than the socket's peer: a PROXY header named
 * it (tls/wire.c). Before the first request byte only: the access log,
 * stats_allow and the per-client budgets then see this address. */
void conn_set_peer(struct conn *c, const struct sockaddr *peer, socklen_t peerlen);
/* The connection is HTTP/2 or nothing: the transport agreed on it with the
 * client (TLS ALPN "h2", tls/wire.c), or its listener speaks nothing else
 * (`listen ... http2_only`). It must open with the HTTP/2 preface; other
 * bytes are a connection error, answered with GOAWAY (PROTOCOL_ERROR) and a
 * close, never with HTTP/1.1 (RFC 9113 3.4). Before the first byte only. */
void conn_set_h2_only(struct conn *c);

/* The connection is TLS, and its handshake's SNI named the site with this
 * index in the server's site table (site/site.h), 0 for a name no site
 * claims, or -1 when the client sent none (tls/wire.c, once the handshake
 * is done). A request whose Host names another site is answered 421. */
void conn_set_tls_site(struct conn *c, int site);

/* Where the driver may put received bytes. Never empty while the core wants READ. */
struct iovec conn_input_space(struct conn *c);
/* n > 0: that many bytes arrived; n == 0: the peer closed; n < 0: -errno. */
void conn_input_done(struct conn *c, ssize_t n);

/* out's memory stays valid until the next conn_output_done() or
 * conn_output_failed(), which may move or free it: ask again after each. */
void conn_output(struct conn *c, struct conn_output *out);
void conn_output_done(struct conn *c, size_t n);
void conn_output_failed(struct conn *c);  /* the peer is gone (EPIPE, ECONNRESET...) */
void conn_shutdown_done(struct conn *c);

/* What the core waits for; *deadline_ms (CLOCK_MONOTONIC ms) is when
 * conn_timeout() must be called, or -1 for none. */
enum conn_want conn_wants(const struct conn *c, int64_t *deadline_ms);
void conn_timeout(struct conn *c);
/* Graceful stop: a busy connection closes after its response; an idle one
 * gets a short grace in which a request is still answered (with close). */
void conn_drain(struct conn *c);
/* Contract for completion-based drivers: conn_drain() and conn_timeout() never
 * move or free the input buffer, so a receive in flight into the span that
 * conn_input_space() returned stays valid until its completion is reported. */

/* True while the connection waits for bytes of a request from the client (its
 * first byte, the rest of its head, or a body to discard): a driver may park
 * it in a poller instead of holding a thread for it, until the socket is
 * readable or conn_wants' deadline passes. */
bool conn_awaits_request(const struct conn *c);

/* A driver about to wait for a connection's next request may call this: an
 * idle connection (nothing buffered, no response pending) gives back its
 * buffers, so thousands of idle keep-alive clients cost little memory. Not
 * while a receive into conn_input_space() is in flight. True if it freed
 * anything. */
bool conn_release_idle(struct conn *c);

/* Request timing. A driver that knows when the connection became readable
 * (it accepted it, or a poller, an event batch or a completion batch reported
 * it) says so before it hands the core the bytes: the next read that brings
 * bytes carries the stamp (CLOCK_MONOTONIC ns, stats_clock_ns()); 0 takes it
 * back (the read found nothing). Without one, a read's bytes count as
 * readable when the read returned: the thread that read them had waited for
 * them itself. The core stamps the rest: picked up (the read that brings a
 * request's first byte, or, for a request buffered behind another, when the
 * core starts it), and the first and last response byte passed to
 * conn_output_done(). Queue wait = picked up - readable; service time = last
 * byte - picked up (docs/operations.md, "Where a request's time goes"). */
void conn_readable(struct conn *c, int64_t ns);
/* A driver may likewise stamp a write with a clock read taken just before
 * the call that hands the kernel its bytes: the response bytes the next
 * conn_output_done() reports were out by then, and the first and last are
 * stamped so. Without one they are stamped when conn_output_done() runs: a
 * thread preempted as its write woke the client would count the client's
 * time as service. */
void conn_writing(struct conn *c, int64_t ns);

/* Monotonic milliseconds, the clock deadlines are expressed in. */
int64_t conn_now_ms(void);

#endif
