/* json.c - JSON string escaping (RFC 8259) and the JSON access-log line. */
#include "json.h"

#include "../outbuf.h"
#include "../utf8.h"

#include <string.h>

size_t json_escape(char *out, size_t cap, const char *s, size_t len)
{
	static const char hex[] = "0123456789abcdef";
	const unsigned char *u = (const unsigned char *)s;
	size_t o = 0;

	for (size_t i = 0; i < len;) {
		/* the common case, a run of printable ASCII, is copied whole */
		size_t run = i;
		while (run < len && u[run] >= 0x20 && u[run] < 0x7f && u[run] != '"' && u[run] != '\\')
			run++;
		if (run > i) {
			size_t n = run - i <= cap - o ? run - i : cap - o;
			memcpy(out + o, s + i, n);
			o += n;
			i += n;
			if (i < run)
				break; /* out of room */
			continue;
		}
		char esc[8];
		const char *piece = esc;
		size_t n, used;
		uint32_t cp;
		unsigned char ch = u[i];

		if (ch == '"' || ch == '\\') {
			esc[0] = '\\';
			esc[1] = (char)ch;
			n = 2;
			used = 1;
		} else if (ch < 0x20 || ch == 0x7f) {
			memcpy(esc, "\\u00", 4);
			esc[4] = hex[ch >> 4];
			esc[5] = hex[ch & 15];
			n = 6;
			used = 1;
		} else if ((used = utf8_decode(s + i, len - i, &cp)) > 0) {
			piece = s + i;
			n = used;
		} else {
			piece = "\\ufffd";
			n = 6;
			used = 1;
		}
		if (o + n > cap)
			break;
		memcpy(out + o, piece, n);
		o += n;
		i += used;
	}
	return o;
}

void json_split_request_line(struct span line, struct span *method, struct span *target,
			     struct span *protocol)
{
	*method = *protocol = (struct span){ 0 };
	*target = line;
	if (!line.p) /* nothing parsed (and NULL + 0 is undefined) */
		return;
	const char *p = line.p, *end = line.p + line.len;
	const char *sp1 = memchr(p, ' ', line.len);
	const char *sp2 = NULL;

	for (const char *q = end; sp1 && q > sp1 + 1; q--)
		if (q[-1] == ' ') {
			sp2 = q - 1;
			break;
		}
	if (!sp1 || !sp2)
		return;
	*method = (struct span){ p, (size_t)(sp1 - p) };
	*target = (struct span){ sp1 + 1, (size_t)(sp2 - sp1 - 1) };
	*protocol = (struct span){ sp2 + 1, (size_t)(end - sp2 - 1) };
}

/* "key":"escaped" (or "key":null for an absent span), using at most limit
 * bytes for the escaped value. */
static void jstring(struct outbuf *b, const char *key, struct span v, bool nullable, size_t limit)
{
	outbuf_puts(b, key);
	if (!v.p && nullable) {
		outbuf_puts(b, "null");
		return;
	}
	outbuf_puts(b, "\"");
	size_t room = b->cap - b->len;
	if (limit > room)
		limit = room;
	b->len += json_escape(b->p + b->len, limit, v.p ? v.p : "", v.p ? v.len : 0);
	outbuf_puts(b, "\"");
}

static struct span cstr(const char *s)
{
	return (struct span){ s, s ? strlen(s) : 0 };
}

/* Room kept for the fixed part of a line: keys, numbers, time, client, model. */
#define JSON_LINE_FIXED 640

size_t json_access_line(char *out, size_t cap, const struct json_access *a)
{
	struct outbuf b = { out, 0, cap - 2, false }; /* "}\n" always fits */
	size_t strings = cap > JSON_LINE_FIXED ? cap - JSON_LINE_FIXED : 0;

	jstring(&b, "{\"time\":", cstr(a->time), false, 64);
	jstring(&b, ",\"client\":", cstr(a->client), false, 64);
	jstring(&b, ",\"method\":", a->method, false, 64);
	/* the target gets half of what is left, the referer half of the rest */
	jstring(&b, ",\"target\":", a->target, false, strings / 2);
	jstring(&b, ",\"protocol\":", a->protocol, false, 32);
	outbuf_puts(&b, ",\"status\":");
	outbuf_u64(&b, a->status < 0 ? 0 : (uint64_t)a->status);
	outbuf_puts(&b, ",\"bytes\":");
	outbuf_u64(&b, a->bytes);
	outbuf_puts(&b, ",\"duration_us\":");
	outbuf_u64(&b, a->duration_us);
	outbuf_puts(&b, ",\"queue_us\":");
	outbuf_u64(&b, a->queue_us);
	outbuf_puts(&b, ",\"service_us\":");
	outbuf_u64(&b, a->service_us);
	outbuf_puts(&b, ",\"first_byte_us\":");
	outbuf_u64(&b, a->first_byte_us);
	if (a->refused)
		jstring(&b, ",\"shed\":", cstr(a->refused), false, 32);
	else if (a->shed)
		outbuf_puts(&b, ",\"shed\":\"queue_wait\"");
	jstring(&b, ",\"referer\":", a->referer, true, strings / 4);
	jstring(&b, ",\"user_agent\":", a->user_agent, true, strings / 4);
	jstring(&b, ",\"model\":", cstr(a->model), false, 32);
	outbuf_puts(&b, ",\"worker\":");
	outbuf_u64(&b, a->worker < 0 ? 0 : (uint64_t)a->worker);
	if (a->site)
		jstring(&b, ",\"site\":", cstr(a->site), false, 64);
	out[b.len++] = '}';
	out[b.len++] = '\n';
	return b.len;
}
