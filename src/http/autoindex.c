/* autoindex.c - directory listings as HTML or JSON, sorted as the query asks. */
#include "autoindex.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../log/json.h"
#include "../outbuf.h"
#include "../utf8.h"

struct autoindex_order autoindex_parse_query(struct span query)
{
	struct autoindex_order o = { AUTOINDEX_BY_NAME, false };
	if (!query.p) /* no query: and NULL + 0 is undefined */
		return o;
	const char *p = query.p, *end = query.p + query.len;

	while (p < end) {
		const char *amp = memchr(p, '&', (size_t)(end - p));
		const char *pend = amp ? amp : end;
		struct span pair = { p, (size_t)(pend - p) };
		if (span_eq_nocase(pair, "sort=mtime"))
			o.key = AUTOINDEX_BY_MTIME;
		else if (span_eq_nocase(pair, "sort=size"))
			o.key = AUTOINDEX_BY_SIZE;
		else if (span_eq_nocase(pair, "sort=name"))
			o.key = AUTOINDEX_BY_NAME;
		else if (span_eq_nocase(pair, "order=desc"))
			o.desc = true;
		else if (span_eq_nocase(pair, "order=asc"))
			o.desc = false;
		p = amp ? amp + 1 : end;
	}
	return o;
}

static int by_name(const void *a, const void *b)
{
	const struct dir_entry *x = a, *y = b;
	return strcmp(x->name, y->name);
}

static int by_mtime(const void *a, const void *b)
{
	const struct dir_entry *x = a, *y = b;
	if (x->mtime != y->mtime)
		return x->mtime < y->mtime ? -1 : 1;
	return by_name(a, b);
}

static int by_size(const void *a, const void *b)
{
	const struct dir_entry *x = a, *y = b;
	if (x->size != y->size)
		return x->size < y->size ? -1 : 1;
	return by_name(a, b);
}

void autoindex_sort(struct dir_entry *e, size_t n, struct autoindex_order order)
{
	int (*cmp)(const void *, const void *) = order.key == AUTOINDEX_BY_MTIME ? by_mtime
						 : order.key == AUTOINDEX_BY_SIZE ? by_size : by_name;
	if (n > 1)
		qsort(e, n, sizeof(*e), cmp);
	if (order.desc)
		for (size_t i = 0, j = n ? n - 1 : 0; i < j; i++, j--) {
			struct dir_entry t = e[i];
			e[i] = e[j];
			e[j] = t;
		}
}

size_t autoindex_etag(char out[HTTP_ETAG_MAX], struct timespec mtime, enum autoindex_mode mode,
		      struct autoindex_order order)
{
	static const char keys[] = "nms";
	int n = snprintf(out, HTTP_ETAG_MAX, "W/\"%llx.%lx-%c%c%c\"", (unsigned long long)mtime.tv_sec,
			 (unsigned long)mtime.tv_nsec, mode == AUTOINDEX_JSON ? 'j' : 'h', keys[order.key],
			 order.desc ? 'd' : 'a');
	return n < 0 ? 0 : (size_t)n;
}

/* ---- output ------------------------------------------------------------- */

/* Text and attribute values alike (HTML 13.1.2 / OWASP: the five). A name is
 * bytes and the page says UTF-8, where controls have no place (HTML 13.2.3.5):
 * a C0 control or DEL shows as its Control Picture (U+2400 + byte: ESC as
 * U+241B, DEL as U+2421), a C1 control and every byte that is not part of
 * well-formed UTF-8 as U+FFFD, as in the JSON listing. The link beside it
 * keeps the exact bytes (percent-encoded). */
static void put_html(struct outbuf *o, const char *s, size_t n)
{
	for (size_t i = 0; i < n;) {
		uint32_t cp;
		size_t len = utf8_decode(s + i, n - i, &cp);
		if (len == 0 || (cp >= 0x80 && cp < 0xa0)) {
			outbuf_puts(o, "\xef\xbf\xbd"); /* U+FFFD */
			i += len ? len : 1;
			continue;
		}
		if (cp < 0x20 || cp == 0x7f) {
			uint32_t pic = cp == 0x7f ? 0x2421 : 0x2400 + cp;
			char e[3] = { (char)(0xe0 | pic >> 12), (char)(0x80 | (pic >> 6 & 0x3f)),
				      (char)(0x80 | (pic & 0x3f)) };
			outbuf_put(o, e, 3);
		} else {
			switch (cp) {
			case '&': outbuf_puts(o, "&amp;"); break;
			case '<': outbuf_puts(o, "&lt;"); break;
			case '>': outbuf_puts(o, "&gt;"); break;
			case '"': outbuf_puts(o, "&quot;"); break;
			case '\'': outbuf_puts(o, "&#39;"); break;
			default: outbuf_put(o, s + i, len);
			}
		}
		i += len;
	}
}

/* A name as one path segment of a relative link: every byte but RFC 3986's
 * unreserved ones is percent-encoded, so '?', '#', ':', '/' and quotes in a
 * name can neither end the segment nor the attribute. */
static void put_url_segment(struct outbuf *o, const char *s, size_t n)
{
	static const char hex[] = "0123456789ABCDEF";
	for (size_t i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)s[i];
		if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
		    ch == '-' || ch == '.' || ch == '_' || ch == '~') {
			outbuf_put(o, s + i, 1);
		} else {
			char e[3] = { '%', hex[ch >> 4], hex[ch & 15] };
			outbuf_put(o, e, 3);
		}
	}
}

static void put_json(struct outbuf *o, const char *s, size_t n)
{
	/* json_escape stops early when out of room: check it took everything */
	size_t room = o->overflow ? 0 : o->cap - o->len;
	size_t worst = 6 * n;
	if (worst > room) {
		char tmp[6 * 256];
		if (n > 256) { /* names are at most NAME_MAX bytes; paths may be longer */
			o->overflow = true;
			return;
		}
		size_t w = json_escape(tmp, sizeof(tmp), s, n);
		outbuf_put(o, tmp, w);
		return;
	}
	o->len += json_escape(o->p + o->len, room, s, n);
}

static void put_time(struct outbuf *o, time_t t, bool rfc3339)
{
	struct tm tm;
	char tmp[40];
	gmtime_r(&t, &tm);
	strftime(tmp, sizeof(tmp), rfc3339 ? "%Y-%m-%dT%H:%M:%SZ" : "%Y-%m-%d %H:%M:%S", &tm);
	outbuf_puts(o, tmp);
}

/* Room kept for what follows the last entry. */
#define FOOTER_RESERVE 256

static void html_head(struct outbuf *o, const char *dir, struct autoindex_order order)
{
	static const char *const keys[] = { "name", "mtime", "size" };
	static const char *const labels[] = { "Name", "Last modified (UTC)", "Size" };
	size_t dlen = strlen(dir);

	outbuf_puts(o, "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>Index of /");
	put_html(o, dir, dlen);
	outbuf_puts(o, dlen ? "/" : "");
	outbuf_puts(o, "</title></head>\n<body>\n<h1>Index of /");
	put_html(o, dir, dlen);
	outbuf_puts(o, dlen ? "/" : "");
	outbuf_puts(o, "</h1>\n<table>\n<tr>");
	for (int k = 0; k < 3; k++) {
		/* the current column's header reverses the order; the others sort ascending */
		bool desc = (int)order.key == k && !order.desc;
		outbuf_puts(o, "<th><a href=\"?sort=");
		outbuf_puts(o, keys[k]);
		outbuf_puts(o, desc ? "&amp;order=desc\">" : "\">");
		outbuf_puts(o, labels[k]);
		outbuf_puts(o, "</a></th>");
	}
	outbuf_puts(o, "</tr>\n");
	if (dlen)
		outbuf_puts(o, "<tr><td><a href=\"../\">../</a></td><td></td><td>-</td></tr>\n");
}

static void html_entry(struct outbuf *o, const struct dir_entry *e)
{
	outbuf_puts(o, "<tr><td><a href=\"");
	put_url_segment(o, e->name, e->name_len);
	outbuf_puts(o, e->is_dir ? "/\">" : "\">");
	put_html(o, e->name, e->name_len);
	outbuf_puts(o, e->is_dir ? "/</a></td><td>" : "</a></td><td>");
	put_time(o, e->mtime, false);
	outbuf_puts(o, "</td><td>");
	if (e->is_dir)
		outbuf_puts(o, "-");
	else
		outbuf_u64(o, e->size);
	outbuf_puts(o, "</td></tr>\n");
}

static void json_head(struct outbuf *o, const char *dir)
{
	size_t dlen = strlen(dir);
	outbuf_puts(o, "{\"path\":\"/");
	put_json(o, dir, dlen);
	outbuf_puts(o, dlen ? "/\",\"entries\":[" : "\",\"entries\":[");
}

static void json_entry(struct outbuf *o, const struct dir_entry *e, bool first)
{
	outbuf_puts(o, first ? "\n{\"name\":\"" : ",\n{\"name\":\"");
	put_json(o, e->name, e->name_len);
	/* the link, percent-encoded: exact even where the name had to lose
	 * bytes (invalid UTF-8 becomes U+FFFD in a JSON string) */
	outbuf_puts(o, "\",\"url\":\"");
	put_url_segment(o, e->name, e->name_len);
	outbuf_puts(o, e->is_dir ? "/\",\"type\":\"directory\",\"size\":null,\"mtime\":\""
			   : "\",\"type\":\"file\",\"size\":");
	if (!e->is_dir) {
		outbuf_u64(o, e->size);
		outbuf_puts(o, ",\"mtime\":\"");
	}
	put_time(o, e->mtime, true);
	outbuf_puts(o, "\"}");
}

size_t autoindex_body_bound(const char *dir, const struct dirlist *dl)
{
	/* worst cases: 6 bytes per name byte in HTML text or JSON, 3 in a link
	 * (both forms have both) */
	uint64_t need = 1024 + 12 * (uint64_t)strlen(dir) + FOOTER_RESERVE;
	for (size_t i = 0; i < dl->n && need < AUTOINDEX_MAX_BODY; i++)
		need += 9 * (uint64_t)dl->entries[i].name_len + 160;
	return need < AUTOINDEX_MAX_BODY ? (size_t)need : AUTOINDEX_MAX_BODY;
}

size_t autoindex_render(char *buf, size_t cap, enum autoindex_mode mode, const char *dir,
			const struct dirlist *dl, struct autoindex_order order)
{
	if (cap < FOOTER_RESERVE + 256)
		return 0;
	struct outbuf o = { buf, 0, cap - FOOTER_RESERVE, false };
	bool truncated = dl->truncated;
	size_t shown = 0;

	if (mode == AUTOINDEX_JSON)
		json_head(&o, dir);
	else
		html_head(&o, dir, order);
	if (o.overflow) /* a path too long for the bound: say nothing rather than half */
		return 0;
	for (size_t i = 0; i < dl->n; i++) {
		size_t mark = o.len;
		if (mode == AUTOINDEX_JSON)
			json_entry(&o, &dl->entries[i], i == 0);
		else
			html_entry(&o, &dl->entries[i]);
		if (o.overflow) { /* the body cap: cut at the last whole entry */
			o.len = mark;
			o.overflow = false;
			truncated = true;
			break;
		}
		shown++;
	}
	o.cap = cap; /* the footer's reserve */
	if (mode == AUTOINDEX_JSON) {
		outbuf_puts(&o, truncated ? "\n],\"truncated\":true}\n" : (shown ? "\n],\"truncated\":false}\n"
								 : "],\"truncated\":false}\n"));
	} else {
		outbuf_puts(&o, "</table>\n");
		if (truncated)
			outbuf_puts(&o, "<p>This listing is truncated: the directory has more entries than "
				  "one listing shows.</p>\n");
		outbuf_puts(&o, "</body></html>\n");
	}
	return o.len;
}
