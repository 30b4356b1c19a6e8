/* test_date.c - HTTP-date formatting and parsing (RFC 9110 5.6.7). */
#include <criterion/criterion.h>

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "../../src/http/date.h"

static struct span date_sp(const char *s)
{
	return (struct span){ s, strlen(s) };
}

/* Expected values from the C library, independent of date.c's parser. */
static time_t date_utc(int y, int mon, int d, int h, int mi, int s)
{
	struct tm tm = { .tm_year = y - 1900, .tm_mon = mon - 1, .tm_mday = d,
			 .tm_hour = h, .tm_min = mi, .tm_sec = s };
	return timegm(&tm);
}

static const struct {
	time_t t;
	const char *s;
} date_known[] = {
	{ 784111777, "Sun, 06 Nov 1994 08:49:37 GMT" },
	{ 0, "Thu, 01 Jan 1970 00:00:00 GMT" },
	{ -1, "Wed, 31 Dec 1969 23:59:59 GMT" },
	{ 951825600, "Tue, 29 Feb 2000 12:00:00 GMT" },
	{ 1709251199, "Thu, 29 Feb 2024 23:59:59 GMT" },
	{ -2203891200LL, "Thu, 01 Mar 1900 00:00:00 GMT" },
	{ 2147483648LL, "Tue, 19 Jan 2038 03:14:08 GMT" },
	{ 4133980799LL, "Fri, 31 Dec 2100 23:59:59 GMT" },
	{ -11670998400LL, "Tue, 29 Feb 1600 00:00:00 GMT" },
	{ 253402300799LL, "Fri, 31 Dec 9999 23:59:59 GMT" },
};

Test(date, format_known)
{
	for (size_t i = 0; i < sizeof(date_known) / sizeof(date_known[0]); i++) {
		char buf[HTTP_DATE_LEN + 1];
		memset(buf, 'X', sizeof(buf));
		http_date_format(date_known[i].t, buf);
		cr_expect_str_eq(buf, date_known[i].s, "%lld", (long long)date_known[i].t);
	}
}

Test(date, parse_known)
{
	for (size_t i = 0; i < sizeof(date_known) / sizeof(date_known[0]); i++) {
		time_t t = 12345;
		cr_expect(http_date_parse(date_sp(date_known[i].s), &t), "%s", date_known[i].s);
		cr_expect_eq(t, date_known[i].t, "%s -> %lld", date_known[i].s, (long long)t);
	}
}

/* Out-of-range times clamp to the 4-digit years instead of misformatting. */
Test(date, format_clamps)
{
	char buf[HTTP_DATE_LEN + 1];
	http_date_format((time_t)900000000000LL, buf);
	cr_expect_str_eq(buf, "Fri, 31 Dec 9999 23:59:59 GMT");
	http_date_format((time_t)-900000000000LL, buf);
	cr_expect_str_eq(buf, "Sat, 01 Jan 0000 00:00:00 GMT");
	cr_expect_eq(strlen(buf), HTTP_DATE_LEN);
}

/* Every few days and odd seconds from 1800 to 2400, through leap years and
 * century non-leap years: format agrees with strftime in the C locale, and
 * parse(format(t)) == t. */
Test(date, round_trip)
{
	time_t from = date_utc(1800, 1, 1, 0, 0, 0), to = date_utc(2400, 12, 31, 23, 59, 59);
	size_t n = 0;
	for (time_t t = from; t <= to; t += 3 * 86400 + 3607, n++) {
		char mine[HTTP_DATE_LEN + 1], ref[64];
		struct tm tm;
		gmtime_r(&t, &tm);
		strftime(ref, sizeof(ref), "%a, %d %b %Y %H:%M:%S GMT", &tm);
		http_date_format(t, mine);
		cr_assert_str_eq(mine, ref, "%lld", (long long)t);
		time_t back;
		cr_assert(http_date_parse(date_sp(mine), &back), "%s", mine);
		cr_assert_eq(back, t, "%s", mine);
	}
	cr_expect_gt(n, 70000);
}

/* Every Feb 29 from 1896 to 2404 parses only in leap years. */
Test(date, leap_days)
{
	for (int y = 1896; y <= 2404; y++) {
		char s[64];
		bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
		snprintf(s, sizeof(s), "Mon, 29 Feb %04d 00:00:00 GMT", y);
		time_t t;
		cr_expect_eq(http_date_parse(date_sp(s), &t), leap, "%s", s);
		if (leap)
			cr_expect_eq(t, date_utc(y, 2, 29, 0, 0, 0), "%s", s);
	}
}

/* 2025-06-01T00:00:00Z, for the RFC 850 century rule. */
#define NOW_2025 ((time_t)1748736000)

Test(date, obsolete_forms)
{
	static const struct {
		const char *s;
		int y, mon, d, h, mi, sec;
	} t[] = {
		/* RFC 850 */
		{ "Sunday, 06-Nov-94 08:49:37 GMT", 1994, 11, 6, 8, 49, 37 },
		{ "Monday, 01-Jan-01 00:00:00 GMT", 2001, 1, 1, 0, 0, 0 },
		{ "Tuesday, 31-Dec-69 23:59:59 GMT", 2069, 12, 31, 23, 59, 59 },
		{ "Saturday, 29-Feb-00 12:00:00 GMT", 2000, 2, 29, 12, 0, 0 },
		{ "Thursday, 29-Feb-24 01:02:03 GMT", 2024, 2, 29, 1, 2, 3 },
		{ "Tuesday, 06-Nov-75 08:49:37 GMT", 2075, 11, 6, 8, 49, 37 },
		{ "Friday, 06-Nov-76 08:49:37 GMT", 1976, 11, 6, 8, 49, 37 },
		{ "Sunday, 06-Nov-25 08:49:37 GMT", 2025, 11, 6, 8, 49, 37 },
		/* asctime, day as SP DIGIT or 2DIGIT */
		{ "Sun Nov  6 08:49:37 1994", 1994, 11, 6, 8, 49, 37 },
		{ "Sun Nov 06 08:49:37 1994", 1994, 11, 6, 8, 49, 37 },
		{ "Thu Jan  1 00:00:00 1970", 1970, 1, 1, 0, 0, 0 },
		{ "Thu Feb 29 23:59:59 2024", 2024, 2, 29, 23, 59, 59 },
		{ "Fri Dec 31 23:59:59 9999", 9999, 12, 31, 23, 59, 59 },
		/* names and GMT matched case-insensitively; a wrong weekday is
		 * accepted (the numbers decide, see date.c) */
		{ "sun, 06 nov 1994 08:49:37 gmt", 1994, 11, 6, 8, 49, 37 },
		{ "SUNDAY, 06-NOV-94 08:49:37 GMT", 1994, 11, 6, 8, 49, 37 },
		{ "Mon, 06 Nov 1994 08:49:37 GMT", 1994, 11, 6, 8, 49, 37 },
		{ "Friday, 06-Nov-94 08:49:37 GMT", 1994, 11, 6, 8, 49, 37 },
		{ "Sat Nov  6 08:49:37 1994", 1994, 11, 6, 8, 49, 37 },
		/* leap second: the next minute, as timegm normalises it */
		{ "Sat, 31 Dec 2016 23:59:60 GMT", 2017, 1, 1, 0, 0, 0 },
	};
	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		time_t got = 12345;
		cr_expect(http_date_parse_at(date_sp(t[i].s), NOW_2025, &got), "%s", t[i].s);
		time_t want = date_utc(t[i].y, t[i].mon, t[i].d, t[i].h, t[i].mi, t[i].sec);
		cr_expect_eq(got, want, "%s: %lld, want %lld", t[i].s, (long long)got, (long long)want);
	}
}

/* RFC 9110 5.6.7: a two-digit year more than 50 years ahead is in the past. */
Test(date, rfc850_century_window)
{
	static const struct {
		time_t now;
		const char *s;
		int year;
	} t[] = {
		{ NOW_2025, "Sunday, 01-Jan-75 00:00:00 GMT", 2075 },
		{ NOW_2025, "Sunday, 01-Jan-76 00:00:00 GMT", 1976 },
		{ NOW_2025, "Sunday, 01-Jan-99 00:00:00 GMT", 1999 },
		{ NOW_2025, "Sunday, 01-Jan-00 00:00:00 GMT", 2000 },
		{ (time_t)0, "Sunday, 01-Jan-20 00:00:00 GMT", 2020 },
		{ (time_t)0, "Sunday, 01-Jan-21 00:00:00 GMT", 1921 },
		{ (time_t)0, "Sunday, 01-Jan-69 00:00:00 GMT", 1969 },
		/* late in a century the window reaches into the next one */
		{ (time_t)3786912000LL /* 2090 */, "Sunday, 01-Jan-10 00:00:00 GMT", 2110 },
		{ (time_t)3786912000LL, "Sunday, 01-Jan-41 00:00:00 GMT", 2041 },
		{ (time_t)3786912000LL, "Sunday, 01-Jan-40 00:00:00 GMT", 2140 },
	};
	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		time_t got;
		cr_expect(http_date_parse_at(date_sp(t[i].s), t[i].now, &got), "%s", t[i].s);
		cr_expect_eq(got, date_utc(t[i].year, 1, 1, 0, 0, 0), "%s (now %lld): want %d", t[i].s,
			     (long long)t[i].now, t[i].year);
	}
}

Test(date, invalid)
{
	static const char *const bad[] = {
		"",
		"Sun, 06 Nov 1994 08:49:37",
		"Sun, 06 Nov 1994 08:49:37 UTC",
		"Sun, 06 Nov 1994 08:49:37 +0000",
		"Sun, 06 Nov 1994 08:49:37 GMT ",
		" Sun, 06 Nov 1994 08:49:37 GMT",
		"Sun,  6 Nov 1994 08:49:37 GMT",
		"Sun, 6 Nov 1994 08:49:37 GMT",
		"Sun, 06 Nov 94 08:49:37 GMT",
		"Sun, 06-Nov-1994 08:49:37 GMT",
		"Sun 06 Nov 1994 08:49:37 GMT",
		"Sunday, 06 Nov 1994 08:49:37 GMT",
		"Sun, 06-Nov-94 08:49:37 GMT",
		"Xyz, 06 Nov 1994 08:49:37 GMT",
		"Sun, 06 Foo 1994 08:49:37 GMT",
		"Sun, 30 Feb 2000 00:00:00 GMT",
		"Sun, 29 Feb 1900 00:00:00 GMT",
		"Sun, 29 Feb 2023 00:00:00 GMT",
		"Sun, 31 Apr 2023 00:00:00 GMT",
		"Sun, 00 Jan 2023 00:00:00 GMT",
		"Sun, 32 Jan 2023 00:00:00 GMT",
		"Sun, 06 Nov 1994 24:00:00 GMT",
		"Sun, 06 Nov 1994 23:60:00 GMT",
		"Sun, 06 Nov 1994 23:59:61 GMT",
		"Sun, 06 Nov 1994 8:49:37 GMT ",
		"Sun, 06 Nov 1994 08-49-37 GMT",
		"Sun, 06 Nov 199x 08:49:37 GMT",
		"Sun, 0x Nov 1994 08:49:37 GMT",
		"Sun, -6 Nov 1994 08:49:37 GMT",
		"Sun, 06 Nov 1994 08:49:3  GMT",
		"Sunday, 06-Nov-94 08:49:37 UTC",
		"Sunday, 06-Nov-94 08:49:37 GMT ",
		"Sunday, 06-Nov-1994 08:49:37 GMT",
		"Sunday, 6-Nov-94 08:49:37 GMT",
		"Sunday 06-Nov-94 08:49:37 GMT ",
		"Sundae, 06-Nov-94 08:49:37 GMT",
		"Sun, 06-Nov-94 08:49:37 GMT   ",
		"Sunday, 30-Feb-94 08:49:37 GMT",
		"Sunday, 06-Nov-94 24:49:37 GMT",
		"Sunday, 06 Nov 94 08:49:37 GMT",
		"Sun Nov 6 08:49:37 1994",
		"Sun Nov  6 08:49:37 1994 ",
		"Sun Nov  6 08:49:37 94",
		"Sun Nov  6 08:49:37 1994 GMT",
		"Sun Nov 31 08:49:37 1994",
		"Sun Nov  0 08:49:37 1994",
		"Sun Nov  6 24:49:37 1994",
		"Sun Foo  6 08:49:37 1994",
		"Xyz Nov  6 08:49:37 1994",
		"Sun,Nov  6 08:49:37 1994",
		"Sun Nov\t 6 08:49:37 1994",
		"1994-11-06T08:49:37Z",
		"784111777",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		time_t t = 12345;
		cr_expect_not(http_date_parse_at(date_sp(bad[i]), NOW_2025, &t), "accepted \"%s\"",
			      bad[i]);
		cr_expect_eq(t, 12345, "\"%s\": wrote *out on failure", bad[i]);
	}
	time_t t;
	cr_expect_not(http_date_parse((struct span){ NULL, 0 }, &t));
	/* the length bounds the parse: a valid date cut short is invalid */
	const char *s = "Sun, 06 Nov 1994 08:49:37 GMT";
	for (size_t n = 0; n < strlen(s); n++)
		cr_expect_not(http_date_parse((struct span){ s, n }, &t), "prefix %zu", n);
}

Test(date, now)
{
	for (int tries = 0; tries < 3; tries++) {
		time_t before = time(NULL);
		const char *a = http_date_now();
		const char *b = http_date_now();
		time_t after = time(NULL);
		if (before != after)
			continue; /* a second boundary in between; try again */
		char want[HTTP_DATE_LEN + 1];
		http_date_format(before, want);
		cr_expect_str_eq(a, want);
		cr_expect_eq(a, b, "same thread, same buffer");
		cr_expect_eq(strlen(a), HTTP_DATE_LEN);
		return;
	}
	cr_assert_fail("clock kept changing");
}

static void *date_now_thread(void *arg)
{
	*(const char **)arg = http_date_now();
	return NULL;
}

Test(date, now_is_per_thread)
{
	const char *mine = http_date_now(), *theirs = NULL;
	pthread_t th;
	cr_assert_eq(pthread_create(&th, NULL, date_now_thread, &theirs), 0);
	pthread_join(th, NULL);
	cr_expect_neq((void *)mine, (void *)theirs, "threads must not share the buffer");
}
