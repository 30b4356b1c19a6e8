/* test_range.c - range_parse against a table of raw header values. */
#include <criterion/criterion.h>

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../../src/http/range.h"
#include "guard.h"

#define R(a, b) { (a), (b) }
#define MAXR 8

struct range_case {
	const char *hdr;
	uint64_t size;
	size_t max;
	enum range_result want;
	size_t n;
	struct byte_range r[MAXR];
};

static const struct range_case range_cases[] = {
	/* basic forms */
	{ "bytes=0-0", 100, 8, RANGE_OK, 1, { R(0, 0) } },
	{ "bytes=0-99", 100, 8, RANGE_OK, 1, { R(0, 99) } },
	{ "bytes=10-", 100, 8, RANGE_OK, 1, { R(10, 99) } },
	{ "bytes=-10", 100, 8, RANGE_OK, 1, { R(90, 99) } },
	{ "bytes=0-", 1, 8, RANGE_OK, 1, { R(0, 0) } },
	/* unit is case-insensitive (RFC 9110 14.1) */
	{ "Bytes=0-1", 100, 8, RANGE_OK, 1, { R(0, 1) } },
	{ "BYTES=0-1", 100, 8, RANGE_OK, 1, { R(0, 1) } },
	/* clamping: last past the end, suffix longer than the file */
	{ "bytes=50-1000", 100, 8, RANGE_OK, 1, { R(50, 99) } },
	{ "bytes=0-18446744073709551615", 100, 8, RANGE_OK, 1, { R(0, 99) } },
	{ "bytes=-1000", 100, 8, RANGE_OK, 1, { R(0, 99) } },
	{ "bytes=-100", 100, 8, RANGE_OK, 1, { R(0, 99) } },
	{ "bytes=-18446744073709551615", 100, 8, RANGE_OK, 1, { R(0, 99) } },
	/* leading zeros are digits like any other */
	{ "bytes=000000000000000000000000005-007", 100, 8, RANGE_OK, 1, { R(5, 7) } },
	/* lists, in request order, not coalesced */
	{ "bytes=0-0,-1", 100, 8, RANGE_OK, 2, { R(0, 0), R(99, 99) } },
	{ "bytes=50-59,0-9", 100, 8, RANGE_OK, 2, { R(50, 59), R(0, 9) } },
	{ "bytes=0-9,5-14", 100, 8, RANGE_OK, 2, { R(0, 9), R(5, 14) } },
	{ "bytes=0-1,0-1", 100, 8, RANGE_OK, 2, { R(0, 1), R(0, 1) } },
	/* OWS around commas and empty list elements (RFC 9110 5.6.1.2) */
	{ "bytes=0-1, 2-3", 100, 8, RANGE_OK, 2, { R(0, 1), R(2, 3) } },
	{ "bytes=0-1 ,\t2-3", 100, 8, RANGE_OK, 2, { R(0, 1), R(2, 3) } },
	{ "bytes=0-1,,2-3", 100, 8, RANGE_OK, 2, { R(0, 1), R(2, 3) } },
	{ "bytes=,0-1", 100, 8, RANGE_OK, 1, { R(0, 1) } },
	{ "bytes=0-1,", 100, 8, RANGE_OK, 1, { R(0, 1) } },
	{ "bytes= , 0-1 , ", 100, 8, RANGE_OK, 1, { R(0, 1) } },
	{ " bytes=0-1 ", 100, 8, RANGE_OK, 1, { R(0, 1) } },
	/* unsatisfiable members are dropped */
	{ "bytes=200-300,0-1", 100, 8, RANGE_OK, 1, { R(0, 1) } },
	{ "bytes=100-,-0,5-5", 100, 8, RANGE_OK, 1, { R(5, 5) } },
	{ "bytes=100-", 100, 8, RANGE_UNSATISFIABLE, 0, { R(0, 0) } },
	{ "bytes=100-200", 100, 8, RANGE_UNSATISFIABLE, 0, { R(0, 0) } },
	{ "bytes=-0", 100, 8, RANGE_UNSATISFIABLE, 0, { R(0, 0) } },
	{ "bytes=-0,-0", 100, 8, RANGE_UNSATISFIABLE, 0, { R(0, 0) } },
	{ "bytes=18446744073709551615-", 100, 8, RANGE_UNSATISFIABLE, 0, { R(0, 0) } },
	/* an empty representation satisfies nothing */
	{ "bytes=0-0", 0, 8, RANGE_UNSATISFIABLE, 0, { R(0, 0) } },
	{ "bytes=0-", 0, 8, RANGE_UNSATISFIABLE, 0, { R(0, 0) } },
	{ "bytes=-5", 0, 8, RANGE_UNSATISFIABLE, 0, { R(0, 0) } },
	/* huge files */
	{ "bytes=-1", UINT64_MAX, 8, RANGE_OK, 1, { R(UINT64_MAX - 1, UINT64_MAX - 1) } },
	{ "bytes=0-", UINT64_MAX, 8, RANGE_OK, 1, { R(0, UINT64_MAX - 1) } },
	/* the max bound counts every spec, satisfiable or not (CVE-2011-3192) */
	{ "bytes=0-0,1-1,2-2", 100, 3, RANGE_OK, 3, { R(0, 0), R(1, 1), R(2, 2) } },
	{ "bytes=0-0,1-1,2-2,3-3", 100, 3, RANGE_IGNORE, 0, { R(0, 0) } },
	{ "bytes=0-0,1-1,2-2,500-", 100, 3, RANGE_IGNORE, 0, { R(0, 0) } },
	{ "bytes=0-0,,,,,,,,1-1", 100, 2, RANGE_OK, 2, { R(0, 0), R(1, 1) } },
	{ "bytes=0-0", 100, 0, RANGE_IGNORE, 0, { R(0, 0) } },
	/* syntactically invalid -> ignore the whole header */
	{ "bytes=5-2", 100, 8, RANGE_IGNORE, 0, { R(0, 0) } },
	{ "bytes=0-1,5-2", 100, 8, RANGE_IGNORE, 0, { R(0, 0) } },
	{ "bytes=99999999999999999999-", 100, 8, RANGE_IGNORE, 0, { R(0, 0) } },
	{ "bytes=18446744073709551616-", 100, 8, RANGE_IGNORE, 0, { R(0, 0) } },
	{ "bytes=0-18446744073709551616", 100, 8, RANGE_IGNORE, 0, { R(0, 0) } },
	{ "bytes=-18446744073709551616", 100, 8, RANGE_IGNORE, 0, { R(0, 0) } },
	{ "bytes=", 100, 8, RANGE_IGNORE, 0, { R(0, 0) } },
	{ "bytes=,", 100, 8, RANGE_IGNORE, 0, { R(0, 0) } },
	{ "bytes= ", 100, 8, RANGE_IGNORE, 0, { R(0, 0) } },
	{ "bytes=-", 100, 8, RANGE_IGNORE, 0, { R(0, 0) } },
	{ "bytes=--1", 100, 8, RANGE_IGNORE, 0, { R(0, 0) } },
	{ "bytes=1", 100, 8, RANGE_IGNORE, 0, { R(0, 0) } },
	{ "bytes=0-1-2", 100, 8, RANGE_IGNORE, 0, { R(0, 0) } },
	{ "bytes=0 -1", 100, 8, RANGE_IGNORE, 0, { R(0, 0) } },
	{ "bytes=0- 1", 100, 8, RANGE_IGNORE, 0, { R(0, 0) } },
	{ "bytes=- 1", 100, 8, RANGE_IGNORE, 0, { R(0, 0) } },
	{ "bytes=0-1 2-3", 100, 8, RANGE_IGNORE, 0, { R(0, 0) } },
	{ "bytes=0-1;2-3", 100, 8, RANGE_IGNORE, 0, { R(0, 0) } },
	{ "bytes=+1-2", 100, 8, RANGE_IGNORE, 0, { R(0, 0) } },
	{ "bytes=0x10-", 100, 8, RANGE_IGNORE, 0, { R(0, 0) } },
	{ "bytes=a-b", 100, 8, RANGE_IGNORE, 0, { R(0, 0) } },
	{ "bytes =0-1", 100, 8, RANGE_IGNORE, 0, { R(0, 0) } },
	{ "bytes= 0-1", 100, 8, RANGE_OK, 1, { R(0, 1) } },
	{ "bytes:0-1", 100, 8, RANGE_IGNORE, 0, { R(0, 0) } },
	{ "bytes0-1", 100, 8, RANGE_IGNORE, 0, { R(0, 0) } },
	{ "items=0-1", 100, 8, RANGE_IGNORE, 0, { R(0, 0) } },
	{ "byte=0-1", 100, 8, RANGE_IGNORE, 0, { R(0, 0) } },
	{ "bytes", 100, 8, RANGE_IGNORE, 0, { R(0, 0) } },
	{ "", 100, 8, RANGE_IGNORE, 0, { R(0, 0) } },
	/* a syntax error after an unsatisfiable spec is still an error */
	{ "bytes=500-,x", 100, 8, RANGE_IGNORE, 0, { R(0, 0) } },
	{ "bytes=5-2", 0, 8, RANGE_IGNORE, 0, { R(0, 0) } },
};

Test(range, table)
{
	for (size_t i = 0; i < sizeof(range_cases) / sizeof(range_cases[0]); i++) {
		const struct range_case *c = &range_cases[i];
		struct byte_range out[MAXR];
		size_t count = 12345;
		struct span v = guarded(c->hdr, strlen(c->hdr));
		enum range_result r = range_parse(v, c->size, out, c->max, &count);

		cr_expect_eq(r, c->want, "\"%s\" size %llu: result %d, want %d", c->hdr,
			     (unsigned long long)c->size, r, c->want);
		if (r == RANGE_OK && c->want == RANGE_OK) {
			cr_expect_eq(count, c->n, "\"%s\": count %zu, want %zu", c->hdr, count, c->n);
			for (size_t k = 0; k < c->n && k < count; k++) {
				cr_expect(out[k].first == c->r[k].first && out[k].last == c->r[k].last,
					  "\"%s\" range %zu: %llu-%llu, want %llu-%llu", c->hdr, k,
					  (unsigned long long)out[k].first,
					  (unsigned long long)out[k].last,
					  (unsigned long long)c->r[k].first,
					  (unsigned long long)c->r[k].last);
			}
		} else {
			cr_expect_eq(count, 0, "\"%s\": count %zu on non-OK", c->hdr, count);
		}
		unguard(v);
	}
}

Test(range, absent)
{
	size_t count = 7;
	struct byte_range out[1];
	cr_expect_eq(range_parse((struct span){ NULL, 0 }, 100, out, 1, &count), RANGE_IGNORE);
	cr_expect_eq(count, 0);
}

/* The bound must hold for any list length, and must not write past out. */
Test(range, many_ranges_never_overflow_out)
{
	static char hdr[64 * 1024];
	size_t n = (size_t)snprintf(hdr, sizeof(hdr), "bytes=0-0");
	while (n + 8 < sizeof(hdr))
		n += (size_t)snprintf(hdr + n, sizeof(hdr) - n, ",1-1");
	struct byte_range out[4];
	size_t count;
	cr_expect_eq(range_parse((struct span){ hdr, n }, 100, out, 4, &count), RANGE_IGNORE);
}

/* The satisfiable count never exceeds max, even with unsatisfiable fillers. */
Test(range, exactly_max)
{
	const char *h = "bytes=0-0,500-,1-1,-0";
	struct byte_range out[4];
	size_t count;
	cr_expect_eq(range_parse((struct span){ h, strlen(h) }, 100, out, 4, &count), RANGE_OK);
	cr_expect_eq(count, 2);
	cr_expect_eq(range_parse((struct span){ h, strlen(h) }, 100, out, 3, &count), RANGE_IGNORE);
}
