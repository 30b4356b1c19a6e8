/* fuzz_range.c - libFuzzer target for Range: range_parse against random
 * sizes, and the responses the core builds from it (single range, multipart
 * /byteranges, 416, 200), byte for byte against the file.
 *
 * Input layout: bytes 0-1 a little-endian file size (mod 50001; when bit 0
 * of byte 2 is set, mod 16, where clamping bites); byte 2 bit 1 picks the
 * server with a cache, bit 2 a HEAD request; bytes 3-10 a 64-bit size for a
 * second, direct range_parse; the rest is the Range value (bytes a field
 * value cannot hold become '-', so the request always parses). The file
 * range.bin is written at that size, byte i being fz_pattern(i).
 *
 * Checked, beyond no crash and no sanitizer report:
 *  range_parse: RANGE_OK gives 1..max ranges, each first <= last < size, in
 *    a non-empty file; otherwise count == 0.
 *  the response: exactly one, and it agrees with range_parse on the same
 *    value: 200 with the whole file, 416 with "bytes * /size", 206 with
 *    Content-Range and those bytes, or multipart/byteranges whose parts are
 *    the ranges in order, each within the file, each part header naming its
 *    range, the bytes the file's, framed by the boundary, and Content-Length
 *    adding up (fz_check_response).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/http/mime.h"
#include "../../src/http/range.h"
#include "fuzz_conn.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FZ_MAX_VALUE 1500 /* fits max_head (2048) with the rest of the request */

static const struct server *srv_cached, *srv_plain;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc, (void)argv;
	fz_servers_open(&srv_cached, &srv_plain);
	return 0;
}

static void fz_check_ranges(enum range_result rr, uint64_t size, const struct byte_range *r, size_t n,
			    size_t max)
{
	if (rr != RANGE_OK) {
		FZ_CHECK(rr == RANGE_IGNORE || rr == RANGE_UNSATISFIABLE);
		FZ_CHECK(n == 0);
		return;
	}
	FZ_CHECK(size > 0 && n >= 1 && n <= max);
	for (size_t i = 0; i < n; i++)
		FZ_CHECK(r[i].first <= r[i].last && r[i].last < size);
}

struct fz_expect {
	uint64_t size;
	bool head;
	enum range_result rr;
	struct byte_range ranges[8];
	size_t n;
	int responses;
};

static void fz_check_file_bytes(const char *p, uint64_t first, uint64_t len)
{
	for (uint64_t i = 0; i < len; i++)
		FZ_CHECK((unsigned char)p[i] == fz_pattern(first + i));
}

/* "bytes FIRST-LAST/SIZE" at v. */
static void fz_check_content_range(const char *v, size_t vlen, const struct byte_range *r, uint64_t size)
{
	char want[80];
	int n = snprintf(want, sizeof(want), "bytes %llu-%llu/%llu", (unsigned long long)r->first,
			 (unsigned long long)r->last, (unsigned long long)size);
	FZ_CHECK((size_t)n == vlen && memcmp(v, want, vlen) == 0);
}

static void fz_expect_multipart(const struct fz_response *res, const struct fz_expect *e)
{
	const char *v;
	size_t vlen;
	static const char ctype[] = "multipart/byteranges; boundary=";
	FZ_CHECK(fz_header(res->bytes, res->head_len, "Content-Type", &v, &vlen));
	FZ_CHECK(vlen > sizeof(ctype) - 1 && memcmp(v, ctype, sizeof(ctype) - 1) == 0);
	const char *boundary = v + sizeof(ctype) - 1;
	size_t blen = vlen - (sizeof(ctype) - 1);
	FZ_CHECK(blen >= 1 && blen <= 70); /* RFC 2046 5.1.1 */
	if (e->head)
		return;

	const char *mime = mime_type("range.bin", 9);
	const char *p = res->bytes + res->head_len, *end = res->bytes + res->len;
	char want[256];
	for (size_t i = 0; i < e->n; i++) {
		int n = snprintf(want, sizeof(want), "\r\n--%.*s\r\nContent-Type: %s\r\nContent-Range: ", (int)blen,
				 boundary, mime);
		FZ_CHECK(n > 0 && (size_t)n < sizeof(want));
		FZ_CHECK((size_t)(end - p) >= (size_t)n && memcmp(p, want, (size_t)n) == 0);
		p += n;
		const char *eol = memmem(p, (size_t)(end - p), "\r\n\r\n", 4);
		FZ_CHECK(eol);
		fz_check_content_range(p, (size_t)(eol - p), &e->ranges[i], e->size);
		p = eol + 4;
		uint64_t len = e->ranges[i].last - e->ranges[i].first + 1;
		FZ_CHECK((uint64_t)(end - p) >= len);
		fz_check_file_bytes(p, e->ranges[i].first, len);
		p += len;
	}
	int n = snprintf(want, sizeof(want), "\r\n--%.*s--\r\n", (int)blen, boundary);
	FZ_CHECK(end - p == n && memcmp(p, want, (size_t)n) == 0);
}

static void fz_on_response(const struct fz_response *res, void *arg)
{
	struct fz_expect *e = arg;
	const char *v;
	size_t vlen;
	const char *body = res->bytes + res->head_len;
	uint64_t blen = res->len - res->head_len;

	e->responses++;
	FZ_CHECK(e->responses == 1);
	switch (e->rr) {
	case RANGE_IGNORE:
		FZ_CHECK(res->status == 200);
		FZ_CHECK(!fz_header(res->bytes, res->head_len, "Content-Range", &v, &vlen));
		FZ_CHECK(blen == (e->head ? 0 : e->size));
		fz_check_file_bytes(body, 0, blen);
		break;
	case RANGE_UNSATISFIABLE:
		FZ_CHECK(res->status == 416);
		FZ_CHECK(fz_header(res->bytes, res->head_len, "Content-Range", &v, &vlen));
		char want[40];
		int n = snprintf(want, sizeof(want), "bytes */%llu", (unsigned long long)e->size);
		FZ_CHECK((size_t)n == vlen && memcmp(v, want, vlen) == 0);
		break;
	case RANGE_OK:
		FZ_CHECK(res->status == 206);
		if (e->n > 1) {
			FZ_CHECK(!fz_header(res->bytes, res->head_len, "Content-Range", &v, &vlen));
			fz_expect_multipart(res, e);
			break;
		}
		FZ_CHECK(fz_header(res->bytes, res->head_len, "Content-Range", &v, &vlen));
		fz_check_content_range(v, vlen, &e->ranges[0], e->size);
		FZ_CHECK(blen == (e->head ? 0 : e->ranges[0].last - e->ranges[0].first + 1));
		fz_check_file_bytes(body, e->ranges[0].first, blen);
		break;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 11)
		return 0;
	uint8_t flags = data[2];
	uint64_t fsize = (uint64_t)data[0] | (uint64_t)data[1] << 8;
	fsize %= flags & 1 ? 16 : 50001;
	uint64_t other = 0;
	for (int i = 0; i < 8; i++)
		other |= (uint64_t)data[3 + i] << (8 * i);
	other >>= data[3] & 63;

	/* The value as the parser will hand it over: field-value bytes only,
	 * without leading or trailing whitespace (RFC 9110 5.5). */
	size_t n = size - 11;
	if (n > FZ_MAX_VALUE)
		n = FZ_MAX_VALUE;
	char *value = malloc(n ? n : 1);
	FZ_CHECK(value);
	for (size_t i = 0; i < n; i++) {
		unsigned char ch = data[11 + i];
		value[i] = (char)((ch >= 0x20 && ch != 0x7f) || ch == '\t' ? ch : '-');
	}
	size_t vs = 0, ve = n;
	while (vs < ve && (value[vs] == ' ' || value[vs] == '\t'))
		vs++;
	while (ve > vs && (value[ve - 1] == ' ' || value[ve - 1] == '\t'))
		ve--;
	struct span trimmed = { value + vs, ve - vs };

	/* range_parse alone, against any size. */
	struct byte_range any[8];
	size_t nany = 99;
	enum range_result rr = range_parse(trimmed, other, any, 8, &nany);
	fz_check_ranges(rr, other, any, nany, 8);

	/* The same value through the core, against the file. */
	struct fz_expect e = { .size = fsize, .head = flags & 4 };
	e.n = 99;
	e.rr = range_parse(trimmed, fsize, e.ranges, 8, &e.n);
	fz_check_ranges(e.rr, fsize, e.ranges, e.n, 8);
	if (e.rr == RANGE_OK && e.n > 1) /* as the core does: merged, or the whole file */
		e.rr = range_coalesce(e.ranges, &e.n, fsize, fz_multipart_gap("application/octet-stream", fsize));

	fz_set_range_file(fsize);
	const struct server *srv = flags & 2 ? srv_cached : srv_plain;
	static const char pre_get[] = "GET /range.bin HTTP/1.1\r\nHost: f\r\nRange: ";
	static const char pre_head[] = "HEAD /range.bin HTTP/1.1\r\nHost: f\r\nRange: ";
	const char *pre = e.head ? pre_head : pre_get;
	size_t plen = strlen(pre);
	size_t rlen = plen + n + 4;
	char *req = malloc(rlen);
	FZ_CHECK(req);
	memcpy(req, pre, plen);
	memcpy(req + plen, value, n);
	memcpy(req + plen + n, "\r\n\r\n", 4);
	fz_drive(srv, NULL, 0, (const uint8_t *)req, rlen, fz_on_response, &e);
	FZ_CHECK(e.responses == 1);
	free(req);
	free(value);
	return 0;
}
