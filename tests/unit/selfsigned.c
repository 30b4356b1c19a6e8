/* selfsigned.c - see selfsigned.h. */
#include "selfsigned.h"

#include <criterion/criterion.h>

EVP_PKEY *test_selfsigned(X509 **crt)
{
	EVP_PKEY *key = EVP_EC_gen("P-256");
	X509 *c = X509_new();

	cr_assert(key && c);
	X509_set_version(c, 2);
	ASN1_INTEGER_set(X509_get_serialNumber(c), 1);
	X509_gmtime_adj(X509_getm_notBefore(c), 0);
	X509_gmtime_adj(X509_getm_notAfter(c), 3600);
	X509_NAME_add_entry_by_txt(X509_get_subject_name(c), "CN", MBSTRING_ASC, (const unsigned char *)"t", -1, -1, 0);
	X509_set_issuer_name(c, X509_get_subject_name(c));
	X509_set_pubkey(c, key);
	cr_assert(X509_sign(c, key, EVP_sha256()) > 0);
	*crt = c;
	return key;
}
