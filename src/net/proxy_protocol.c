/* proxy_protocol.c - parses the PROXY protocol header, versions 1 (text)
 * and 2 (binary), from the bytes a connection brought (proxy_protocol.h). */
#include "proxy_protocol.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <string.h>

static const unsigned char v2_sig[12] = { 0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D, 0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A };
static const char v1_sig[] = "PROXY ";
#define V1_SIG_LEN (sizeof(v1_sig) - 1)

static enum proxy_status fail(struct proxy_header *h, const char *why)
{
	h->error = why;
	return PROXY_ERROR;
}

static size_t min_size(size_t a, size_t b)
{
	return a < b ? a : b;
}

/* ---- version 2 ------------------------------------------------------- */

static void set_inet(struct sockaddr_storage *ss, const unsigned char *addr, const unsigned char *port)
{
	struct sockaddr_in *s = (struct sockaddr_in *)ss;
	memset(ss, 0, sizeof(*ss));
	s->sin_family = AF_INET;
	memcpy(&s->sin_addr, addr, 4);
	memcpy(&s->sin_port, port, 2); /* both in network order on the wire and in the struct */
}

static void set_inet6(struct sockaddr_storage *ss, const unsigned char *addr, const unsigned char *port)
{
	struct sockaddr_in6 *s = (struct sockaddr_in6 *)ss;
	memset(ss, 0, sizeof(*ss));
	s->sin6_family = AF_INET6;
	memcpy(&s->sin6_addr, addr, 16);
	memcpy(&s->sin6_port, port, 2);
}

/* Every check is made as soon as its byte is there, so a bad header is
 * refused at once rather than after the balancer's next segment. */
static enum proxy_status parse_v2(const unsigned char *b, size_t len, struct proxy_header *h)
{
	if (len > 12) {
		if (b[12] >> 4 != 2)
			return fail(h, "a version 2 signature with another version");
		if ((b[12] & 0x0F) > 1)
			return fail(h, "an unknown version 2 command");
	}
	if (len > 13 && ((b[13] >> 4) > 3 || (b[13] & 0x0F) > 2))
		return fail(h, "an unknown version 2 address family or transport");
	if (len < 16)
		return PROXY_NEED_MORE;
	size_t alen = (size_t)b[14] << 8 | b[15];
	if (16 + alen > PROXY_HEADER_MAX)
		return fail(h, "a version 2 header longer than 536 bytes");
	if (len < 16 + alen)
		return PROXY_NEED_MORE;

	h->len = 16 + alen;
	h->version = 2;
	h->relayed = false;
	if ((b[12] & 0x0F) == 0) /* LOCAL: the balancer's own connection (a health check) */
		return PROXY_DONE;
	unsigned fam = b[13] >> 4, proto = b[13] & 0x0F;
	static const size_t need[4] = { 0, 12, 36, 216 }; /* the address block of each family */
	if (fam != 0 && proto != 0 && alen < need[fam])
		return fail(h, "a version 2 address block shorter than its family's");
	const unsigned char *a = b + 16;
	if (b[13] == 0x11) { /* TCP over IPv4 */
		set_inet(&h->src, a, a + 8);
		set_inet(&h->dst, a + 4, a + 10);
		h->addrlen = sizeof(struct sockaddr_in);
		h->relayed = true;
	} else if (b[13] == 0x21) { /* TCP over IPv6 */
		set_inet6(&h->src, a, a + 32);
		set_inet6(&h->dst, a + 16, a + 34);
		h->addrlen = sizeof(struct sockaddr_in6);
		h->relayed = true;
	}
	/* UNSPEC, UDP and UNIX: valid, and the connection's own addresses
	 * stand (the specification's fallback for what a receiver does not
	 * take). TLVs after the addresses are skipped: nothing here needs them. */
	return PROXY_DONE;
}

/* ---- version 1 ------------------------------------------------------- */

/* A port: decimal 0..65535 without leading zeros. */
static bool v1_port(const char *p, size_t n, unsigned char out[2])
{
	unsigned v = 0;
	if (n == 0 || n > 5 || (n > 1 && p[0] == '0'))
		return false;
	for (size_t i = 0; i < n; i++) {
		if (p[i] < '0' || p[i] > '9')
			return false;
		v = v * 10 + (unsigned)(p[i] - '0');
	}
	if (v > 65535)
		return false;
	out[0] = (unsigned char)(v >> 8);
	out[1] = (unsigned char)v;
	return true;
}

/* An IPv4 address: exactly four decimal numbers 0..255 without leading
 * zeros (which some parsers would read as octal), dot-separated. */
static bool v1_ipv4(const char *p, size_t n, unsigned char out[4])
{
	size_t i = 0;
	for (int part = 0; part < 4; part++) {
		unsigned v = 0;
		size_t start = i;
		while (i < n && p[i] >= '0' && p[i] <= '9' && i - start < 3)
			v = v * 10 + (unsigned)(p[i++] - '0');
		if (i == start || v > 255 || (i - start > 1 && p[start] == '0'))
			return false;
		out[part] = (unsigned char)v;
		if (part < 3 && (i >= n || p[i++] != '.'))
			return false;
	}
	return i == n;
}

/* An IPv6 address in the forms inet_pton takes (HAProxy writes a mapped
 * IPv4 client as ::ffff:a.b.c.d). */
static bool v1_ipv6(const char *p, size_t n, unsigned char out[16])
{
	char tmp[INET6_ADDRSTRLEN];
	if (n == 0 || n >= sizeof(tmp) || memchr(p, '\0', n))
		return false;
	memcpy(tmp, p, n);
	tmp[n] = '\0';
	return inet_pton(AF_INET6, tmp, out) == 1;
}

/* The next field of a line: up to the next space or the end. */
static bool v1_field(const char **p, const char *end, const char **f, size_t *n)
{
	const char *sp = memchr(*p, ' ', (size_t)(end - *p));
	*f = *p;
	*n = (size_t)((sp ? sp : end) - *p);
	*p = sp ? sp + 1 : end;
	return *n > 0;
}

/* "PROXY TCP4|TCP6 SRC DST SPORT DPORT" or "PROXY UNKNOWN[ anything]",
 * line being the text between "PROXY " and the CRLF. */
static enum proxy_status parse_v1_line(const char *line, const char *end, struct proxy_header *h)
{
	const char *p = line, *f;
	size_t n;
	unsigned char src[16], dst[16], sport[2], dport[2];

	if (!v1_field(&p, end, &f, &n))
		return fail(h, "a version 1 line without a protocol");
	if (n == 7 && memcmp(f, "UNKNOWN", 7) == 0) /* the rest is to be ignored */
		return PROXY_DONE;
	bool v4 = n == 4 && memcmp(f, "TCP4", 4) == 0;
	if (!v4 && !(n == 4 && memcmp(f, "TCP6", 4) == 0))
		return fail(h, "a version 1 line with a protocol other than TCP4, TCP6 or UNKNOWN");
	if (!v1_field(&p, end, &f, &n) || !(v4 ? v1_ipv4(f, n, src) : v1_ipv6(f, n, src)) ||
	    !v1_field(&p, end, &f, &n) || !(v4 ? v1_ipv4(f, n, dst) : v1_ipv6(f, n, dst)))
		return fail(h, "a version 1 line with a bad address");
	if (!v1_field(&p, end, &f, &n) || !v1_port(f, n, sport) || !v1_field(&p, end, &f, &n) ||
	    !v1_port(f, n, dport) || f + n != end)
		return fail(h, "a version 1 line with bad ports");
	if (v4) {
		set_inet(&h->src, src, sport);
		set_inet(&h->dst, dst, dport);
		h->addrlen = sizeof(struct sockaddr_in);
	} else {
		set_inet6(&h->src, src, sport);
		set_inet6(&h->dst, dst, dport);
		h->addrlen = sizeof(struct sockaddr_in6);
	}
	h->relayed = true;
	return PROXY_DONE;
}

static enum proxy_status parse_v1(const char *b, size_t len, struct proxy_header *h)
{
	size_t scan = min_size(len, PROXY_V1_MAX);
	for (size_t i = 0; i < scan; i++) {
		if (b[i] == '\n') /* the specification allows no LF without its CR */
			return fail(h, "a version 1 line ended by LF alone");
		if (b[i] != '\r')
			continue;
		if (i + 1 >= PROXY_V1_MAX)
			break;
		if (i + 1 == len)
			return PROXY_NEED_MORE;
		if (b[i + 1] != '\n')
			return fail(h, "a version 1 line with CR not followed by LF");
		h->len = i + 2;
		h->version = 1;
		h->relayed = false;
		return parse_v1_line(b + V1_SIG_LEN, b + i, h);
	}
	if (len >= PROXY_V1_MAX)
		return fail(h, "a version 1 line without CRLF in its first 107 bytes");
	return PROXY_NEED_MORE;
}

enum proxy_status proxy_parse(const void *buf, size_t len, struct proxy_header *h)
{
	const unsigned char *b = buf;

	h->error = NULL;
	if (len == 0)
		return PROXY_NEED_MORE;
	if (memcmp(b, v2_sig, min_size(len, sizeof(v2_sig))) == 0) {
		if (len < sizeof(v2_sig))
			return PROXY_NEED_MORE;
		return parse_v2(b, len, h);
	}
	if (memcmp(b, v1_sig, min_size(len, V1_SIG_LEN)) == 0) {
		if (len < V1_SIG_LEN)
			return PROXY_NEED_MORE;
		return parse_v1((const char *)b, len, h);
	}
	return fail(h, "no PROXY protocol header");
}
