/* test_site_names.c - which site a Host or an SNI names: exact names and
 * "*.domain" wildcards, case, ports and a final dot, the best match across
 * sites, and the `names` values a [site] section may hold. */
#include <criterion/criterion.h>

#include <stdint.h>
#include <string.h>

#include "../../src/site/names.h"

static size_t match(const char *list, const char *host)
{
	size_t len;
	const char *h = site_host_part(host, strlen(host), &len);
	return site_names_match(list, h, len);
}

Test(site_names, exact_names_match_whatever_the_case_port_or_final_dot)
{
	const char *list = "example.com www.example.com";
	cr_assert_eq(match(list, "example.com"), SIZE_MAX);
	cr_assert_eq(match(list, "WWW.Example.COM"), SIZE_MAX);
	cr_assert_eq(match(list, "example.com:8080"), SIZE_MAX);
	cr_assert_eq(match(list, "example.com."), SIZE_MAX);
	cr_assert_eq(match(list, "example.com.:443"), SIZE_MAX);
	cr_assert_eq(match(list, "example.org"), 0);
	cr_assert_eq(match(list, "xexample.com"), 0);
	cr_assert_eq(match(list, "example.co"), 0);
	cr_assert_eq(match(list, ""), 0);
}

Test(site_names, a_wildcard_takes_every_name_below_the_domain_but_not_the_domain)
{
	const char *list = "*.example.com";
	cr_assert_gt(match(list, "a.example.com"), 0);
	cr_assert_gt(match(list, "a.b.example.com"), 0);
	cr_assert_gt(match(list, "A.EXAMPLE.com:80"), 0);
	cr_assert_eq(match(list, "example.com"), 0);
	cr_assert_eq(match(list, ".example.com"), 0);
	cr_assert_eq(match(list, "aexample.com"), 0);
	cr_assert_eq(match(list, "a.example.com.evil"), 0);
}

Test(site_names, exact_beats_wildcard_and_a_longer_wildcard_a_shorter_one)
{
	size_t exact = match("a.example.com", "a.example.com");
	size_t longer = match("*.a.example.com", "x.a.example.com");
	size_t shorter = match("*.example.com", "x.a.example.com");
	size_t wild = match("*.example.com", "a.example.com");
	cr_assert_gt(exact, wild);
	cr_assert_gt(longer, shorter);
	cr_assert_gt(shorter, 0);
}

Test(site_names, ipv6_literals_keep_their_brackets_and_lose_the_port)
{
	size_t len;
	const char *h = site_host_part("[::1]:8080", 10, &len);
	cr_assert_eq(len, 5);
	cr_assert_eq(strncmp(h, "[::1]", len), 0);
	h = site_host_part(NULL, 0, &len);
	cr_assert_eq(len, 0);
}

Test(site_names, a_names_value_is_checked)
{
	char why[256];
	cr_assert_eq(site_names_check("example.com *.example.com xn--bcher-kva.example", why, sizeof(why)), 0);
	cr_assert_eq(site_names_check("   ", why, sizeof(why)), -1);
	cr_assert_eq(site_names_check("exa_mple.com", why, sizeof(why)), -1);
	cr_assert(strstr(why, "exa_mple.com"), "%s", why);
	cr_assert_eq(site_names_check("*example.com", why, sizeof(why)), -1);
	cr_assert_eq(site_names_check("a.*.example.com", why, sizeof(why)), -1);
	cr_assert_eq(site_names_check("example.com.", why, sizeof(why)), -1);
	cr_assert_eq(site_names_check("-a.example.com", why, sizeof(why)), -1);
	cr_assert_eq(site_names_check("a..example.com", why, sizeof(why)), -1);
	cr_assert_eq(site_names_check("example.com:80", why, sizeof(why)), -1);
}

Test(site_names, site_names_are_checked)
{
	cr_assert(site_name_valid("blog"));
	cr_assert(site_name_valid("example.com_2"));
	cr_assert_not(site_name_valid("default"));
	cr_assert_not(site_name_valid(""));
	cr_assert_not(site_name_valid("a b"));
	cr_assert_not(site_name_valid("a/b"));
}

Test(site_names, overlap_is_found_without_regard_to_case)
{
	char dup[64];
	cr_assert(site_names_overlap("a.example b.example", "c.example B.EXAMPLE", dup, sizeof(dup)));
	cr_assert_str_eq(dup, "b.example");
	cr_assert_not(site_names_overlap("a.example", "*.a.example", dup, sizeof(dup)));
}
