/* cache_control.c - Cache-Control rules by path or MIME type, first match
 * wins, as a site owner writes them in nginx (location + expires) or Caddy
 * (header matchers): the pattern decides, not the order of the files. Pure. */
#include "cache_control.h"

#include <errno.h>
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* "max-age=N" as a directive of its own (not "s-maxage"), or -1. RFC 9111
 * 5.2.2.1: delta-seconds; a too-big value is taken as the largest we hold,
 * which stays below 2^31 (1.2.2) so that now + N, the Expires, cannot
 * overflow time_t. */
static long long max_age_of(const char *v)
{
	for (const char *p = v; (p = strcasestr(p, "max-age")) != NULL; p += 7) {
		bool starts = p == v || p[-1] == ',' || p[-1] == ' ' || p[-1] == '\t';
		const char *q = p + 7;
		if (!starts || *q != '=' || q[1] < '0' || q[1] > '9')
			continue;
		errno = 0;
		long long n = strtoll(q + 1, NULL, 10);
		return errno == ERANGE || n > 0x7fffffffLL ? 0x7fffffffLL : n;
	}
	return -1;
}

int cache_control_add(struct cache_control_rules *rules, const char *pattern, const char *value, char *why,
		      size_t whylen)
{
	if (rules->n == CACHE_CONTROL_RULES_MAX) {
		snprintf(why, whylen, "more than %d rules", CACHE_CONTROL_RULES_MAX);
		return -1;
	}
	size_t plen = strlen(pattern), vlen = strlen(value);
	if (plen == 0 || plen >= CACHE_CONTROL_PATTERN_MAX) {
		snprintf(why, whylen, "pattern '%s' is empty or longer than %d bytes", pattern,
			 CACHE_CONTROL_PATTERN_MAX - 1);
		return -1;
	}
	if (vlen == 0 || vlen >= CACHE_CONTROL_VALUE_MAX) {
		snprintf(why, whylen, "%s: value is empty or longer than %d bytes", pattern,
			 CACHE_CONTROL_VALUE_MAX - 1);
		return -1;
	}
	/* the value goes into the head as it is: a control character would
	 * split it (RFC 9110 5.5 allows none but HTAB) */
	for (size_t i = 0; i < vlen; i++) {
		unsigned char ch = (unsigned char)value[i];
		if ((ch < 0x20 && ch != '\t') || ch == 0x7f) {
			snprintf(why, whylen, "%s: control character in the value", pattern);
			return -1;
		}
	}
	struct cache_control_rule *r = &rules->rule[rules->n];
	/* "*.js" (no '/') is a path glob too: a '*' crosses directories */
	bool path_glob = !strchr(pattern, '/') && strpbrk(pattern, "*?[");
	r->by_type = pattern[0] != '/' && !path_glob;
	if (r->by_type) {
		const char *slash = strchr(pattern, '/');
		if (!slash || slash == pattern || slash[1] == '\0' || strpbrk(pattern, " \t;")) {
			snprintf(why, whylen, "pattern '%s' is neither a path (starting with '/') nor a MIME "
				 "type (like text/html or image/*)", pattern);
			return -1;
		}
	}
	r->glob = !r->by_type && strpbrk(pattern, "*?[") != NULL;
	memcpy(r->pattern, pattern, plen + 1);
	memcpy(r->value, value, vlen + 1);
	r->max_age = max_age_of(value);
	rules->n++;
	return 0;
}

static bool path_matches(const struct cache_control_rule *r, const char *path)
{
	if (!path)
		return false;
	if (r->glob)
		return fnmatch(r->pattern, path, 0) == 0;
	return strncmp(path, r->pattern, strlen(r->pattern)) == 0;
}

bool cache_control_rule_matches(const struct cache_control_rule *r, const char *path, const char *index_path,
				const char *mime)
{
	if (!r->by_type)
		return path_matches(r, path) || path_matches(r, index_path);
	char type[CACHE_CONTROL_PATTERN_MAX];
	size_t tlen = mime ? strcspn(mime, "; \t") : 0;
	if (tlen == 0 || tlen >= sizeof(type))
		return false; /* no type pattern is that long: matches none */
	memcpy(type, mime, tlen);
	type[tlen] = '\0';
	return fnmatch(r->pattern, type, FNM_CASEFOLD) == 0;
}

const struct cache_control_rule *cache_control_match(const struct cache_control_rules *rules, const char *path,
						     const char *index_path, const char *mime)
{
	for (size_t i = 0; i < rules->n; i++)
		if (cache_control_rule_matches(&rules->rule[i], path, index_path, mime))
			return &rules->rule[i];
	return NULL;
}
