/* tls_driver.c - a fuzzing driver for the TLS wire (see fuzz_tls.h): the
 * repeatable random source, the TLS servers, and the actions fz_run
 * (conn_driver.c) takes on a wire, each as a model's io.c takes it.
 *
 * It includes src/tls/wire.c itself (the Makefile links every other source)
 * so it can check the wire's own state between calls: no plaintext left
 * undelivered while it waits for the client, bounded buffers. */
#define OPENSSL_SUPPRESS_DEPRECATED /* RAND_set_rand_method: see fz_rand_install */
#include "../../src/tls/wire.c"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>

#include "fuzz_tls.h"

/* ---- the random source --------------------------------------------- */

static uint64_t fz_rand_next[2];
static enum fz_rand_stream fz_rand_cur;

static uint64_t fz_splitmix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15u;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9u;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebu;
	return x ^ (x >> 31);
}

static int fz_rand_bytes(unsigned char *buf, int num)
{
	for (int i = 0; i < num; i += 8) {
		uint64_t v = fz_splitmix(fz_rand_next[fz_rand_cur]++ ^ ((uint64_t)fz_rand_cur << 60));
		for (int k = 0; k < 8 && i + k < num; k++)
			buf[i + k] = (unsigned char)(v >> (8 * k));
	}
	return 1;
}

static int fz_rand_seed(const void *buf, int num)
{
	(void)buf, (void)num;
	return 1;
}

static int fz_rand_add(const void *buf, int num, double entropy)
{
	(void)buf, (void)num, (void)entropy;
	return 1;
}

static int fz_rand_status(void)
{
	return 1;
}

static const RAND_METHOD fz_rand_method = {
	.seed = fz_rand_seed,
	.bytes = fz_rand_bytes,
	.add = fz_rand_add,
	.pseudorand = fz_rand_bytes,
	.status = fz_rand_status,
};

/* OpenSSL 3's RAND_bytes_ex and RAND_priv_bytes_ex (server random, key
 * shares, ECDSA nonces, ticket IVs) still ask a RAND_METHOD set this way
 * before their DRBGs: deprecated, and exactly the test hook wanted here. */
void fz_rand_install(void)
{
	FZ_CHECK(RAND_set_rand_method(&fz_rand_method) == 1);
	fz_rand_restart();
}

void fz_rand_restart(void)
{
	fz_rand_next[FZ_RAND_SERVER] = fz_rand_next[FZ_RAND_CLIENT] = 0;
	fz_rand_cur = FZ_RAND_SERVER;
}

void fz_rand_use(enum fz_rand_stream s)
{
	fz_rand_cur = s;
}

/* ---- the servers ---------------------------------------------------- */

static bool fz_kernel_accepts;

static int fz_fake_kernel(int sock, const struct ktls_tx *tx)
{
	(void)sock, (void)tx;
	return fz_kernel_accepts ? 0 : -ENOPROTOOPT;
}

void fz_tls_kernel_accepts(bool yes)
{
	fz_kernel_accepts = yes;
}

/* A P-256 key and a self-signed certificate with fixed dates, from the
 * repeatable random source: the same bytes in every process, as the
 * recorded sessions' transcripts need. Written where the context loads
 * them, outside the docroot; the caller removes them once loaded. */
static void fz_write_cert(char *dir, struct config *cfg)
{
	EVP_PKEY *key = EVP_EC_gen("P-256");
	X509 *crt = X509_new();
	FILE *f;

	FZ_CHECK(key && crt);
	X509_set_version(crt, 2);
	ASN1_INTEGER_set(X509_get_serialNumber(crt), 1);
	FZ_CHECK(ASN1_TIME_set_string(X509_getm_notBefore(crt), "20250101000000Z") == 1);
	FZ_CHECK(ASN1_TIME_set_string(X509_getm_notAfter(crt), "20991231235959Z") == 1);
	X509_NAME_add_entry_by_txt(X509_get_subject_name(crt), "CN", MBSTRING_ASC, (const unsigned char *)"fuzz", -1,
				   -1, 0);
	X509_set_issuer_name(crt, X509_get_subject_name(crt));
	X509_set_pubkey(crt, key);
	FZ_CHECK(X509_sign(crt, key, EVP_sha256()) > 0);

	FZ_CHECK(mkdtemp(dir));
	snprintf(cfg->tls_certificate, sizeof(cfg->tls_certificate), "%s/cert.pem", dir);
	snprintf(cfg->tls_certificate_key, sizeof(cfg->tls_certificate_key), "%s/key.pem", dir);
	FZ_CHECK((f = fopen(cfg->tls_certificate, "w")) && PEM_write_X509(f, crt) == 1);
	fclose(f);
	FZ_CHECK((f = fopen(cfg->tls_certificate_key, "w")) &&
		 PEM_write_PrivateKey(f, key, NULL, NULL, 0, NULL, NULL) == 1);
	fclose(f);
	X509_free(crt);
	EVP_PKEY_free(key);
}

static struct config fz_tls_cfg[2];
static struct server fz_tls_srv[2];
static bool fz_tls_open;

static void fz_tls_servers_close(void)
{
	server_close(&fz_tls_srv[0]);
	server_close(&fz_tls_srv[1]);
}

void fz_tls_servers_open(struct fz_tls_server out[2])
{
	if (!fz_tls_open) {
		char dir[] = "/tmp/spindle-fuzz-tls-XXXXXX";
		fz_rand_install();
		for (int i = 0; i < 2; i++) {
			fz_config(&fz_tls_cfg[i], i == 1);
			fz_tls_cfg[i].tls = true;
		}
		fz_write_cert(dir, &fz_tls_cfg[0]);
		memcpy(fz_tls_cfg[1].tls_certificate, fz_tls_cfg[0].tls_certificate, sizeof(fz_tls_cfg[1].tls_certificate));
		memcpy(fz_tls_cfg[1].tls_certificate_key, fz_tls_cfg[0].tls_certificate_key,
		       sizeof(fz_tls_cfg[1].tls_certificate_key));
		FZ_CHECK(server_init(&fz_tls_srv[0], &fz_tls_cfg[0], NULL) == 0);
		setenv("SPINDLE_KTLS", "try", 1); /* context.h: try kernel TLS where the kernel has none */
		FZ_CHECK(server_init(&fz_tls_srv[1], &fz_tls_cfg[1], NULL) == 0);
		unsetenv("SPINDLE_KTLS");
		FZ_CHECK(fz_tls_srv[0].tls && !tls_context_ktls(fz_tls_srv[0].tls));
		FZ_CHECK(fz_tls_srv[1].tls && tls_context_ktls(fz_tls_srv[1].tls));
		unlink(fz_tls_cfg[0].tls_certificate);
		unlink(fz_tls_cfg[0].tls_certificate_key);
		rmdir(dir);
		wire_ktls_set_installer(fz_fake_kernel);
		fz_tls_open = true;
		atexit(fz_tls_servers_close);
	}
	for (int i = 0; i < 2; i++)
		out[i] = (struct fz_tls_server){ &fz_tls_srv[i], fz_tls_srv[i].tls };
}

/* ---- the driver ----------------------------------------------------- */

/* A handshake flight, plus WIRE_ENCRYPT_MAX of plaintext sealed into
 * records, plus the odd ticket or KeyUpdate: far below this. */
#define FZ_TLS_OUT_MAX (256u * 1024)

struct fz_tls_drv {
	struct wire *w;
	const uint8_t *payload;
	size_t npayload, fed;
	const struct fz_tls_peer *peer;
	bool eof_sent;
	bool verbose;
	enum tls_state seen; /* for FUZZ_VERBOSE */
};

/* Invariants that hold whenever the driver asks what the wire wants. */
static enum conn_want fz_tls_wants(struct fz_tls_drv *d, int64_t *deadline)
{
	struct wire *w = d->w;
	struct tls_conn *t = w->tls;
	enum conn_want want = wire_wants(w, deadline);
	int64_t core_deadline;
	enum conn_want core = conn_wants(w->core, &core_deadline);

	FZ_CHECK(t);
	switch (want) {
	case CONN_WANT_READ:
		FZ_CHECK(*deadline >= 0);
		FZ_CHECK(!out_pending(t)); /* nothing of ours is left unsent while we wait */
		/* Plaintext OpenSSL has already decrypted must reach a core that
		 * wants it now: waiting for the client instead would stall a
		 * request it has sent whole. */
		if (t->state == TLS_OPEN && core == CONN_WANT_READ && !t->peer_eof)
			FZ_CHECK(SSL_pending(t->ssl) == 0);
		break;
	case CONN_WANT_WRITE:
		FZ_CHECK(*deadline >= 0);
		FZ_CHECK(out_pending(t) || (t->state == TLS_OPEN && core == CONN_WANT_WRITE));
		break;
	case CONN_WANT_SHUTDOWN:
	case CONN_WANT_CLOSE:
		FZ_CHECK(*deadline == -1);
		break;
	}
	/* a pool parks a connection that awaits a request until its socket is
	 * readable: one with something to send would never be woken */
	if (wire_awaits_request(w))
		FZ_CHECK(want == CONN_WANT_READ);
	FZ_CHECK(t->out_off <= t->out_len && t->out_len <= t->out_cap);
	FZ_CHECK(t->out_len <= FZ_TLS_OUT_MAX);
	/* the driver reads only while the wire wants to, which it does only
	 * after OpenSSL took what it could: at most a record is left over */
	FZ_CHECK(BIO_ctrl_pending(t->rbio) <= 2 * WIRE_IN_SIZE + 1024);
	return want;
}

static void fz_tls_write_step(struct fz_tls_drv *d, size_t limit)
{
	struct conn_output out;
	int64_t deadline;

	wire_output(d->w, &out);
	if (out.total == 0) {
		/* io.c's path: the wire found it cannot go on (an encryption
		 * failure, a file that shrank) and must close now, not spin */
		wire_output_done(d->w, 0);
		FZ_CHECK(wire_wants(d->w, &deadline) != CONN_WANT_WRITE);
		return;
	}
	FZ_CHECK(out.iovcnt >= 0 && out.iovcnt <= CONN_IOV_MAX);
	if (!kernel_tx(d->w->tls))
		FZ_CHECK(out.iovcnt == 1 && out.file_len == 0);
	size_t sum = 0;
	for (int i = 0; i < out.iovcnt; i++) {
		FZ_CHECK(out.iov[i].iov_base && out.iov[i].iov_len > 0);
		sum += out.iov[i].iov_len;
	}
	FZ_CHECK(out.total == (out.iovcnt ? sum : out.file_len));

	size_t n = limit < out.total ? limit : out.total, left = n;
	for (int i = 0; i < out.iovcnt && left > 0; i++) {
		size_t k = out.iov[i].iov_len < left ? out.iov[i].iov_len : left;
		if (d->peer)
			d->peer->received(d->peer->arg, out.iov[i].iov_base, k);
		left -= k;
	}
	if (out.iovcnt == 0) { /* sendfile's view: the range is there in the file */
		char *tmp = malloc(n);
		FZ_CHECK(tmp);
		FZ_CHECK(pread(out.file_fd, tmp, n, out.file_off) == (ssize_t)n);
		free(tmp);
	}
	wire_output_done(d->w, n);
}

/* Reads up to `limit` bytes of the client's; when they are all read, asks
 * the peer for more, and without any sends EOF if `eof_when_empty`. */
static void fz_tls_read_step(struct fz_tls_drv *d, size_t limit, bool eof_when_empty)
{
	struct iovec space = wire_input_space(d->w);

	FZ_CHECK(space.iov_len > 0);
	if (d->fed == d->npayload && d->peer && d->peer->more(d->peer->arg, &d->payload, &d->npayload))
		d->fed = 0;
	size_t n = fz_recv(space, d->payload, d->npayload, &d->fed, limit);
	if (n > 0) {
		wire_input_done(d->w, (ssize_t)n);
	} else if (eof_when_empty) {
		FZ_CHECK(!d->eof_sent); /* once the wire saw EOF it never wants to read again */
		d->eof_sent = true;
		wire_input_done(d->w, 0);
	}
}

/* ---- the wire's actions, for fz_run ------------------------------------ */

static enum conn_want fz_tls_wants_op(void *drv, int64_t *deadline)
{
	struct fz_tls_drv *d = drv;
	enum conn_want w = fz_tls_wants(d, deadline);

	if (d->verbose && d->w->tls->state != d->seen) { /* when reproducing: how far the handshake got */
		d->seen = d->w->tls->state;
		fprintf(stderr, "fuzz: tls state %d (%s)\n", (int)d->seen, SSL_get_version(d->w->tls->ssl));
	}
	return w;
}

static void fz_tls_write(void *drv, size_t limit)
{
	fz_tls_write_step(drv, limit);
}

static void fz_tls_read(void *drv, size_t limit, bool eof_when_empty)
{
	fz_tls_read_step(drv, limit, eof_when_empty);
}

static void fz_tls_shutdown_done(void *drv)
{
	wire_shutdown_done(((struct fz_tls_drv *)drv)->w);
}

static void fz_tls_timeout(void *drv, enum conn_want was)
{
	struct fz_tls_drv *d = drv;
	/* A send timeout with records unsent ends the connection. With none
	 * unsent (the core's response not sealed yet: a driver only waits
	 * after a short send, so only the fuzzer times out here), the core
	 * gives up on its response and the wire may still try a close_notify. */
	bool unsent = out_pending(d->w->tls);
	int64_t deadline;

	wire_timeout(d->w);
	if (was == CONN_WANT_WRITE)
		FZ_CHECK(wire_wants(d->w, &deadline) == CONN_WANT_CLOSE || (!unsent && d->w->tls->notify_sent));
}

static void fz_tls_drain(void *drv)
{
	wire_drain(((struct fz_tls_drv *)drv)->w);
}

static void fz_tls_output_failed(void *drv)
{
	struct fz_tls_drv *d = drv;
	int64_t deadline;

	wire_output_failed(d->w);
	FZ_CHECK(wire_wants(d->w, &deadline) == CONN_WANT_CLOSE);
}

static void fz_tls_input_end(void *drv, ssize_t how)
{
	struct fz_tls_drv *d = drv;

	if (d->eof_sent)
		return;
	wire_input_space(d->w);
	wire_input_done(d->w, how);
	/* the driver sends nothing after an EOF or a reset */
	d->eof_sent = true;
	d->fed = d->npayload;
	d->peer = NULL;
}

static void fz_tls_release_idle(void *drv)
{
	wire_release_idle(((struct fz_tls_drv *)drv)->w);
}

static const struct fz_ops fz_tls_ops = {
	.wants = fz_tls_wants_op,
	.write = fz_tls_write,
	.read = fz_tls_read,
	.shutdown_done = fz_tls_shutdown_done,
	.timeout = fz_tls_timeout,
	.drain = fz_tls_drain,
	.output_failed = fz_tls_output_failed,
	.input_end = fz_tls_input_end,
	.release_idle = fz_tls_release_idle,
};

void fz_tls_drive(const struct fz_tls_server *s, const uint8_t *ctl, size_t nctl, const uint8_t *payload,
		  size_t npayload, const struct fz_tls_peer *peer)
{
	struct sockaddr_in addr = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct fz_tls_drv d = { .payload = payload, .npayload = npayload, .peer = peer,
				.verbose = getenv("FUZZ_VERBOSE") != NULL, .seen = TLS_HANDSHAKE };

	int fd_probe = fz_fd_probe();
	fz_rand_restart();
	d.w = wire_new(s->srv, s->tls, -1, (const struct sockaddr *)&addr, sizeof(addr));
	FZ_CHECK(d.w && d.w->tls);
	fz_run(&fz_tls_ops, &d, ctl, nctl);
	wire_free(d.w);
	ERR_clear_error();
	fz_check_no_fd_leak(fd_probe);
}
