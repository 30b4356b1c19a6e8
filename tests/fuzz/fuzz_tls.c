/* fuzz_tls.c - libFuzzer target for the TLS transport (src/tls/wire.c): the
 * client's ciphertext goes into a wire as a model's recv would put it, the
 * connection core answers behind it, and the driver (tls_driver.c) checks
 * the wire between every two calls.
 *
 * Input layout: byte 0 picks the server and the mode, byte 1 is the number
 * of control bytes, which come last (driver actions: short reads and
 * writes, a timeout, a drain, EOF, a reset, a send failure; conn_driver.c):
 * mutating them leaves the ciphertext before them whole. Byte 0:
 *   bit 0  the server with a file cache and kernel TLS (fuzz_tls.h)
 *   bit 1  the fake kernel takes the keys
 *   bit 2  client mode: the bytes between are a script for an OpenSSL
 *          client in process (see client_step), which completes a real
 *          handshake and seals what the script says into records; else
 *          they are the client's ciphertext, sent as they are
 *   bit 3  client mode: TLS 1.2 rather than 1.3
 * Raw ciphertext reaches the handshake parser; past a handshake only the
 * recorded seeds replay (fuzz_tls.h says why), and a mutated record fails
 * its MAC. Client mode is how mutated requests, record boundaries,
 * KeyUpdates and close_notify reach an open connection.
 *
 * Record mode: FUZZ_TLS_RECORD=DIR makes the target run the sessions below
 * with the in-process client, write each client's bytes to DIR/<name> as a
 * raw input, and exit. The server's random source repeats itself, so these
 * inputs complete their handshakes and requests when the fuzzer replays
 * them (tests/fuzz/seeds-tls/ was made so). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include "fuzz_tls.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct fz_tls_server servers[2];

/* ---- the in-process client and record mode's sessions ------------------ */

#define STEP_KEY_UPDATE "\x01"  /* ask the server for a KeyUpdate */
#define STEP_CLOSE_NOTIFY "\x02"

struct session {
	const char *name;
	int max_version;
	const char *ciphers12, *suites13, *groups;
	const char *alpn; /* wire format, NULL: offer none */
	const char *steps[6];
};

static const struct session sessions[] = {
	{ "tls13-get", TLS1_3_VERSION, NULL, NULL, NULL, "\x08http/1.1",
	  { "GET / HTTP/1.1\r\nHost: fuzz\r\n\r\n", STEP_CLOSE_NOTIFY } },
	{ "tls13-keepalive", TLS1_3_VERSION, NULL, NULL, NULL, NULL,
	  { "GET /mid.txt HTTP/1.1\r\nHost: fuzz\r\n\r\n", "HEAD /index.html HTTP/1.1\r\nHost: fuzz\r\n\r\n",
	    "GET /big.bin HTTP/1.1\r\nHost: fuzz\r\nRange: bytes=0-99,30000-30099\r\n\r\n",
	    "GET /big.bin HTTP/1.1\r\nHost: fuzz\r\n\r\n", STEP_CLOSE_NOTIFY } },
	{ "tls13-pipelined", TLS1_3_VERSION, NULL, "TLS_CHACHA20_POLY1305_SHA256", NULL, NULL,
	  { "GET /index.html HTTP/1.1\r\nHost: fuzz\r\n\r\nGET /dir/ HTTP/1.1\r\nHost: fuzz\r\n\r\n"
	    "GET /nope HTTP/1.1\r\nHost: fuzz\r\nConnection: close\r\n\r\n" } },
	{ "tls13-keyupdate", TLS1_3_VERSION, NULL, "TLS_AES_256_GCM_SHA384", "P-256", NULL,
	  { "GET /index.html HTTP/1.1\r\nHost: fuzz\r\n\r\n", STEP_KEY_UPDATE,
	    "GET /mid.txt HTTP/1.1\r\nHost: fuzz\r\n\r\n", STEP_CLOSE_NOTIFY } },
	{ "tls13-post-bad", TLS1_3_VERSION, NULL, NULL, NULL, NULL,
	  { "POST /index.html HTTP/1.1\r\nHost: fuzz\r\nContent-Length: 5\r\n\r\nhello",
	    "GET / HTTP/1.1\r\nHost: fuzz\r\nBad header\r\n\r\n" } },
	{ "tls12-aesgcm", TLS1_2_VERSION, "ECDHE-ECDSA-AES128-GCM-SHA256", NULL, NULL, "\x08http/1.1",
	  { "GET /big.bin HTTP/1.1\r\nHost: fuzz\r\n\r\n", "GET /empty.txt HTTP/1.1\r\nHost: fuzz\r\n\r\n",
	    STEP_CLOSE_NOTIFY } },
	{ "tls12-chacha", TLS1_2_VERSION, "ECDHE-ECDSA-CHACHA20-POLY1305", NULL, NULL, NULL,
	  { "GET /noindex/ HTTP/1.1\r\nHost: fuzz\r\n\r\n", STEP_CLOSE_NOTIFY } },
	{ "alpn-h2-only", TLS1_3_VERSION, NULL, NULL, NULL, "\x02h2", { NULL } },
};

struct client {
	SSL *ssl;
	BIO *in, *out;
	const struct session *s; /* record mode: its steps; else the script's */
	size_t step;
	const uint8_t *script;
	size_t nscript, pos;
	unsigned char *rec; /* every byte the client sent, in order */
	size_t rec_len, rec_cap;
	size_t plain;       /* plaintext bytes it received */
	int responses;
};

static void client_received(void *arg, const void *p, size_t n)
{
	struct client *c = arg;
	FZ_CHECK(BIO_write(c->in, p, (int)n) == (int)n);
}

/* One step of a fuzz script, once the handshake is done; true: the next
 * one goes out with it (bit 7), else the client waits for the server to
 * be idle again. Op byte, low 2 bits:
 *   0  a record of plaintext: the next byte is its length - 1, then the bytes
 *   1  a KeyUpdate (bit 2: requesting the server's); under TLS 1.2 a
 *      renegotiation (a ClientHello on the open connection)
 *   2  close_notify
 *   3  raw bytes as they are (a torn or forged record): length, bytes */
static bool client_step(struct client *c)
{
	if (c->pos >= c->nscript)
		return false;
	uint8_t op = c->script[c->pos++];
	size_t len = 0;

	if ((op & 3) == 0 || (op & 3) == 3) {
		len = c->pos < c->nscript ? (size_t)c->script[c->pos++] + ((op & 3) == 0) : 0;
		if (len > c->nscript - c->pos)
			len = c->nscript - c->pos;
	}
	const uint8_t *data = c->script + c->pos;
	c->pos += len;
	switch (op & 3) {
	case 0:
		if (len > 0 && SSL_write(c->ssl, data, (int)len) <= 0)
			return false;
		break;
	case 1:
		if (SSL_version(c->ssl) == TLS1_2_VERSION) /* the server refuses it (no_renegotiation) */
			SSL_renegotiate(c->ssl);
		else
			SSL_key_update(c->ssl, op & 4 ? SSL_KEY_UPDATE_REQUESTED : SSL_KEY_UPDATE_NOT_REQUESTED);
		SSL_do_handshake(c->ssl);
		break;
	case 2:
		SSL_shutdown(c->ssl);
		break;
	case 3:
		FZ_CHECK(BIO_write(c->out, data, (int)len) == (int)len || len == 0);
		break;
	}
	return op & 0x80;
}

/* Runs the client's next move under its own random stream: read what
 * came, then finish the handshake or take the session's next step. */
static bool client_more(void *arg, const uint8_t **p, size_t *n)
{
	struct client *c = arg;
	unsigned char buf[16384];
	int r;

	fz_rand_use(FZ_RAND_CLIENT);
	while ((r = SSL_read(c->ssl, buf, sizeof(buf))) > 0) {
		c->plain += (size_t)r;
		for (const unsigned char *q = buf; (q = memmem(q, (size_t)(buf + r - q), "HTTP/1.1 ", 9)); q += 9)
			c->responses++;
	}
	if (!SSL_is_init_finished(c->ssl)) {
		SSL_do_handshake(c->ssl);
	} else if (c->s) {
		if (c->step < sizeof(c->s->steps) / sizeof(c->s->steps[0]) && c->s->steps[c->step]) {
			const char *st = c->s->steps[c->step++];
			if (strcmp(st, STEP_KEY_UPDATE) == 0) {
				FZ_CHECK(SSL_key_update(c->ssl, SSL_KEY_UPDATE_REQUESTED) == 1);
				SSL_do_handshake(c->ssl);
			} else if (strcmp(st, STEP_CLOSE_NOTIFY) == 0) {
				SSL_shutdown(c->ssl);
			} else {
				FZ_CHECK(SSL_write(c->ssl, st, (int)strlen(st)) == (int)strlen(st));
			}
		}
	} else {
		while (client_step(c))
			;
	}
	ERR_clear_error();
	fz_rand_use(FZ_RAND_SERVER);

	size_t pending = BIO_ctrl_pending(c->out);
	if (pending == 0)
		return false;
	if (c->rec_len + pending > c->rec_cap) {
		c->rec_cap = (c->rec_len + pending) * 2;
		FZ_CHECK((c->rec = realloc(c->rec, c->rec_cap)));
	}
	FZ_CHECK(BIO_read(c->out, c->rec + c->rec_len, (int)pending) == (int)pending);
	*p = c->rec + c->rec_len;
	*n = pending;
	c->rec_len += pending;
	return true;
}

/* A client context as a session asks for (record mode), or the fuzz
 * script's (s == NULL: TLS 1.3, or 1.2 with `tls12`). */
static SSL_CTX *client_ctx(const struct session *s, bool tls12)
{
	SSL_CTX *ctx;

	fz_rand_use(FZ_RAND_CLIENT);
	FZ_CHECK((ctx = SSL_CTX_new(TLS_client_method())));
	SSL_CTX_set_max_proto_version(ctx, s ? s->max_version : tls12 ? TLS1_2_VERSION : TLS1_3_VERSION);
	if (s && s->ciphers12)
		FZ_CHECK(SSL_CTX_set_cipher_list(ctx, s->ciphers12) == 1);
	if (s && s->suites13)
		FZ_CHECK(SSL_CTX_set_ciphersuites(ctx, s->suites13) == 1);
	if (s && s->groups)
		FZ_CHECK(SSL_CTX_set1_groups_list(ctx, s->groups) == 1);
	if (s && s->alpn)
		FZ_CHECK(SSL_CTX_set_alpn_protos(ctx, (const unsigned char *)s->alpn, (unsigned)strlen(s->alpn)) == 0);
	fz_rand_use(FZ_RAND_SERVER);
	return ctx;
}

/* Runs one connection with the client on `ctx` playing the session or
 * the script; the client's bytes stay in c->rec (the caller frees it). */
static void client_run(struct client *c, SSL_CTX *ctx, const struct fz_tls_server *srv, const uint8_t *ctl,
		       size_t nctl)
{
	fz_rand_restart();
	fz_rand_use(FZ_RAND_CLIENT);
	FZ_CHECK((c->ssl = SSL_new(ctx)) && (c->in = BIO_new(BIO_s_mem())) && (c->out = BIO_new(BIO_s_mem())));
	BIO_set_mem_eof_return(c->in, -1);
	SSL_set_bio(c->ssl, c->in, c->out);
	SSL_set_connect_state(c->ssl);
	SSL_set_tlsext_host_name(c->ssl, "fuzz");
	fz_rand_use(FZ_RAND_SERVER);

	struct fz_tls_peer peer = { client_received, client_more, c };
	fz_tls_drive(srv, ctl, nctl, NULL, 0, &peer);
	client_more(c, &(const uint8_t *){ NULL }, &(size_t){ 0 }); /* reads what came after its last move */
	if (getenv("FUZZ_VERBOSE"))
		fprintf(stderr, "fuzz: the client sent %zu bytes, read %d responses (%zu bytes)\n", c->rec_len,
			c->responses, c->plain);
	SSL_free(c->ssl);
	ERR_clear_error();
}

static void record_one(const char *dir, const struct session *s)
{
	struct client c = { .s = s };
	SSL_CTX *ctx = client_ctx(s, false);
	char path[512];
	FILE *f;

	fz_tls_kernel_accepts(false);
	client_run(&c, ctx, &servers[0], NULL, 0);
	fprintf(stderr, "fuzz_tls: recorded %s: %zu bytes sent, %d responses (%zu bytes) received\n", s->name,
		c.rec_len, c.responses, c.plain);
	snprintf(path, sizeof(path), "%s/%s", dir, s->name);
	FZ_CHECK((f = fopen(path, "wb")));
	FZ_CHECK(fputc(0, f) == 0 && fputc(0, f) == 0); /* server 0, raw, no control bytes */
	FZ_CHECK(fwrite(c.rec, 1, c.rec_len, f) == c.rec_len);
	fclose(f);
	SSL_CTX_free(ctx);
	free(c.rec);
}

static SSL_CTX *script_ctx[2]; /* TLS 1.3, TLS 1.2 */

static void script_ctx_free(void)
{
	SSL_CTX_free(script_ctx[0]);
	SSL_CTX_free(script_ctx[1]);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc, (void)argv;
	fz_tls_servers_open(servers);
	const char *dir = getenv("FUZZ_TLS_RECORD");
	if (dir) {
		for (size_t i = 0; i < sizeof(sessions) / sizeof(sessions[0]); i++)
			record_one(dir, &sessions[i]);
		exit(0);
	}
	script_ctx[0] = client_ctx(NULL, false);
	script_ctx[1] = client_ctx(NULL, true);
	atexit(script_ctx_free);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 2)
		return 0;
	size_t nctl = data[1];
	if (nctl > size - 2)
		nctl = size - 2;
	const uint8_t *ctl = data + size - nctl, *body = data + 2;
	size_t nbody = size - 2 - nctl;
	const struct fz_tls_server *srv = &servers[data[0] & 1];

	fz_tls_kernel_accepts(data[0] & 2);
	if (data[0] & 4) {
		struct client c = { .script = body, .nscript = nbody };
		client_run(&c, script_ctx[(data[0] >> 3) & 1], srv, ctl, nctl);
		free(c.rec);
	} else {
		fz_tls_drive(srv, ctl, nctl, body, nbody, NULL);
	}
	return 0;
}
