/* names.c - host names and wildcards of sites, and matching a Host or an
 * SNI against them (names.h). */
#include "names.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

bool site_name_valid(const char *name)
{
	size_t n = strlen(name);
	if (n == 0 || n >= SITE_NAME_MAX || strcmp(name, "default") == 0)
		return false;
	return strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") == n;
}

/* The next space-separated token of a list at *p: its start and length,
 * *p moved past it; length 0 at the end. */
static size_t next_token(const char **p, const char **tok)
{
	const char *s = *p + strspn(*p, " \t");
	size_t n = strcspn(s, " \t");
	*tok = s;
	*p = s + n;
	return n;
}

/* One host name: labels of letters, digits and '-', none empty, none
 * starting or ending with '-'; no final dot (a Host's is dropped before
 * matching, so a name with one would never match). */
static bool hostname_valid(const char *s, size_t n)
{
	if (n == 0 || n >= SITE_HOSTNAME_MAX)
		return false;
	size_t label = 0;
	for (size_t i = 0; i <= n; i++) {
		char ch = i < n ? s[i] : '.';
		if (ch == '.') {
			if (label == 0 || s[i - 1] == '-')
				return false;
			label = 0;
			continue;
		}
		bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
			  (ch == '-' && label > 0);
		if (!ok || ++label > 63)
			return false;
	}
	return true;
}

int site_names_check(const char *list, char *why, size_t whylen)
{
	const char *p = list, *tok;
	size_t n, count = 0;
	while ((n = next_token(&p, &tok)) > 0) {
		bool wild = n > 2 && tok[0] == '*' && tok[1] == '.';
		if (!hostname_valid(wild ? tok + 2 : tok, wild ? n - 2 : n)) {
			snprintf(why, whylen, "names: '%.*s' is not a host name or a '*.domain' wildcard (letters, "
				 "digits, '-' and '.'; an IDN in its xn-- form)", (int)n, tok);
			return -1;
		}
		count++;
	}
	if (count == 0) {
		snprintf(why, whylen, "names: no name given");
		return -1;
	}
	return 0;
}

const char *site_host_part(const char *p, size_t len, size_t *out_len)
{
	if (!p) {
		*out_len = 0;
		return "";
	}
	if (len && p[0] == '[') { /* an IPv6 literal: its colons are not a port's */
		const char *end = memchr(p, ']', len);
		*out_len = end ? (size_t)(end - p) + 1 : len;
		return p;
	}
	const char *colon = memchr(p, ':', len);
	if (colon)
		len = (size_t)(colon - p);
	if (len && p[len - 1] == '.') /* "example.com." is example.com (RFC 1034 3.1) */
		len--;
	*out_len = len;
	return p;
}

size_t site_names_match(const char *list, const char *host, size_t host_len)
{
	const char *p = list, *tok;
	size_t n, best = 0;
	if (host_len == 0)
		return 0;
	while ((n = next_token(&p, &tok)) > 0) {
		if (n == host_len && strncasecmp(tok, host, n) == 0)
			return SIZE_MAX; /* exact: nothing beats it */
		/* "*.example.com" takes "a.example.com" and "a.b.example.com":
		 * the suffix from the dot on, with something before it */
		if (n > 2 && tok[0] == '*' && tok[1] == '.' && host_len > n - 1 &&
		    strncasecmp(tok + 1, host + host_len - (n - 1), n - 1) == 0 && n - 1 > best)
			best = n - 1;
	}
	return best;
}

bool site_names_overlap(const char *a, const char *b, char *dup, size_t duplen)
{
	const char *p = a, *ta;
	size_t na;
	while ((na = next_token(&p, &ta)) > 0) {
		const char *q = b, *tb;
		size_t nb;
		while ((nb = next_token(&q, &tb)) > 0)
			if (na == nb && strncasecmp(ta, tb, na) == 0) {
				snprintf(dup, duplen, "%.*s", (int)na, ta);
				return true;
			}
	}
	return false;
}
