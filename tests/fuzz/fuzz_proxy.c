/* fuzz_proxy.c - libFuzzer target for the PROXY protocol header parser
 * (src/net/proxy_protocol.c).
 *
 * The input is the bytes a connection brings (at most PROXY_HEADER_MAX + 64
 * of them are looked at). Each is given to proxy_parse from a copy placed at
 * the end of its allocation, so a read past the bytes given is an ASan
 * report. Checked, beyond no crash and no sanitizer report:
 *  - the verdict on every prefix agrees with the whole: a prefix shorter
 *    than a DONE header is NEED_MORE, every longer one is the same header;
 *    once ERROR, every longer prefix is ERROR; NEED_MORE never comes at or
 *    past PROXY_HEADER_MAX bytes;
 *  - DONE: 16 <= len <= PROXY_HEADER_MAX for version 2, 15 <= len <= 107
 *    and one CRLF, at the end, for version 1; relayed addresses are AF_INET or AF_INET6 with
 *    the matching length, and for version 2 they are the header's bytes;
 *  - ERROR comes with a reason.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/net/proxy_protocol.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int ok)
{
	if (!ok)
		abort();
}

/* proxy_parse over exactly n bytes, which end where their allocation does. */
static enum proxy_status parse_exact(const uint8_t *data, size_t n, struct proxy_header *h)
{
	uint8_t *copy = malloc(n ? n : 1);
	check(copy != NULL);
	memcpy(copy, data, n);
	memset(h, 0xa5, sizeof(*h));
	enum proxy_status st = proxy_parse(copy, n, h);
	free(copy);
	return st;
}

static bool same_header(const struct proxy_header *a, const struct proxy_header *b)
{
	if (a->len != b->len || a->version != b->version || a->relayed != b->relayed)
		return false;
	return !a->relayed || (a->addrlen == b->addrlen && memcmp(&a->src, &b->src, a->addrlen) == 0 &&
			       memcmp(&a->dst, &b->dst, a->addrlen) == 0);
}

static void check_done(const uint8_t *data, const struct proxy_header *h)
{
	check(h->version == 1 || h->version == 2);
	if (h->version == 2) {
		check(h->len >= 16 && h->len <= PROXY_HEADER_MAX);
		check(h->len == 16 + ((size_t)data[14] << 8 | data[15]));
	} else {
		check(h->len >= 15 && h->len <= PROXY_V1_MAX); /* "PROXY UNKNOWN\r\n" is the shortest */
		check(data[h->len - 2] == '\r' && data[h->len - 1] == '\n');
		check(memchr(data, '\n', h->len - 1) == NULL);
	}
	if (!h->relayed)
		return;
	int fam = h->src.ss_family;
	check(fam == AF_INET || fam == AF_INET6);
	check(h->dst.ss_family == fam);
	check(h->addrlen == (fam == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6)));
	if (h->version == 2) { /* the addresses and ports as the header carries them */
		const struct sockaddr_in *s4 = (const void *)&h->src, *d4 = (const void *)&h->dst;
		const struct sockaddr_in6 *s6 = (const void *)&h->src, *d6 = (const void *)&h->dst;
		check((data[12] & 0x0F) == 1);
		if (fam == AF_INET) {
			check(data[13] == 0x11);
			check(memcmp(&s4->sin_addr, data + 16, 4) == 0 && memcmp(&d4->sin_addr, data + 20, 4) == 0);
			check(memcmp(&s4->sin_port, data + 24, 2) == 0 && memcmp(&d4->sin_port, data + 26, 2) == 0);
		} else {
			check(data[13] == 0x21);
			check(memcmp(&s6->sin6_addr, data + 16, 16) == 0 && memcmp(&d6->sin6_addr, data + 32, 16) == 0);
			check(memcmp(&s6->sin6_port, data + 48, 2) == 0 && memcmp(&d6->sin6_port, data + 50, 2) == 0);
		}
	} else if (fam == AF_INET) { /* version 1 IPv4 is canonical: it prints back as it came */
		char a[INET_ADDRSTRLEN], want[64];
		const struct sockaddr_in *s4 = (const void *)&h->src;
		check(inet_ntop(AF_INET, &s4->sin_addr, a, sizeof(a)) != NULL);
		size_t n = (size_t)snprintf(want, sizeof(want), "PROXY TCP4 %s ", a);
		check(memcmp(data, want, n) == 0);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct proxy_header whole, part;

	if (size > PROXY_HEADER_MAX + 64)
		size = PROXY_HEADER_MAX + 64;
	enum proxy_status st = parse_exact(data, size, &whole);
	if (st == PROXY_ERROR)
		check(whole.error != NULL && whole.error[0] != '\0');
	if (st == PROXY_NEED_MORE)
		check(size < PROXY_HEADER_MAX);
	if (st == PROXY_DONE) {
		check(whole.len <= size);
		check_done(data, &whole);
	}
	/* every prefix, as a connection trickling in a byte at a time would be seen */
	bool errored = false;
	for (size_t n = 0; n <= size; n++) {
		enum proxy_status pst = parse_exact(data, n, &part);
		if (errored) {
			check(pst == PROXY_ERROR);
			continue;
		}
		switch (st) {
		case PROXY_DONE:
			if (n < whole.len)
				check(pst == PROXY_NEED_MORE);
			else
				check(pst == PROXY_DONE && same_header(&part, &whole));
			break;
		case PROXY_NEED_MORE:
			check(pst == PROXY_NEED_MORE);
			break;
		case PROXY_ERROR:
			check(pst != PROXY_DONE);
			errored = pst == PROXY_ERROR;
			break;
		}
	}
	check(st != PROXY_ERROR || errored);
	return 0;
}
