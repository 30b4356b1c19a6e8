/* response.c - status texts, built-in error pages, validator comparison and
 * the evaluation of conditional requests (RFC 9110 13). Pure. */
#include "response.h"

#include <stdio.h>
#include <string.h>

#include "date.h"

const char *http_status_text(int status)
{
	switch (status) {
	case 100: return "Continue";
	case 200: return "OK";
	case 204: return "No Content";
	case 206: return "Partial Content";
	case 301: return "Moved Permanently";
	case 302: return "Found";
	case 304: return "Not Modified";
	case 307: return "Temporary Redirect";
	case 308: return "Permanent Redirect";
	case 400: return "Bad Request";
	case 403: return "Forbidden";
	case 404: return "Not Found";
	case 405: return "Method Not Allowed";
	case 406: return "Not Acceptable";
	case 408: return "Request Timeout";
	case 411: return "Length Required";
	case 412: return "Precondition Failed";
	case 413: return "Content Too Large";
	case 414: return "URI Too Long";
	case 416: return "Range Not Satisfiable";
	case 417: return "Expectation Failed";
	case 421: return "Misdirected Request";
	case 431: return "Request Header Fields Too Large";
	case 500: return "Internal Server Error";
	case 501: return "Not Implemented";
	case 503: return "Service Unavailable";
	case 505: return "HTTP Version Not Supported";
	default: return "Unknown";
	}
}

size_t http_builtin_page(int status, char *out, size_t cap)
{
	const char *text = http_status_text(status);
	int n = snprintf(out, cap,
			 "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>%d %s</title></head>\n"
			 "<body><h1>%d %s</h1><hr><p>spindle</p></body></html>\n",
			 status, text, status, text);
	return n < 0 ? 0 : ((size_t)n < cap ? (size_t)n : cap - 1);
}

size_t http_etag(char out[HTTP_ETAG_MAX], time_t mtime, uint64_t size)
{
	int n = snprintf(out, HTTP_ETAG_MAX, "\"%llx-%llx\"", (unsigned long long)mtime,
			 (unsigned long long)size);
	return (size_t)n;
}

static bool is_ows(char ch)
{
	return ch == ' ' || ch == '\t';
}

/* Whether an entity-tag list contains etag (RFC 9110 8.8.3.2). The weak
 * comparison ignores a W/ prefix; the strong one never matches a weak tag,
 * theirs or ours (files have strong tags, listings weak ones).
 * "*" matches any current representation. */
static bool etag_list_matches(struct span field, const char *etag, size_t etag_len, bool strong)
{
	const char *p = field.p, *end = field.p + field.len;
	bool ours_weak = etag_len >= 2 && etag[0] == 'W' && etag[1] == '/';

	if (ours_weak) {
		etag += 2;
		etag_len -= 2;
	}

	while (p < end) {
		bool weak = false;
		while (p < end && (is_ows(*p) || *p == ','))
			p++;
		if (p == end)
			break;
		/* only a lone "*" means any representation: "*junk" is no
		 * entity-tag, and matches nothing */
		if (*p == '*' && (p + 1 == end || p[1] == ',' || is_ows(p[1])))
			return true;
		if (end - p >= 2 && p[0] == 'W' && p[1] == '/') {
			p += 2;
			weak = true;
		}
		const char *tag = p;
		if (p < end && *p == '"') {
			p++;
			while (p < end && *p != '"')
				p++;
			if (p < end)
				p++;
		} else {
			while (p < end && *p != ',' && !is_ows(*p))
				p++;
		}
		if (p < end && *p != ',' && !is_ows(*p)) {
			/* junk glued to a quoted tag ("abc"x): not an entity-tag, so no match */
			while (p < end && *p != ',')
				p++;
			continue;
		}
		if ((!strong || (!weak && !ours_weak)) && (size_t)(p - tag) == etag_len && memcmp(tag, etag, etag_len) == 0)
			return true;
	}
	return false;
}

bool http_etag_list_matches(struct span field, const char *etag, size_t etag_len)
{
	return etag_list_matches(field, etag, etag_len, false);
}

bool http_etag_list_matches_strong(struct span field, const char *etag, size_t etag_len)
{
	return etag_list_matches(field, etag, etag_len, true);
}

/* Whether any field line of a list field (RFC 9110 5.3) lists the tag. */
static bool etag_lines_match(struct span field, unsigned lines, const char *name,
			     const struct http_validators *v, bool strong)
{
	const char *cursor = NULL;
	struct span line;

	while (http_field_lines_next(field, lines, name, &cursor, &line))
		if (etag_list_matches(line, v->etag, v->etag_len, strong))
			return true;
	return false;
}

int http_preconditions(const struct http_request *r, const struct http_validators *v)
{
	bool safe = r->method == HTTP_GET || r->method == HTTP_HEAD;
	time_t t;

	/* 1. If-Match (strong); 2. If-Unmodified-Since only without it, and
	 * ignored unless it is a valid date (13.1.4). */
	if (r->if_match.p) {
		if (!etag_lines_match(r->if_match, r->if_match_lines, "if-match", v, true))
			return 412;
	} else if (r->if_unmodified_since.p && http_date_parse(r->if_unmodified_since, &t)) {
		if (v->mtime > t)
			return 412;
	}
	/* 3. If-None-Match (weak); 4. If-Modified-Since only without it, and
	 * only for GET and HEAD. */
	if (r->if_none_match.p) {
		if (etag_lines_match(r->if_none_match, r->if_none_match_lines, "if-none-match", v, false))
			return safe ? 304 : 412;
	} else if (safe && r->if_modified_since.p && http_date_parse(r->if_modified_since, &t)) {
		if (v->mtime <= t)
			return 304;
	}
	return 0;
}

bool http_range_applies(const struct http_request *r, const struct http_validators *v, time_t now)
{
	/* 5. Range is for GET only (RFC 9110 14.2; HEAD mirrors GET's headers),
	 * and If-Range makes it conditional on the representation. */
	if (!r->range.p || (r->method != HTTP_GET && r->method != HTTP_HEAD))
		return false;
	return !r->if_range.p || http_if_range_matches(r->if_range, v->etag, v->etag_len, v->mtime, now);
}

bool http_if_range_matches(struct span field, const char *etag, size_t etag_len, time_t last_modified,
			   time_t now)
{
	/* a tag is quoted or "W/"-prefixed: "Wed, ..." is a date, not a weak tag */
	if (field.len > 0 && (field.p[0] == '"' || (field.len >= 2 && field.p[0] == 'W' && field.p[1] == '/')))
		return field.len == etag_len && memcmp(field.p, etag, etag_len) == 0;
	time_t t;
	/* a file modified within the current second may change again unseen */
	return http_date_parse(field, &t) && t == last_modified && now - last_modified >= 1;
}
