/* outbuf.h - appending text to a fixed buffer that refuses to overflow: what
 * does not fit is dropped whole and flagged, so a builder checks once at the
 * end (or per item, to cut at an item). Used by the listing and JSON log
 * builders and the connection core's response heads. */
#ifndef SPINDLE_OUTBUF_H
#define SPINDLE_OUTBUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

struct outbuf {
	char *p;
	size_t len, cap;
	bool overflow;   /* something did not fit (and was left out) */
};

static inline void outbuf_put(struct outbuf *o, const char *s, size_t n)
{
	if (o->overflow || o->len + n > o->cap) {
		o->overflow = true;
		return;
	}
	memcpy(o->p + o->len, s, n);
	o->len += n;
}

static inline void outbuf_puts(struct outbuf *o, const char *s)
{
	outbuf_put(o, s, strlen(s));
}

/* Decimal, without snprintf (which costs more than a whole log line). */
static inline void outbuf_u64(struct outbuf *o, uint64_t v)
{
	char tmp[24];
	size_t i = sizeof(tmp);
	do {
		tmp[--i] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	outbuf_put(o, tmp + i, sizeof(tmp) - i);
}

#endif
