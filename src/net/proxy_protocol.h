/* proxy_protocol.h - the PROXY protocol header (versions 1 and 2) that a
 * load balancer such as HAProxy (`send-proxy`, `send-proxy-v2`) puts before
 * a connection's first byte to tell the server who the client is.
 *
 * Pure: bytes in, a verdict out; no I/O, no allocation, no globals. The
 * caller keeps the bytes that arrived so far and calls again with more:
 *
 *     PROXY_NEED_MORE   the bytes are a valid start of a header: read more
 *     PROXY_DONE        a whole header of h->len bytes; what follows is the
 *                       connection's own data (a request, a TLS ClientHello)
 *     PROXY_ERROR       not a header, or a malformed one (h->error says why):
 *                       close the connection
 *
 * The verdict on a prefix never contradicts the verdict on more bytes: a
 * NEED_MORE is never followed by a different header, an ERROR stays an ERROR,
 * and bytes past a DONE header change nothing. The specification is
 * HAProxy's doc/proxy-protocol.txt. */
#ifndef SPINDLE_NET_PROXY_PROTOCOL_H
#define SPINDLE_NET_PROXY_PROTOCOL_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

/* Version 1 is one text line of at most 107 bytes with its CRLF (the
 * specification's worst case, an UNKNOWN line with two IPv6 addresses). */
#define PROXY_V1_MAX 107
/* Version 2 is 16 bytes and the length they announce, up to 64 KiB. We take
 * at most 536 in all: the specification designs the header to fit the
 * smallest segment every TCP host must accept (576 - 40 bytes), so that it
 * arrives in one piece; it holds HAProxy's addresses (52 bytes for IPv6) with
 * room for the TLVs it adds on request (ALPN, authority, unique id of up to
 * 128 bytes, SSL details), and a longer one would only make every connection
 * on the listener buffer more before it is refused. */
#define PROXY_HEADER_MAX 536

enum proxy_status { PROXY_NEED_MORE, PROXY_DONE, PROXY_ERROR };

struct proxy_header {
	size_t len;       /* DONE: the header's bytes */
	int version;      /* DONE: 1 or 2 */
	/* DONE: true when the header names the client (a TCP connection over
	 * IPv4 or IPv6): src and dst are then AF_INET or AF_INET6 addresses
	 * with their ports. false for a v2 LOCAL command (the balancer's own
	 * health check), a v1 UNKNOWN line, and what this server does not take
	 * (UDP, UNIX or unspecified families): the connection's own peer
	 * stands, as the specification asks. */
	bool relayed;
	struct sockaddr_storage src, dst;
	socklen_t addrlen;  /* of src and dst */
	const char *error;  /* ERROR: why, a constant string */
};

/* Examines the first len bytes a connection brought (see above). *h is
 * filled on DONE, and h->error on ERROR. */
enum proxy_status proxy_parse(const void *buf, size_t len, struct proxy_header *h);

#endif
