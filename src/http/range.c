/* range.c - Range header parsing (RFC 9110 14.1.1, 14.2). Pure: bytes in,
 * ranges out, no I/O, no allocation.
 *
 * Policy, for the core to rely on:
 *  - range_parse() returns ranges in request order. Overlapping or
 *    out-of-order ranges are legal syntax; the first defence against
 *    CVE-2011-3192 style abuse is the `max` bound on the number of
 *    range-specs, counted before any is dropped. The second is
 *    range_coalesce(), which the core applies before answering: requests
 *    whose ranges add up to more than the file get the file once (200, as
 *    nginx does), and the rest are merged where they overlap, touch or leave
 *    a gap cheaper to send than a part header (RFC 9110 14.6), so a response
 *    never carries much more than the bytes it covers. Parts keep the order
 *    of the request (RFC 9110 15.3.7.2), as nginx's do.
 *  - Any syntax error anywhere in the list makes the whole header RANGE_IGNORE
 *    (RFC 9110 14.2: a server MAY ignore an invalid ranges-specifier), so the
 *    result never depends on a prefix of a broken header.
 *  - Numbers are checked against UINT64_MAX, not against a digit count, so
 *    leading zeros are fine; anything that does not fit is RANGE_IGNORE.
 */
#include "range.h"

#include <stdbool.h>

static bool range_is_ows(char c)
{
	return c == ' ' || c == '\t';
}

static bool range_is_digit(char c)
{
	return c >= '0' && c <= '9';
}

/* Parses 1*DIGIT at *pp. Returns false when there is no digit or the value
 * overflows uint64_t (RFC 9110 14.1.1 puts no bound on the digits, but we
 * must: a wrapped offset would point somewhere the client did not ask for). */
static bool range_parse_u64(const char **pp, const char *end, uint64_t *out)
{
	const char *p = *pp;
	uint64_t v = 0;

	if (p == end || !range_is_digit(*p))
		return false;
	for (; p < end && range_is_digit(*p); p++) {
		unsigned d = (unsigned)(*p - '0');
		if (v > (UINT64_MAX - d) / 10)
			return false;
		v = v * 10 + d;
	}
	*pp = p;
	*out = v;
	return true;
}

enum range_result range_parse(struct span value, uint64_t size, struct byte_range *out, size_t max,
			      size_t *count)
{
	const char *p = value.p;
	const char *end = p ? p + value.len : p; /* NULL + 0 is undefined in C */
	size_t specs = 0; /* syntactic range-specs seen, satisfiable or not */
	size_t n = 0;     /* satisfiable ranges written to out */
	bool empty_suffix = false; /* a satisfiable suffix of an empty representation */

	*count = 0;
	if (value.p == NULL)
		return RANGE_IGNORE;

	/* The header is normally trimmed already; be lenient anyway. */
	while (p < end && range_is_ows(*p))
		p++;

	/* RFC 9110 14.1: range units are compared case-insensitively. No
	 * whitespace is allowed around '=' (ranges-specifier grammar). */
	if ((size_t)(end - p) < 6 || strncasecmp(p, "bytes=", 6) != 0)
		return RANGE_IGNORE;
	p += 6;

	/* range-set = 1#range-spec. RFC 9110 5.6.1.2: recipients accept empty
	 * list elements, so ",", " , ," etc. between specs are skipped; at least
	 * one real spec is still required. */
	for (;;) {
		uint64_t first, last;
		bool suffix = false, open = false;

		while (p < end && (range_is_ows(*p) || *p == ','))
			p++;
		if (p == end)
			break;

		if (*p == '-') {
			/* suffix-range = "-" suffix-length */
			p++;
			suffix = true;
			if (!range_parse_u64(&p, end, &last))
				return RANGE_IGNORE;
			first = 0;
		} else {
			/* int-range = first-pos "-" [ last-pos ] */
			if (!range_parse_u64(&p, end, &first))
				return RANGE_IGNORE;
			if (p == end || *p != '-')
				return RANGE_IGNORE;
			p++;
			if (p < end && range_is_digit(*p)) {
				if (!range_parse_u64(&p, end, &last))
					return RANGE_IGNORE;
				/* RFC 9110 14.1.1: last-pos < first-pos makes the
				 * int-range invalid, hence the whole header. */
				if (last < first)
					return RANGE_IGNORE;
			} else {
				open = true;
				last = 0;
			}
		}

		/* A spec must be followed by OWS and a comma, or the end. This
		 * also rejects "0 - 1" and "0-1-2". */
		while (p < end && range_is_ows(*p))
			p++;
		if (p < end && *p != ',')
			return RANGE_IGNORE;

		if (++specs > max)
			return RANGE_IGNORE; /* CVE-2011-3192 */

		/* RFC 9110 14.1.1 satisfiability. In an empty representation
		 * only a non-zero suffix is satisfiable, and it selects nothing
		 * a 206 could carry: remembered, so the answer is the whole
		 * (empty) representation rather than 416. */
		if (size == 0) {
			if (suffix && last > 0)
				empty_suffix = true;
			continue;
		}
		if (suffix) {
			/* "-0" selects nothing; a suffix longer than the
			 * representation selects all of it. */
			if (last == 0)
				continue;
			first = last >= size ? 0 : size - last;
			last = size - 1;
		} else {
			if (first >= size)
				continue;
			if (open || last >= size)
				last = size - 1;
		}
		out[n].first = first;
		out[n].last = last;
		n++;
	}

	if (specs == 0)
		return RANGE_IGNORE; /* "bytes=" or "bytes=,," is not a range-set */
	if (n == 0)
		return empty_suffix ? RANGE_IGNORE : RANGE_UNSATISFIABLE;
	*count = n;
	return RANGE_OK;
}

/* Whether two ranges go out as one part: they overlap, touch, or leave fewer
 * than `gap` bytes between them. last + 1 cannot wrap (last < size), and the
 * gap is compared by subtraction so a huge `gap` cannot wrap either. */
static bool range_close(struct byte_range a, struct byte_range b, uint64_t gap)
{
	if (b.first > a.last)
		return b.first == a.last + 1 || b.first - (a.last + 1) < gap;
	if (a.first > b.last)
		return a.first == b.last + 1 || a.first - (b.last + 1) < gap;
	return true;
}

enum range_result range_coalesce(struct byte_range *r, size_t *count, uint64_t size, uint64_t gap)
{
	size_t n = *count, out = 0;
	uint64_t sum = 0;

	/* nginx's rule: a set that asks for more bytes than the file has is an
	 * amplification attempt (or pointless); the whole file, once, is the
	 * honest answer (RFC 9110 14.2 lets a server ignore Range). */
	for (size_t i = 0; i < n; i++) {
		uint64_t len = r[i].last - r[i].first + 1;
		if (len > size - sum)
			return RANGE_IGNORE;
		sum += len;
	}

	if (n > RANGE_COALESCE_MAX)
		return RANGE_IGNORE;

	/* Sort the positions by offset (insertion sort: n is at most
	 * max_ranges, and usually a handful already in order, where this is
	 * linear), and the ranges themselves stay in request order. */
	uint16_t pos[RANGE_COALESCE_MAX];
	for (size_t i = 0; i < n; i++) {
		uint16_t key = (uint16_t)i;
		size_t j = i;
		for (; j > 0 && r[pos[j - 1]].first > r[key].first; j--)
			pos[j] = pos[j - 1];
		pos[j] = key;
	}

	/* Merge runs of the sorted positions that overlap, touch or lie closer
	 * than `gap`. RFC 9110 15.3.7.2: parts SHOULD keep the order of their
	 * range-specs, except those coalesced into others, so a merged range
	 * goes where its earliest spec was; the others are marked dead (first >
	 * last, which no real range is). */
	for (size_t k = 0; k < n;) {
		struct byte_range merged = r[pos[k]];
		size_t earliest = pos[k], end = k + 1;
		for (; end < n && range_close(merged, r[pos[end]], gap); end++) {
			if (r[pos[end]].last > merged.last)
				merged.last = r[pos[end]].last;
			if (pos[end] < earliest)
				earliest = pos[end];
		}
		for (; k < end; k++)
			r[pos[k]] = (struct byte_range){ 1, 0 };
		r[earliest] = merged;
	}
	for (size_t i = 0; i < n; i++)
		if (r[i].first <= r[i].last)
			r[out++] = r[i];
	*count = out;
	return out ? RANGE_OK : RANGE_IGNORE;
}
