/* serialize.h - the HTTP/1.1 serializer: a response value (owned by the
 * h1_out it sits in) becomes a head in a buffer and a list of segments to
 * send, head first, then the body: memory, or byte ranges of the body source
 * that the session resolves as it sends (response_body_bytes, else the
 * file). Only here are the status line, Server, Date, Content-Length's
 * digits and Connection written. */
#ifndef SPINDLE_HTTP1_SERIALIZE_H
#define SPINDLE_HTTP1_SERIALIZE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../http/response_value.h"

/* A piece of what is sent: memory, or (p == NULL) body bytes
 * [off, off + len) of the response. */
struct h1_seg {
	const char *p;
	uint64_t off;
	size_t len;
};

/* One response on its way out: the value, its head, and how far it is sent. */
struct h1_out {
	struct response resp;
	char *hdr;               /* the head, and a small body right after it */
	size_t hdr_cap;
	bool hdr_fixed;          /* hdr is not the heap's: a bigger head goes to a new heap buffer */
	struct h1_seg *segs;
	size_t nsegs, seg_max, seg_cur, seg_off;
	uint64_t sent, head_len;
};

/* What the session decides around the value. */
struct h1_framing {
	const char *server_header;   /* "Server: ...\r\n" and the listener's own lines */
	bool head_request;           /* HEAD: the head a GET would get, no body */
	bool keep_alive;             /* else "Connection: close" */
	bool say_keep_alive;         /* an HTTP/1.0 client kept open is told so */
};

/* Serializes o->resp into o->hdr (grown as needed) and o->segs (seg_max
 * entries, enough for the value's pieces and the head); resets the send
 * position. 0, or -EINVAL for a broken value, -ENOMEM. */
int h1_serialize(struct h1_out *o, const struct h1_framing *f);

/* Empties o for the next response: the value released, nothing to send. */
void h1_out_reset(struct h1_out *o);

#endif
