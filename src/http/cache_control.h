/* cache_control.h - Cache-Control rules: which Cache-Control a
 * response gets, by URL path (prefix or glob) or by MIME type, first match
 * wins, in the order the configuration lists them. Pure. */
#ifndef SPINDLE_HTTP_CACHE_CONTROL_H
#define SPINDLE_HTTP_CACHE_CONTROL_H

#include <stdbool.h>
#include <stddef.h>

#define CACHE_CONTROL_RULES_MAX 32
#define CACHE_CONTROL_PATTERN_MAX 128
#define CACHE_CONTROL_VALUE_MAX 160

struct cache_control_rule {
	char pattern[CACHE_CONTROL_PATTERN_MAX];
	char value[CACHE_CONTROL_VALUE_MAX];  /* the field value, as configured */
	bool by_type;       /* pattern is a MIME type (text/html, or image/ then a star), else a path */
	bool glob;          /* a path pattern with * ? or [: fnmatch, else a prefix */
	long long max_age;  /* seconds from "max-age=N", or -1: what an Expires is made from */
};

struct cache_control_rules {
	size_t n;
	struct cache_control_rule rule[CACHE_CONTROL_RULES_MAX];
};

/* Appends a rule. A pattern starting with '/' matches the URL path: a glob
 * when it has * ? or [ (a '*' also crosses '/'), else a prefix; so does a
 * glob without '/' ("*.js" matches "/js/app.js"). Any other
 * pattern is a MIME type, matched without its parameters, case-insensitively,
 * '*' allowed (image/ then a star: any image). Returns 0, or -1 with the reason in why. */
int cache_control_add(struct cache_control_rules *rules, const char *pattern, const char *value, char *why,
		      size_t whylen);

/* Whether one rule matches, as cache_control_match() reads it. */
bool cache_control_rule_matches(const struct cache_control_rule *r, const char *path, const char *index_path,
				const char *mime);

/* The first rule matching the decoded URL path (NUL-terminated) or the MIME
 * type (parameters allowed: "text/html; charset=utf-8"), or NULL. When a
 * directory request is answered by its index file, index_path is that file's
 * URL path ("/docs/index.html" for "/docs/"), else NULL: a path rule matches
 * if either path does, so "/index.html = no-cache" covers "GET /" as nginx's
 * "location = /index.html" does (its index directive redirects internally),
 * and "/docs/" still covers the directory. Rules stay in order: the first
 * rule matching either path wins. */
const struct cache_control_rule *cache_control_match(const struct cache_control_rules *rules, const char *path,
						     const char *index_path, const char *mime);

#endif
