/* context.c - the shared OpenSSL context: certificate, key, protocol policy,
 * ALPN and the session-ticket keys. */
#include "context.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/x509.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>

#include "../config.h"
#include "../log/log.h"
#include "../site/names.h"
#include "wire.h"

/* Mozilla's "intermediate" profile (v5.7), minus its DHE suites: ECDHE only;
 * TLS 1.3 suites in the profile's order. */
#define TLS_CIPHERS_12                                                                                      \
	"ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384:"          \
	"ECDHE-RSA-AES256-GCM-SHA384:ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305"
#define TLS_SUITES_13 "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256"
#define TLS_GROUPS "X25519:prime256v1:secp384r1"

#define TICKET_SECRET_LEN 32

/* A [site NAME]'s names and, when it has one, its certificate: held by an
 * SSL_CTX of its own that only loads and keeps it (the handshake stays on
 * the shared context, its ALPN, tickets and policy; SNI swaps in the pair). */
struct tls_site {
	char names[SITE_NAMES_LIST_MAX];
	SSL_CTX *cert; /* NULL: the site uses the top level's certificate */
};

struct tls_context {
	SSL_CTX *ctx;
	unsigned char ticket_secret[TICKET_SECRET_LEN];
	bool ktls; /* the kernel offers TLS: connections try to hand TX to it */
	struct tls_site *sites;
	int nsites;
};

/* The keys of one rotation period, derived from the generation's secret. */
struct ticket_keys {
	unsigned char name[16];
	unsigned char aes[32];
	unsigned char hmac[32];
};

static void derive(const struct tls_context *t, const char *label, uint64_t period, unsigned char out[32])
{
	unsigned char in[TICKET_SECRET_LEN + 16 + 8];
	size_t llen = strlen(label);

	memcpy(in, t->ticket_secret, TICKET_SECRET_LEN);
	memcpy(in + TICKET_SECRET_LEN, label, llen);
	memcpy(in + TICKET_SECRET_LEN + llen, &period, sizeof(period));
	EVP_Digest(in, TICKET_SECRET_LEN + llen + sizeof(period), out, NULL, EVP_sha256(), NULL);
}

static void ticket_keys_for(const struct tls_context *t, uint64_t period, struct ticket_keys *k)
{
	unsigned char name[32];

	derive(t, "ticket name", period, name);
	memcpy(k->name, name, sizeof(k->name));
	derive(t, "ticket aes", period, k->aes);
	derive(t, "ticket hmac", period, k->hmac);
}

static int ticket_mac_init(EVP_MAC_CTX *hctx, unsigned char *key)
{
	OSSL_PARAM params[] = {
		OSSL_PARAM_construct_octet_string(OSSL_MAC_PARAM_KEY, key, 32),
		OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, (char *)"sha256", 0),
		OSSL_PARAM_construct_end(),
	};
	return EVP_MAC_CTX_set_params(hctx, params);
}

/* OpenSSL's ticket-key callback (SSL_CTX_set_tlsext_ticket_key_evp_cb):
 * encrypt under this period's key; decrypt under this period's or the last
 * one's, asking for a fresh ticket (return 2) in the latter case. */
static int ticket_key_cb(SSL *ssl, unsigned char key_name[16], unsigned char iv[EVP_MAX_IV_LENGTH],
			 EVP_CIPHER_CTX *cctx, EVP_MAC_CTX *hctx, int enc)
{
	const struct tls_context *t = SSL_CTX_get_app_data(SSL_get_SSL_CTX(ssl));
	uint64_t now = (uint64_t)time(NULL) / TLS_TICKET_ROTATE_S;
	struct ticket_keys k;
	int rc = -1;

	if (enc) {
		ticket_keys_for(t, now, &k);
		memcpy(key_name, k.name, sizeof(k.name));
		if (RAND_bytes(iv, EVP_CIPHER_get_iv_length(EVP_aes_256_cbc())) <= 0 ||
		    !EVP_EncryptInit_ex(cctx, EVP_aes_256_cbc(), NULL, k.aes, iv) || !ticket_mac_init(hctx, k.hmac))
			goto out;
		rc = 1;
		goto out;
	}
	for (uint64_t age = 0; age < 2; age++) {
		ticket_keys_for(t, now - age, &k);
		if (memcmp(key_name, k.name, sizeof(k.name)) != 0)
			continue;
		if (!ticket_mac_init(hctx, k.hmac) || !EVP_DecryptInit_ex(cctx, EVP_aes_256_cbc(), NULL, k.aes, iv))
			goto out;
		rc = age == 0 ? 1 : 2;
		goto out;
	}
	rc = 0; /* unknown or expired key: a full handshake */
out:
	OPENSSL_cleanse(&k, sizeof(k));
	return rc;
}

/* RFC 7301, in our order of preference: h2 (unless http2 = off), then
 * http/1.1; h2 alone on a connection of an http2_only listener. The client
 * that chose h2 sends the HTTP/2 preface, which the core recognises as it
 * does on a plain listener. A client offering only other protocols gets
 * no_application_protocol, as nginx answers. */
static const unsigned char alpn_h2[] = "\x02h2\x08http/1.1";
static const unsigned char alpn_h1[] = "\x08http/1.1";
static const unsigned char alpn_h2_alone[] = "\x02h2";

/* OpenSSL takes one ALPN callback per context, shared by every listener:
 * the connections that offer h2 alone carry a mark in their SSL's extra
 * data. The index is taken by tls_context_new(), before any serving thread
 * exists, so the callback reads it without a lock. */
static int alpn_h2_only_index = -1;
static pthread_once_t alpn_index_once = PTHREAD_ONCE_INIT;

static void alpn_index_init(void)
{
	alpn_h2_only_index = SSL_get_ex_new_index(0, NULL, NULL, NULL, NULL);
}

void tls_offer_h2_only(void *ssl)
{
	/* without an index (out of memory at start) http/1.1 stays on offer,
	 * and the core still takes nothing but the preface */
	if (alpn_h2_only_index >= 0)
		SSL_set_ex_data(ssl, alpn_h2_only_index, (void *)alpn_h2_alone);
}

static int alpn_select_cb(SSL *ssl, const unsigned char **out, unsigned char *outlen, const unsigned char *in,
			  unsigned int inlen, void *arg)
{
	bool alone = arg && alpn_h2_only_index >= 0 && SSL_get_ex_data(ssl, alpn_h2_only_index);
	const unsigned char *ours = alone ? alpn_h2_alone : arg ? alpn_h2 : alpn_h1;
	unsigned int len = alone ? sizeof(alpn_h2_alone) - 1 : arg ? sizeof(alpn_h2) - 1 : sizeof(alpn_h1) - 1;
	if (SSL_select_next_proto((unsigned char **)out, outlen, ours, len, in, inlen) !=
	    OPENSSL_NPN_NEGOTIATED)
		return SSL_TLSEXT_ERR_ALERT_FATAL;
	return SSL_TLSEXT_ERR_OK;
}

/* The SNI's site: the best match over every site's names, as a request's
 * Host is matched (site/names.h); -1 for none. */
static int sni_site(const struct tls_context *t, const char *sni)
{
	size_t len, best_score = 0;
	int best = -1;
	if (!sni)
		return -1;
	const char *host = site_host_part(sni, strlen(sni), &len);
	for (int i = 0; i < t->nsites; i++) {
		size_t score = site_names_match(t->sites[i].names, host, len);
		if (score > best_score) {
			best = i;
			best_score = score;
		}
	}
	return best;
}

/* RFC 6066 3: the certificate of the site the client names; a name no site
 * claims, or a site without a certificate of its own, keeps the top
 * level's (the handshake goes on: the site answers, or refuses, per
 * request). */
static int servername_cb(SSL *ssl, int *alert, void *arg)
{
	const struct tls_context *t = arg;
	(void)alert;
	int i = sni_site(t, SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name));
	if (i < 0 || !t->sites[i].cert)
		return SSL_TLSEXT_ERR_OK;
	SSL_CTX *c = t->sites[i].cert;
	STACK_OF(X509) *chain = NULL;
	SSL_CTX_get0_chain_certs(c, &chain);
	if (SSL_use_cert_and_key(ssl, SSL_CTX_get0_certificate(c), SSL_CTX_get0_privatekey(c), chain, 1) != 1) {
		ERR_clear_error();
		return SSL_TLSEXT_ERR_OK; /* the top level's certificate, then: the client judges it */
	}
	return SSL_TLSEXT_ERR_OK;
}

#define PEM_SCAN_MAX (1 << 20) /* a chain or key file is a few KiB */

/* The labels of the PEM blocks in path ("CERTIFICATE, PRIVATE KEY"), into
 * out; false when none (not PEM: DER, or anything else). */
static bool pem_labels(const char *path, char *out, size_t len, bool *encrypted)
{
	FILE *f = fopen(path, "r");
	char line[256];
	size_t o = 0, total = 0;

	out[0] = '\0';
	*encrypted = false;
	if (!f)
		return false;
	while (total < PEM_SCAN_MAX && fgets(line, sizeof(line), f)) {
		total += strlen(line);
		if (strncmp(line, "Proc-Type: 4,ENCRYPTED", 22) == 0)
			*encrypted = true;
		if (strncmp(line, "-----BEGIN ", 11))
			continue;
		char *label = line + 11, *dash = strstr(label, "-----");
		if (!dash)
			continue;
		*dash = '\0';
		if (strstr(label, "ENCRYPTED"))
			*encrypted = true;
		if (!strstr(out, label) && o + strlen(label) + 3 < len)
			o += (size_t)snprintf(out + o, len - o, "%s%s", o ? ", " : "", label);
	}
	fclose(f);
	return o > 0;
}

/* After OpenSSL refused key (tls_certificate or tls_certificate_key): what
 * is wrong with the file, in words, OpenSSL's own reason as a detail. */
static void log_file_error(const char *key, const char *path, bool want_key)
{
	char labels[256], detail[160] = "";
	bool encrypted;
	unsigned long e = ERR_peek_last_error();
	const char *reason = e ? ERR_reason_error_string(e) : NULL;

	if (reason)
		snprintf(detail, sizeof(detail), " (OpenSSL: %s)", reason);
	ERR_clear_error();
	if (!pem_labels(path, labels, sizeof(labels), &encrypted)) {
		log_error("tls: %s '%s': not a PEM file (no '-----BEGIN' line; a DER file converts with `openssl %s "
			  "-inform der -in FILE -out FILE.pem`)", key, path, want_key ? "pkey" : "x509");
	} else if (want_key && encrypted) {
		log_error("tls: %s '%s': the key is encrypted, and spindle asks for no passphrase (decrypt it with "
			  "`openssl pkey -in FILE -out FILE.plain`)", key, path);
	} else if (want_key && !strstr(labels, "PRIVATE KEY")) {
		log_error("tls: %s '%s': holds no private key (only: %s)", key, path, labels);
	} else if (!want_key && !strstr(labels, "CERTIFICATE")) {
		log_error("tls: %s '%s': holds no certificate (only: %s)", key, path, labels);
	} else {
		log_error("tls: %s '%s': its %s does not decode (a damaged or truncated PEM block)%s", key, path,
			  want_key ? "private key" : "certificate", detail);
	}
}

/* OpenSSL opens the files by path and reads them to their end: a FIFO would
 * block --check and the master (a reload then ignores SIGTERM), a device
 * such as /dev/zero would never end. So only a regular file the master can
 * read gets that far (opened non-blocking, to look at it without waiting). */
static bool readable(const char *key, const char *path)
{
	struct stat st;
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0) {
		log_error("tls: %s '%s': cannot read it: %s", key, path, strerror(errno));
		return false;
	}
	bool regular = fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
	close(fd);
	if (!regular)
		log_error("tls: %s '%s': not a regular file", key, path);
	return regular;
}

/* A certificate chain and its key into ctx; 0, or -1 after saying what is
 * wrong with which file. cert_key, key_key: the keys that named them, as
 * messages say ("tls_certificate", or "FILE:LINE: [site NAME] tls_certificate"). */
static int load_pair(SSL_CTX *ctx, const char *cert_key, const char *key_key, const char *cert, const char *key)
{
	if (SSL_CTX_use_certificate_chain_file(ctx, cert) != 1) {
		log_file_error(cert_key, cert, false);
		return -1;
	}
	/* loading the key already compares it with the certificate */
	if (SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1) {
		unsigned long e = ERR_peek_last_error();
		if (ERR_GET_LIB(e) != ERR_LIB_X509 || ERR_GET_REASON(e) != X509_R_KEY_VALUES_MISMATCH) {
			log_file_error(key_key, key, true);
			return -1;
		}
	}
	if (ERR_peek_last_error() || SSL_CTX_check_private_key(ctx) != 1) {
		ERR_clear_error();
		log_error("tls: %s '%s' is not the key of %s '%s' (the first certificate in that file)", key_key, key,
			  cert_key, cert);
		return -1;
	}
	return 0;
}

/* Every [site NAME]'s names, and its certificate where it has one: loaded
 * now, as the top level's is, so a reload with a broken one is refused. */
static int load_sites(struct tls_context *t, const struct config *cfg)
{
	if (cfg->nsites == 0)
		return 0;
	t->sites = calloc((size_t)cfg->nsites, sizeof(*t->sites));
	if (!t->sites)
		return -1;
	t->nsites = cfg->nsites;
	for (int i = 0; i < cfg->nsites; i++) {
		const struct site_config *s = &cfg->sites[i];
		char cert_key[sizeof(cfg->source) + SITE_NAME_MAX + 48], key_key[sizeof(cert_key)];
		snprintf(t->sites[i].names, sizeof(t->sites[i].names), "%s", s->names);
		if (!s->tls_certificate[0])
			continue;
		/* where the site's keys are, as a configuration error names them
		 * (key_line: enum site_set's order, 6 the certificate, 7 its key) */
		snprintf(cert_key, sizeof(cert_key), "%s:%d: [site %s] tls_certificate", cfg->source, s->key_line[6],
			 s->name);
		snprintf(key_key, sizeof(key_key), "%s:%d: [site %s] tls_certificate_key", cfg->source, s->key_line[7],
			 s->name);
		if (!readable(cert_key, s->tls_certificate) || !readable(key_key, s->tls_certificate_key))
			return -1;
		t->sites[i].cert = SSL_CTX_new(TLS_server_method());
		if (!t->sites[i].cert || load_pair(t->sites[i].cert, cert_key, key_key, s->tls_certificate,
								 s->tls_certificate_key) < 0)
			return -1;
	}
	SSL_CTX_set_tlsext_servername_callback(t->ctx, servername_cb);
	SSL_CTX_set_tlsext_servername_arg(t->ctx, t);
	return 0;
}

/* RFC 6066 3 allows no address in SNI, yet some clients (wrk among them)
 * send the one they dialled: that names no site, as no SNI does. */
static bool sni_is_address(const char *sni)
{
	unsigned char addr[sizeof(struct in6_addr)];
	char inner[INET6_ADDRSTRLEN + 2];
	size_t n = strlen(sni);
	if (n >= 2 && sni[0] == '[' && sni[n - 1] == ']' && n - 2 < sizeof(inner)) {
		memcpy(inner, sni + 1, n - 2);
		inner[n - 2] = '\0';
		sni = inner;
	}
	return inet_pton(AF_INET, sni, addr) == 1 || inet_pton(AF_INET6, sni, addr) == 1;
}

int tls_site_of(const void *ssl)
{
	const struct tls_context *t = SSL_CTX_get_app_data(SSL_get_SSL_CTX((const SSL *)ssl));
	const char *sni = SSL_get_servername((const SSL *)ssl, TLSEXT_NAMETYPE_host_name);
	if (!sni || !*sni || sni_is_address(sni))
		return -1;
	return t ? 1 + sni_site(t, sni) : 0;
}

bool tls_kernel_available(void)
{
	char ulps[256] = "";
	FILE *f = fopen("/proc/sys/net/ipv4/tcp_available_ulp", "r");

	if (!f)
		return false;
	size_t n = fread(ulps, 1, sizeof(ulps) - 1, f);
	fclose(f);
	ulps[n] = '\0';
	for (char *save, *tok = strtok_r(ulps, " \n", &save); tok; tok = strtok_r(NULL, " \n", &save))
		if (strcmp(tok, "tls") == 0)
			return true;
	return false;
}

struct tls_context *tls_context_new(const struct config *cfg)
{
	struct tls_context *t = calloc(1, sizeof(*t));

	if (!t)
		return NULL;
	if (!cfg->tls_certificate[0] || !cfg->tls_certificate_key[0]) {
		log_error("tls: tls = on needs tls_certificate and tls_certificate_key");
		goto fail;
	}
	if (!readable("tls_certificate", cfg->tls_certificate) || !readable("tls_certificate_key", cfg->tls_certificate_key))
		goto fail;
	t->ctx = SSL_CTX_new(TLS_server_method());
	if (!t->ctx || RAND_bytes(t->ticket_secret, sizeof(t->ticket_secret)) <= 0) {
		log_error("tls: cannot create a context: %s", ERR_reason_error_string(ERR_get_error()));
		goto fail;
	}
	SSL_CTX_set_app_data(t->ctx, t);
	SSL_CTX_set_min_proto_version(t->ctx, TLS1_2_VERSION);
	/* renegotiation and compression are attack surface (CRIME, renegotiation
	 * DoS); the server picks the cipher, from the profile's order */
	SSL_CTX_set_options(t->ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE);
	SSL_CTX_set_max_early_data(t->ctx, 0); /* no 0-RTT: replayable */
	if (!SSL_CTX_set_cipher_list(t->ctx, TLS_CIPHERS_12) || !SSL_CTX_set_ciphersuites(t->ctx, TLS_SUITES_13) ||
	    !SSL_CTX_set1_groups_list(t->ctx, TLS_GROUPS)) {
		log_error("tls: the cipher policy is not supported by this OpenSSL");
		goto fail;
	}
	/* Resumption by tickets only: a server-side session cache would be one
	 * process's, and a client resuming on another would miss it. */
	SSL_CTX_set_session_cache_mode(t->ctx, SSL_SESS_CACHE_OFF);
	SSL_CTX_set_timeout(t->ctx, TLS_TICKET_ROTATE_S);
	SSL_CTX_set_num_tickets(t->ctx, 1);
	SSL_CTX_set_tlsext_ticket_key_evp_cb(t->ctx, ticket_key_cb);
	pthread_once(&alpn_index_once, alpn_index_init);
	SSL_CTX_set_alpn_select_cb(t->ctx, alpn_select_cb, cfg->http2 ? (void *)alpn_h2 : NULL);
	SSL_CTX_set_mode(t->ctx, SSL_MODE_RELEASE_BUFFERS); /* idle connections give their record buffers back */

	if (load_pair(t->ctx, "tls_certificate", "tls_certificate_key", cfg->tls_certificate,
		      cfg->tls_certificate_key) < 0 || load_sites(t, cfg) < 0)
		goto fail;
	/* Kernel TLS: after a TLS 1.3 handshake the wire hands the server's
	 * write keys to the socket, and file bodies go out with sendfile again
	 * (wire.c, ktls.h). The key-log callback is how OpenSSL over memory BIOs
	 * gives the traffic secret out; it is set only where it will be used. */
	const char *force = getenv("SPINDLE_KTLS");
	t->ktls = tls_kernel_available() || (force && strcmp(force, "try") == 0);
	if (t->ktls)
		SSL_CTX_set_keylog_callback(t->ctx, wire_ktls_keylog);
	if (t->ktls && !tls_kernel_available()) {
		log_info("tls: 'tls' not in tcp_available_ulp, but SPINDLE_KTLS=try: TLS 1.3 connections try kernel "
			 "TLS and fall back to user space where the kernel refuses it");
	} else if (t->ktls) {
		log_info("tls: kernel TLS is available: TLS 1.3 connections (AES-GCM, CHACHA20-POLY1305) send "
			 "through it and sendfile after the handshake; TLS 1.2 ones encrypt in user space");
	} else {
		log_info("tls: no kernel TLS ('tls' not in tcp_available_ulp): file bodies are read and encrypted "
			 "in user space");
	}
	return t;
fail:
	tls_context_free(t);
	return NULL;
}

void tls_context_free(struct tls_context *t)
{
	if (!t)
		return;
	SSL_CTX_free(t->ctx);
	for (int i = 0; i < t->nsites; i++)
		SSL_CTX_free(t->sites[i].cert);
	free(t->sites);
	OPENSSL_cleanse(t->ticket_secret, sizeof(t->ticket_secret));
	free(t);
}

bool tls_context_ktls(const struct tls_context *t)
{
	return t->ktls;
}

void *tls_context_ssl_ctx(const struct tls_context *t)
{
	return t->ctx;
}

void tls_thread_done(void)
{
	OPENSSL_thread_stop();
}
