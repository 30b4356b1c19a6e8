/* ktls.h - handing a TLS 1.3 connection's transmit direction to the kernel
 * (Linux kernel TLS, "tls" upper-layer protocol) after the handshake, so the
 * wire can pass file ranges through as sendfile again.
 *
 * Only TX and only TLS 1.3. TLS 1.2 would need the key block, which OpenSSL
 * over memory BIOs does not expose (its own kTLS code reads it from inside
 * the record layer); a TLS 1.2 connection stays in user space. RX stays in
 * user space too: the wire keeps feeding ciphertext to OpenSSL.
 *
 * Three pieces, the first two pure:
 *   - ktls_tls13_tx_keys: key and IV from the server application traffic
 *     secret (RFC 8446 7.1 HKDF-Expand-Label, 7.3 "key"/"iv");
 *   - struct ktls_records: counts the records OpenSSL wrote under those keys
 *     (the TLS 1.3 NewSessionTicket), which is the kernel's starting sequence
 *     number;
 *   - ktls_crypto_info (pure) and ktls_install_tx: what the kernel is given,
 *     and the two setsockopt calls. */
#ifndef SPINDLE_TLS_KTLS_H
#define SPINDLE_TLS_KTLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <linux/tls.h>

#define KTLS_SECRET_MAX 48 /* SHA-384 */

/* What the kernel needs for one direction. */
struct ktls_tx {
	uint16_t cipher_type;   /* TLS_CIPHER_* of <linux/tls.h> */
	size_t key_len;         /* 16 or 32 */
	unsigned char key[32];
	unsigned char iv[12];   /* the full per-record nonce base of RFC 8446 5.3 */
	uint64_t seq;           /* the next record's sequence number */
};

/* HKDF-Expand-Label(secret, label, "", out_len) with the hash named by
 * digest ("SHA256", "SHA384"). False if OpenSSL refuses. */
bool ktls_hkdf_expand_label(const char *digest, const unsigned char *secret, size_t secret_len, const char *label,
			    unsigned char *out, size_t out_len);

/* Fills cipher_type, key_len, key and iv for the TLS 1.3 suite whose IANA id
 * is suite (0x1301 AES-128-GCM, 0x1302 AES-256-GCM, 0x1303 CHACHA20-POLY1305)
 * from the server application traffic secret. False for any other suite (the
 * kernel has no CCM here: that connection stays in user space) or a secret
 * of the wrong length. Leaves seq alone. */
bool ktls_tls13_tx_keys(uint16_t suite, const unsigned char *secret, size_t secret_len, struct ktls_tx *out);

/* Parses an NSS key-log line (what SSL_CTX_set_keylog_callback hands out):
 * true and the secret if it is "SERVER_TRAFFIC_SECRET_0 <random> <hex>". */
bool ktls_parse_server_secret(const char *line, unsigned char secret[KTLS_SECRET_MAX], size_t *secret_len);

/* A parser of TLS record headers over the stream the server writes. The
 * application keys begin at byte `mark` of the stream (where the write BIO
 * stood when OpenSSL derived them); every record starting there or later
 * was sealed under them and used one sequence number. */
struct ktls_records {
	uint64_t pos;           /* bytes fed so far */
	uint64_t mark;
	bool marked;
	bool mark_at_record;    /* a record header began exactly at mark */
	uint64_t after_mark;    /* records that began at or after mark */
	unsigned char hdr[5];
	unsigned hdr_have;      /* bytes of the current header seen */
	uint32_t body_left;     /* bytes of the current record's body to skip */
};

void ktls_records_init(struct ktls_records *r);
/* Sets the mark; it must not lie behind what was fed already. */
bool ktls_records_mark(struct ktls_records *r, uint64_t mark);
void ktls_records_feed(struct ktls_records *r, const unsigned char *p, size_t n);
/* True, with the next sequence number, when the stream stands between two
 * records and the mark fell on a record boundary; false when the count could
 * be wrong (no mark, a partial record, a mark inside a record). */
bool ktls_records_next_seq(const struct ktls_records *r, uint64_t *seq);

/* The kernel's TLS_TX argument for tx: one of <linux/tls.h>'s layouts. */
union ktls_crypto_info {
	struct tls12_crypto_info_aes_gcm_128 aes128;
	struct tls12_crypto_info_aes_gcm_256 aes256;
	struct tls12_crypto_info_chacha20_poly1305 chacha;
};

/* Fills ci for tx (version TLS 1.3, the IV split into the kernel's salt and
 * "iv", rec_seq big-endian); its length, or -EINVAL for an unknown cipher. */
int ktls_crypto_info(const struct ktls_tx *tx, union ktls_crypto_info *ci);

/* Installs the TLS ULP and the TX keys on the connected TCP socket sock. 0,
 * or -errno (ENOENT/EOPNOTSUPP: the kernel has no kTLS or not this cipher).
 * After a failure of the second step the ULP stays, which leaves writes as
 * they were (plain TCP), so the connection carries on in user space. */
int ktls_install_tx(int sock, const struct ktls_tx *tx);

#endif
