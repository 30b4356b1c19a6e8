/* selfsigned.h - a throwaway P-256 key and a self-signed certificate for it,
 * made in memory, for unit tests that run TLS handshakes. */
#ifndef SPINDLE_TEST_SELFSIGNED_H
#define SPINDLE_TEST_SELFSIGNED_H

#include <openssl/evp.h>
#include <openssl/x509.h>

/* The key (the caller frees it and *crt). Fails the test on any error. */
EVP_PKEY *test_selfsigned(X509 **crt);

#endif
