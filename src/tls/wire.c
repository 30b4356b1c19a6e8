/* wire.c - the plain and TLS transports between a driver and the core (see
 * wire.h), and the PROXY header that may come before either. The TLS one is
 * a small state machine around an SSL object whose BIOs are memory: it never
 * touches the socket. */
#include "wire.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include "../config.h"
#include "../log/log.h"
#include "../net/proxy_protocol.h"
#include "../server.h"
#include "../stats/stats.h"
#include "context.h"
#include "ktls.h"

#define WIRE_IN_SIZE (16 * 1024)      /* one receive of ciphertext */
#define WIRE_ENCRYPT_MAX (64 * 1024)  /* plaintext encrypted per output step: bounds the record buffer */
#define WIRE_FILE_CHUNK (16 * 1024)   /* one pread of a file body: one full TLS record */

enum tls_state {
	TLS_HANDSHAKE,
	TLS_OPEN,
	TLS_CLOSING, /* the handshake failed: send what is queued (an alert), then close */
	TLS_DEAD,    /* close now */
};

struct tls_conn {
	SSL *ssl;
	BIO *rbio, *wbio;      /* ciphertext in (from the driver), out (to the driver) */
	enum tls_state state;
	bool peer_eof;         /* close_notify received: the core has seen its EOF */
	bool broken;           /* a protocol error: no close_notify for this one */
	bool notify_sent;
	bool heard;            /* some ciphertext came: a connection that closes before is no handshake */
	int64_t progress_ms;   /* last write progress, for the closing flush's deadline */
	unsigned char *in;     /* WIRE_IN_SIZE, from wire_input_space() to wire_input_done() */
	unsigned char *out;    /* records for the driver: out[out_off .. out_len) */
	size_t out_off, out_len, out_cap;
	int sock;              /* only for handing TX to the kernel, never read or written here */
	struct tls_ktls *ktls; /* NULL: this connection stays in user space */
};

/* The kernel-TLS switch of one connection (TLS 1.3 only, see ktls.h).
 *
 * The sequence number: OpenSSL seals the NewSessionTicket under the
 * application keys before the first response, so the kernel cannot start at
 * 0. Deferring the ticket is no option (resumption needs it), so the wire
 * counts. The server's first flight (ServerHello .. Finished) is all out
 * before the client's Finished can arrive, and we send no 0.5-RTT data, so
 * the records under the application keys are exactly those written from
 * the SSL_do_handshake call that completes the handshake on: the wire marks
 * the stream there and counts every record header collected after the mark.
 * (The key-log callback's moment would not do as a mark: OpenSSL buffers the
 * flight in a BIO of its own and flushes it later.) The switch happens only
 * with nothing of OpenSSL's left to send and the stream between records;
 * otherwise the connection simply stays in user space.
 *
 * After the switch OpenSSL must never write again under the old TX state: a
 * KeyUpdate request from the client (which OpenSSL would answer by writing)
 * closes the connection, and close_notify is not sent (the kernel would need
 * it as an alert record through a TLS_SET_RECORD_TYPE cmsg, a system call
 * that is the driver's; an HTTP/1.1 response is framed by its length, so a
 * client loses nothing by a FIN without close_notify, RFC 9112 9.8). */
struct tls_ktls {
	bool tried, on;
	bool have_secret;
	size_t secret_len;
	unsigned char secret[KTLS_SECRET_MAX];
	struct ktls_records records;
};

/* A connection on a `proxy_protocol` listener, until its header is in. */
struct proxy_stage {
	unsigned char buf[PROXY_HEADER_MAX]; /* the bytes so far: the header, maybe more */
	size_t len;
	bool draining;                       /* its deadline is a drain's grace, not header_timeout */
	struct sockaddr_storage peer;        /* the balancer, for log lines */
	socklen_t peerlen;
};

struct wire {
	struct conn *core;
	const struct config *cfg;
	struct tls_conn *tls;       /* NULL: plain TCP */
	struct proxy_stage *proxy;  /* non-NULL: the PROXY header comes first */
	bool refused;               /* the PROXY stage refused the connection: close */
};

/* ---- the receive buffer ----------------------------------------------- */

/* The ciphertext of a receive lives in t->in only until wire_input_done()
 * has put it into the memory BIO. So that a connection the client leaves
 * silent holds no 16 KiB of it, the buffer goes back to its thread when the
 * receive is done, and the thread's next receive takes it: a loop that
 * receives synchronously (epoll, the blocking models) keeps one for all its
 * connections; a receive that waits in the kernel (uring's single-shot recv)
 * holds its own until it completes. A thread's spare is freed when it exits. */
static pthread_key_t spare_key;
static pthread_once_t spare_once = PTHREAD_ONCE_INIT;
static bool spare_ok;

static void spare_init(void)
{
	spare_ok = pthread_key_create(&spare_key, free) == 0;
}

static unsigned char *in_take(void)
{
	pthread_once(&spare_once, spare_init);
	unsigned char *p = spare_ok ? pthread_getspecific(spare_key) : NULL;
	if (p) {
		pthread_setspecific(spare_key, NULL);
		return p;
	}
	return malloc(WIRE_IN_SIZE);
}

static void in_give(unsigned char *p)
{
	pthread_once(&spare_once, spare_init);
	if (p && spare_ok && !pthread_getspecific(spare_key) && pthread_setspecific(spare_key, p) == 0)
		return;
	free(p);
}

/* ---- the PROXY header ------------------------------------------------ */

/* A listener with proxy_protocol takes the header before anything else,
 * TLS included (a balancer in TCP mode passes the ClientHello through after
 * it), and only from real_ip_from: anyone else could name any client. The
 * header is read into the stage's buffer, never more than the core can take
 * at once after it, so that what follows the header in the same read (a
 * request, a ClientHello) goes on in one piece. Until the header is whole the
 * wire wants to read under the core's deadline (header_timeout). */

#define PROXY_LOG_PER_SECOND 10 /* refusal lines an instance writes, at most */

/* The count is shared by every process forked after wire_share_limits():
 * the fork model refuses in a child per connection, and a count of each
 * child's own would let a client connecting in a loop write a line each. */
struct refusal_limit {
	_Atomic int64_t second;
	atomic_uint lines;
	atomic_ulong unlogged;
};
static struct refusal_limit refusal_local;
static struct refusal_limit *refusals = &refusal_local;
static pthread_once_t refusal_once = PTHREAD_ONCE_INIT;

static void refusal_map(void)
{
	void *p = mmap(NULL, sizeof(struct refusal_limit), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (p != MAP_FAILED) /* else each process counts its own: more lines, no harm */
		refusals = p;
}

void wire_share_limits(void)
{
	pthread_once(&refusal_once, refusal_map);
}

/* "192.0.2.1:41234", "[2001:db8::1]:41234" or "unix:". */
static void peer_text(const struct sockaddr *sa, socklen_t len, char *buf, size_t cap)
{
	char a[INET6_ADDRSTRLEN];
	if (sa && sa->sa_family == AF_INET && len >= sizeof(struct sockaddr_in)) {
		const struct sockaddr_in *s4 = (const struct sockaddr_in *)sa;
		inet_ntop(AF_INET, &s4->sin_addr, a, sizeof(a));
		snprintf(buf, cap, "%s:%u", a, ntohs(s4->sin_port));
	} else if (sa && sa->sa_family == AF_INET6 && len >= sizeof(struct sockaddr_in6)) {
		const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)sa;
		inet_ntop(AF_INET6, &s6->sin6_addr, a, sizeof(a));
		snprintf(buf, cap, "[%s]:%u", a, ntohs(s6->sin6_port));
	} else {
		snprintf(buf, cap, "%s", sa && sa->sa_family == AF_UNIX ? "unix:" : "-");
	}
}

/* One warning per refused connection, PROXY_LOG_PER_SECOND of them a second
 * at most: a client connecting in a loop must not fill the log. The first one
 * written after a quiet spell tells how many went unlogged. */
static void proxy_log_refusal(const struct sockaddr *peer, socklen_t len, const char *why)
{
	if (!log_wants(LOG_WARN))
		return;
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	struct refusal_limit *l = refusals;
	int64_t now = ts.tv_sec, was = atomic_load(&l->second);
	if (was != now && atomic_compare_exchange_strong(&l->second, &was, now))
		atomic_store(&l->lines, 0);
	if (atomic_fetch_add(&l->lines, 1) >= PROXY_LOG_PER_SECOND) {
		atomic_fetch_add(&l->unlogged, 1);
		return;
	}
	unsigned long missed = atomic_exchange(&l->unlogged, 0);
	char who[INET6_ADDRSTRLEN + 16];
	peer_text(peer, len, who, sizeof(who));
	if (missed)
		log_warn("proxy_protocol: refused %s: %s (and %lu more refusals not logged)", who, why, missed);
	else
		log_warn("proxy_protocol: refused %s: %s", who, why);
}

static void proxy_refuse(struct wire *w, const char *why)
{
	struct proxy_stage *p = w->proxy;
	if (why)
		proxy_log_refusal((const struct sockaddr *)&p->peer, p->peerlen, why);
	w->refused = true;
}

static int proxy_start(struct wire *w, const struct server *srv, const struct sockaddr *peer, socklen_t peerlen)
{
	if (!peer || !cidr_list_match(&srv->real_ip_from, peer)) {
		proxy_log_refusal(peer, peerlen, "not in real_ip_from");
		w->refused = true;
		return 0;
	}
	struct proxy_stage *p = w->proxy = malloc(sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->len = 0;
	p->draining = false;
	p->peerlen = peerlen <= sizeof(p->peer) ? peerlen : 0;
	memcpy(&p->peer, peer, p->peerlen);
	return 0;
}

static struct iovec proxy_input_space(struct wire *w)
{
	struct proxy_stage *p = w->proxy;
	size_t room = sizeof(p->buf) - p->len;
	if (!w->tls) { /* see above: the rest must fit the core's buffer */
		struct iovec core = conn_input_space(w->core);
		if (core.iov_len < room)
			room = core.iov_len;
	}
	return (struct iovec){ p->buf + p->len, room };
}

static void tls_received(struct wire *w, const unsigned char *in, size_t n);

/* Bytes that came after the header, for the transport. */
static void proxy_pass_on(struct wire *w, const unsigned char *in, size_t n)
{
	if (w->tls) {
		tls_received(w, in, n);
		return;
	}
	struct iovec space = conn_input_space(w->core);
	if (space.iov_len < n) { /* the core's buffer could not be had */
		w->refused = true;
		return;
	}
	memcpy(space.iov_base, in, n);
	conn_input_done(w->core, (ssize_t)n);
}

static void proxy_input_done(struct wire *w, ssize_t n)
{
	struct proxy_stage *p = w->proxy;
	struct proxy_header h;

	if (w->refused) /* timed out while a receive was in flight */
		return;
	if (n <= 0) {
		/* a connect-and-close (a port probe) sent no header to refuse */
		proxy_refuse(w, p->len ? "the connection ended inside its PROXY header" : NULL);
		return;
	}
	p->len += (size_t)n;
	switch (proxy_parse(p->buf, p->len, &h)) {
	case PROXY_NEED_MORE:
		return;
	case PROXY_ERROR:
		proxy_refuse(w, h.error);
		return;
	case PROXY_DONE:
		break;
	}
	/* v2 LOCAL and v1 UNKNOWN: the balancer speaks for itself (a health check) */
	if (h.relayed)
		conn_set_peer(w->core, (const struct sockaddr *)&h.src, h.addrlen);
	w->proxy = NULL; /* from here on, a plain or TLS wire */
	if (p->len > h.len)
		proxy_pass_on(w, p->buf + h.len, p->len - h.len);
	free(p);
}

static void proxy_timeout(struct wire *w)
{
	struct proxy_stage *p = w->proxy;
	/* a drain's grace running out is no fault of the balancer's */
	proxy_refuse(w, p->draining ? NULL : "no complete PROXY header within header_timeout");
	conn_timeout(w->core); /* counted as the core counts a timeout */
}

/* ---- the wire --------------------------------------------------------- */

struct wire *wire_new(const struct server *srv, const struct tls_context *tls, int sock, const struct sockaddr *peer,
		      socklen_t peerlen)
{
	struct wire *w = calloc(1, sizeof(*w));
	bool h2_only = server_h2_only_for(srv, sock); /* `listen ... http2_only` */

	if (!w)
		return NULL;
	w->cfg = srv->cfg;
	w->core = conn_new(srv, peer, peerlen);
	if (!w->core)
		goto fail;
	if (h2_only) /* the preface, or a connection error */
		conn_set_h2_only(w->core);
	if (server_proxy_for(srv, sock) && proxy_start(w, srv, peer, peerlen) < 0)
		goto fail;
	if (!tls || w->refused)
		return w;
	struct tls_conn *t = w->tls = calloc(1, sizeof(*t));
	if (!t)
		goto fail;
	t->sock = sock;
	if (tls_context_ktls(tls)) {
		t->ktls = calloc(1, sizeof(*t->ktls));
		if (!t->ktls)
			goto fail;
		ktls_records_init(&t->ktls->records);
	}
	t->ssl = SSL_new(tls_context_ssl_ctx(tls));
	t->rbio = BIO_new(BIO_s_mem());
	t->wbio = BIO_new(BIO_s_mem());
	if (!t->ssl || !t->rbio || !t->wbio) {
		BIO_free(t->rbio);
		BIO_free(t->wbio);
		t->rbio = t->wbio = NULL;
		goto fail;
	}
	/* an empty memory BIO says "retry", not "end of file" */
	BIO_set_mem_eof_return(t->rbio, -1);
	SSL_set_bio(t->ssl, t->rbio, t->wbio); /* the SSL owns them now */
	SSL_set_accept_state(t->ssl);
	SSL_set_app_data(t->ssl, t);
	if (h2_only)
		tls_offer_h2_only(t->ssl);
	t->state = TLS_HANDSHAKE;
	return w;
fail:
	ERR_clear_error();
	wire_free(w);
	return NULL;
}

void wire_free(struct wire *w)
{
	if (!w)
		return;
	if (w->tls) {
		SSL_free(w->tls->ssl);
		in_give(w->tls->in);
		free(w->tls->out);
		if (w->tls->ktls)
			OPENSSL_cleanse(w->tls->ktls, sizeof(*w->tls->ktls));
		free(w->tls->ktls);
		free(w->tls);
	}
	free(w->proxy);
	conn_free(w->core);
	free(w);
}

/* ---- TLS ------------------------------------------------------------ */

static bool out_pending(const struct tls_conn *t)
{
	return t->out_off < t->out_len;
}

/* The kernel encrypts what this connection sends: the core's output passes
 * through as it does on a plain wire (file ranges as sendfile). */
static bool kernel_tx(const struct tls_conn *t)
{
	return t->ktls && t->ktls->on && !out_pending(t);
}

/* Moves the records OpenSSL wrote into the driver's output buffer. */
static void tls_collect(struct tls_conn *t)
{
	size_t n = BIO_ctrl_pending(t->wbio);

	if (t->ktls && t->ktls->on && SSL_get_key_update_type(t->ssl) != SSL_KEY_UPDATE_NONE) {
		/* the client asked for our KeyUpdate, which OpenSSL would send with
		 * its next write, under keys the kernel holds now: close instead */
		t->broken = true;
		t->state = TLS_DEAD;
		return;
	}
	if (n == 0)
		return;
	if (t->out_off == t->out_len)
		t->out_off = t->out_len = 0;
	if (t->out_len + n > t->out_cap) {
		size_t cap = t->out_len + n;
		unsigned char *p = realloc(t->out, cap);
		if (!p) { /* cannot keep the stream whole */
			t->state = TLS_DEAD;
			return;
		}
		t->out = p;
		t->out_cap = cap;
	}
	int got = BIO_read(t->wbio, t->out + t->out_len, (int)n);
	if (got <= 0)
		return;
	if (t->ktls && t->ktls->on) { /* OpenSSL wrote under keys the kernel owns now */
		t->out_len = t->out_off;
		t->broken = true;
		t->state = TLS_DEAD;
		return;
	}
	if (t->ktls && !t->ktls->tried)
		ktls_records_feed(&t->ktls->records, t->out + t->out_len, (size_t)got);
	t->out_len += (size_t)got;
}

/* The kernel's part of the switch; a unit test puts a kernel of its own here
 * (this machine has none) to drive the path after the switch. */
static int (*ktls_installer)(int sock, const struct ktls_tx *tx) = ktls_install_tx;

void wire_ktls_set_installer(int (*install)(int sock, const struct ktls_tx *tx))
{
	ktls_installer = install ? install : ktls_install_tx;
}

void wire_ktls_keylog(const SSL *ssl, const char *line)
{
	struct tls_conn *t = SSL_get_app_data(ssl);
	struct tls_ktls *k = t ? t->ktls : NULL;

	if (!k || k->have_secret || !ktls_parse_server_secret(line, k->secret, &k->secret_len))
		return;
	k->have_secret = true;
}

/* Hands TX to the kernel if this connection qualifies; called once, before
 * the first response is encrypted, with all of OpenSSL's output sent. */
static void tls_try_ktls(struct tls_conn *t)
{
	struct tls_ktls *k = t->ktls;
	struct ktls_tx tx = { 0 };
	const SSL_CIPHER *cipher = SSL_get_current_cipher(t->ssl);
	int rc;

	k->tried = true;
	if (SSL_version(t->ssl) != TLS1_3_VERSION || !cipher || !k->have_secret ||
	    BIO_ctrl_pending(t->wbio) != 0 || !ktls_records_next_seq(&k->records, &tx.seq) ||
	    !ktls_tls13_tx_keys((uint16_t)SSL_CIPHER_get_protocol_id(cipher), k->secret, k->secret_len, &tx))
		goto out;
	rc = ktls_installer(t->sock, &tx);
	if (rc == 0) {
		k->on = true;
		log_debug("tls: kernel TLS on for TLS 1.3 TX from record %llu", (unsigned long long)tx.seq);
	} else { /* the sequence number in the message lets a test check the count */
		log_debug("tls: kernel TLS refused (%s) for TLS 1.3 TX from record %llu: this connection encrypts "
			  "in user space", strerror(-rc), (unsigned long long)tx.seq);
	}
out:
	OPENSSL_cleanse(&tx, sizeof(tx));
	OPENSSL_cleanse(k->secret, sizeof(k->secret));
	ERR_clear_error();
}

static void tls_fail_handshake(struct tls_conn *t)
{
	struct stats_slot *s = stats_here();
	/* a connect-and-close (a TCP health check, a port scan) tried no handshake */
	if (s && t->heard)
		STATS_ADD(s, tls_handshake_failures, 1);
	ERR_clear_error();
	t->broken = true;
	t->progress_ms = conn_now_ms();
	t->state = out_pending(t) ? TLS_CLOSING : TLS_DEAD; /* the alert, if any, goes out first */
}

/* Runs everything the buffered ciphertext and the core's state allow without
 * the socket: the handshake, plaintext into the core while it wants to read,
 * close_notify once it wants to close. */
static void tls_pump(struct wire *w)
{
	struct tls_conn *t = w->tls;

	for (;;) {
		if (t->state == TLS_HANDSHAKE) {
			int r = SSL_do_handshake(t->ssl);
			if (r == 1 && t->ktls) /* what follows is under the application keys */
				ktls_records_mark(&t->ktls->records, t->ktls->records.pos);
			tls_collect(t);
			if (r != 1) {
				if (SSL_get_error(t->ssl, r) != SSL_ERROR_WANT_READ)
					tls_fail_handshake(t);
				return;
			}
			t->state = TLS_OPEN;
			const unsigned char *alpn;
			unsigned int alpn_len;
			SSL_get0_alpn_selected(t->ssl, &alpn, &alpn_len);
			if (alpn_len == 2 && memcmp(alpn, "h2", 2) == 0)
				conn_set_h2_only(w->core);
			struct stats_slot *s = stats_here();
			if (s) {
				STATS_ADD(s, tls_handshakes, 1);
				if (SSL_session_reused(t->ssl))
					STATS_ADD(s, tls_resumed, 1);
			}
			/* the site the SNI chose: a request's Host is checked against it */
			conn_set_tls_site(w->core, tls_site_of(t->ssl));
		}
		if (t->state != TLS_OPEN)
			return;
		int64_t deadline;
		enum conn_want want = conn_wants(w->core, &deadline);
		if (want == CONN_WANT_READ) {
			if (t->peer_eof)
				return;
			struct iovec space = conn_input_space(w->core);
			int r = SSL_read(t->ssl, space.iov_base, (int)space.iov_len);
			tls_collect(t); /* a TLS 1.3 ticket, a KeyUpdate reply */
			if (r > 0) {
				conn_input_done(w->core, r);
				continue;
			}
			switch (SSL_get_error(t->ssl, r)) {
			case SSL_ERROR_WANT_READ:
				return;
			case SSL_ERROR_ZERO_RETURN: /* close_notify: the core sees an orderly EOF */
				t->peer_eof = true;
				conn_input_done(w->core, 0);
				continue;
			default: /* a bad record or MAC: like a reset */
				ERR_clear_error();
				t->broken = true;
				t->peer_eof = true;
				conn_input_done(w->core, -ECONNRESET);
				continue;
			}
		}
		if ((want == CONN_WANT_SHUTDOWN || want == CONN_WANT_CLOSE) && !t->notify_sent && !t->broken &&
		    !(t->ktls && t->ktls->on)) { /* no close_notify under kernel TX (see struct tls_ktls) */
			/* best effort: the driver sends it if the socket takes it
			 * before the send deadline, then shuts down or closes */
			t->notify_sent = true;
			SSL_shutdown(t->ssl);
			ERR_clear_error();
			tls_collect(t);
			t->progress_ms = conn_now_ms();
		}
		return;
	}
}

/* Encrypts the next part of the core's output (up to WIRE_ENCRYPT_MAX of
 * plaintext); the core counts it as sent, the records wait in t->out. */
static void tls_encrypt(struct wire *w)
{
	struct tls_conn *t = w->tls;
	struct conn_output o;
	size_t done = 0;

	conn_output(w->core, &o);
	if (o.iovcnt > 0) {
		for (int i = 0; i < o.iovcnt && done < WIRE_ENCRYPT_MAX; i++) {
			size_t n = o.iov[i].iov_len;
			if (n > WIRE_ENCRYPT_MAX - done)
				n = WIRE_ENCRYPT_MAX - done;
			if (n > 0 && SSL_write(t->ssl, o.iov[i].iov_base, (int)n) <= 0)
				goto broken;
			done += n;
		}
	} else {
		unsigned char buf[WIRE_FILE_CHUNK];
		while (done < o.file_len && done < WIRE_ENCRYPT_MAX) {
			size_t want = o.file_len - done < sizeof(buf) ? o.file_len - done : sizeof(buf);
			ssize_t n = pread(o.file_fd, buf, want, o.file_off + (off_t)done);
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0) { /* the file shrank (or failed) under us: the promised length can't be kept */
				if (done > 0)
					break; /* send what we have; the next step finds it */
				tls_collect(t);
				conn_output_failed(w->core);
				return;
			}
			if (SSL_write(t->ssl, buf, (int)n) <= 0)
				goto broken;
			done += (size_t)n;
		}
	}
	tls_collect(t);
	conn_output_done(w->core, done);
	tls_pump(w);
	return;
broken:
	ERR_clear_error();
	t->broken = true;
	t->state = TLS_DEAD;
	conn_output_failed(w->core);
}

/* ---- the driver interface --------------------------------------------- */

struct iovec wire_input_space(struct wire *w)
{
	struct tls_conn *t = w->tls;

	if (w->proxy)
		return proxy_input_space(w);
	if (w->refused) { /* the driver reads nothing more: the wire wants to close */
		static unsigned char none[1];
		return (struct iovec){ none, sizeof(none) };
	}
	if (!t)
		return conn_input_space(w->core);
	if (!t->in)
		t->in = in_take();
	if (!t->in) { /* the driver reads nothing and the wire closes */
		t->state = TLS_DEAD;
		static unsigned char none[1];
		return (struct iovec){ none, sizeof(none) };
	}
	return (struct iovec){ t->in, WIRE_IN_SIZE };
}

void wire_input_done(struct wire *w, ssize_t n)
{
	struct tls_conn *t = w->tls;

	if (w->proxy) {
		proxy_input_done(w, n);
		return;
	}
	if (w->refused)
		return;
	if (!t) {
		conn_input_done(w->core, n);
		return;
	}
	unsigned char *in = t->in; /* the receive is over: its buffer goes back below */
	t->in = NULL;
	if (t->state == TLS_CLOSING || t->state == TLS_DEAD) {
		in_give(in); /* a receive that was in flight: nothing more is read */
		return;
	}
	if (n <= 0) {
		in_give(in);
		if (t->state == TLS_HANDSHAKE) { /* left (or reset) mid-handshake */
			tls_fail_handshake(t);
			return;
		}
		t->peer_eof = true;
		t->broken = n < 0; /* reset: no close_notify */
		conn_input_done(w->core, n);
		tls_pump(w);
		return;
	}
	tls_received(w, in, (size_t)n);
	in_give(in);
}

/* Ciphertext for OpenSSL, from a receive (or after a PROXY header). */
static void tls_received(struct wire *w, const unsigned char *in, size_t n)
{
	struct tls_conn *t = w->tls;

	t->heard = true;
	if (!in || BIO_write(t->rbio, in, (int)n) != (int)n) {
		t->state = TLS_DEAD;
		return;
	}
	tls_pump(w);
}

void wire_output(struct wire *w, struct conn_output *out)
{
	struct tls_conn *t = w->tls;

	if (!t) {
		conn_output(w->core, out);
		return;
	}
	int64_t deadline;
	if (!out_pending(t) && t->state == TLS_OPEN && conn_wants(w->core, &deadline) == CONN_WANT_WRITE) {
		if (t->ktls && !t->ktls->tried)
			tls_try_ktls(t);
		if (kernel_tx(t)) {
			conn_output(w->core, out);
			return;
		}
		tls_encrypt(w);
	}
	out->iovcnt = 1;
	out->iov[0].iov_base = t->out + t->out_off;
	out->iov[0].iov_len = t->out_len - t->out_off;
	out->file_fd = -1;
	out->file_off = 0;
	out->file_len = 0;
	out->total = out->iov[0].iov_len;
	out->more = false;
}

void wire_output_done(struct wire *w, size_t n)
{
	struct tls_conn *t = w->tls;

	if (!t || kernel_tx(t)) {
		conn_output_done(w->core, n);
		if (t)
			tls_pump(w);
		return;
	}
	t->out_off += n;
	if (n > 0)
		t->progress_ms = conn_now_ms();
	if (t->out_off == t->out_len)
		t->out_off = t->out_len = 0;
	if (t->state == TLS_CLOSING && !out_pending(t))
		t->state = TLS_DEAD;
}

void wire_output_failed(struct wire *w)
{
	struct tls_conn *t = w->tls;
	int64_t deadline;

	if (!t || (kernel_tx(t) && t->state == TLS_OPEN)) {
		conn_output_failed(w->core);
		return;
	}
	if (t->state == TLS_HANDSHAKE) /* reset before our flight went out: a failure all the same */
		tls_fail_handshake(t);
	t->broken = true;
	t->state = TLS_DEAD;
	if (conn_wants(w->core, &deadline) == CONN_WANT_WRITE)
		conn_output_failed(w->core);
}

void wire_shutdown_done(struct wire *w)
{
	conn_shutdown_done(w->core);
	if (w->tls)
		tls_pump(w);
}

enum conn_want wire_wants(struct wire *w, int64_t *deadline_ms)
{
	struct tls_conn *t = w->tls;

	if (w->refused) {
		*deadline_ms = -1;
		return CONN_WANT_CLOSE;
	}
	enum conn_want want = conn_wants(w->core, deadline_ms);
	if (w->proxy) /* the header, under the core's deadline for a request's head */
		return want == CONN_WANT_CLOSE ? want : CONN_WANT_READ;

	if (!t)
		return want;
	if (t->state == TLS_DEAD) {
		*deadline_ms = -1;
		return CONN_WANT_CLOSE;
	}
	if (out_pending(t)) {
		/* the core may be done (closing) while its last records still go
		 * out: they get the send timeout from the last progress */
		if (t->state == TLS_CLOSING || want == CONN_WANT_CLOSE || want == CONN_WANT_SHUTDOWN)
			*deadline_ms = t->progress_ms + w->cfg->send_timeout_ms;
		return CONN_WANT_WRITE;
	}
	if (t->state == TLS_HANDSHAKE)
		return CONN_WANT_READ; /* under the core's header deadline */
	return want;
}

void wire_timeout(struct wire *w)
{
	struct tls_conn *t = w->tls;
	int64_t deadline;

	if (w->refused)
		return;
	if (w->proxy) {
		proxy_timeout(w);
		return;
	}
	if (!t) {
		conn_timeout(w->core);
		return;
	}
	if (t->state == TLS_HANDSHAKE) { /* header_timeout cuts a slow handshake */
		stats_timeout();
		tls_fail_handshake(t);
		t->state = TLS_DEAD; /* a client that is that slow gets no alert */
		return;
	}
	if (out_pending(t) || t->state != TLS_OPEN) {
		if (t->state == TLS_OPEN && conn_wants(w->core, &deadline) != CONN_WANT_CLOSE)
			conn_timeout(w->core);
		t->state = TLS_DEAD;
		return;
	}
	conn_timeout(w->core);
	tls_pump(w);
}

void wire_drain(struct wire *w)
{
	conn_drain(w->core);
	if (w->proxy)
		w->proxy->draining = true;
	if (w->tls && w->tls->state == TLS_OPEN)
		tls_pump(w);
}

bool wire_awaits_request(struct wire *w)
{
	struct tls_conn *t = w->tls;

	if (w->refused || (t && (out_pending(t) || t->state == TLS_CLOSING || t->state == TLS_DEAD)))
		return false;
	/* Mid-handshake, the client's next bytes are awaited as a head's are,
	 * so the core decides: not while draining, when the grace is watched
	 * by whoever holds the connection (a pool that parked it again would
	 * only be handed it back at once, round and round for the grace). */
	return conn_awaits_request(w->core);
}

void wire_writing(struct wire *w, int64_t ns)
{
	if (!w->tls || kernel_tx(w->tls))
		conn_writing(w->core, ns);
}

void wire_readable(struct wire *w, int64_t ns)
{
	if (!w->tls || w->tls->state == TLS_OPEN || ns == 0)
		conn_readable(w->core, ns);
}

/* A memory BIO keeps the largest buffer it ever held (a flight with the
 * certificate chain, 64 KiB of records from a file body) for as long as it
 * lives: an empty pair is swapped for new ones, which hold no buffer until
 * the next bytes come. */
static void tls_renew_bios(struct tls_conn *t)
{
	if (BIO_ctrl_pending(t->rbio) != 0 || BIO_ctrl_pending(t->wbio) != 0)
		return;
	BIO *rbio = BIO_new(BIO_s_mem());
	BIO *wbio = BIO_new(BIO_s_mem());
	if (!rbio || !wbio) { /* keep the old ones: they still work */
		BIO_free(rbio);
		BIO_free(wbio);
		ERR_clear_error();
		return;
	}
	BIO_set_mem_eof_return(rbio, -1);
	SSL_set_bio(t->ssl, rbio, wbio); /* frees the old pair */
	t->rbio = rbio;
	t->wbio = wbio;
}

bool wire_release_idle(struct wire *w)
{
	struct tls_conn *t = w->tls;

	bool freed = conn_release_idle(w->core);
	/* Between requests, and in a handshake that waits for the client's
	 * next flight (ours is sent): nothing the wire buffers is needed until
	 * the client's next bytes, which allocate again. */
	if (!t || (t->state != TLS_OPEN && t->state != TLS_HANDSHAKE) || out_pending(t) ||
	    !conn_awaits_request(w->core))
		return freed;
	freed = freed || t->in || t->out;
	in_give(t->in); /* a receive that found nothing (EAGAIN) left it here */
	free(t->out);
	t->in = t->out = NULL;
	t->out_cap = t->out_off = t->out_len = 0;
	/* OpenSSL's own record buffers are gone already: SSL_MODE_RELEASE_BUFFERS
	 * (context.c) frees them as soon as they are empty. */
	tls_renew_bios(t);
	return freed;
}
