/* test_ktls.c - the pure pieces of the kernel-TLS switch: TLS 1.3 key/IV
 * derivation against RFC 8448's trace, the key-log line parser, and the
 * record counter over crafted write streams; then all three against a real
 * OpenSSL handshake in memory. */
#include <criterion/criterion.h>

#include <linux/tls.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "../../src/tls/ktls.h"
#include "selfsigned.h"

/* RFC 8448 section 3 (Simple 1-RTT Handshake), TLS_AES_128_GCM_SHA256:
 * server application_traffic_secret_0 and its write key and iv. */
static const unsigned char s_ap_secret[32] = {
	0xa1, 0x1a, 0xf9, 0xf0, 0x55, 0x31, 0xf8, 0x56, 0xad, 0x47, 0x11, 0x6b, 0x45, 0xa9, 0x50, 0x32,
	0x82, 0x04, 0xb4, 0xf4, 0x4b, 0xfb, 0x6b, 0x3a, 0x4b, 0x4f, 0x1f, 0x3f, 0xcb, 0x63, 0x16, 0x43,
};
static const unsigned char s_ap_key[16] = {
	0x9f, 0x02, 0x28, 0x3b, 0x6c, 0x9c, 0x07, 0xef, 0xc2, 0x6b, 0xb9, 0xf2, 0xac, 0x92, 0xe3, 0x56,
};
static const unsigned char s_ap_iv[12] = {
	0xcf, 0x78, 0x2b, 0x88, 0xdd, 0x83, 0x54, 0x9a, 0xad, 0xf1, 0xe9, 0x84,
};

Test(ktls, rfc8448_server_application_key_and_iv)
{
	struct ktls_tx tx = { .seq = 7 };

	cr_assert(ktls_tls13_tx_keys(0x1301, s_ap_secret, sizeof(s_ap_secret), &tx));
	cr_assert_eq(tx.cipher_type, TLS_CIPHER_AES_GCM_128);
	cr_assert_eq(tx.key_len, 16);
	cr_assert_arr_eq(tx.key, s_ap_key, sizeof(s_ap_key));
	cr_assert_arr_eq(tx.iv, s_ap_iv, sizeof(s_ap_iv));
	cr_assert_eq(tx.seq, 7, "the sequence number is the counter's business");
}

Test(ktls, hkdf_expand_label_rfc8448_handshake_key)
{
	/* RFC 8448 section 3: server handshake_traffic_secret -> key */
	static const unsigned char s_hs[32] = {
		0xb6, 0x7b, 0x7d, 0x69, 0x0c, 0xc1, 0x6c, 0x4e, 0x75, 0xe5, 0x42, 0x13, 0xcb, 0x2d, 0x37, 0xb4,
		0xe9, 0xc9, 0x12, 0xbc, 0xde, 0xd9, 0x10, 0x5d, 0x42, 0xbe, 0xfd, 0x59, 0xd3, 0x91, 0xad, 0x38,
	};
	static const unsigned char key[16] = {
		0x3f, 0xce, 0x51, 0x60, 0x09, 0xc2, 0x17, 0x27, 0xd0, 0xf2, 0xe4, 0xe8, 0x6e, 0xe4, 0x03, 0xbc,
	};
	unsigned char out[16];

	cr_assert(ktls_hkdf_expand_label("SHA256", s_hs, sizeof(s_hs), "key", out, sizeof(out)));
	cr_assert_arr_eq(out, key, sizeof(key));
}

Test(ktls, suites_and_secret_lengths)
{
	unsigned char secret48[48] = { 1 };
	struct ktls_tx tx;

	cr_assert(ktls_tls13_tx_keys(0x1302, secret48, 48, &tx));
	cr_assert_eq(tx.cipher_type, TLS_CIPHER_AES_GCM_256);
	cr_assert_eq(tx.key_len, 32);
	cr_assert(ktls_tls13_tx_keys(0x1303, s_ap_secret, 32, &tx));
	cr_assert_eq(tx.cipher_type, TLS_CIPHER_CHACHA20_POLY1305);
	cr_assert_eq(tx.key_len, 32);
	/* the output length is part of HkdfLabel: a 32-byte key does not
	 * begin with the 16-byte one */
	cr_assert(memcmp(tx.key, s_ap_key, 16) != 0);
	cr_assert_not(ktls_tls13_tx_keys(0x1304, s_ap_secret, 32, &tx), "AES-128-CCM: not for the kernel here");
	cr_assert_not(ktls_tls13_tx_keys(0x1301, secret48, 48, &tx), "SHA-256 suite with a 48-byte secret");
	cr_assert_not(ktls_tls13_tx_keys(0x1302, s_ap_secret, 32, &tx), "SHA-384 suite with a 32-byte secret");
}

Test(ktls, crypto_info_layouts)
{
	struct ktls_tx tx = { .cipher_type = TLS_CIPHER_AES_GCM_128, .key_len = 16, .seq = 0x0102030405060708ull };
	static const unsigned char seq_be[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
	union ktls_crypto_info ci;

	memcpy(tx.key, s_ap_key, 16);
	memcpy(tx.iv, s_ap_iv, 12);
	cr_assert_eq(ktls_crypto_info(&tx, &ci), (int)sizeof(ci.aes128));
	cr_assert_eq(ci.aes128.info.version, TLS_1_3_VERSION);
	cr_assert_eq(ci.aes128.info.cipher_type, TLS_CIPHER_AES_GCM_128);
	cr_assert_arr_eq(ci.aes128.salt, s_ap_iv, 4);
	cr_assert_arr_eq(ci.aes128.iv, s_ap_iv + 4, 8);
	cr_assert_arr_eq(ci.aes128.key, s_ap_key, 16);
	cr_assert_arr_eq(ci.aes128.rec_seq, seq_be, 8);

	tx.cipher_type = TLS_CIPHER_AES_GCM_256;
	cr_assert_eq(ktls_crypto_info(&tx, &ci), (int)sizeof(ci.aes256));
	cr_assert_arr_eq(ci.aes256.salt, s_ap_iv, 4);
	cr_assert_arr_eq(ci.aes256.iv, s_ap_iv + 4, 8);
	cr_assert_arr_eq(ci.aes256.rec_seq, seq_be, 8);

	tx.cipher_type = TLS_CIPHER_CHACHA20_POLY1305;
	cr_assert_eq(ktls_crypto_info(&tx, &ci), (int)sizeof(ci.chacha));
	cr_assert_eq(ci.chacha.info.cipher_type, TLS_CIPHER_CHACHA20_POLY1305);
	cr_assert_arr_eq(ci.chacha.iv, s_ap_iv, 12, "ChaCha20 takes the whole IV, no salt");
	cr_assert_arr_eq(ci.chacha.rec_seq, seq_be, 8);

	tx.cipher_type = TLS_CIPHER_AES_CCM_128; /* not offered */
	cr_assert_eq(ktls_crypto_info(&tx, &ci), -EINVAL);
}

Test(ktls, install_on_a_socket_without_the_ulp_fails_cleanly)
{
	/* a UNIX socket has no TCP ULPs: the attempt fails with an errno and
	 * the socket carries on */
	int sv[2];
	struct ktls_tx tx = { .cipher_type = TLS_CIPHER_AES_GCM_128, .key_len = 16 };

	cr_assert(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
	cr_assert_lt(ktls_install_tx(sv[0], &tx), 0);
	cr_assert_eq(write(sv[0], "x", 1), 1);
	char c;
	cr_assert_eq(read(sv[1], &c, 1), 1);
	close(sv[0]);
	close(sv[1]);
}

Test(ktls, keylog_line)
{
	unsigned char secret[KTLS_SECRET_MAX];
	size_t len = 0;

	cr_assert(ktls_parse_server_secret("SERVER_TRAFFIC_SECRET_0 0011aabb "
					   "a11af9f05531f856ad47116b45a950328204b4f44bfb6b3a4b4f1f3fcb631643",
					   secret, &len));
	cr_assert_eq(len, 32);
	cr_assert_arr_eq(secret, s_ap_secret, 32);
	cr_assert_not(ktls_parse_server_secret("CLIENT_TRAFFIC_SECRET_0 00 "
					       "a11af9f05531f856ad47116b45a950328204b4f44bfb6b3a4b4f1f3fcb631643",
					       secret, &len));
	cr_assert_not(ktls_parse_server_secret("SERVER_HANDSHAKE_TRAFFIC_SECRET 00 aabb", secret, &len));
	cr_assert_not(ktls_parse_server_secret("SERVER_TRAFFIC_SECRET_0 00 a11af9", secret, &len), "too short");
	cr_assert_not(ktls_parse_server_secret("SERVER_TRAFFIC_SECRET_0 00 "
					       "a11af9f05531f856ad47116b45a950328204b4f44bfb6b3a4b4f1f3fcb63164z",
					       secret, &len), "not hex");
	cr_assert_not(ktls_parse_server_secret("SERVER_TRAFFIC_SECRET_0 nospace", secret, &len));
}

/* Appends one record (type 23, body of len bytes) to buf at *n. */
static void record(unsigned char *buf, size_t *n, uint16_t len)
{
	buf[(*n)++] = 23;
	buf[(*n)++] = 3;
	buf[(*n)++] = 3;
	buf[(*n)++] = (unsigned char)(len >> 8);
	buf[(*n)++] = (unsigned char)len;
	memset(buf + *n, 0xab, len);
	*n += len;
}

Test(ktls, counter_counts_records_after_the_mark)
{
	static unsigned char flight[4096], tickets[1024];
	size_t nf = 0, nt = 0;
	struct ktls_records r;
	uint64_t seq = 99;

	record(flight, &nf, 90);   /* ServerHello */
	record(flight, &nf, 1);    /* ChangeCipherSpec */
	record(flight, &nf, 2000); /* EE .. Finished */
	record(tickets, &nt, 200);
	record(tickets, &nt, 5); /* a header whose length bytes hold 0x00 0x05 */

	ktls_records_init(&r);
	cr_assert_not(ktls_records_next_seq(&r, &seq), "no mark yet");
	/* the flight in odd pieces, splitting headers */
	ktls_records_feed(&r, flight, 3);
	ktls_records_feed(&r, flight + 3, 97);
	ktls_records_feed(&r, flight + 100, nf - 100);
	cr_assert(ktls_records_mark(&r, r.pos));
	cr_assert(ktls_records_next_seq(&r, &seq));
	cr_assert_eq(seq, 0, "nothing under the application keys yet");
	for (size_t i = 0; i < nt; i++) /* byte by byte */
		ktls_records_feed(&r, tickets + i, 1);
	cr_assert(ktls_records_next_seq(&r, &seq));
	cr_assert_eq(seq, 2);
}

Test(ktls, counter_refuses_partial_records_and_bad_marks)
{
	static unsigned char s[1024];
	size_t n = 0;
	struct ktls_records r;
	uint64_t seq;

	record(s, &n, 100);
	record(s, &n, 100);

	/* mid-record at the end of the stream */
	ktls_records_init(&r);
	cr_assert(ktls_records_mark(&r, 0));
	ktls_records_feed(&r, s, n - 1);
	cr_assert_not(ktls_records_next_seq(&r, &seq));
	ktls_records_feed(&r, s + n - 1, 1);
	cr_assert(ktls_records_next_seq(&r, &seq));
	cr_assert_eq(seq, 2);

	/* a mark inside a record: the count would be a guess */
	ktls_records_init(&r);
	ktls_records_feed(&r, s, 50);
	cr_assert(ktls_records_mark(&r, 50));
	ktls_records_feed(&r, s + 50, n - 50);
	cr_assert_not(ktls_records_next_seq(&r, &seq));

	/* a mark behind what was fed, or set twice */
	ktls_records_init(&r);
	ktls_records_feed(&r, s, 10);
	cr_assert_not(ktls_records_mark(&r, 5));
	cr_assert(ktls_records_mark(&r, 10));
	cr_assert_not(ktls_records_mark(&r, 20));

	/* a mark ahead of the stream: not there yet */
	ktls_records_init(&r);
	cr_assert(ktls_records_mark(&r, 105));
	ktls_records_feed(&r, s, 105);
	cr_assert(ktls_records_next_seq(&r, &seq));
	cr_assert_eq(seq, 0);
	ktls_records_init(&r);
	cr_assert(ktls_records_mark(&r, 300));
	ktls_records_feed(&r, s, n);
	cr_assert_not(ktls_records_next_seq(&r, &seq));
}

/* ---- against OpenSSL itself ----------------------------------------------
 * A TLS 1.3 handshake between two in-memory SSL objects, the server side
 * marked and counted the way the wire does (mark at the SSL_do_handshake
 * call that completes the handshake, count the records collected after it),
 * then the server's first application record is opened with the derived key
 * and IV at the counted sequence number: what the kernel, given the same
 * values, would have sealed is what OpenSSL sealed. */

struct side {
	unsigned char secret[KTLS_SECRET_MAX];
	size_t secret_len;
	bool have;
};

static void keylog(const SSL *ssl, const char *line)
{
	struct side *s = SSL_get_app_data(ssl);

	if (!s->have && ktls_parse_server_secret(line, s->secret, &s->secret_len))
		s->have = true;
}

static SSL_CTX *server_ctx(const char *suite)
{
	X509 *crt;
	EVP_PKEY *key = test_selfsigned(&crt);
	SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());

	cr_assert(ctx);
	cr_assert(SSL_CTX_use_certificate(ctx, crt) == 1 && SSL_CTX_use_PrivateKey(ctx, key) == 1);
	X509_free(crt);
	EVP_PKEY_free(key);
	SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
	cr_assert(SSL_CTX_set_ciphersuites(ctx, suite) == 1);
	SSL_CTX_set_num_tickets(ctx, 1);
	SSL_CTX_set_keylog_callback(ctx, keylog);
	return ctx;
}

/* Moves what from has written to to's input; returns the bytes (freed by the
 * caller) so the server side can be counted. */
static unsigned char *move(SSL *from, SSL *to, size_t *n)
{
	BIO *w = SSL_get_wbio(from);
	*n = BIO_ctrl_pending(w);
	unsigned char *p = malloc(*n + 1);
	cr_assert(p);
	cr_assert(*n == 0 || BIO_read(w, p, (int)*n) == (int)*n);
	cr_assert(*n == 0 || BIO_write(SSL_get_rbio(to), p, (int)*n) == (int)*n);
	return p;
}

static void open_first_record(const char *suite, const EVP_CIPHER *aead)
{
	static const char msg[] = "HTTP/1.1 200 OK\r\n";
	SSL_CTX *sctx = server_ctx(suite), *cctx = SSL_CTX_new(TLS_client_method());
	SSL *srv = SSL_new(sctx), *cli = SSL_new(cctx);
	struct side side = { 0 };
	struct ktls_records rec;
	struct ktls_tx tx = { 0 };
	bool srv_done = false;
	size_t n;

	cr_assert(cctx && srv && cli);
	SSL_set_bio(srv, BIO_new(BIO_s_mem()), BIO_new(BIO_s_mem()));
	SSL_set_bio(cli, BIO_new(BIO_s_mem()), BIO_new(BIO_s_mem()));
	BIO_set_mem_eof_return(SSL_get_rbio(srv), -1);
	BIO_set_mem_eof_return(SSL_get_rbio(cli), -1);
	SSL_set_app_data(srv, &side);
	SSL_set_accept_state(srv);
	SSL_set_connect_state(cli);
	ktls_records_init(&rec);
	for (int round = 0; round < 10 && !srv_done; round++) {
		SSL_do_handshake(cli);
		free(move(cli, srv, &n));
		int r = SSL_do_handshake(srv);
		if (r == 1) {
			srv_done = true;
			cr_assert(ktls_records_mark(&rec, rec.pos));
		}
		unsigned char *p = move(srv, cli, &n);
		ktls_records_feed(&rec, p, n);
		free(p);
	}
	cr_assert(srv_done && side.have);
	cr_assert(ktls_records_next_seq(&rec, &tx.seq));
	cr_assert_eq(tx.seq, 1, "one NewSessionTicket under the application keys");
	cr_assert(ktls_tls13_tx_keys((uint16_t)SSL_CIPHER_get_protocol_id(SSL_get_current_cipher(srv)), side.secret,
				     side.secret_len, &tx));

	/* the server's first response record */
	cr_assert(SSL_write(srv, msg, sizeof(msg) - 1) == (int)sizeof(msg) - 1);
	unsigned char *p = move(srv, cli, &n);
	cr_assert(n > 5 + 16 && p[0] == 23 && (size_t)(p[3] << 8 | p[4]) == n - 5, "one whole record");
	unsigned char nonce[12], plain[256];
	memcpy(nonce, tx.iv, sizeof(nonce));
	for (int i = 0; i < 8; i++) /* RFC 8446 5.3: the sequence number XORed into the IV's low end */
		nonce[4 + i] ^= (unsigned char)(tx.seq >> (56 - 8 * i));
	EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
	int len = 0, fin = 0;
	size_t body = n - 5 - 16;
	cr_assert(body < sizeof(plain));
	cr_assert(EVP_DecryptInit_ex(c, aead, NULL, tx.key, nonce) == 1);
	cr_assert(EVP_DecryptUpdate(c, NULL, &len, p, 5) == 1); /* AAD: the record header */
	cr_assert(EVP_DecryptUpdate(c, plain, &len, p + 5, (int)body) == 1);
	cr_assert(EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_AEAD_SET_TAG, 16, p + 5 + body) == 1);
	cr_assert(EVP_DecryptFinal_ex(c, plain + len, &fin) == 1, "the tag checks with our key, IV and sequence");
	cr_assert(body >= sizeof(msg) && memcmp(plain, msg, sizeof(msg) - 1) == 0 && plain[sizeof(msg) - 1] == 23);

	/* and the client reads it: the stream is intact */
	char got[64];
	cr_assert_eq(SSL_read(cli, got, sizeof(got)), (int)sizeof(msg) - 1);
	EVP_CIPHER_CTX_free(c);
	free(p);
	SSL_free(srv);
	SSL_free(cli);
	SSL_CTX_free(sctx);
	SSL_CTX_free(cctx);
}

Test(ktls, openssl_record_opens_with_aes_128_gcm)
{
	open_first_record("TLS_AES_128_GCM_SHA256", EVP_aes_128_gcm());
}

Test(ktls, openssl_record_opens_with_aes_256_gcm)
{
	open_first_record("TLS_AES_256_GCM_SHA384", EVP_aes_256_gcm());
}

Test(ktls, openssl_record_opens_with_chacha20_poly1305)
{
	open_first_record("TLS_CHACHA20_POLY1305_SHA256", EVP_chacha20_poly1305());
}
