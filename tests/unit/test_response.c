/* test_response.c - validators: ETag lists (If-None-Match, weak comparison)
 * and If-Range (strong comparison; a date only when it is a strong
 * validator, judged against an injected clock), status texts and pages. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "../../src/http/date.h"
#include "../../src/http/response.h"
#include "guard.h"

#define ETAG "\"5f5e100-2a\""

struct list_case {
	const char *field;
	bool want;
};

Test(response, etag_list_table)
{
	static const struct list_case cases[] = {
		{ ETAG, true },
		{ "W/" ETAG, true },                       /* weak comparison ignores W/ */
		{ "*", true },
		{ "  *  ", true },
		{ "\"other\", " ETAG, true },
		{ "\"other\"," ETAG, true },               /* no space after the comma */
		{ "\"a\" ,\t" ETAG " , \"b\"", true },
		{ ",," ETAG ",,", true },                  /* empty list elements (RFC 9110 5.6.1) */
		{ "\"a\", W/" ETAG, true },
		{ "\"other\"", false },
		{ "", false },
		{ ",", false },
		{ "\"5f5e100-2a", false },                 /* unterminated */
		{ "\"5f5e100-2a\"x", false },              /* trailing junk glued on */
		{ "\"5f5e100-2\"", false },                /* a prefix of the tag */
		{ "\"5f5e100-2aa\"", false },              /* the tag is a prefix */
		{ "5f5e100-2a", false },                   /* unquoted */
		{ "w/" ETAG, false },                      /* W/ is case-sensitive */
		{ "\"x, " ETAG "\"", false },              /* inside another tag's quotes */
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct span f = guarded(cases[i].field, strlen(cases[i].field));
		cr_expect_eq(http_etag_list_matches(f, ETAG, strlen(ETAG)), cases[i].want, "'%s': want %d",
			     cases[i].field, cases[i].want);
		unguard(f);
	}
}

/* Our own tag may be weak (a directory listing): the weak
 * comparison still matches it with or without W/, the strong one never. */
Test(response, own_weak_etag)
{
	static const char ours[] = "W/" ETAG;
	static const char *const fields[] = { ETAG, "W/" ETAG, "\"a\", W/" ETAG };
	for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
		struct span f = guarded(fields[i], strlen(fields[i]));
		cr_expect(http_etag_list_matches(f, ours, strlen(ours)), "'%s'", fields[i]);
		cr_expect(!http_etag_list_matches_strong(f, ours, strlen(ours)), "'%s'", fields[i]);
		unguard(f);
	}
	struct span other = guarded("W/\"other\"", 9);
	cr_expect(!http_etag_list_matches(other, ours, strlen(ours)));
	unguard(other);
}

Test(response, etag_format)
{
	char e[HTTP_ETAG_MAX];
	size_t n = http_etag(e, 100000000, 42);
	cr_assert_str_eq(e, ETAG);
	cr_assert_eq(n, strlen(ETAG));
	/* the largest values still fit */
	n = http_etag(e, (time_t)0x7fffffffffffffffLL, UINT64_MAX);
	cr_assert_eq(n, strlen(e));
	cr_assert_lt(n, (size_t)HTTP_ETAG_MAX);
}

static bool if_range(const char *field, time_t last_modified, time_t now)
{
	struct span f = guarded(field, strlen(field));
	bool r = http_if_range_matches(f, ETAG, strlen(ETAG), last_modified, now);
	unguard(f);
	return r;
}

Test(response, if_range_etag_is_strong_comparison)
{
	time_t lm = 1700000000;
	cr_assert(if_range(ETAG, lm, lm + 100));
	cr_assert_not(if_range("W/" ETAG, lm, lm + 100), "a weak tag never matches If-Range");
	cr_assert_not(if_range("\"other\"", lm, lm + 100));
	cr_assert_not(if_range("\"5f5e100-2\"", lm, lm + 100));
	cr_assert_not(if_range("*", lm, lm + 100));
	cr_assert_not(if_range("", lm, lm + 100));
}

/* RFC 9110 8.8.2.2: a Last-Modified is a strong validator only when it is at
 * least a second older than the moment the response is made. */
Test(response, if_range_date_with_injected_clock)
{
	time_t lm = 1700000000;
	char date[HTTP_DATE_LEN + 1];
	http_date_format(lm, date);

	cr_assert_not(if_range(date, lm, lm), "modified this very second: weak, so no range");
	cr_assert(if_range(date, lm, lm + 1), "a second later it is strong");
	cr_assert(if_range(date, lm, lm + 86400));
	cr_assert_not(if_range(date, lm, lm - 5), "a clock behind the file: not strong");

	/* the date must equal Last-Modified exactly: older or newer means changed */
	char other[HTTP_DATE_LEN + 1];
	http_date_format(lm - 1, other);
	cr_assert_not(if_range(other, lm, lm + 100));
	http_date_format(lm + 1, other);
	cr_assert_not(if_range(other, lm, lm + 100));

	/* the obsolete formats are dates too (RFC 9110 5.6.7) */
	cr_assert(if_range("Tuesday, 14-Nov-23 22:13:20 GMT", lm, lm + 100));
	cr_assert(if_range("Tue Nov 14 22:13:20 2023", lm, lm + 100));
	cr_assert_not(if_range("yesterday", lm, lm + 100));
}

/* Every day of the week: "Wed, ..." starts with the same letter as a weak
 * tag ("W/...") and must still be read as a date. */
Test(response, if_range_date_on_every_weekday)
{
	for (int day = 0; day < 7; day++) {
		time_t lm = 1700000000 + day * 86400;
		char date[HTTP_DATE_LEN + 1];
		http_date_format(lm, date);
		cr_expect(if_range(date, lm, lm + 100), "If-Range: %s should match its Last-Modified", date);
	}
}

Test(response, status_texts_and_builtin_pages)
{
	static const int codes[] = { 200, 206, 301, 304, 400, 403, 404, 405, 408, 413, 414, 416, 431, 500, 501, 503, 505 };
	for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++)
		cr_expect_str_neq(http_status_text(codes[i]), "Unknown", "%d", codes[i]);
	cr_assert_str_eq(http_status_text(408), "Request Timeout");
	cr_assert_str_eq(http_status_text(299), "Unknown");

	char page[512];
	size_t n = http_builtin_page(404, page, sizeof(page));
	cr_assert_eq(n, strlen(page));
	cr_assert(strstr(page, "<title>404 Not Found</title>"));
	/* a short buffer truncates and reports what it holds */
	char small[16];
	n = http_builtin_page(404, small, sizeof(small));
	cr_assert_eq(n, sizeof(small) - 1);
	cr_assert_eq(strlen(small), n);
}
