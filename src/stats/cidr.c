/* cidr.c - parsing and matching address prefix lists. */
#include "cidr.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

static void mask(uint8_t a[16], unsigned bits)
{
	for (unsigned i = 0; i < 16; i++) {
		unsigned keep = bits >= 8 * (i + 1) ? 8 : bits > 8 * i ? bits - 8 * i : 0;
		a[i] &= (uint8_t)(0xff00u >> keep);
	}
}

static int parse_one(const char *tok, size_t len, struct cidr *out, char *err, size_t errlen)
{
	char buf[INET6_ADDRSTRLEN + 8];
	if (len >= sizeof(buf)) {
		snprintf(err, errlen, "'%.*s...': not an address", 40, tok);
		return -1;
	}
	memcpy(buf, tok, len);
	buf[len] = '\0';
	char *slash = strchr(buf, '/');
	bool v6 = strchr(buf, ':') != NULL;
	unsigned max = v6 ? 128 : 32, bits = max;
	if (slash) {
		*slash = '\0';
		const char *d = slash + 1;
		if (!*d || strlen(d) > 3 || strspn(d, "0123456789") != strlen(d)) {
			snprintf(err, errlen, "'%.*s': bad prefix length", (int)len, tok);
			return -1;
		}
		bits = 0;
		for (; *d; d++)
			bits = bits * 10 + (unsigned)(*d - '0');
		if (bits > max) {
			snprintf(err, errlen, "'%.*s': prefix length must be 0..%u", (int)len, tok, max);
			return -1;
		}
	}
	memset(out, 0, sizeof(*out));
	if (v6) {
		if (inet_pton(AF_INET6, buf, out->addr) != 1)
			goto bad;
		out->bits = (uint8_t)bits;
	} else {
		if (inet_pton(AF_INET, buf, out->addr + 12) != 1)
			goto bad;
		out->addr[10] = out->addr[11] = 0xff;
		out->bits = (uint8_t)(bits + 96);
	}
	mask(out->addr, out->bits);
	return 0;
bad:
	snprintf(err, errlen, "'%.*s': not an IPv4 or IPv6 address", (int)len, tok);
	return -1;
}

int cidr_list_parse(const char *text, struct cidr_list *out, char *err, size_t errlen)
{
	static const char seps[] = " \t,";
	out->n = 0;
	out->unix_ok = false;
	for (const char *p = text; *p;) {
		p += strspn(p, seps);
		size_t len = strcspn(p, seps);
		if (len == 0)
			break;
		if (len == 5 && strncmp(p, "unix:", 5) == 0) {
			out->unix_ok = true;
			p += len;
			continue;
		}
		if (out->n == CIDR_MAX) {
			snprintf(err, errlen, "more than %d prefixes", CIDR_MAX);
			return -1;
		}
		if (parse_one(p, len, &out->v[out->n], err, errlen) < 0)
			return -1;
		out->n++;
		p += len;
	}
	return 0;
}

bool cidr_list_match16(const struct cidr_list *l, const uint8_t addr[16])
{
	for (size_t i = 0; i < l->n; i++) {
		uint8_t a[16];
		memcpy(a, addr, 16);
		mask(a, l->v[i].bits);
		if (memcmp(a, l->v[i].addr, 16) == 0)
			return true;
	}
	return false;
}

bool cidr_list_match(const struct cidr_list *l, const struct sockaddr *sa)
{
	uint8_t a[16] = { 0 };
	if (sa->sa_family == AF_INET) {
		a[10] = a[11] = 0xff;
		memcpy(a + 12, &((const struct sockaddr_in *)sa)->sin_addr, 4);
	} else if (sa->sa_family == AF_INET6) {
		memcpy(a, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
	} else {
		return sa->sa_family == AF_UNIX && l->unix_ok;
	}
	return cidr_list_match16(l, a);
}
