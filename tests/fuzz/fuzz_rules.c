/* fuzz_rules.c - libFuzzer target for redirect rules: the '*' matcher, rule
 * parsing and the Location a rule writes, over a request path and Host from
 * the client.
 *
 * Input layout: up to the first '\n' a rule ("PATTERN STATUS TARGET", fed
 * to redirect_rule_add, which may refuse it); up to the next '\n' a Host;
 * the rest a request path, '?' starting its query. A few fixed rules come
 * after the fuzzed one, so the path meets them too.
 *
 * Checked invariants, beyond "no crash, no sanitizer report, no input
 * slower than the run's timeout":
 *  - a Location holds no byte below 0x21 and no 0x7f (it goes into a head);
 *  - it fits the buffer and is NUL-terminated at its length;
 *  - a Location never starts with "//" (another site);
 *  - rules_glob_match of a pattern without '*' matches exactly equal bytes.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/site/rule_steps.h"
#include "../../src/site/rules.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fuzz_check(int ok)
{
	if (!ok)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *in = (const char *)data;
	const char *nl1 = memchr(in, '\n', size);
	if (!nl1)
		return 0;
	const char *host = nl1 + 1;
	const char *nl2 = memchr(host, '\n', size - (size_t)(host - in));
	if (!nl2)
		return 0;
	const char *path = nl2 + 1;
	size_t path_len = size - (size_t)(path - in);

	static struct redirect_rules rules;
	memset(&rules, 0, sizeof(rules));
	char rule[512], why[256];
	size_t rlen = (size_t)(nl1 - in);
	if (rlen < sizeof(rule)) {
		memcpy(rule, in, rlen);
		rule[rlen] = '\0';
		char *sp = strchr(rule, ' ');
		if (sp && strlen(rule) == rlen) { /* no NUL inside: what a config line can hold */
			*sp = '\0';
			(void)redirect_rule_add(&rules, rule, sp + 1, why, sizeof(why));
		}
	}
	static const char *const fixed[][2] = {
		{ "/a*", "301 /$1" }, { "/*/*/*", "308 /x/$3/$2/$1" }, { "//*.*/*", "301 https://$2/$3" },
		{ "/q*", "302 {path}?{query}" }, { "/*", "307 https://{host}{path}" },
	};
	for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++)
		fuzz_check(redirect_rule_add(&rules, fixed[i][0], fixed[i][1], why, sizeof(why)) == 0);

	struct http_request req = { .method = HTTP_GET };
	const char *q = memchr(path, '?', path_len);
	req.path = (struct span){ path, q ? (size_t)(q - path) : path_len };
	if (q)
		req.query = (struct span){ q + 1, path_len - (size_t)(q - path) - 1 };
	if (nl2 > host)
		req.host = (struct span){ host, (size_t)(nl2 - host) };
	/* the parser lets through no control byte or space in these */
	for (const char *p = host; p < in + size; p++)
		if (((unsigned char)*p <= 0x20 || *p == 0x7f) && p != nl2)
			return 0;

	char loc[1024];
	memset(loc, 0x5a, sizeof(loc));
	int status = rule_step_redirect(&rules, &req, loc, sizeof(loc) - 8);
	for (size_t i = sizeof(loc) - 8; i < sizeof(loc); i++)
		fuzz_check(loc[i] == 0x5a);
	if (status) {
		fuzz_check(status == 301 || status == 302 || status == 307 || status == 308);
		size_t n = strlen(loc);
		fuzz_check(n < sizeof(loc) - 8);
		for (size_t i = 0; i < n; i++)
			fuzz_check((unsigned char)loc[i] > 0x20 && loc[i] != 0x7f);
		if (loc[0] == '/')
			fuzz_check(loc[1] != '/');
	}

	/* a literal pattern (the path itself, with '*' dropped) matches itself */
	char lit[256];
	size_t ln = 0;
	for (size_t i = 0; i < path_len && ln < sizeof(lit) - 1; i++)
		if (path[i] != '*' && path[i] != '\0')
			lit[ln++] = path[i];
	lit[ln] = '\0';
	struct rules_capture cap[RULES_CAPTURES];
	size_t ncap = 0;
	fuzz_check(rules_glob_match(lit, lit, ln, false, cap, &ncap) && ncap == 0);
	return 0;
}
