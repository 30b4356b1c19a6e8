/* context.h - the TLS settings every connection of a generation shares: one
 * OpenSSL SSL_CTX (certificate chain, key, Mozilla "intermediate" protocol
 * and cipher choice, ALPN h2 and http/1.1) and the session-ticket secret.
 *
 * Built by the master in server_init(), before any fork, so every serving
 * process and thread of a generation holds the same ticket secret and a
 * ticket issued by one resumes in any other. Ticket keys rotate every
 * TLS_TICKET_ROTATE_S seconds (derived from the secret and the period's
 * number, so no process has to tell another) and on reload (a new
 * generation draws a new secret).
 *
 * Each [site NAME] with a certificate of its own has it loaded here too;
 * the client's SNI puts it on the connection (the handshake's policy, ALPN
 * and tickets stay the shared context's). */
#ifndef SPINDLE_TLS_CONTEXT_H
#define SPINDLE_TLS_CONTEXT_H

#include <stdbool.h>

struct config;
struct tls_context;

/* A ticket is issued under the current period's key and accepted during the
 * next period too (then renewed): it lives between one and two periods. */
#define TLS_TICKET_ROTATE_S 3600

/* Loads cfg's certificate and key. NULL after logging a message that names
 * the file at fault (unreadable, not a certificate, key does not match). */
struct tls_context *tls_context_new(const struct config *cfg);
void tls_context_free(struct tls_context *t);

/* The site an established connection's SNI names, as its certificate was
 * chosen (the best match of the sites' names): its index in the server's
 * site table (site/site.h: 0 the top level's, i + 1 cfg->sites[i]), 0 for a
 * name no site claims, -1 when the client sent no SNI or an address as one
 * (RFC 6066 3 allows none). ssl: the SSL *. */
int tls_site_of(const void *ssl);

/* The connection's listener speaks HTTP/2 alone (`listen ... http2_only`):
 * ALPN offers it h2 and nothing else, so a client that offers only other
 * protocols fails the handshake with no_application_protocol (RFC 7301
 * 3.2). ssl: the SSL *, before its handshake, of a context built by
 * tls_context_new(). */
void tls_offer_h2_only(void *ssl);

/* The OpenSSL context (an SSL_CTX *), for the transport layer. */
void *tls_context_ssl_ctx(const struct tls_context *t);

/* Whether connections of this context try kernel TLS: the kernel offered it
 * when the context was built, or the environment has SPINDLE_KTLS=try (the
 * ULP list names only loaded modules, and setsockopt may load "tls" on
 * demand; the tests use it to drive the attempt and its fallback where the
 * kernel has none). */
bool tls_context_ktls(const struct tls_context *t);

/* Frees the calling thread's OpenSSL state (error queue, random
 * generators) now rather than in OpenSSL's thread-exit handler: a thread
 * that says it is done before it has exited (thread's live count) may
 * otherwise still own that state when the process leaves. */
void tls_thread_done(void);

/* Whether the kernel offers TLS offload ("tls" in tcp_available_ulp). */
bool tls_kernel_available(void);

#endif
