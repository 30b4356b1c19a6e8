/* test_path.c - path_resolve against a table of raw request paths. */
#include <criterion/criterion.h>

#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "../../src/fs/path.h"
#include "guard.h"

enum { SLASH = 1, DOT = 2 };

struct path_case {
	const char *raw;
	size_t raw_len; /* 0: strlen(raw); for inputs with a raw NUL */
	int want;       /* 0, -400 or -414 */
	const char *out;
	int flags;      /* SLASH: trailing_slash, DOT: has_dot_segment */
};

static const struct path_case path_cases[] = {
	/* root and plain paths */
	{ "/", 0, 0, "", SLASH },
	{ "/index.html", 0, 0, "index.html", 0 },
	{ "/a/b/c", 0, 0, "a/b/c", 0 },
	{ "/a/b/", 0, 0, "a/b", SLASH },
	/* repeated slashes collapse */
	{ "//", 0, 0, "", SLASH },
	{ "//a///b/", 0, 0, "a/b", SLASH },
	{ "///a", 0, 0, "a", 0 },
	{ "/a//", 0, 0, "a", SLASH },
	/* "." is dropped; a final "." or ".." names a directory */
	{ "/.", 0, 0, "", SLASH },
	{ "/./", 0, 0, "", SLASH },
	{ "/a/./b", 0, 0, "a/b", 0 },
	{ "/a/.", 0, 0, "a", SLASH },
	{ "/./././a", 0, 0, "a", 0 },
	/* ".." pops, but never above the root */
	{ "/a/..", 0, 0, "", SLASH },
	{ "/a/../", 0, 0, "", SLASH },
	{ "/a/b/../c", 0, 0, "a/c", 0 },
	{ "/a/b/c/../../d", 0, 0, "a/d", 0 },
	{ "/a/b/..", 0, 0, "a", SLASH },
	{ "/a//b//..//c", 0, 0, "a/c", 0 },
	{ "/..", 0, -400, "", 0 },
	{ "/../", 0, -400, "", 0 },
	{ "/a/../..", 0, -400, "", 0 },
	{ "/a/../../b", 0, -400, "", 0 },
	{ "/../etc/passwd", 0, -400, "", 0 },
	{ "/./..", 0, -400, "", 0 },
	/* encoded dots and slashes are decoded first, then canonicalised */
	{ "/%2e%2e/etc/passwd", 0, -400, "", 0 },
	{ "/%2E%2E/etc/passwd", 0, -400, "", 0 },
	{ "/.%2e/x", 0, -400, "", 0 },
	{ "/a/%2e%2e/%2e%2e/x", 0, -400, "", 0 },
	{ "/a/%2e%2e/x", 0, 0, "x", 0 },
	{ "/a/..%2fb", 0, 0, "b", 0 },
	{ "/a/..%2Fb", 0, 0, "b", 0 },
	{ "/%2e", 0, 0, "", SLASH },
	{ "/a%2fb", 0, 0, "a/b", 0 },
	{ "/a%2f", 0, 0, "a", SLASH },
	{ "/%2f%2f", 0, 0, "", SLASH },
	{ "/a/%2e%2e%2f%2e%2e%2fetc", 0, -400, "", 0 },
	/* decoded exactly once: %25 is a literal '%' */
	{ "/%252e", 0, 0, "%2e", 0 },
	{ "/%252e%252e/x", 0, 0, "%2e%2e/x", 0 },
	{ "/a%25", 0, 0, "a%", 0 },
	/* no '+' translation; other bytes pass through */
	{ "/a+b.txt", 0, 0, "a+b.txt", 0 },
	{ "/a%20b", 0, 0, "a b", 0 },
	{ "/caf%C3%A9 menu.html", 0, 0, "caf\xc3\xa9 menu.html", 0 },
	{ "/caf%c3%a9", 0, 0, "caf\xc3\xa9", 0 },
	{ "/%3f.html", 0, 0, "?.html", 0 },
	{ "/a\\..\\b", 0, 0, "a\\..\\b", 0 },
	/* dot segments that survive are reported */
	{ "/.git/config", 0, 0, ".git/config", DOT },
	{ "/.well-known/x", 0, 0, ".well-known/x", DOT },
	{ "/a/.htaccess", 0, 0, "a/.htaccess", DOT },
	{ "/%2ehtaccess", 0, 0, ".htaccess", DOT },
	{ "/...", 0, 0, "...", DOT },
	{ "/a/.../b", 0, 0, "a/.../b", DOT },
	{ "/..a", 0, 0, "..a", DOT },
	{ "/.hidden/../a", 0, 0, "a", 0 },
	{ "/a/.b/../c", 0, 0, "a/c", 0 },
	{ "/.a/.b/..", 0, 0, ".a", DOT | SLASH },
	{ "/a.b/c.d", 0, 0, "a.b/c.d", 0 },
	{ "/a./b", 0, 0, "a./b", 0 },
	/* bad escapes */
	{ "/%", 0, -400, "", 0 },
	{ "/%2", 0, -400, "", 0 },
	{ "/a%", 0, -400, "", 0 },
	{ "/%zz", 0, -400, "", 0 },
	{ "/%g0", 0, -400, "", 0 },
	{ "/%0g", 0, -400, "", 0 },
	{ "/%-1", 0, -400, "", 0 },
	{ "/% 2", 0, -400, "", 0 },
	/* NUL, encoded or raw */
	{ "/%00", 0, -400, "", 0 },
	{ "/a%00.html", 0, -400, "", 0 },
	{ "/a\0b", 4, -400, "", 0 },
	/* not origin-form */
	{ "", 0, -400, "", 0 },
	{ "*", 0, -400, "", 0 },
	{ "a/b", 0, -400, "", 0 },
	{ "%2fa", 0, -400, "", 0 },
	{ "http://x/a", 0, -400, "", 0 },
};

Test(path, table)
{
	for (size_t i = 0; i < sizeof(path_cases) / sizeof(path_cases[0]); i++) {
		const struct path_case *c = &path_cases[i];
		size_t n = c->raw_len ? c->raw_len : strlen(c->raw);
		struct span raw = guarded(c->raw, n);
		char out[256];
		struct path_result res;
		memset(out, 'X', sizeof(out));
		int rc = path_resolve(raw, out, sizeof(out), &res);

		cr_expect_eq(rc, c->want, "\"%s\": rc %d, want %d", c->raw, rc, c->want);
		if (rc == 0 && c->want == 0) {
			cr_expect_str_eq(out, c->out, "\"%s\": out \"%s\", want \"%s\"", c->raw, out,
					 c->out);
			cr_expect_eq(res.len, strlen(c->out), "\"%s\": len %zu", c->raw, res.len);
			cr_expect_eq(res.trailing_slash, !!(c->flags & SLASH),
				     "\"%s\": trailing_slash %d", c->raw, res.trailing_slash);
			cr_expect_eq(res.has_dot_segment, !!(c->flags & DOT),
				     "\"%s\": has_dot_segment %d", c->raw, res.has_dot_segment);
		} else {
			cr_expect_eq(out[0], '\0', "\"%s\": out not emptied on error", c->raw);
		}
		unguard(raw);
	}
}

Test(path, null_span)
{
	char out[8];
	struct path_result res;
	cr_expect_eq(path_resolve((struct span){ NULL, 0 }, out, sizeof(out), &res), -400);
}

/* cap counts the NUL: a result of cap-1 bytes fits, cap bytes do not. */
Test(path, capacity)
{
	char out[8];
	struct path_result res;

	memset(out, 'X', sizeof(out));
	cr_expect_eq(path_resolve(SPAN_LIT("/abcdefg"), out, 8, &res), 0);
	cr_expect_str_eq(out, "abcdefg");
	cr_expect_eq(path_resolve(SPAN_LIT("/abcdefgh"), out, 8, &res), -414);
	/* the separator counts too */
	cr_expect_eq(path_resolve(SPAN_LIT("/abc/efg"), out, 8, &res), 0);
	cr_expect_str_eq(out, "abc/efg");
	cr_expect_eq(path_resolve(SPAN_LIT("/abc/efgh"), out, 8, &res), -414);
	/* collapsing happens before the length counts */
	cr_expect_eq(path_resolve(SPAN_LIT("//////a/./././b///"), out, 4, &res), 0);
	cr_expect_str_eq(out, "a/b");
	/* the root needs only the NUL */
	cr_expect_eq(path_resolve(SPAN_LIT("/"), out, 1, &res), 0);
	cr_expect_str_eq(out, "");
	cr_expect_eq(path_resolve(SPAN_LIT("/a"), out, 1, &res), -414);
	cr_expect_eq(path_resolve(SPAN_LIT("/"), out, 0, &res), -414);
}

/* Never writes past cap, whatever the input. */
Test(path, no_write_past_cap)
{
	char buf[16];
	struct path_result res;
	for (size_t cap = 1; cap < 10; cap++) {
		memset(buf, 'Z', sizeof(buf));
		path_resolve(SPAN_LIT("/aaaa/bbbb/cccc/dddd"), buf, cap, &res);
		for (size_t k = cap; k < sizeof(buf); k++)
			cr_expect_eq(buf[k], 'Z', "cap %zu: byte %zu written", cap, k);
	}
}

/* Dotfile bookkeeping survives pops of both kinds of segment. */
Test(path, dot_segment_tracking)
{
	static const struct {
		const char *raw;
		bool dot;
	} t[] = {
		{ "/.a/b/../../c", false },
		{ "/a/.b/c/..", true },
		{ "/.a/.b/../..", false },
		{ "/.a/../.b", true },
		{ "/x/.a/..", false },
	};
	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		char out[64];
		struct path_result res;
		cr_expect_eq(path_resolve((struct span){ t[i].raw, strlen(t[i].raw) }, out, sizeof(out),
					  &res),
			     0, "%s", t[i].raw);
		cr_expect_eq(res.has_dot_segment, t[i].dot, "%s: has_dot_segment", t[i].raw);
	}
}

/* Each percent escape of every byte value decodes to that byte. */
Test(path, all_escapes)
{
	for (int b = 1; b < 256; b++) {
		static const char hx[] = "0123456789abcdef";
		char raw[8] = { '/', 'x', '%', hx[b >> 4], hx[b & 15] };
		char out[8];
		struct path_result res;
		int rc = path_resolve((struct span){ raw, 5 }, out, sizeof(out), &res);
		cr_expect_eq(rc, 0, "%%%02x", b);
		if (b == '/') {
			cr_expect_str_eq(out, "x");
			cr_expect(res.trailing_slash);
		} else {
			cr_expect_eq(res.len, 2, "%%%02x", b);
			cr_expect_eq((unsigned char)out[1], b, "%%%02x", b);
		}
	}
}
