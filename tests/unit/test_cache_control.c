/* test_cache_control.c - Cache-Control rules: path prefix, path glob, MIME
 * type, first match wins, max-age for Expires, bad rules refused. */
#include <criterion/criterion.h>

#include <string.h>

#include "../../src/http/cache_control.h"

static struct cache_control_rules rules;

static void add(const char *pattern, const char *value)
{
	char why[256];
	cr_assert_eq(cache_control_add(&rules, pattern, value, why, sizeof(why)), 0, "%s: %s", pattern, why);
}

static const char *match(const char *path, const char *mime)
{
	const struct cache_control_rule *r = cache_control_match(&rules, path, NULL, mime);
	return r ? r->value : NULL;
}

static void setup(void)
{
	memset(&rules, 0, sizeof(rules));
	add("/assets/*", "public, max-age=31536000, immutable");
	add("/api/", "no-store");
	add("*.map", "private");
	add("text/html", "no-cache");
	add("image/*", "max-age=3600");
	add("/", "max-age=60");
}

TestSuite(cache_control, .init = setup);

Test(cache_control, first_match_wins)
{
	cr_assert_str_eq(match("/assets/app.js", "text/javascript; charset=utf-8"),
			 "public, max-age=31536000, immutable");
	cr_assert_str_eq(match("/assets/deep/x.html", "text/html; charset=utf-8"),
			 "public, max-age=31536000, immutable", "the path rule comes first");
	cr_assert_str_eq(match("/api/v1/x.json", "application/json"), "no-store");
	cr_assert_str_eq(match("/js/app.js.map", "application/json"), "private", "* crosses '/'");
	cr_assert_str_eq(match("/index.html", "text/html; charset=utf-8"), "no-cache");
	cr_assert_str_eq(match("/docs/", "TEXT/HTML"), "no-cache", "types are case-insensitive");
	cr_assert_str_eq(match("/logo.png", "image/png"), "max-age=3600");
	cr_assert_str_eq(match("/a.txt", "text/plain; charset=utf-8"), "max-age=60");
}

Test(cache_control, no_rule_no_match)
{
	memset(&rules, 0, sizeof(rules));
	cr_assert_null(match("/a.txt", "text/plain"));
	add("/assets", "max-age=1");
	cr_assert_null(match("/a.txt", "text/plain"));
	cr_assert_str_eq(match("/assets2/x", "text/plain"), "max-age=1", "a pattern without * is a prefix");
	add("text/*", "max-age=2");
	cr_assert_null(match("/b.json", "application/json"));
	cr_assert_str_eq(match("/b.txt", "text/plain; charset=utf-8"), "max-age=2");
}

Test(cache_control, max_age_for_expires)
{
	cr_assert_eq(rules.rule[0].max_age, 31536000);
	cr_assert_eq(rules.rule[1].max_age, -1);
	cr_assert_eq(rules.rule[4].max_age, 3600);
	add("/s", "s-maxage=10");
	cr_assert_eq(rules.rule[rules.n - 1].max_age, -1, "s-maxage is not max-age");
	add("/t", "public,max-age=0");
	cr_assert_eq(rules.rule[rules.n - 1].max_age, 0);
	add("/u", "max-age=99999999999999999999999");
	cr_assert_eq(rules.rule[rules.n - 1].max_age, 0x7fffffffLL, "an overflow is clamped, not wrapped");
	/* fits a long long, but now + it overflows time_t (an Expires in year
	 * 0, or a UBSan abort): RFC 9111 1.2.2 caps delta-seconds at 2^31 */
	add("/v", "max-age=9223372036854775807");
	cr_assert_eq(rules.rule[rules.n - 1].max_age, 0x7fffffffLL);
	add("/w", "max-age=4000000000");
	cr_assert_eq(rules.rule[rules.n - 1].max_age, 0x7fffffffLL);
}

Test(cache_control, bad_rules_refused)
{
	char why[256];
	cr_assert_eq(cache_control_add(&rules, "html", "no-cache", why, sizeof(why)), -1);
	cr_assert(strstr(why, "neither a path"), "%s", why);
	cr_assert_eq(cache_control_add(&rules, "/x", "a\r\nSet-Cookie: y", why, sizeof(why)), -1);
	cr_assert(strstr(why, "control character"), "%s", why);
	cr_assert_eq(cache_control_add(&rules, "/x", "", why, sizeof(why)), -1);
	cr_assert_eq(cache_control_add(&rules, "text/", "x", why, sizeof(why)), -1);
	while (rules.n < CACHE_CONTROL_RULES_MAX)
		add("/y", "x");
	cr_assert_eq(cache_control_add(&rules, "/z", "x", why, sizeof(why)), -1);
	cr_assert(strstr(why, "more than"), "%s", why);
}

static const char *match_index(const char *path, const char *index_path, const char *mime)
{
	const struct cache_control_rule *r = cache_control_match(&rules, path, index_path, mime);
	return r ? r->value : NULL;
}

Test(cache_control, a_directory_matches_by_its_index_file_too)
{
	memset(&rules, 0, sizeof(rules));
	add("/index.html", "no-cache");
	add("/docs/", "max-age=600");
	add("/sub/*.html", "max-age=5");
	add("text/html", "max-age=1");
	cr_assert_str_eq(match_index("/", "/index.html", "text/html"), "no-cache", "GET / serves /index.html");
	cr_assert_str_eq(match_index("/docs/", "/docs/index.html", "text/html"), "max-age=600");
	cr_assert_str_eq(match_index("/sub/", "/sub/index.html", "text/html"), "max-age=5");
	cr_assert_str_eq(match_index("/other/", "/other/index.html", "text/html"), "max-age=1", "types still apply");
	cr_assert_str_eq(match("/", "text/html"), "max-age=1", "no index path, no index rule");
	/* in order: the first rule that matches either path wins */
	memset(&rules, 0, sizeof(rules));
	add("/", "max-age=60");
	add("/index.html", "no-cache");
	cr_assert_str_eq(match_index("/", "/index.html", "text/html"), "max-age=60");
}
