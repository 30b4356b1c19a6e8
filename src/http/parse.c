/* parse.c - HTTP/1.x request-head parser and chunked-body skipper (RFC 9112).
 *
 * One forward scan over the caller's bytes, character classes from one const
 * table, spans pointing back into the buffer. Nothing here allocates, does I/O
 * or keeps state between calls of its own: a head parsed as it trickles in
 * keeps its progress in the caller's struct http_parse_state, a chunked body
 * in the caller's struct http_chunked. */
#include "parse.h"

#include <limits.h>
#include <string.h>
#include <strings.h>

enum {
	HTTP_C_TCHAR = 0x01,  /* RFC 9110 5.6.2 tchar */
	HTTP_C_VALUE = 0x02,  /* RFC 9110 5.5 field-vchar, SP, HTAB */
	HTTP_C_TARGET = 0x04, /* request-target bytes we let through: not CTL/SP/DEL/'#' */
	HTTP_C_HOST = 0x08,   /* RFC 3986 unreserved / sub-delims (reg-name sans '%') */
	HTTP_C_HEX = 0x10,    /* HEXDIG */
};

static const unsigned char http_cclass[256] = {
	0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, /* 00 */
	0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, /* 10 */
	0x02, 0x0f, 0x06, 0x03, 0x0f, 0x07, 0x0f, 0x0f, 0x0e, 0x0e, 0x0f, 0x0f, 0x0e, 0x0f, 0x0f, 0x06, /* 20 */
	0x1f, 0x1f, 0x1f, 0x1f, 0x1f, 0x1f, 0x1f, 0x1f, 0x1f, 0x1f, 0x06, 0x0e, 0x06, 0x0e, 0x06, 0x06, /* 30 */
	0x06, 0x1f, 0x1f, 0x1f, 0x1f, 0x1f, 0x1f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, /* 40 */
	0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x06, 0x06, 0x06, 0x07, 0x0f, /* 50 */
	0x07, 0x1f, 0x1f, 0x1f, 0x1f, 0x1f, 0x1f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, /* 60 */
	0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x06, 0x07, 0x06, 0x0f, 0x00, /* 70 */
	0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, /* 80 */
	0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, /* 90 */
	0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, /* a0 */
	0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, /* b0 */
	0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, /* c0 */
	0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, /* d0 */
	0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, /* e0 */
	0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, /* f0 */
};

#define HTTP_IS(c, cls) (http_cclass[(unsigned char)(c)] & (cls))
#define HTTP_IS_WS(c) ((c) == ' ' || (c) == '\t')
#define HTTP_IS_DIGIT(c) ((unsigned char)((c) - '0') < 10)

/* Eight bytes at a time for the two long runs (target, field values). Each
 * helper sets the high bit of every byte of t (a word whose high bits are
 * already clear) that is below n / equal to c; the "| H" keeps the per-byte
 * subtraction from borrowing across bytes, so the answer is exact. */
#define HTTP_L 0x0101010101010101ull
#define HTTP_H 0x8080808080808080ull

static inline uint64_t http_swar_lt(uint64_t t, unsigned n)
{
	return ~((t | HTTP_H) - n * HTTP_L) & HTTP_H;
}

static inline uint64_t http_swar_eq(uint64_t t, unsigned c)
{
	return http_swar_lt(t ^ (c * HTTP_L), 1);
}

/* Bytes >= 0x80 (obs-text) are allowed in both runs, hence the "& ~w". */
static inline bool http_swar_value_ok(const char *p)
{
	uint64_t w, t;
	memcpy(&w, p, 8);
	t = w & ~HTTP_H;
	return ((http_swar_lt(t, 0x20) | http_swar_eq(t, 0x7f)) & ~w & HTTP_H) == 0;
}

static inline bool http_swar_target_ok(const char *p)
{
	uint64_t w, t;
	memcpy(&w, p, 8);
	t = w & ~HTTP_H;
	return ((http_swar_lt(t, 0x21) | http_swar_eq(t, 0x7f) | http_swar_eq(t, '#')) & ~w & HTTP_H) == 0;
}

/* Return the first byte in [p, end) that may not appear in a field value /
 * request-target (or end). The word loop only skips words it has proved
 * clean; the rest (a stop byte, HTAB in a value) goes byte by byte. */
static const char *http_scan_value(const char *p, const char *end)
{
	for (;;) {
		while (end - p >= 8 && http_swar_value_ok(p))
			p += 8;
		const char *stop = end - p > 8 ? p + 8 : end;
		while (p < stop && HTTP_IS(*p, HTTP_C_VALUE))
			p++;
		if (p < stop || p == end)
			return p;
	}
}

static const char *http_scan_target(const char *p, const char *end)
{
	while (end - p >= 8 && http_swar_target_ok(p))
		p += 8;
	while (p < end && HTTP_IS(*p, HTTP_C_TARGET))
		p++;
	return p;
}

static const char *const http_method_names[] = {
	[HTTP_GET] = "GET",         [HTTP_HEAD] = "HEAD",       [HTTP_POST] = "POST",
	[HTTP_PUT] = "PUT",         [HTTP_DELETE] = "DELETE",   [HTTP_CONNECT] = "CONNECT",
	[HTTP_OPTIONS] = "OPTIONS", [HTTP_TRACE] = "TRACE",     [HTTP_PATCH] = "PATCH",
	[HTTP_METHOD_UNKNOWN] = "UNKNOWN",
};

const char *http_method_name(enum http_method m)
{
	if ((unsigned)m > HTTP_METHOD_UNKNOWN)
		m = HTTP_METHOD_UNKNOWN;
	return http_method_names[m];
}

/* RFC 9110 9.1: method names are case-sensitive. */
static enum http_method http_method_lookup(const char *m, size_t n)
{
#define HTTP_M(lit, val) if (memcmp(m, lit, n) == 0) return val
	switch (n) {
	case 3:
		HTTP_M("GET", HTTP_GET);
		HTTP_M("PUT", HTTP_PUT);
		break;
	case 4:
		HTTP_M("HEAD", HTTP_HEAD);
		HTTP_M("POST", HTTP_POST);
		break;
	case 5:
		HTTP_M("TRACE", HTTP_TRACE);
		HTTP_M("PATCH", HTTP_PATCH);
		break;
	case 6:
		HTTP_M("DELETE", HTTP_DELETE);
		break;
	case 7:
		HTTP_M("CONNECT", HTTP_CONNECT);
		HTTP_M("OPTIONS", HTTP_OPTIONS);
		break;
	}
#undef HTTP_M
	return HTTP_METHOD_UNKNOWN;
}

/* uri-host [ ":" port ] (RFC 9110 7.2, RFC 3986 3.2.2). Used for the Host
 * field, the authority of an absolute-form target (no userinfo: RFC 9110
 * 4.2.4 says to treat it as an error) and CONNECT's authority-form. An empty
 * host is invalid for "http" (RFC 9110 4.2.1). */
static bool http_authority_valid(const char *p, size_t n, bool need_port)
{
	const char *e = p + n, *h;

	if (p == e)
		return false;
	if (*p == '[') {
		/* IP-literal: enough to keep '/', '@', spaces and CTLs out. */
		h = ++p;
		while (p < e && (HTTP_IS(*p, HTTP_C_HOST) || *p == ':'))
			p++;
		if (p == e || *p != ']' || p == h)
			return false;
		p++;
	} else {
		h = p;
		while (p < e) {
			if (HTTP_IS(*p, HTTP_C_HOST))
				p++;
			else if (*p == '%' && e - p >= 3 && HTTP_IS(p[1], HTTP_C_HEX) && HTTP_IS(p[2], HTTP_C_HEX))
				p += 3;
			else
				break;
		}
		if (p == h)
			return false;
	}
	if (p == e)
		return !need_port;
	if (*p++ != ':' || e - p > 5)
		return false;
	for (; p < e; p++)
		if (!HTTP_IS_DIGIT(*p))
			return false;
	return true;
}

/* Splits the request-target into path and query (RFC 9112 3.2) and, for
 * absolute-form and authority-form, returns the authority, which replaces
 * Host (RFC 9112 3.2.2). */
static int http_target_parse(struct http_request *req, struct span *authority)
{
	static const char http_root[] = "/";
	const char *t = req->target.p, *e = t + req->target.len, *q;

	if (req->method == HTTP_CONNECT) {
		/* RFC 9112 3.2.3: CONNECT takes authority-form (host:port) and
		 * only CONNECT may. The path is empty; the core refuses CONNECT. */
		if (!http_authority_valid(t, req->target.len, true))
			return -400;
		*authority = req->target;
		req->path = (struct span){ t, 0 };
		return 0;
	}
	if (*t == '*') {
		/* RFC 9112 3.2.4: asterisk-form is only for server-wide OPTIONS;
		 * an unknown method might define it too and gets 501 anyway. */
		if (req->target.len != 1 || (req->method != HTTP_OPTIONS && req->method != HTTP_METHOD_UNKNOWN))
			return -400;
		req->path = req->target;
		return 0;
	}
	if (*t != '/') {
		/* RFC 9112 3.2.2: absolute-form; a server MUST accept it. Only
		 * the schemes we serve are meaningful here. */
		const char *a;
		if (e - t >= 7 && strncasecmp(t, "http://", 7) == 0)
			a = t + 7;
		else if (e - t >= 8 && strncasecmp(t, "https://", 8) == 0)
			a = t + 8;
		else
			return -400;
		t = a;
		while (t < e && *t != '/' && *t != '?')
			t++;
		if (!http_authority_valid(a, (size_t)(t - a), false))
			return -400;
		*authority = (struct span){ a, (size_t)(t - a) };
		if (t == e || *t == '?') {
			/* RFC 9110 4.2.3: an empty path-abempty means "/". */
			req->path = (struct span){ http_root, 1 };
			if (t < e)
				req->query = (struct span){ t + 1, (size_t)(e - t - 1) };
			return 0;
		}
	}
	q = memchr(t, '?', (size_t)(e - t));
	if (q) {
		req->path = (struct span){ t, (size_t)(q - t) };
		req->query = (struct span){ q + 1, (size_t)(e - q - 1) };
	} else {
		req->path = (struct span){ t, (size_t)(e - t) };
	}
	return 0;
}

bool http_list_member_next(const char **p, const char *end, struct span *member)
{
	const char *s = *p;
	while (s < end) {
		while (s < end && (*s == ',' || HTTP_IS_WS(*s)))
			s++;
		const char *m = s;
		while (s < end && *s != ',')
			s++;
		const char *mend = s;
		while (mend > m && HTTP_IS_WS(mend[-1]))
			mend--;
		if (mend > m) {
			*p = s;
			*member = (struct span){ m, (size_t)(mend - m) };
			return true;
		}
	}
	*p = s;
	return false;
}

/* RFC 9110 7.6.1: Connection is a list of tokens, compared case-insensitively. */
static void http_connection_tokens(const char *p, const char *e, bool *close, bool *keep)
{
	struct span t;
	while (http_list_member_next(&p, e, &t)) {
		if (t.len == 5 && strncasecmp(t.p, "close", 5) == 0)
			*close = true;
		else if (t.len == 10 && strncasecmp(t.p, "keep-alive", 10) == 0)
			*keep = true;
	}
}

#define HTTP_NAME_IS(lit) (strncasecmp(name, lit, sizeof(lit) - 1) == 0)

/* One more field line of a list field: the span grows to its end. */
static void http_list_add(struct span *field, unsigned *lines, struct span v)
{
	if (*lines == 0)
		*field = v;
	else
		field->len = (size_t)(v.p + v.len - field->p);
	(*lines)++;
}

/* Records one field we care about; others are only counted. The switch on
 * length and first letter means one strncasecmp at most per field. */
static int http_header(struct http_request *req, struct http_parse_state *s, const char *name, size_t nlen,
		       struct span v)
{
	switch (nlen) {
	case 4:
		if (HTTP_NAME_IS("host")) {
			/* RFC 9110 7.2 / RFC 9112 3.2: more than one Host, or an
			 * invalid one, gets 400. */
			if (s->host++ || !http_authority_valid(v.p, v.len, false))
				return -400;
			req->host = v;
		}
		break;
	case 5:
		if (HTTP_NAME_IS("range")) {
			/* Range is not a list (RFC 9110 14.2); two of them are
			 * ignored, which is always allowed (a full 200). */
			if (span_is_set(req->range))
				s->range_dup = true;
			else
				req->range = v;
		}
		break;
	case 6:
		if (HTTP_NAME_IS("expect"))
			http_list_add(&req->expect, &req->expect_lines, v);
		else if (HTTP_NAME_IS("origin") && !span_is_set(req->origin))
			req->origin = v;
		break;
	case 7:
		if (HTTP_NAME_IS("referer") && !span_is_set(req->referer))
			req->referer = v;
		break;
	case 8:
		if (HTTP_NAME_IS("if-range")) {
			/* Two validators: ignore the Range rather than guess. */
			if (span_is_set(req->if_range))
				s->range_dup = true;
			else
				req->if_range = v;
		} else if (HTTP_NAME_IS("if-match")) {
			/* every line counts: a tag on the second one, missed,
			 * would turn a 200 into a 412 */
			http_list_add(&req->if_match, &req->if_match_lines, v);
		}
		break;
	case 10:
		if ((name[0] | 0x20) == 'c') {
			if (HTTP_NAME_IS("connection")) {
				if (!span_is_set(req->connection))
					req->connection = v;
				http_connection_tokens(v.p, v.p + v.len, &s->close, &s->keep_alive);
			}
		} else if (HTTP_NAME_IS("user-agent") && !span_is_set(req->user_agent)) {
			req->user_agent = v;
		}
		break;
	case 29:
		if (HTTP_NAME_IS("access-control-request-method") && !span_is_set(req->acr_method))
			req->acr_method = v;
		break;
	case 30:
		if (HTTP_NAME_IS("access-control-request-headers") && !span_is_set(req->acr_headers))
			req->acr_headers = v;
		break;
	case 13:
		if (HTTP_NAME_IS("if-none-match"))
			http_list_add(&req->if_none_match, &req->if_none_match_lines, v);
		break;
	case 14:
		if (HTTP_NAME_IS("content-length")) {
			/* RFC 9112 6.3: anything but one plain 1*DIGIT is a
			 * framing error; we do not merge duplicates, even equal
			 * ones, since that is where smuggling lives. */
			uint64_t n = 0;
			if (s->content_length++ || v.len == 0)
				return -400;
			for (size_t i = 0; i < v.len; i++) {
				unsigned d = (unsigned char)v.p[i] - '0';
				if (d > 9 || n > (UINT64_MAX - d) / 10)
					return -400;
				n = n * 10 + d;
			}
			req->has_content_length = true;
			req->content_length = n;
		}
		break;
	case 15:
		if (HTTP_NAME_IS("accept-encoding"))
			http_list_add(&req->accept_encoding, &req->accept_encoding_lines, v);
		break;
	case 17:
		if ((name[0] | 0x20) == 't') {
			if (HTTP_NAME_IS("transfer-encoding")) {
				/* Judged after the head: CL + TE must be 400
				 * whichever comes first. */
				if (!s->transfer_encoding++)
					s->te = v;
			}
		} else if (HTTP_NAME_IS("if-modified-since")) {
			/* RFC 9110 13.1.3: more than one member -> ignore it. */
			if (span_is_set(req->if_modified_since))
				s->ims_dup = true;
			else
				req->if_modified_since = v;
		}
		break;
	case 19:
		if (HTTP_NAME_IS("if-unmodified-since")) {
			/* RFC 9110 13.1.4: a list of dates is not a valid date. */
			if (span_is_set(req->if_unmodified_since))
				s->ius_dup = true;
			else
				req->if_unmodified_since = v;
		}
		break;
	}
	return 0;
}

/* Where a suspended parse resumes (struct http_parse_state.phase). */
enum {
	HTTP_P_START,   /* empty lines before the request line */
	HTTP_P_METHOD,
	HTTP_P_TARGET,
	HTTP_P_VERSION, /* the version and the request line's end: rechecked whole */
	HTTP_P_FIELD,   /* the start of a field line, or the head's final empty line */
	HTTP_P_NAME,
	HTTP_P_OWS,     /* whitespace after the colon */
	HTTP_P_VALUE,
};

/* A resumed scan reached the end of the head (http_parse_step). */
#define HTTP_PARSE_AGAIN INT_MIN

/* Saves where the scan stopped, for the next call with more bytes. */
#define HTTP_SUSPEND(ph, label)                         \
	do {                                            \
		st->phase = (ph);                       \
		st->pos = (size_t)(p - buf);            \
		goto label;                             \
	} while (0)

/* One forward scan from where st says the last call stopped. Every decision
 * looks only at bytes up to the scan position, and a check that needs a byte
 * not yet here (a CR's LF, the version's 8 bytes) suspends before the byte it
 * cannot judge, so a resumed scan reaches the same verdict as one over all
 * the bytes at once. Spans written into *req by earlier calls may point to
 * where the buffer used to be: a resumed scan only tests their presence, and
 * stops at the end of the head (HTTP_PARSE_AGAIN) before anything reads them. */
static int http_parse_step(const char *buf, size_t len, const struct http_limits *lim,
			   struct http_request *req, struct http_parse_state *st, bool resumed)
{
	/* Nothing past max_head can be part of an acceptable head, so the
	 * scan never looks further: a head not finished by then is -431. */
	const char *p = buf + st->pos;
	const char *end = buf + (len < lim->max_head ? len : lim->max_head);
	const char *line = buf + st->line, *lend, *tok, *eol;
	const char *name, *val, *vend;
	size_t nlen;
	struct span authority = { NULL, 0 };
	int major, minor, rc;

	switch (st->phase) {
	case HTTP_P_START:
		if (st->pos == 0)
			*req = (struct http_request){ .method = HTTP_METHOD_UNKNOWN };
		goto empty_lines;
	case HTTP_P_METHOD:
	case HTTP_P_TARGET:
	case HTTP_P_VERSION:
		goto request_line;
	case HTTP_P_FIELD:
		goto field;
	case HTTP_P_NAME:
		name = buf + st->tok;
		goto field_name;
	case HTTP_P_OWS:
		name = buf + st->tok;
		nlen = st->nlen;
		goto field_ows;
	default:
		name = buf + st->tok;
		nlen = st->nlen;
		val = buf + st->val;
		goto field_value;
	}

empty_lines:
	/* RFC 9112 2.2: a server SHOULD ignore at least one empty line before
	 * the request-line; we ignore any number (they count towards max_head). */
	for (;;) {
		if (p == end)
			HTTP_SUSPEND(HTTP_P_START, incomplete);
		if (*p == '\n') {
			p++;
		} else if (*p == '\r') {
			if (end - p < 2)
				HTTP_SUSPEND(HTTP_P_START, incomplete);
			if (p[1] != '\n')
				return -400;
			p += 2;
		} else {
			break;
		}
	}
	line = p;
	st->line = (size_t)(line - buf);
	st->phase = HTTP_P_METHOD;

request_line:
	/* The request line is scanned only up to the first byte that would
	 * make it too long (content, CR, LF), so a huge target is refused
	 * without being read to its end. */
	if ((size_t)(end - line) > lim->max_request_line && (size_t)(end - line) - lim->max_request_line > 2)
		lend = line + lim->max_request_line + 2;
	else
		lend = end;
	if (st->phase == HTTP_P_TARGET)
		goto target;
	if (st->phase == HTTP_P_VERSION)
		goto version;

	/* RFC 9112 3: method SP request-target SP HTTP-version, single SPs. */
	while (p < lend && HTTP_IS(*p, HTTP_C_TCHAR))
		p++;
	if (p == lend)
		HTTP_SUSPEND(HTTP_P_METHOD, incomplete_line);
	if (*p != ' ' || p == line)
		return -400;
	st->mlen = (size_t)(p - line);
	req->method = http_method_lookup(line, st->mlen);
	p++;
	st->tok = (size_t)(p - buf);

target:
	tok = buf + st->tok;
	p = http_scan_target(p, lend);
	if (p == lend)
		HTTP_SUSPEND(HTTP_P_TARGET, incomplete_line);
	/* Anything but SP here is a CTL, DEL or '#': RFC 3986 allows no
	 * fragment in a request-target (RFC 9112 3.2). */
	if (*p != ' ' || p == tok)
		return -400;
	st->tlen = (size_t)(p - tok);
	st->tok = (size_t)(++p - buf);

version:
	/* RFC 9112 2.3: HTTP-version = "HTTP" "/" DIGIT "." DIGIT, case-sensitive.
	 * At most ten bytes, so a resumed call checks them again from the start. */
	tok = p = buf + st->tok;
	{
		static const char pat[] = "HTTP/9.9";
		size_t avail = (size_t)(lend - p);
		for (size_t i = 0; i < 8 && i < avail; i++) {
			if (pat[i] == '9' ? !HTTP_IS_DIGIT(p[i]) : p[i] != pat[i])
				return -400;
		}
		if (avail < 8) {
			p = lend;
			st->phase = HTTP_P_VERSION;
			st->pos = st->tok;
			goto incomplete_line;
		}
	}
	major = tok[5] - '0';
	minor = tok[7] - '0';
	p += 8;
	if (p == lend)
		HTTP_SUSPEND(HTTP_P_VERSION, incomplete_line);
	eol = p;
	if (*p == '\r') {
		/* A CR at the very end may be half of a CRLF: not content. */
		if (p + 1 == lend)
			HTTP_SUSPEND(HTTP_P_VERSION, incomplete_line);
		if (p[1] != '\n')
			return -400;
		p += 2;
	} else if (*p == '\n') {
		p++;
	} else {
		return -400;
	}
	req->method_name = (struct span){ line, st->mlen };
	req->target = (struct span){ line + st->mlen + 1, st->tlen };
	req->request_line = (struct span){ line, (size_t)(eol - line) };
	if ((size_t)(eol - line) > lim->max_request_line)
		return -414;
	/* RFC 9110 6.2: only the major version decides whether we can answer;
	 * 1.x with x > 1 is treated as 1.1. */
	if (major != 1)
		return -505;
	req->version_minor = minor ? 1 : 0;
	rc = http_target_parse(req, &authority);
	if (rc)
		return rc;

	/* RFC 9112 5: field-line = field-name ":" OWS field-value OWS. */
	for (;;) {
field:
		if (p == end)
			HTTP_SUSPEND(HTTP_P_FIELD, incomplete);
		if (*p == '\n') {
			p++;
			break;
		}
		if (*p == '\r') {
			if (end - p < 2)
				HTTP_SUSPEND(HTTP_P_FIELD, incomplete);
			if (p[1] != '\n')
				return -400;
			p += 2;
			break;
		}
		/* A leading SP/HTAB (obs-fold, or whitespace after the start
		 * line: RFC 9112 2.2, 5.2), whitespace before ':' (RFC 9112
		 * 5.1) and an empty name all stop here. */
		name = p;
field_name:
		while (p < end && HTTP_IS(*p, HTTP_C_TCHAR))
			p++;
		if (p == end) {
			st->tok = (size_t)(name - buf);
			HTTP_SUSPEND(HTTP_P_NAME, incomplete);
		}
		if (*p != ':' || p == name)
			return -400;
		if (++req->header_count > lim->max_headers)
			return -431;
		nlen = (size_t)(p - name);
		p++;
field_ows:
		while (p < end && HTTP_IS_WS(*p))
			p++;
		if (p == end) {
			/* where the field started: its offsets, saved only when suspending */
			st->tok = (size_t)(name - buf);
			st->nlen = nlen;
			HTTP_SUSPEND(HTTP_P_OWS, incomplete);
		}
		val = p;
field_value:
		p = http_scan_value(p, end);
		if (p == end || (*p == '\r' && end - p < 2)) {
			st->tok = (size_t)(name - buf);
			st->nlen = nlen;
			st->val = (size_t)(val - buf);
			HTTP_SUSPEND(HTTP_P_VALUE, incomplete);
		}
		vend = p;
		if (*p == '\r') {
			/* RFC 9112 2.2: a bare CR is refused, never read as a line end. */
			if (p[1] != '\n')
				return -400;
			p += 2;
		} else if (*p == '\n') {
			p++;
		} else {
			/* NUL and the other CTLs (RFC 9110 5.5). */
			return -400;
		}
		while (vend > val && HTTP_IS_WS(vend[-1]))
			vend--;
		rc = http_header(req, st, name, nlen, (struct span){ val, (size_t)(vend - val) });
		if (rc)
			return rc;
	}

	/* The checks below read spans that earlier calls took: the caller
	 * parses the finished head again in one pass. */
	if (resumed)
		return HTTP_PARSE_AGAIN;
	if (req->version_minor == 1 && !st->host)
		return -400;
	if (st->transfer_encoding) {
		/* RFC 9112 6.1 / 6.3: TE with CL, or TE in HTTP/1.0, means the
		 * framing cannot be trusted. */
		if (st->content_length || req->version_minor == 0)
			return -400;
		/* RFC 9112 6.1: chunked must be the final coding and we know
		 * no other, so only a lone "chunked" is acceptable. */
		if (st->transfer_encoding > 1 || !span_eq_nocase(st->te, "chunked"))
			return -501;
		req->chunked = true;
	}
	if (st->range_dup) {
		req->range = (struct span){ NULL, 0 };
		req->if_range = (struct span){ NULL, 0 };
	}
	if (st->ims_dup)
		req->if_modified_since = (struct span){ NULL, 0 };
	if (st->ius_dup)
		req->if_unmodified_since = (struct span){ NULL, 0 };
	if (span_is_set(authority))
		req->host = authority;
	/* RFC 9112 9.3: 1.1 persists unless "close"; 1.0 only when asked. */
	req->keep_alive = !st->close && (req->version_minor == 1 || st->keep_alive);
	if (p - buf > INT_MAX)
		return -431;
	return (int)(p - buf);

incomplete_line:
	if ((size_t)(p - line) > lim->max_request_line)
		return -414;
incomplete:
	return len >= lim->max_head ? -431 : 0;
}

int http_parse_request_resume(const char *buf, size_t len, const struct http_limits *lim,
			      struct http_request *req, struct http_parse_state *st)
{
	bool resumed = st->phase != HTTP_P_START || st->pos != 0;
	int rc = http_parse_step(buf, len, lim, req, st, resumed);

	if (rc == 0)
		return 0;
	*st = (struct http_parse_state){ 0 };
	/* One more pass over the finished head (O(n), once) points every span
	 * into buf and makes the final checks. */
	if (rc == HTTP_PARSE_AGAIN) {
		rc = http_parse_step(buf, len, lim, req, st, false);
		*st = (struct http_parse_state){ 0 };
	}
	return rc;
}

int http_parse_request(const char *buf, size_t len, const struct http_limits *lim,
		       struct http_request *req)
{
	struct http_parse_state st = { 0 };
	return http_parse_step(buf, len, lim, req, &st, false);
}

/* The value of the field line starting at p (just after its colon, or at the
 * value itself), trimmed; *next is where the line after it starts. */
static struct span http_line_value(const char *p, const char *end, const char **next)
{
	const char *eol = memchr(p, '\n', (size_t)(end - p));
	const char *vend = eol ? eol : end;

	*next = eol ? eol + 1 : end;
	while (p < vend && HTTP_IS_WS(*p))
		p++;
	while (vend > p && (HTTP_IS_WS(vend[-1]) || vend[-1] == '\r'))
		vend--;
	return (struct span){ p, (size_t)(vend - p) };
}

bool http_field_lines_next(struct span field, unsigned lines, const char *name, const char **cursor,
			   struct span *value)
{
	if (!field.p) /* absent (and NULL + 0 is undefined) */
		return false;
	const char *end = field.p + field.len, *p = *cursor;
	size_t nlen = strlen(name);

	if (p == end)
		return false;
	if (lines <= 1) {
		*cursor = end;
		*value = field;
		return true;
	}
	if (!p) {
		*value = http_line_value(field.p, end, cursor);
		return true;
	}
	/* The parser accepted these lines, so each is "name:value"; skip the
	 * other fields between ours. */
	while (p < end) {
		const char *colon = memchr(p, ':', (size_t)(end - p));
		const char *eol = memchr(p, '\n', (size_t)(end - p));
		if (colon && (!eol || colon < eol) && (size_t)(colon - p) == nlen &&
		    strncasecmp(p, name, nlen) == 0) {
			*value = http_line_value(colon + 1, end, cursor);
			return true;
		}
		p = eol ? eol + 1 : end;
	}
	*cursor = end;
	return false;
}

/* Chunked body (RFC 9112 7.1): one byte at a time on the framing lines, data
 * skipped in one step. Every line end is CRLF or a bare LF (RFC 9112 2.2). */
enum {
	HTTP_CH_SIZE0,      /* first HEXDIG of chunk-size */
	HTTP_CH_SIZE,       /* more HEXDIG, BWS, ';' or line end */
	HTTP_CH_SIZE_WS,    /* BWS after the size: only ';' may follow */
	HTTP_CH_EXT,        /* chunk-ext up to the line end */
	HTTP_CH_SIZE_LF,    /* CR seen on the size line */
	HTTP_CH_DATA,
	HTTP_CH_DATA_END,   /* CRLF after chunk-data */
	HTTP_CH_DATA_LF,
	HTTP_CH_TRAILER,    /* start of a trailer field line, or the final line */
	HTTP_CH_TR_NAME,
	HTTP_CH_TR_VALUE,
	HTTP_CH_TR_LF,
	HTTP_CH_END_LF,     /* CR seen on the final empty line */
	HTTP_CH_DONE,
	HTTP_CH_ERROR,
};

/* Bounds so a peer cannot keep us reading framing forever. */
#define HTTP_CH_MAX_LINE 4096
#define HTTP_CH_MAX_TRAILER 16384

enum http_chunked_result http_chunked_skip(struct http_chunked *st, const char *buf, size_t len,
					   size_t *consumed)
{
	size_t i = 0;

	if (st->state == HTTP_CH_DONE) {
		*consumed = 0;
		return HTTP_CHUNKED_DONE;
	}
	if (st->state == HTTP_CH_ERROR) {
		*consumed = 0;
		return HTTP_CHUNKED_ERROR;
	}
	while (i < len) {
		if (st->state == HTTP_CH_DATA) {
			uint64_t n = len - i < st->remaining ? len - i : st->remaining;
			i += (size_t)n;
			st->remaining -= n;
			st->total = st->total > UINT64_MAX - n ? UINT64_MAX : st->total + n;
			if (st->remaining == 0)
				st->state = HTTP_CH_DATA_END;
			continue;
		}

		unsigned char c = (unsigned char)buf[i++];
		if (st->state < HTTP_CH_DATA || st->state >= HTTP_CH_TRAILER) {
			if (++st->line_len > HTTP_CH_MAX_LINE)
				goto fail;
		}
		if (st->state >= HTTP_CH_TRAILER) {
			/* In the trailer section "remaining" is free: it counts
			 * trailer bytes instead. */
			if (++st->remaining > HTTP_CH_MAX_TRAILER)
				goto fail;
		}

		switch (st->state) {
		case HTTP_CH_SIZE0:
		case HTTP_CH_SIZE:
			/* chunk-size = 1*HEXDIG, checked for overflow. */
			if (HTTP_IS(c, HTTP_C_HEX)) {
				unsigned d = c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10;
				if (st->remaining > (UINT64_MAX >> 4))
					goto fail;
				st->remaining = st->remaining << 4 | d;
				st->state = HTTP_CH_SIZE;
			} else if (st->state == HTTP_CH_SIZE0) {
				goto fail;
			} else if (HTTP_IS_WS(c)) {
				st->state = HTTP_CH_SIZE_WS;
			} else if (c == ';') {
				st->state = HTTP_CH_EXT;
			} else if (c == '\r') {
				st->state = HTTP_CH_SIZE_LF;
			} else {
				goto fail; /* a bare LF included: see HTTP_CH_SIZE_LF */
			}
			break;
		case HTTP_CH_SIZE_WS:
			/* RFC 9112 7.1.1: BWS is only allowed before ';'. */
			if (c == ';')
				st->state = HTTP_CH_EXT;
			else if (!HTTP_IS_WS(c))
				goto fail;
			break;
		case HTTP_CH_EXT:
			/* We ignore extensions (RFC 9112 7.1.1) but still refuse
			 * CTLs in them: a bare CR or a NUL here is a smuggling
			 * vector. */
			if (c == '\r')
				st->state = HTTP_CH_SIZE_LF;
			else if (!HTTP_IS(c, HTTP_C_VALUE))
				goto fail;
			break;
		case HTTP_CH_SIZE_LF:
			/* RFC 9112 2.2 lets a recipient accept a bare LF only in the
			 * start line and header fields: chunk framing needs CRLF, or a
			 * proxy that reads "5\n" differently could smuggle a request. */
			if (c != '\n')
				goto fail;
			st->line_len = 0;
			/* last-chunk: the trailer section follows. */
			st->state = st->remaining ? HTTP_CH_DATA : HTTP_CH_TRAILER;
			break;
		case HTTP_CH_DATA_END:
			if (c == '\r')
				st->state = HTTP_CH_DATA_LF;
			else
				goto fail;
			break;
		case HTTP_CH_DATA_LF:
			if (c != '\n')
				goto fail;
			st->state = HTTP_CH_SIZE0;
			break;
		case HTTP_CH_TRAILER:
			if (c == '\r') {
				st->state = HTTP_CH_END_LF;
			} else if (HTTP_IS(c, HTTP_C_TCHAR)) {
				st->state = HTTP_CH_TR_NAME;
			} else {
				/* obs-fold, whitespace or an empty name. */
				goto fail;
			}
			break;
		case HTTP_CH_TR_NAME:
			if (c == ':')
				st->state = HTTP_CH_TR_VALUE;
			else if (!HTTP_IS(c, HTTP_C_TCHAR))
				goto fail;
			break;
		case HTTP_CH_TR_VALUE:
			if (c == '\r') {
				st->state = HTTP_CH_TR_LF;
			} else if (!HTTP_IS(c, HTTP_C_VALUE)) {
				goto fail;
			}
			break;
		case HTTP_CH_TR_LF:
			if (c != '\n')
				goto fail;
			st->line_len = 0;
			st->state = HTTP_CH_TRAILER;
			break;
		case HTTP_CH_END_LF:
			if (c != '\n')
				goto fail;
			goto done;
		default:
			goto fail;
		}
	}
	*consumed = len;
	return HTTP_CHUNKED_MORE;

done:
	st->state = HTTP_CH_DONE;
	*consumed = i;
	return HTTP_CHUNKED_DONE;
fail:
	st->state = HTTP_CH_ERROR;
	*consumed = i;
	return HTTP_CHUNKED_ERROR;
}

enum http_expectation http_expectation(const struct http_request *r)
{
	/* A 100-continue from an HTTP/1.0 client MUST be ignored (1.0 has no
	 * interim responses); Apache ignores any Expect from 1.0, and so do we. */
	if (!r->expect.p || r->version_minor == 0)
		return HTTP_EXPECT_NONE;
	/* A list over every Expect line (RFC 9110 5.3, 5.6.1): empty members
	 * are nothing; any member but 100-continue is one we cannot meet. */
	enum http_expectation ex = HTTP_EXPECT_NONE;
	const char *cursor = NULL;
	struct span line;
	while (http_field_lines_next(r->expect, r->expect_lines, "expect", &cursor, &line)) {
		const char *p = line.p, *end = line.p + line.len;
		struct span m;
		while (http_list_member_next(&p, end, &m)) {
			if (!span_eq_nocase(m, "100-continue"))
				return HTTP_EXPECT_UNKNOWN;
			ex = HTTP_EXPECT_CONTINUE;
		}
	}
	return ex;
}
