/* fuzz_path.c - libFuzzer target for path_resolve and range_parse.
 *
 * Input layout: byte 0 picks a shift and byte 1 a range limit; bytes 2..9
 * are a little-endian size shifted right by that amount (so small sizes,
 * where clamping bites, come up as often as huge ones); the rest is fed to
 * both parsers, as a request path and as a Range value. Short inputs use
 * what there is.
 *
 * Checked invariants, beyond "no crash, no sanitizer report":
 *  path:  on success out[len] == NUL, len < cap, no NUL inside, no leading or
 *         trailing '/', no empty, "." or ".." component, has_dot_segment
 *         matches the components, and resolving "/" + out again (when out
 *         holds no '%' to decode a second time) is a fixed point. On failure
 *         out is "". Nothing is written at or past cap.
 *  range: on RANGE_OK 1 <= count <= max and first <= last < size for every
 *         range; otherwise count == 0; an empty file is never RANGE_OK.
 *         range_coalesce then covers every range, keeps parts `gap` apart
 *         and in the order of the earliest range in each.
 *  acme:  the same bytes as a request path: a token match is exactly the
 *         canonical path, under the challenge directory, of token
 *         characters only; nothing is written at or past its cap.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/site/acme_challenge.h"
#include "../../src/fs/path.h"
#include "../../src/http/range.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_CAP 64
#define FUZZ_MAXR 16

static void fuzz_check(int ok)
{
	if (!ok)
		abort();
}

static void fuzz_path(const uint8_t *in, size_t n, size_t cap)
{
	char out[FUZZ_CAP + 8];
	struct path_result res;

	memset(out, 0x5a, sizeof(out));
	int rc = path_resolve((struct span){ (const char *)in, n }, out, cap, &res);
	for (size_t i = cap; i < sizeof(out); i++)
		fuzz_check(out[i] == 0x5a);
	if (rc != 0) {
		fuzz_check(rc == -400 || rc == -414);
		fuzz_check(cap == 0 || out[0] == '\0');
		return;
	}

	fuzz_check(res.len < cap && out[res.len] == '\0');
	fuzz_check(memchr(out, '\0', res.len) == NULL);
	fuzz_check(res.len == 0 || (out[0] != '/' && out[res.len - 1] != '/'));

	bool dot = false;
	size_t start = 0;
	for (size_t i = 0; i <= res.len; i++) {
		if (i < res.len && out[i] != '/')
			continue;
		size_t clen = i - start;
		if (res.len > 0) {
			fuzz_check(clen > 0); /* no "//" */
			fuzz_check(!(clen == 1 && out[start] == '.'));
			fuzz_check(!(clen == 2 && out[start] == '.' && out[start + 1] == '.'));
			if (out[start] == '.')
				dot = true;
		}
		start = i + 1;
	}
	fuzz_check(dot == res.has_dot_segment);

	/* Canonical output is a fixed point, unless decoding again would
	 * change it (a decoded '%'): that is exactly the double decode the
	 * server must never do. */
	if (memchr(out, '%', res.len) == NULL) {
		char again_in[FUZZ_CAP + 1], again[FUZZ_CAP];
		struct path_result res2;
		again_in[0] = '/';
		memcpy(again_in + 1, out, res.len);
		fuzz_check(path_resolve((struct span){ again_in, res.len + 1 }, again, sizeof(again),
					&res2) == 0);
		fuzz_check(res2.len == res.len && memcmp(again, out, res.len) == 0);
		fuzz_check(res2.has_dot_segment == res.has_dot_segment);
	}
}

static void fuzz_acme(const uint8_t *in, size_t n, size_t cap)
{
	static const char prefix[] = ACME_CHALLENGE_DIR "/";
	const size_t plen = sizeof(prefix) - 1;
	char rel[ACME_REL_MAX + 8];
	struct span path = { (const char *)in, n };

	memset(rel, 0x5a, sizeof(rel));
	enum acme_match m = acme_challenge_match(path, rel, cap);
	for (size_t i = cap; i < sizeof(rel); i++)
		fuzz_check(rel[i] == 0x5a);
	if (m != ACME_TOKEN)
		return;
	size_t len = strnlen(rel, cap);
	fuzz_check(len < cap && len > plen && memcmp(rel, prefix, plen) == 0);
	fuzz_check(strspn(rel + plen, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-") ==
		   len - plen);
	char canon[4096];
	struct path_result res;
	fuzz_check(path_resolve(path, canon, sizeof(canon), &res) == 0);
	fuzz_check(!res.trailing_slash && res.len == len && memcmp(canon, rel, len) == 0);
}

static void fuzz_range(const uint8_t *in, size_t n, uint64_t fsize, size_t max)
{
	struct byte_range out[FUZZ_MAXR + 1];
	size_t count = 999;

	memset(&out[max], 0x5a, sizeof(out[max]));
	enum range_result r = range_parse((struct span){ (const char *)in, n }, fsize, out, max, &count);
	/* nothing written past max */
	const unsigned char *guard = (const unsigned char *)&out[max];
	for (size_t i = 0; i < sizeof(out[max]); i++)
		fuzz_check(guard[i] == 0x5a);

	if (r != RANGE_OK) {
		fuzz_check(r == RANGE_IGNORE || r == RANGE_UNSATISFIABLE);
		fuzz_check(count == 0);
		return;
	}
	fuzz_check(fsize > 0);
	fuzz_check(count >= 1 && count <= max);
	for (size_t i = 0; i < count; i++)
		fuzz_check(out[i].first <= out[i].last && out[i].last < fsize);

	/* range_coalesce with a gap from the size byte: what was asked is
	 * covered, parts are far enough apart, and they come in the order of
	 * the earliest range in each (RFC 9110 15.3.7.2). */
	struct byte_range asked[FUZZ_MAXR];
	size_t m = count;
	uint64_t gap = fsize & 15;
	memcpy(asked, out, count * sizeof(out[0]));
	if (range_coalesce(out, &m, fsize, gap) != RANGE_OK)
		return;
	fuzz_check(m >= 1 && m <= count);
	for (size_t i = 0; i < m; i++) {
		fuzz_check(out[i].first <= out[i].last && out[i].last < fsize);
		for (size_t j = 0; j < i; j++) {
			const struct byte_range *lo = out[j].first < out[i].first ? &out[j] : &out[i];
			const struct byte_range *hi = lo == &out[j] ? &out[i] : &out[j];
			fuzz_check(hi->first > lo->last + 1 && hi->first - (lo->last + 1) >= gap);
		}
	}
	size_t next_part = 0;
	for (size_t q = 0; q < count; q++) {
		size_t p = 0;
		while (p < m && !(out[p].first <= asked[q].first && asked[q].last <= out[p].last))
			p++;
		fuzz_check(p < m && p <= next_part);
		if (p == next_part)
			next_part++;
	}
	fuzz_check(next_part == m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint64_t fsize = 0;
	unsigned shift = 0;
	size_t max = 4;
	size_t hdr = size < 10 ? size : 10;

	if (size > 0)
		shift = data[0] & 63;
	if (size > 1)
		max = data[1] % (FUZZ_MAXR + 1);
	for (size_t i = 2; i < hdr; i++)
		fsize |= (uint64_t)data[i] << (8 * (i - 2));
	fsize >>= shift;

	const uint8_t *in = data + hdr;
	size_t n = size - hdr;

	/* Copy to an exact-size heap block so ASan flags any over-read. */
	uint8_t *copy = malloc(n ? n : 1);
	if (copy == NULL)
		return 0;
	memcpy(copy, in, n);

	/* A small cap, picked from the input, exercises -414 paths too. */
	size_t cap = size > 0 ? (size_t)(data[0] >> 6) * 16 + 1 : FUZZ_CAP;
	if (size > 1 && (data[1] & 0x80))
		cap = FUZZ_CAP;
	fuzz_path(copy, n, cap);
	fuzz_range(copy, n, fsize, max);
	fuzz_acme(copy, n, ACME_REL_MAX - (fsize & 7)); /* short buffers too */

	free(copy);
	return 0;
}
