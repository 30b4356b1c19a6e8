/* test_ktls_wire.c - a TLS wire across the kernel-TLS switch, with the test
 * playing the kernel (this machine has no kernel TLS): an OpenSSL client in
 * memory handshakes with the wire, the wire hands its TX keys to the test's
 * "installer", and from then on the test seals what the wire passes through
 * (memory, or a file range it would sendfile) into TLS 1.3 records with those
 * keys, as the kernel would. The client must read the whole response; a
 * KeyUpdate request after it must close the wire. */
#include <criterion/criterion.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "../../src/tls/context.h"
#include "../../src/tls/ktls.h"
#include "../../src/tls/wire.h"
#include "selfsigned.h"
#include "testserver.h"

#define BODY_SIZE (200 * 1024)

static struct ktls_tx kernel;   /* what the wire installed */
static bool installed;

static int fake_install(int sock, const struct ktls_tx *tx)
{
	(void)sock;
	kernel = *tx;
	installed = true;
	return 0;
}

/* Seals plaintext into records as the kernel does (RFC 8446 5.2, 5.3). */
static void kernel_seal(BIO *to, const unsigned char *p, size_t n)
{
	const EVP_CIPHER *aead = kernel.cipher_type == TLS_CIPHER_AES_GCM_128 ? EVP_aes_128_gcm()
				 : kernel.cipher_type == TLS_CIPHER_AES_GCM_256 ? EVP_aes_256_gcm()
										: EVP_chacha20_poly1305();
	static unsigned char rec[5 + 16384 + 1 + 16];

	while (n > 0) {
		size_t chunk = n < 16384 ? n : 16384;
		size_t len = chunk + 1 + 16;
		unsigned char nonce[12], inner[16384 + 1];
		int out = 0;

		memcpy(inner, p, chunk);
		inner[chunk] = 23; /* the content type: application_data */
		rec[0] = 23;
		rec[1] = rec[2] = 3;
		rec[3] = (unsigned char)(len >> 8);
		rec[4] = (unsigned char)len;
		memcpy(nonce, kernel.iv, 12);
		for (int i = 0; i < 8; i++)
			nonce[4 + i] ^= (unsigned char)(kernel.seq >> (56 - 8 * i));
		EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
		cr_assert(EVP_EncryptInit_ex(c, aead, NULL, kernel.key, nonce) == 1);
		cr_assert(EVP_EncryptUpdate(c, NULL, &out, rec, 5) == 1);
		cr_assert(EVP_EncryptUpdate(c, rec + 5, &out, inner, (int)chunk + 1) == 1);
		cr_assert(EVP_EncryptFinal_ex(c, rec + 5 + out, &out) == 1);
		cr_assert(EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_AEAD_GET_TAG, 16, rec + 5 + chunk + 1) == 1);
		EVP_CIPHER_CTX_free(c);
		cr_assert(BIO_write(to, rec, (int)(5 + len)) == (int)(5 + len));
		kernel.seq++;
		p += chunk;
		n -= chunk;
	}
}

static void write_cert(struct test_server *ts)
{
	X509 *crt;
	EVP_PKEY *key = test_selfsigned(&crt);
	char path[256];
	FILE *f;

	snprintf(path, sizeof(path), "%s/cert.pem", ts->dir);
	cr_assert((f = fopen(path, "w")) && PEM_write_X509(f, crt) == 1);
	fclose(f);
	snprintf(ts->cfg.tls_certificate, sizeof(ts->cfg.tls_certificate), "%s", path);
	snprintf(path, sizeof(path), "%s/key.pem", ts->dir);
	cr_assert((f = fopen(path, "w")) && PEM_write_PrivateKey(f, key, NULL, NULL, 0, NULL, NULL) == 1);
	fclose(f);
	snprintf(ts->cfg.tls_certificate_key, sizeof(ts->cfg.tls_certificate_key), "%s", path);
	X509_free(crt);
	EVP_PKEY_free(key);
}

static void serve_one(const char *suite)
{
	static unsigned char body[BODY_SIZE], got[BODY_SIZE + 4096];
	static const char req[] = "GET /big.bin HTTP/1.1\r\nHost: t\r\n\r\n";
	struct test_server ts;
	size_t have = 0;
	bool sent_req = false, saw_file_range = false;

	for (size_t i = 0; i < sizeof(body); i++)
		body[i] = (unsigned char)(i * 7 + i / 251);
	test_server_init(&ts);
	test_server_file(&ts, "big.bin", (const char *)body, sizeof(body));
	write_cert(&ts);
	ts.cfg.tls = true;
	ts.cfg.cache_size = 0; /* the body comes from the file (sendfile), not from memory */
	setenv("SPINDLE_KTLS", "try", 1);
	struct tls_context *tls = tls_context_new(&ts.cfg);
	cr_assert_not_null(tls);
	test_server_open(&ts);
	installed = false;
	wire_ktls_set_installer(fake_install);

	struct wire *w = wire_new(&ts.srv, tls, -1, NULL, 0);
	SSL_CTX *cctx = SSL_CTX_new(TLS_client_method());
	SSL_CTX_set_min_proto_version(cctx, TLS1_3_VERSION);
	cr_assert(SSL_CTX_set_ciphersuites(cctx, suite) == 1);
	SSL *cli = SSL_new(cctx);
	BIO *cin = BIO_new(BIO_s_mem()), *cout = BIO_new(BIO_s_mem());
	BIO_set_mem_eof_return(cin, -1);
	SSL_set_bio(cli, cin, cout);
	SSL_set_connect_state(cli);
	cr_assert(w && cli);

	for (int round = 0; round < 10000 && have < sizeof(body) + 64; round++) {
		if (!SSL_is_init_finished(cli))
			SSL_do_handshake(cli);
		else if (!sent_req)
			sent_req = SSL_write(cli, req, sizeof(req) - 1) == (int)sizeof(req) - 1;
		size_t n = BIO_ctrl_pending(cout);
		if (n > 0) {
			struct iovec space = wire_input_space(w);
			cr_assert(n <= space.iov_len);
			cr_assert(BIO_read(cout, space.iov_base, (int)n) == (int)n);
			wire_input_done(w, (ssize_t)n);
		}
		int64_t deadline;
		enum conn_want want = wire_wants(w, &deadline);
		cr_assert(want != CONN_WANT_CLOSE, "the wire closed after %zu bytes", have);
		if (want == CONN_WANT_WRITE) {
			struct conn_output o;
			static unsigned char buf[256 * 1024];
			size_t len = 0;
			wire_output(w, &o);
			for (int i = 0; i < o.iovcnt; i++) {
				memcpy(buf + len, o.iov[i].iov_base, o.iov[i].iov_len);
				len += o.iov[i].iov_len;
			}
			if (o.iovcnt == 0 && o.file_len > 0) { /* what a driver would sendfile */
				size_t take = o.file_len < 64 * 1024 ? o.file_len : 64 * 1024;
				cr_assert(installed, "a file range only after the switch");
				cr_assert_eq(pread(o.file_fd, buf, take, o.file_off), (ssize_t)take);
				len = take;
				saw_file_range = true;
			}
			if (installed) /* everything after the switch is plaintext for the kernel */
				kernel_seal(cin, buf, len);
			else if (len > 0)
				cr_assert(BIO_write(cin, buf, (int)len) == (int)len);
			wire_output_done(w, len);
		}
		int r;
		while ((r = SSL_read(cli, got + have, (int)(sizeof(got) - have))) > 0)
			have += (size_t)r;
	}
	cr_assert(installed, "the wire switched to the (test's) kernel");
	cr_assert_eq(kernel.seq > 1, true, "records were sealed after the ticket");
	cr_assert(saw_file_range, "the body went out as a file range (sendfile), not through OpenSSL");
	const char *eoh = memmem(got, have, "\r\n\r\n", 4);
	cr_assert(eoh && strncmp((const char *)got, "HTTP/1.1 200", 12) == 0);
	size_t head = (size_t)(eoh + 4 - (const char *)got);
	cr_assert_eq(have - head, sizeof(body));
	cr_assert(memcmp(got + head, body, sizeof(body)) == 0);

	/* A KeyUpdate asking for ours: OpenSSL's answer would be sealed under
	 * keys the kernel holds now, so the wire must close rather than send it. */
	cr_assert(SSL_key_update(cli, SSL_KEY_UPDATE_REQUESTED) == 1);
	SSL_do_handshake(cli);
	size_t n = BIO_ctrl_pending(cout);
	cr_assert(n > 0);
	struct iovec space = wire_input_space(w);
	cr_assert(BIO_read(cout, space.iov_base, (int)n) == (int)n);
	wire_input_done(w, (ssize_t)n);
	int64_t deadline;
	cr_assert_eq(wire_wants(w, &deadline), CONN_WANT_CLOSE);

	wire_free(w);
	SSL_free(cli);
	SSL_CTX_free(cctx);
	wire_ktls_set_installer(NULL);
	tls_context_free(tls);
	test_server_close(&ts);
	unsetenv("SPINDLE_KTLS");
}

Test(ktls_wire, response_through_the_kernel_aes_128_gcm)
{
	serve_one("TLS_AES_128_GCM_SHA256");
}

Test(ktls_wire, response_through_the_kernel_chacha20)
{
	serve_one("TLS_CHACHA20_POLY1305_SHA256");
}
