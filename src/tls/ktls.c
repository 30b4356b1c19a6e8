/* ktls.c - TLS 1.3 transmit keys for the kernel (see ktls.h). */
#include "ktls.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <linux/tls.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>

#ifndef SOL_TLS
#define SOL_TLS 282
#endif

#define TLS_RECORD_HEADER 5

bool ktls_hkdf_expand_label(const char *digest, const unsigned char *secret, size_t secret_len, const char *label,
			    unsigned char *out, size_t out_len)
{
	/* struct HkdfLabel { uint16 length; opaque label<7..255> = "tls13 " +
	 * label; opaque context<0..255> = ""; } (RFC 8446 7.1) */
	static const char prefix[] = "tls13 ";
	unsigned char info[2 + 1 + 255 + 1];
	size_t llen = sizeof(prefix) - 1 + strlen(label);
	size_t ilen = 0;
	bool ok = false;

	if (llen > 255 || out_len > 0xffff)
		return false;
	info[ilen++] = (unsigned char)(out_len >> 8);
	info[ilen++] = (unsigned char)out_len;
	info[ilen++] = (unsigned char)llen;
	memcpy(info + ilen, prefix, sizeof(prefix) - 1);
	ilen += sizeof(prefix) - 1;
	memcpy(info + ilen, label, strlen(label));
	ilen += strlen(label);
	info[ilen++] = 0;

	EVP_KDF *kdf = EVP_KDF_fetch(NULL, "HKDF", NULL);
	EVP_KDF_CTX *ctx = kdf ? EVP_KDF_CTX_new(kdf) : NULL;
	int mode = EVP_KDF_HKDF_MODE_EXPAND_ONLY;
	OSSL_PARAM params[] = {
		OSSL_PARAM_construct_int(OSSL_KDF_PARAM_MODE, &mode),
		OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, (char *)digest, 0),
		OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, (void *)secret, secret_len),
		OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, info, ilen),
		OSSL_PARAM_construct_end(),
	};
	if (ctx && EVP_KDF_derive(ctx, out, out_len, params) > 0)
		ok = true;
	EVP_KDF_CTX_free(ctx);
	EVP_KDF_free(kdf);
	return ok;
}

bool ktls_tls13_tx_keys(uint16_t suite, const unsigned char *secret, size_t secret_len, struct ktls_tx *out)
{
	const char *digest;

	switch (suite) {
	case 0x1301:
		out->cipher_type = TLS_CIPHER_AES_GCM_128;
		out->key_len = 16;
		digest = "SHA256";
		break;
	case 0x1302:
		out->cipher_type = TLS_CIPHER_AES_GCM_256;
		out->key_len = 32;
		digest = "SHA384";
		break;
	case 0x1303:
		out->cipher_type = TLS_CIPHER_CHACHA20_POLY1305;
		out->key_len = 32;
		digest = "SHA256";
		break;
	default:
		return false;
	}
	/* the traffic secret is as long as the suite's hash */
	if (secret_len != (suite == 0x1302 ? 48u : 32u))
		return false;
	return ktls_hkdf_expand_label(digest, secret, secret_len, "key", out->key, out->key_len) &&
	       ktls_hkdf_expand_label(digest, secret, secret_len, "iv", out->iv, sizeof(out->iv));
}

bool ktls_parse_server_secret(const char *line, unsigned char secret[KTLS_SECRET_MAX], size_t *secret_len)
{
	static const char label[] = "SERVER_TRAFFIC_SECRET_0 ";

	if (strncmp(line, label, sizeof(label) - 1) != 0)
		return false;
	const char *hex = strchr(line + sizeof(label) - 1, ' '); /* past the client random */
	if (!hex)
		return false;
	hex++;
	size_t n = 0;
	while (hex[0] && hex[0] != '\n') {
		int hi = OPENSSL_hexchar2int((unsigned char)hex[0]);
		int lo = hi < 0 ? -1 : OPENSSL_hexchar2int((unsigned char)hex[1]);
		if (lo < 0 || n == KTLS_SECRET_MAX)
			goto bad;
		secret[n++] = (unsigned char)(hi << 4 | lo);
		hex += 2;
	}
	if (n != 32 && n != 48)
		goto bad;
	*secret_len = n;
	return true;
bad:
	OPENSSL_cleanse(secret, KTLS_SECRET_MAX);
	return false;
}

void ktls_records_init(struct ktls_records *r)
{
	memset(r, 0, sizeof(*r));
}

bool ktls_records_mark(struct ktls_records *r, uint64_t mark)
{
	if (r->marked || mark < r->pos)
		return false;
	r->mark = mark;
	r->marked = true;
	return true;
}

void ktls_records_feed(struct ktls_records *r, const unsigned char *p, size_t n)
{
	while (n > 0) {
		if (r->body_left > 0) {
			size_t skip = n < r->body_left ? n : r->body_left;
			r->body_left -= (uint32_t)skip;
			r->pos += skip;
			p += skip;
			n -= skip;
			continue;
		}
		if (r->hdr_have == 0 && r->marked && r->pos >= r->mark) {
			r->after_mark++;
			if (r->pos == r->mark)
				r->mark_at_record = true;
		}
		r->hdr[r->hdr_have++] = *p++;
		r->pos++;
		n--;
		if (r->hdr_have == TLS_RECORD_HEADER) {
			/* type(1) legacy_version(2) length(2) */
			r->body_left = (uint32_t)r->hdr[3] << 8 | r->hdr[4];
			r->hdr_have = 0;
		}
	}
}

bool ktls_records_next_seq(const struct ktls_records *r, uint64_t *seq)
{
	if (!r->marked || r->hdr_have != 0 || r->body_left != 0)
		return false;
	if (!r->mark_at_record && r->pos != r->mark)
		return false; /* the mark fell inside a record, or lies ahead */
	*seq = r->after_mark;
	return true;
}

/* Fills one of <linux/tls.h>'s crypto_info layouts, whose fields differ in
 * size only: the 12-byte TLS 1.3 IV is split into the kernel's salt and "iv"
 * (4 + 8 for AES-GCM, 0 + 12 for ChaCha20). */
static void crypto_info_fill(struct tls_crypto_info *info, uint16_t cipher_type, unsigned char *salt,
			     size_t salt_len, unsigned char *iv, size_t iv_len, unsigned char *key, size_t key_len,
			     unsigned char rec_seq[8], const struct ktls_tx *tx)
{
	info->version = TLS_1_3_VERSION;
	info->cipher_type = cipher_type;
	memcpy(salt, tx->iv, salt_len);
	memcpy(iv, tx->iv + salt_len, iv_len);
	memcpy(key, tx->key, key_len);
	for (int i = 0; i < 8; i++) /* big-endian, as in the nonce (RFC 8446 5.3) */
		rec_seq[i] = (unsigned char)(tx->seq >> (56 - 8 * i));
}

int ktls_crypto_info(const struct ktls_tx *tx, union ktls_crypto_info *ci)
{
	memset(ci, 0, sizeof(*ci));
	switch (tx->cipher_type) {
	case TLS_CIPHER_AES_GCM_128:
		crypto_info_fill(&ci->aes128.info, TLS_CIPHER_AES_GCM_128, ci->aes128.salt, sizeof(ci->aes128.salt),
				 ci->aes128.iv, sizeof(ci->aes128.iv), ci->aes128.key, sizeof(ci->aes128.key),
				 ci->aes128.rec_seq, tx);
		return sizeof(ci->aes128);
	case TLS_CIPHER_AES_GCM_256:
		crypto_info_fill(&ci->aes256.info, TLS_CIPHER_AES_GCM_256, ci->aes256.salt, sizeof(ci->aes256.salt),
				 ci->aes256.iv, sizeof(ci->aes256.iv), ci->aes256.key, sizeof(ci->aes256.key),
				 ci->aes256.rec_seq, tx);
		return sizeof(ci->aes256);
	case TLS_CIPHER_CHACHA20_POLY1305:
		crypto_info_fill(&ci->chacha.info, TLS_CIPHER_CHACHA20_POLY1305, ci->chacha.salt, 0, ci->chacha.iv,
				 sizeof(ci->chacha.iv), ci->chacha.key, sizeof(ci->chacha.key), ci->chacha.rec_seq, tx);
		return sizeof(ci->chacha);
	default:
		return -EINVAL;
	}
}

int ktls_install_tx(int sock, const struct ktls_tx *tx)
{
	union ktls_crypto_info ci;
	int len = ktls_crypto_info(tx, &ci);
	int rc = 0;

	if (len < 0)
		return len;
	if (setsockopt(sock, SOL_TCP, TCP_ULP, "tls", sizeof("tls")) < 0 ||
	    setsockopt(sock, SOL_TLS, TLS_TX, &ci, (socklen_t)len) < 0)
		rc = -errno;
	OPENSSL_cleanse(&ci, sizeof(ci));
	return rc;
}
