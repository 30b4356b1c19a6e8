/* test_range.c - range_parse against a table of raw header values. */
#include <criterion/criterion.h>

#include <stdbool.h>
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
	/* an empty representation: only a non-zero suffix is satisfiable (RFC
	 * 9110 14.1.1), and it selects nothing a 206 can carry -> the whole, 200 */
	{ "bytes=0-0", 0, 8, RANGE_UNSATISFIABLE, 0, { R(0, 0) } },
	{ "bytes=0-", 0, 8, RANGE_UNSATISFIABLE, 0, { R(0, 0) } },
	{ "bytes=-0", 0, 8, RANGE_UNSATISFIABLE, 0, { R(0, 0) } },
	{ "bytes=-5", 0, 8, RANGE_IGNORE, 0, { R(0, 0) } },
	{ "bytes=0-0,-1", 0, 8, RANGE_IGNORE, 0, { R(0, 0) } },
	{ "bytes=-1,x", 0, 8, RANGE_IGNORE, 0, { R(0, 0) } },
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

/* range_coalesce: parsed ranges in, the set actually served out. */
struct coalesce_case {
	const char *hdr;
	uint64_t size, gap;
	enum range_result want;
	size_t n;
	struct byte_range r[MAXR];
};

static const struct coalesce_case coalesce_cases[] = {
	/* disjoint ranges far apart stay, in request order (RFC 9110 15.3.7.2) */
	{ "bytes=0-9,50-59", 100, 10, RANGE_OK, 2, { R(0, 9), R(50, 59) } },
	{ "bytes=50-59,0-9", 100, 10, RANGE_OK, 2, { R(50, 59), R(0, 9) } },
	{ "bytes=80-89,0-9,40-49", 100, 10, RANGE_OK, 3, { R(80, 89), R(0, 9), R(40, 49) } },
	/* a merged part takes the place of its earliest spec */
	{ "bytes=60-70,0-9,65-80,5-12", 100, 0, RANGE_OK, 2, { R(60, 80), R(0, 12) } },
	{ "bytes=90-95,0-9,40-49,8-20", 100, 5, RANGE_OK, 3, { R(90, 95), R(0, 20), R(40, 49) } },
	/* a later range that bridges two earlier ones joins them */
	{ "bytes=0-9,30-39,10-29", 100, 0, RANGE_OK, 1, { R(0, 39) } },
	{ "bytes=70-79,0-9,30-39,10-29", 100, 0, RANGE_OK, 2, { R(70, 79), R(0, 39) } },
	/* overlapping, contained and duplicate ranges merge */
	{ "bytes=0-9,5-14", 100, 0, RANGE_OK, 1, { R(0, 14) } },
	{ "bytes=0-29,5-14", 100, 0, RANGE_OK, 1, { R(0, 29) } },
	{ "bytes=5-14,0-29", 100, 0, RANGE_OK, 1, { R(0, 29) } },
	{ "bytes=0-1,0-1", 100, 0, RANGE_OK, 1, { R(0, 1) } },
	/* adjacent ranges merge even with no gap allowance */
	{ "bytes=0-9,10-19", 100, 0, RANGE_OK, 1, { R(0, 19) } },
	{ "bytes=10-19,0-9", 100, 0, RANGE_OK, 1, { R(0, 19) } },
	{ "bytes=0-9,11-19", 100, 0, RANGE_OK, 2, { R(0, 9), R(11, 19) } },
	/* gaps below the allowance merge, at or above it do not */
	{ "bytes=0-9,19-29", 100, 10, RANGE_OK, 1, { R(0, 29) } },
	{ "bytes=0-9,20-29", 100, 10, RANGE_OK, 2, { R(0, 9), R(20, 29) } },
	{ "bytes=0-0,3-3,6-6,9-9", 100, 2, RANGE_OK, 4, { R(0, 0), R(3, 3), R(6, 6), R(9, 9) } },
	{ "bytes=0-0,3-3,6-6,9-9", 100, 3, RANGE_OK, 1, { R(0, 9) } },
	/* a chain: each merge extends what the next is compared with */
	{ "bytes=0-9,8-20,19-40,60-70", 100, 0, RANGE_OK, 2, { R(0, 40), R(60, 70) } },
	{ "bytes=60-70,19-40,8-20,0-9", 100, 0, RANGE_OK, 2, { R(60, 70), R(0, 40) } },
	/* a huge allowance merges everything, without wrapping */
	{ "bytes=0-0,-1", 100, UINT64_MAX, RANGE_OK, 1, { R(0, 99) } },
	/* adding up to exactly the file is fine; more is served as a 200 (nginx) */
	{ "bytes=0-49,50-99", 100, 0, RANGE_OK, 1, { R(0, 99) } },
	{ "bytes=0-50,50-99", 100, 0, RANGE_IGNORE, 0, { R(0, 0) } },
	{ "bytes=0-,0-", 100, 0, RANGE_IGNORE, 0, { R(0, 0) } },
	{ "bytes=-100,-100", 100, 0, RANGE_IGNORE, 0, { R(0, 0) } },
	{ "bytes=0-0,0-0,0-0,0-0,0-0,0-0,0-0", 5, 0, RANGE_IGNORE, 0, { R(0, 0) } },
	{ "bytes=0-0,0-0,0-0,0-0,0-0", 5, 0, RANGE_OK, 1, { R(0, 0) } },
	/* lengths near 2^64 must not wrap the sum into "small" */
	{ "bytes=0-,1-", UINT64_MAX, 0, RANGE_IGNORE, 0, { R(0, 0) } },
	/* one range is left alone */
	{ "bytes=10-", 100, 50, RANGE_OK, 1, { R(10, 99) } },
};

Test(range, coalesce_table)
{
	for (size_t i = 0; i < sizeof(coalesce_cases) / sizeof(coalesce_cases[0]); i++) {
		const struct coalesce_case *c = &coalesce_cases[i];
		struct byte_range out[MAXR];
		size_t count;
		cr_assert_eq(range_parse((struct span){ c->hdr, strlen(c->hdr) }, c->size, out, MAXR, &count),
			     RANGE_OK, "\"%s\" does not parse", c->hdr);
		enum range_result r = range_coalesce(out, &count, c->size, c->gap);
		cr_expect_eq(r, c->want, "\"%s\" size %llu gap %llu: result %d, want %d", c->hdr,
			     (unsigned long long)c->size, (unsigned long long)c->gap, r, c->want);
		if (r != RANGE_OK || c->want != RANGE_OK)
			continue;
		cr_expect_eq(count, c->n, "\"%s\": count %zu, want %zu", c->hdr, count, c->n);
		for (size_t k = 0; k < c->n && k < count; k++)
			cr_expect(out[k].first == c->r[k].first && out[k].last == c->r[k].last,
				  "\"%s\" range %zu: %llu-%llu, want %llu-%llu", c->hdr, k,
				  (unsigned long long)out[k].first, (unsigned long long)out[k].last,
				  (unsigned long long)c->r[k].first, (unsigned long long)c->r[k].last);
	}
}

/* max_ranges (1000) ranges in reverse order: kept so, and merged only once
 * the gap allowance exceeds the 5-byte gaps between them. */
Test(range, coalesce_max_ranges_reverse_order)
{
	struct byte_range r[1000];
	size_t n = 1000;
	for (size_t i = 0; i < n; i++)
		r[i] = (struct byte_range){ (999 - i) * 10, (999 - i) * 10 + 4 };
	cr_assert_eq(range_coalesce(r, &n, 10000, 5), RANGE_OK);
	cr_assert_eq(n, 1000);
	for (size_t i = 0; i < n; i++)
		cr_expect(r[i].first == (999 - i) * 10 && r[i].last == (999 - i) * 10 + 4, "r[%zu] = %llu-%llu", i,
			  (unsigned long long)r[i].first, (unsigned long long)r[i].last);
	for (size_t i = 0; i < n; i++)
		r[i] = (struct byte_range){ (999 - i) * 10, (999 - i) * 10 + 4 };
	cr_assert_eq(range_coalesce(r, &n, 10000, 6), RANGE_OK);
	cr_expect_eq(n, 1);
	cr_expect(r[0].first == 0 && r[0].last == 9994);
}

/* More ranges than range_coalesce can track without allocating: the whole
 * file (config.c bounds max_ranges to RANGE_COALESCE_MAX, so never in use). */
Test(range, coalesce_more_than_max_is_ignored)
{
	static struct byte_range r[RANGE_COALESCE_MAX + 1];
	size_t n = RANGE_COALESCE_MAX + 1;
	for (size_t i = 0; i < n; i++)
		r[i] = (struct byte_range){ i * 10, i * 10 };
	cr_expect_eq(range_coalesce(r, &n, 100000, 1), RANGE_IGNORE);
	n = RANGE_COALESCE_MAX;
	cr_expect_eq(range_coalesce(r, &n, 100000, 1), RANGE_OK);
	cr_expect_eq(n, RANGE_COALESCE_MAX);
}

/* Random range sets (a fixed xorshift seed, so failures reproduce): the result
 * is disjoint, any two parts are at least `gap` bytes apart, the parts come
 * in the order of the earliest range that fed each, every byte asked for is
 * covered, and no byte that is neither asked for nor in a gap shorter than
 * `gap` between asked-for bytes. */
Test(range, coalesce_properties)
{
	uint64_t s = 0x9e3779b97f4a7c15u;
	enum { SIZE = 200 };
	for (int iter = 0; iter < 20000; iter++) {
		struct byte_range r[16];
		bool asked[SIZE] = { false };
		size_t n = 1 + (size_t)(s % 16);
		uint64_t gap = (s >> 8) % 8;
		for (size_t i = 0; i < n; i++) {
			s ^= s << 13;
			s ^= s >> 7;
			s ^= s << 17;
			uint64_t a = s % SIZE, len = 1 + (s >> 20) % 12;
			uint64_t b = a + len - 1 < SIZE ? a + len - 1 : SIZE - 1;
			r[i] = (struct byte_range){ a, b };
			for (uint64_t k = a; k <= b; k++)
				asked[k] = true;
		}
		uint64_t sum = 0;
		for (size_t i = 0; i < n; i++)
			sum += r[i].last - r[i].first + 1;
		struct byte_range asked_in_order[16];
		memcpy(asked_in_order, r, n * sizeof(r[0]));
		size_t m = n;
		enum range_result res = range_coalesce(r, &m, SIZE, gap);
		if (sum > SIZE) {
			cr_assert_eq(res, RANGE_IGNORE, "iter %d: sum %llu > size must be ignored", iter,
				     (unsigned long long)sum);
			continue;
		}
		cr_assert_eq(res, RANGE_OK, "iter %d", iter);
		cr_assert(m >= 1 && m <= n, "iter %d: %zu ranges from %zu", iter, m, n);
		bool covered[SIZE] = { false };
		for (size_t i = 0; i < m; i++) {
			cr_assert(r[i].first <= r[i].last && r[i].last < SIZE, "iter %d: bad range", iter);
			for (size_t j = 0; j < i; j++) {
				const struct byte_range *lo = r[j].first < r[i].first ? &r[j] : &r[i];
				const struct byte_range *hi = lo == &r[j] ? &r[i] : &r[j];
				cr_assert(hi->first > lo->last + 1 && hi->first - (lo->last + 1) >= gap,
					  "iter %d: parts %zu and %zu not merged", iter, j, i);
			}
			for (uint64_t k = r[i].first; k <= r[i].last; k++)
				covered[k] = true;
		}
		for (size_t k = 0; k < SIZE; k++) {
			if (asked[k])
				cr_assert(covered[k], "iter %d: byte %zu asked, not covered", iter, k);
		}
		/* walking the request, the part holding each range is the next
		 * part or one already seen: parts in order of their earliest spec */
		size_t next_part = 0;
		for (size_t q = 0; q < n; q++) {
			size_t p = 0;
			while (p < m && !(r[p].first <= asked_in_order[q].first &&
					  asked_in_order[q].last <= r[p].last))
				p++;
			cr_assert(p < m, "iter %d: range %zu in no part", iter, q);
			cr_assert(p <= next_part, "iter %d: range %zu in part %zu before part %zu", iter, q, p,
				  next_part);
			if (p == next_part)
				next_part++;
		}
		cr_assert_eq(next_part, m, "iter %d", iter);
		/* an unasked covered byte lies in a run of unasked bytes shorter than gap */
		for (size_t k = 0; k < SIZE;) {
			if (!covered[k] || asked[k]) {
				k++;
				continue;
			}
			size_t run = 0;
			while (k + run < SIZE && covered[k + run] && !asked[k + run])
				run++;
			cr_assert(run < gap, "iter %d: %zu unasked bytes at %zu with gap %llu", iter, run, k,
				  (unsigned long long)gap);
			k += run;
		}
	}
}
