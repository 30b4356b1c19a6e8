/* rules.h - redirect and header rules from [redirects] and [headers], and
 * the CORS origins: what they hold, how a pattern matches a request, and
 * how a redirect's target is written. Pure: the steps that apply them to a
 * request and a response value are site.c's (site_rules_*). */
#ifndef SPINDLE_SITE_RULES_H
#define SPINDLE_SITE_RULES_H

#include <stdbool.h>
#include <stddef.h>

#include "../http/cache_control.h"

#define RULES_MAX 32
#define RULES_PATTERN_MAX 128
#define RULES_TARGET_MAX 256
#define RULES_NAME_MAX 64
#define RULES_VALUE_MAX 512
#define RULES_CAPTURES 9

/* "[//HOST]PATH = STATUS TARGET". HOST and PATH are literal but for '*',
 * which matches any run of bytes ('/' included) and is captured as $1..$9
 * in order (the host's first). */
struct redirect_rule {
	char host[RULES_PATTERN_MAX];    /* "" = any host */
	char path[RULES_PATTERN_MAX];
	int status;                      /* 301, 302, 307 or 308 */
	char target[RULES_TARGET_MAX];
};

struct redirect_rules {
	size_t n;
	struct redirect_rule rule[RULES_MAX];
};

/* "PATTERN = Name: value": PATTERN as [cache_control] has it (a path prefix,
 * a path glob, or a MIME type). A value of "-" removes the field. */
struct header_rule {
	struct cache_control_rule match;
	char name[RULES_NAME_MAX];
	char value[RULES_VALUE_MAX];
	bool remove;
};

struct header_rules {
	size_t n;
	struct header_rule rule[RULES_MAX];
};

/* Whether a rule removes the field name from every response (its pattern
 * "/", "/" and a star, or a star): then even the answers a session makes on its own
 * (to a request it cannot parse) leave it out. */
bool header_rules_remove_everywhere(const struct header_rules *rules, const char *name);

/* Appends one rule; returns 0, or -1 with the problem in why. */
int redirect_rule_add(struct redirect_rules *rules, const char *pattern, const char *value, char *why,
		      size_t whylen);
int header_rule_add(struct header_rules *rules, const char *pattern, const char *value, char *why, size_t whylen);

/* Matches s[0..len) against a '*' pattern, case-insensitively when fold:
 * true with up to RULES_CAPTURES captures appended to cap (ncap counts
 * them). Backtracks over at most a bounded number of steps, so a hostile
 * path cannot make it slow: past the bound it answers false. */
struct rules_capture {
	const char *p;
	size_t len;
};
bool rules_glob_match(const char *pattern, const char *s, size_t len, bool fold, struct rules_capture *cap,
		      size_t *ncap);

/* The first redirect rule matching host (NULL: none sent, port stripped)
 * and the decoded canonical path ("/a/b"), its captures in cap; or NULL. */
const struct redirect_rule *redirect_rule_match(const struct redirect_rules *rules, const char *host,
						size_t host_len, const char *path, size_t path_len,
						struct rules_capture cap[RULES_CAPTURES], size_t *ncap);

/* Writes rule's target with $N and {host} {path} {query} replaced into out
 * (cap bytes): captures and {path} percent-encoded as a path, {query} as
 * sent. Returns the length, or -1 when it does not fit. path is the decoded
 * canonical path, query NULL when the request had none. */
long redirect_target(const struct redirect_rule *rule, const struct rules_capture *caps, size_t ncap,
		     const char *host, size_t host_len, const char *path, size_t path_len, const char *query,
		     size_t query_len, char *out, size_t cap);

/* Percent-encodes a decoded path for a Location (RFC 3986 3.3): out needs
 * 3 * len bytes. Returns the length written. */
size_t rules_encode_path(const char *in, size_t len, char *out);

/* Whether origin (as the client sent it) is in the space-separated list,
 * or the list is "*". */
bool cors_origin_allowed(const char *list, const char *origin, size_t len);

#endif
