/* cidr.h - client address lists ("127.0.0.0/8 ::1/128 10.1.2.3") and
 * matching a peer against them. Pure: no I/O, no allocation.
 *
 * IPv4 prefixes are kept as IPv4-mapped IPv6 (::ffff:a.b.c.d, prefix + 96),
 * so an IPv4 rule also matches an IPv4 client reaching a dual-stack ("::")
 * listener, whose address arrives mapped. */
#ifndef SPINDLE_STATS_CIDR_H
#define SPINDLE_STATS_CIDR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#define CIDR_MAX 64

struct cidr {
	uint8_t addr[16]; /* host bits cleared */
	uint8_t bits;     /* 0..128 */
};

struct cidr_list {
	size_t n;
	struct cidr v[CIDR_MAX];
	bool unix_ok;     /* "unix:": clients of UNIX sockets, as nginx's allow unix: */
};

/* Parses prefixes separated by spaces, tabs or commas; an address without
 * "/N" is one host, "unix:" every client of a UNIX socket. An empty list allows no one. Returns 0, or -1 with the
 * problem in err ("'10.0.0.0/33': prefix length must be 0..32"). */
int cidr_list_parse(const char *text, struct cidr_list *out, char *err, size_t errlen);

/* Is the socket address (AF_INET or AF_INET6) inside one of the prefixes?
 * An AF_UNIX one matches when the list holds "unix:". */
bool cidr_list_match(const struct cidr_list *l, const struct sockaddr *sa);

/* The same for a 16-byte IPv6 (or IPv4-mapped) address. */
bool cidr_list_match16(const struct cidr_list *l, const uint8_t addr[16]);

#endif
