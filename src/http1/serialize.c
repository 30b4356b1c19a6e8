/* serialize.c - a response value as HTTP/1.1 bytes (RFC 9112 4, 6). */
#include "serialize.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../http/date.h"
#include "../outbuf.h"

void h1_out_reset(struct h1_out *o)
{
	response_release(&o->resp);
	o->nsegs = o->seg_cur = o->seg_off = 0;
	o->sent = o->head_len = 0;
}

static void add_seg(struct h1_out *o, const char *p, uint64_t off, uint64_t len)
{
	if (len == 0 || o->nsegs == o->seg_max)
		return;
	o->segs[o->nsegs++] = (struct h1_seg){ p, off, (size_t)len };
}

/* What the head can take at most: every field's line, the Content-Length
 * digits (20), and the lines the session adds. */
static size_t head_bound(const struct response *r, const struct h1_framing *f)
{
	size_t n = sizeof("HTTP/1.1 999 \r\n") + strlen(http_status_text(r->status)) + strlen(f->server_header) +
		   sizeof("Date: \r\n") + HTTP_DATE_LEN + sizeof("Connection: keep-alive\r\n") + 2;
	for (size_t i = 0; i < r->nfields; i++)
		n += strlen(r->fields[i].name) + 4 + (r->fields[i].value ? r->fields[i].len : 20);
	return n + r->lines_len;
}

/* A file's body from memory small enough to follow the head in its buffer
 * goes there, so the response is one buffer: one send(), which TCP copies
 * in one piece (a sendmsg of two iovecs costs measurably more per request on
 * the keep-alive path). */
static bool body_follows_head(const struct h1_out *o, uint64_t len)
{
	return o->resp.body.follows_head && response_body_bytes(&o->resp, 0) && len <= o->hdr_cap - o->head_len;
}

int h1_serialize(struct h1_out *o, const struct h1_framing *f)
{
	const struct response *r = &o->resp;

	o->nsegs = o->seg_cur = o->seg_off = 0;
	o->sent = o->head_len = 0;
	if (r->broken)
		return -EINVAL;
	size_t need = head_bound(r, f);
	if (need > o->hdr_cap) {
		/* the old head's bytes are not kept: it is written afresh */
		char *h = o->hdr_fixed ? malloc(need) : realloc(o->hdr, need);
		if (!h)
			return -ENOMEM;
		o->hdr_fixed = false;
		o->hdr = h;
		o->hdr_cap = need;
	}
	struct outbuf b = { o->hdr, 0, o->hdr_cap, false };
	outbuf_puts(&b, "HTTP/1.1 ");
	outbuf_u64(&b, (uint64_t)r->status);
	outbuf_put(&b, " ", 1);
	outbuf_puts(&b, http_status_text(r->status));
	outbuf_puts(&b, "\r\n");
	const char *lines = f->server_header;
	if (r->no_server && strncmp(lines, "Server:", 7) == 0) {
		/* a [headers] rule removed it; the listener's own lines stay */
		const char *eol = strstr(lines, "\r\n");
		lines = eol ? eol + 2 : "";
	}
	outbuf_puts(&b, lines);
	outbuf_puts(&b, "Date: ");
	outbuf_put(&b, http_date_now(), HTTP_DATE_LEN);
	outbuf_puts(&b, "\r\n");
	uint64_t length = response_length(r);
	for (size_t i = 0; i < r->nfields; i++) {
		const struct response_field *fl = &r->fields[i];
		outbuf_puts(&b, fl->name);
		outbuf_puts(&b, ": ");
		if (fl->value)
			outbuf_put(&b, fl->value, fl->len);
		else
			outbuf_u64(&b, length);
		outbuf_puts(&b, "\r\n");
	}
	if (r->lines_len)
		outbuf_put(&b, r->lines, r->lines_len);
	if (!f->keep_alive)
		outbuf_puts(&b, "Connection: close\r\n");
	else if (f->say_keep_alive)
		outbuf_puts(&b, "Connection: keep-alive\r\n");
	outbuf_puts(&b, "\r\n");
	if (b.overflow)
		return -EINVAL; /* head_bound is wrong: never sent cut short */
	o->head_len = b.len;
	add_seg(o, o->hdr, 0, b.len);
	if (f->head_request || r->body.kind == RESPONSE_BODY_NONE)
		return 0;
	if (r->pieces) {
		for (size_t i = 0; i < r->npieces; i++)
			add_seg(o, r->pieces[i].p, r->pieces[i].off, r->pieces[i].len);
		return 0;
	}
	if (r->body.len > 0 && body_follows_head(o, r->body.len)) {
		memcpy(o->hdr + o->head_len, response_body_bytes(r, r->body.off), (size_t)r->body.len);
		o->segs[0].len += (size_t)r->body.len;
		return 0;
	}
	add_seg(o, NULL, r->body.off, r->body.len);
	return 0;
}
