/* rules.c - redirect and header rules as configured, matched against a
 * request: '*' globs with captures, targets with $N and {placeholders},
 * and the CORS origin list. Pure: nothing here touches a response. */
#include "rules.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* the most steps one match may take: a pattern of several '*' against a
 * long path backtracks, and the path is the client's */
#define RULES_MATCH_STEPS 20000

static bool glob_at(const char *p, const char *s, size_t len, bool fold, struct rules_capture *cap, size_t *ncap,
		    long *steps)
{
	while (*p && *p != '*') {
		if (len == 0)
			return false;
		unsigned char a = (unsigned char)*p, b = (unsigned char)*s;
		if (fold ? tolower(a) != tolower(b) : a != b)
			return false;
		p++, s++, len--;
	}
	if (*p == '\0')
		return len == 0;
	size_t at = *ncap;
	for (size_t k = 0; k <= len; k++) {
		if (--*steps < 0)
			return false;
		if (at < RULES_CAPTURES)
			cap[at] = (struct rules_capture){ s, k };
		*ncap = at + 1;
		if (glob_at(p + 1, s + k, len - k, fold, cap, ncap, steps))
			return true;
	}
	*ncap = at;
	return false;
}

bool rules_glob_match(const char *pattern, const char *s, size_t len, bool fold, struct rules_capture *cap,
		      size_t *ncap)
{
	long steps = RULES_MATCH_STEPS;
	size_t start = *ncap;
	if (glob_at(pattern, s, len, fold, cap, ncap, &steps))
		return true;
	*ncap = start;
	return false;
}

static size_t count_stars(const char *s)
{
	size_t n = 0;
	for (; *s; s++)
		n += *s == '*';
	return n;
}

static bool has_control(const char *s)
{
	for (; *s; s++)
		if (((unsigned char)*s < 0x20 && *s != '\t') || *s == 0x7f)
			return true;
	return false;
}

int redirect_rule_add(struct redirect_rules *rules, const char *pattern, const char *value, char *why,
		      size_t whylen)
{
	if (rules->n == RULES_MAX) {
		snprintf(why, whylen, "more than %d rules", RULES_MAX);
		return -1;
	}
	struct redirect_rule r = { 0 };
	const char *path = pattern;
	if (pattern[0] == '/' && pattern[1] == '/') {
		/* "//host/path": the host up to the next '/' */
		const char *slash = strchr(pattern + 2, '/');
		size_t hlen = slash ? (size_t)(slash - pattern - 2) : 0;
		if (!slash || hlen == 0 || hlen >= sizeof(r.host)) {
			snprintf(why, whylen, "'%s': expected //HOST/PATH, with no port in HOST (a ':' ends a pattern)",
				 pattern);
			return -1;
		}
		memcpy(r.host, pattern + 2, hlen);
		path = slash;
	}
	if (path[0] != '/' || strlen(path) >= sizeof(r.path) || has_control(pattern)) {
		snprintf(why, whylen, "'%s': a pattern is a path starting with '/' (or //HOST/PATH), under %d bytes",
			 pattern, RULES_PATTERN_MAX);
		return -1;
	}
	strcpy(r.path, path);
	size_t stars = count_stars(r.host) + count_stars(r.path);
	if (stars > RULES_CAPTURES) {
		snprintf(why, whylen, "'%s': more than %d '*'", pattern, RULES_CAPTURES);
		return -1;
	}
	char *end;
	long status = strtol(value, &end, 10);
	if (end == value || (status != 301 && status != 302 && status != 307 && status != 308) ||
	    (*end != ' ' && *end != '\t')) {
		snprintf(why, whylen, "'%s': expected 'STATUS TARGET' with STATUS 301, 302, 307 or 308", value);
		return -1;
	}
	r.status = (int)status;
	const char *target = end + strspn(end, " \t");
	size_t tlen = strlen(target);
	if (tlen == 0 || tlen >= sizeof(r.target) || has_control(target) || strpbrk(target, " \t")) {
		snprintf(why, whylen, "'%s': the target is empty, holds a space or control character, or is "
			 "longer than %d bytes", value, RULES_TARGET_MAX - 1);
		return -1;
	}
	if ((target[0] != '/' && target[0] != '{' && strncmp(target, "http://", 7) != 0 &&
	     strncmp(target, "https://", 8) != 0) || strncmp(target, "//", 2) == 0) {
		snprintf(why, whylen, "'%s': the target starts with one '/', 'http://', 'https://' or a "
			 "placeholder", target);
		return -1;
	}
	for (const char *t = target; *t; t++) {
		if (*t == '$') {
			if (t[1] < '1' || t[1] > '9' || (size_t)(t[1] - '0') > stars) {
				snprintf(why, whylen, "'%s': $%c names no '*' of the pattern (it has %zu)", target,
					 t[1] ? t[1] : ' ', stars);
				return -1;
			}
		} else if (*t == '{') {
			if (strncmp(t, "{host}", 6) && strncmp(t, "{path}", 6) && strncmp(t, "{query}", 7)) {
				snprintf(why, whylen, "'%s': unknown placeholder (known: {host} {path} {query})",
					 target);
				return -1;
			}
		}
	}
	memcpy(r.target, target, tlen + 1);
	rules->rule[rules->n++] = r;
	return 0;
}

/* RFC 9110 5.1 token characters: what a field name is made of */
static bool is_token(const char *s)
{
	if (!*s)
		return false;
	for (; *s; s++)
		if (!isalnum((unsigned char)*s) && !strchr("!#$%&'*+-.^_`|~", *s))
			return false;
	return true;
}

int header_rule_add(struct header_rules *rules, const char *pattern, const char *value, char *why, size_t whylen)
{
	if (rules->n == RULES_MAX) {
		snprintf(why, whylen, "more than %d rules", RULES_MAX);
		return -1;
	}
	struct header_rule r = { 0 };
	const char *colon = strchr(value, ':');
	size_t nlen = colon ? (size_t)(colon - value) : 0;
	while (nlen > 0 && (value[nlen - 1] == ' ' || value[nlen - 1] == '\t'))
		nlen--;
	if (!colon || nlen == 0 || nlen >= sizeof(r.name)) {
		snprintf(why, whylen, "'%s': expected 'Name: value' (or 'Name: -' to remove it)", value);
		return -1;
	}
	memcpy(r.name, value, nlen);
	if (!is_token(r.name)) {
		snprintf(why, whylen, "'%s': not a field name", r.name);
		return -1;
	}
	/* framing and the fields the session owns: changing them would
	 * make the response unreadable or lie about it */
	static const char *const owned[] = { "Content-Length", "Content-Range", "Transfer-Encoding", "Connection",
					     "Keep-Alive", "Date", "Upgrade", "Trailer", NULL };
	for (const char *const *o = owned; *o; o++) {
		if (strcasecmp(r.name, *o) == 0) {
			snprintf(why, whylen, "%s: a field the server owns cannot be added or removed", r.name);
			return -1;
		}
	}
	const char *v = colon + 1 + strspn(colon + 1, " \t");
	size_t vlen = strlen(v);
	if (vlen == 0 || vlen >= sizeof(r.value) || has_control(v)) {
		snprintf(why, whylen, "%s: the value is empty, longer than %d bytes or holds a control character",
			 r.name, RULES_VALUE_MAX - 1);
		return -1;
	}
	memcpy(r.value, v, vlen + 1);
	r.remove = strcmp(v, "-") == 0;
	/* the pattern reads as a [cache_control] one does */
	struct cache_control_rules one = { 0 };
	if (cache_control_add(&one, pattern, "-", why, whylen) < 0)
		return -1;
	r.match = one.rule[0];
	rules->rule[rules->n++] = r;
	return 0;
}

bool header_rules_remove_everywhere(const struct header_rules *rules, const char *name)
{
	for (size_t i = 0; i < rules->n; i++) {
		const struct header_rule *r = &rules->rule[i];
		const char *p = r->match.pattern;
		if (r->remove && strcasecmp(r->name, name) == 0 && !r->match.by_type &&
		    (strcmp(p, "/") == 0 || strcmp(p, "/*") == 0 || strcmp(p, "*") == 0))
			return true;
	}
	return false;
}

const struct redirect_rule *redirect_rule_match(const struct redirect_rules *rules, const char *host,
						size_t host_len, const char *path, size_t path_len,
						struct rules_capture cap[RULES_CAPTURES], size_t *ncap)
{
	for (size_t i = 0; i < rules->n; i++) {
		const struct redirect_rule *r = &rules->rule[i];
		*ncap = 0;
		if (r->host[0] && (!host || !rules_glob_match(r->host, host, host_len, true, cap, ncap)))
			continue;
		if (rules_glob_match(r->path, path, path_len, false, cap, ncap))
			return r;
	}
	*ncap = 0;
	return NULL;
}

size_t rules_encode_path(const char *in, size_t len, char *out)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t o = 0;
	for (size_t i = 0; i < len; i++) {
		unsigned char ch = (unsigned char)in[i];
		if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
		    strchr("-._~!$&'()*+,;=:@/", ch)) { /* not isalnum: no locale decides a URL */
			out[o++] = (char)ch;
		} else {
			out[o++] = '%';
			out[o++] = hex[ch >> 4];
			out[o++] = hex[ch & 15];
		}
	}
	return o;
}

long redirect_target(const struct redirect_rule *rule, const struct rules_capture *caps, size_t ncap,
		     const char *host, size_t host_len, const char *path, size_t path_len, const char *query,
		     size_t query_len, char *out, size_t cap)
{
	size_t o = 0;
	bool has_query = false;
	for (const char *t = rule->target; *t;) {
		const char *p = NULL;
		size_t len = 0;
		bool encode = false;
		size_t adv = 1;
		if (*t == '$' && t[1] >= '1' && t[1] <= '9') {
			size_t i = (size_t)(t[1] - '1');
			if (i < ncap && i < RULES_CAPTURES)
				p = caps[i].p, len = caps[i].len;
			encode = true, adv = 2;
		} else if (strncmp(t, "{host}", 6) == 0) {
			p = host, len = host ? host_len : 0, adv = 6;
		} else if (strncmp(t, "{path}", 6) == 0) {
			p = path, len = path_len, encode = true, adv = 6;
		} else if (strncmp(t, "{query}", 7) == 0) {
			p = query, len = query ? query_len : 0, adv = 7;
			has_query = true;
		} else {
			if (*t == '?')
				has_query = true;
			p = t, len = 1;
		}
		size_t need = encode ? 3 * len : len;
		if (o + need + 1 > cap)
			return -1;
		if (encode)
			o += rules_encode_path(p, len, out + o);
		else if (len)
			memcpy(out + o, p, len), o += len;
		t += adv;
	}
	/* a target without a query of its own keeps the request's (as
	 * nginx's rewrite does): a moved page keeps its parameters */
	if (!has_query && query) {
		if (o + query_len + 2 > cap)
			return -1;
		out[o++] = '?';
		memcpy(out + o, query, query_len);
		o += query_len;
	}
	out[o] = '\0';
	/* "/a* = 301 /$1" and "/a/b" make "//b", and "{host}/x" without a
	 * Host "//x": a Location naming the host b or x. A Location that
	 * starts as a path stays on this site: its leading slashes are one */
	if (out[0] == '/' && out[1] == '/') {
		size_t extra = strspn(out, "/") - 1;
		memmove(out, out + extra, o - extra + 1);
		o -= extra;
	}
	return (long)o;
}

bool cors_origin_allowed(const char *list, const char *origin, size_t len)
{
	if (!list[0] || !origin || len == 0)
		return false;
	if (strcmp(list, "*") == 0)
		return true;
	for (const char *p = list; *p;) {
		p += strspn(p, " \t");
		size_t n = strcspn(p, " \t");
		if (n == len && strncasecmp(p, origin, len) == 0)
			return true;
		p += n;
	}
	return false;
}
