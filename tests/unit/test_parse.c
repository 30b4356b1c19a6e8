/* test_parse.c - tables of raw request bytes -> parser outcome, and chunked
 * bodies -> skipper outcome. Every input sits against a PROT_NONE page so a
 * read past the end faults instead of passing by luck. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "../../src/http/parse.h"

#define TP_AREA (256 * 1024) /* a multiple of any page size we run on */
#define RC_ALL 1000000       /* expected rc: the whole input */
#define ABSENT tp_absent     /* expected span: p == NULL */

static const char tp_absent[] = "(absent)";

/* Criterion runs each parameterized test in a freshly exec'd process, so a
 * parameter must not carry pointers: we pass an index into the table. */
#define TP_INDEX_PARAMS(table)                                        \
	do {                                                          \
		static size_t idx[sizeof(table) / sizeof(table[0])]; \
		for (size_t i = 0; i < sizeof(idx) / sizeof(idx[0]); i++) \
			idx[i] = i;                                   \
		return cr_make_param_array(size_t, idx, sizeof(idx) / sizeof(idx[0])); \
	} while (0)

static const struct http_limits tp_default_lim = { 8192, 16384, 100 };

/* The input is copied to the end of a writable area whose next page is
 * PROT_NONE (as h2o/picohttpparser's test.c does). */
static const char *tp_place(const char *s, size_t n)
{
	static char *area;
	if (!area) {
		long pg = sysconf(_SC_PAGESIZE);
		area = mmap(NULL, TP_AREA + (size_t)pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		cr_assert(area != MAP_FAILED, "mmap failed");
		cr_assert(mprotect(area + TP_AREA, (size_t)pg, PROT_NONE) == 0, "mprotect failed");
	}
	cr_assert(n <= TP_AREA, "test input too large");
	memcpy(area + TP_AREA - n, s, n);
	return area + TP_AREA - n;
}

static int tp_parse(const char *s, size_t n, const struct http_limits *lim, struct http_request *r)
{
	return http_parse_request(tp_place(s, n), n, lim ? lim : &tp_default_lim, r);
}

static bool tp_span_is(struct span sp, const char *want)
{
	if (want == ABSENT)
		return sp.p == NULL;
	return sp.p != NULL && sp.len == strlen(want) && memcmp(sp.p, want, sp.len) == 0;
}

static const char *tp_show(struct span sp, char *buf, size_t n)
{
	if (!sp.p)
		snprintf(buf, n, "(absent)");
	else
		snprintf(buf, n, "'%.*s'", (int)sp.len, sp.p);
	return buf;
}

/* ---------------------------------------------------------------- outcomes */

struct tp_case {
	const char *name;
	const char *raw;
	size_t len;              /* 0: strlen(raw); set it for inputs with NUL */
	int rc;                  /* expected return; RC_ALL: the whole input */
	struct http_limits lim;  /* all zero: tp_default_lim */
};

#define H11 " HTTP/1.1\r\nHost: a\r\n"
#define REQ(extra) "GET /" H11 extra "\r\n"
#define REQ10(extra) "GET / HTTP/1.0\r\n" extra "\r\n"
#define NUL_REQ(s) s, sizeof(s) - 1

static const struct tp_case tp_cases[] = {
	/* request line */
	{ "plain GET", REQ(""), 0, RC_ALL, { 0 } },
	{ "lower-case version", "GET / http/1.1\r\nHost: a\r\n\r\n", 0, -400, { 0 } },
	{ "two SPs after method", "GET  /" H11 "\r\n", 0, -400, { 0 } },
	{ "two SPs before version", "GET /  HTTP/1.1\r\nHost: a\r\n\r\n", 0, -400, { 0 } },
	{ "SP after version", "GET / HTTP/1.1 \r\nHost: a\r\n\r\n", 0, -400, { 0 } },
	{ "HTAB as separator", "GET\t/" H11 "\r\n", 0, -400, { 0 } },
	{ "leading SP", " GET /" H11 "\r\n", 0, -400, { 0 } },
	{ "non-tchar in method", "GE(T /" H11 "\r\n", 0, -400, { 0 } },
	{ "missing version", "GET /\r\nHost: a\r\n\r\n", 0, -400, { 0 } },
	{ "missing target", "GET HTTP/1.1\r\nHost: a\r\n\r\n", 0, -400, { 0 } },
	{ "version HTTP/1", "GET / HTTP/1\r\nHost: a\r\n\r\n", 0, -400, { 0 } },
	{ "version HTTP/1.10", "GET / HTTP/1.10\r\nHost: a\r\n\r\n", 0, -400, { 0 } },
	{ "version HTTP/a.1", "GET / HTTP/a.1\r\nHost: a\r\n\r\n", 0, -400, { 0 } },
	{ "version HTTP/1.1x", "GET / HTTP/1.1x\r\nHost: a\r\n\r\n", 0, -400, { 0 } },
	{ "version HTTPS/1.1", "GET / HTTPS/1.1\r\nHost: a\r\n\r\n", 0, -400, { 0 } },
	{ "version 11", "GET / HTTP/11\r\nHost: a\r\n\r\n", 0, -400, { 0 } },
	{ "HTTP/2.0", "GET / HTTP/2.0\r\nHost: a\r\n\r\n", 0, -505, { 0 } },
	{ "HTTP/0.9", "GET / HTTP/0.9\r\n\r\n", 0, -505, { 0 } },
	{ "HTTP/3.0", "GET / HTTP/3.0\r\n\r\n", 0, -505, { 0 } },
	{ "HTTP/9.9", "GET / HTTP/9.9\r\n\r\n", 0, -505, { 0 } },
	{ "h2 preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 0, -505, { 0 } },
	{ "HTTP/1.9 is 1.1", "GET / HTTP/1.9\r\nHost: a\r\n\r\n", 0, RC_ALL, { 0 } },

	/* request-target */
	{ "DEL in target", "GET /a\x7f" H11 "\r\n", 0, -400, { 0 } },
	{ "CTL in target", "GET /a\x01" "b" H11 "\r\n", 0, -400, { 0 } },
	{ "NUL in target", NUL_REQ("GET /a\0b" H11 "\r\n"), -400, { 0 } },
	{ "fragment", "GET /a#b" H11 "\r\n", 0, -400, { 0 } },
	{ "relative target", "GET a/b" H11 "\r\n", 0, -400, { 0 } },
	{ "query only", "GET ?a" H11 "\r\n", 0, -400, { 0 } },
	{ "ftp absolute-form", "GET ftp://a/b" H11 "\r\n", 0, -400, { 0 } },
	{ "absolute-form empty host", "GET http:///a" H11 "\r\n", 0, -400, { 0 } },
	{ "absolute-form no authority", "GET http://" H11 "\r\n", 0, -400, { 0 } },
	{ "absolute-form userinfo", "GET http://u@h/" H11 "\r\n", 0, -400, { 0 } },
	{ "absolute-form bad port", "GET http://h:8x/" H11 "\r\n", 0, -400, { 0 } },
	{ "absolute-form http:/", "GET http:/a" H11 "\r\n", 0, -400, { 0 } },
	{ "asterisk with GET", "GET *" H11 "\r\n", 0, -400, { 0 } },
	{ "asterisk plus", "OPTIONS *x" H11 "\r\n", 0, -400, { 0 } },
	{ "asterisk OPTIONS", "OPTIONS *" H11 "\r\n", 0, RC_ALL, { 0 } },
	{ "authority-form with GET", "GET a.example:80" H11 "\r\n", 0, -400, { 0 } },
	{ "CONNECT origin-form", "CONNECT /" H11 "\r\n", 0, -400, { 0 } },
	{ "CONNECT without port", "CONNECT a.example" H11 "\r\n", 0, -400, { 0 } },
	{ "obs-text in target", "GET /caf\xc3\xa9" H11 "\r\n", 0, RC_ALL, { 0 } },

	/* line endings (RFC 9112 2.2) */
	{ "bare CR in request line", "GET / HTTP/1.1\rHost: a\r\n\r\n", 0, -400, { 0 } },
	{ "CR CR LF after request line", "GET / HTTP/1.1\r\r\nHost: a\r\n\r\n", 0, -400, { 0 } },
	{ "bare CR in value", REQ("X: a\rb\r\n"), 0, -400, { 0 } },
	{ "bare CR ends value", REQ("X: a\r\r\n"), 0, -400, { 0 } },
	{ "bare CR as final line", "GET /" H11 "\r\r\n", 0, -400, { 0 } },
	{ "bare CR in leading line", "\r GET /" H11 "\r\n", 0, -400, { 0 } },
	{ "LF only", "GET / HTTP/1.1\nHost: a\n\n", 0, RC_ALL, { 0 } },
	{ "mixed endings", "GET / HTTP/1.1\nHost: a\r\nX: y\n\r\n", 0, RC_ALL, { 0 } },
	{ "leading CRLFs", "\r\n\r\nGET /" H11 "\r\n", 0, RC_ALL, { 0 } },
	{ "leading LFs", "\n\n\nGET /" H11 "\r\n", 0, RC_ALL, { 0 } },

	/* field lines (RFC 9112 5) */
	{ "SP before colon", REQ("X : a\r\n"), 0, -400, { 0 } },
	{ "HTAB before colon", REQ("X\t: a\r\n"), 0, -400, { 0 } },
	{ "SP before colon in Host", "GET / HTTP/1.1\r\nHost : a\r\n\r\n", 0, -400, { 0 } },
	{ "obs-fold", REQ("X: a\r\n b\r\n"), 0, -400, { 0 } },
	{ "obs-fold HTAB", REQ("X: a\r\n\tb\r\n"), 0, -400, { 0 } },
	{ "whitespace line after start line", "GET / HTTP/1.1\r\n Host: a\r\n\r\n", 0, -400, { 0 } },
	{ "empty field-name", REQ(": a\r\n"), 0, -400, { 0 } },
	{ "no colon", REQ("X a\r\n"), 0, -400, { 0 } },
	{ "no colon, LF only", "GET / HTTP/1.1\nHost: a\nX\n\n", 0, -400, { 0 } },
	{ "non-tchar in name", REQ("X(a): b\r\n"), 0, -400, { 0 } },
	{ "quote in name", REQ("X\"a: b\r\n"), 0, -400, { 0 } },
	{ "NUL in value", NUL_REQ(REQ("X: a\0b\r\n")), -400, { 0 } },
	{ "CTL in value", REQ("X: a\x01" "b\r\n"), 0, -400, { 0 } },
	{ "DEL in value", REQ("X: a\x7f\r\n"), 0, -400, { 0 } },
	{ "ESC in value", REQ("X: \x1b[0m\r\n"), 0, -400, { 0 } },
	{ "obs-text in value", REQ("X: caf\xc3\xa9\r\n"), 0, RC_ALL, { 0 } },
	{ "HTAB in value", REQ("X: a\tb\t\r\n"), 0, RC_ALL, { 0 } },
	{ "empty value", REQ("X:\r\n"), 0, RC_ALL, { 0 } },
	{ "long value", REQ("User-Agent: Mozilla/5.0 (X11; Linux x86_64; rv:120.0) Gecko/20100101 Firefox/120.0\r\n"), 0, RC_ALL, { 0 } },
	{ "CTL late in long value", REQ("User-Agent: Mozilla/5.0 (X11; Linux x86_64; rv:120.0) Gecko\x02/20100101\r\n"), 0, -400, { 0 } },

	/* Host (RFC 9110 7.2, RFC 9112 3.2) */
	{ "missing Host in 1.1", "GET / HTTP/1.1\r\n\r\n", 0, -400, { 0 } },
	{ "missing Host in 1.0", "GET / HTTP/1.0\r\n\r\n", 0, RC_ALL, { 0 } },
	{ "two Host", REQ("Host: a\r\n"), 0, -400, { 0 } },
	{ "two Host, other case", REQ("hOST: b\r\n"), 0, -400, { 0 } },
	{ "two Host in 1.0", REQ10("Host: a\r\nHost: a\r\n"), 0, -400, { 0 } },
	{ "empty Host", "GET / HTTP/1.1\r\nHost:\r\n\r\n", 0, -400, { 0 } },
	{ "Host with space", "GET / HTTP/1.1\r\nHost: a b\r\n\r\n", 0, -400, { 0 } },
	{ "Host with slash", "GET / HTTP/1.1\r\nHost: a/b\r\n\r\n", 0, -400, { 0 } },
	{ "Host with userinfo", "GET / HTTP/1.1\r\nHost: u@a\r\n\r\n", 0, -400, { 0 } },
	{ "Host with bad port", "GET / HTTP/1.1\r\nHost: a:8x\r\n\r\n", 0, -400, { 0 } },
	{ "Host with long port", "GET / HTTP/1.1\r\nHost: a:123456\r\n\r\n", 0, -400, { 0 } },
	{ "Host bad pct", "GET / HTTP/1.1\r\nHost: a%zz\r\n\r\n", 0, -400, { 0 } },
	{ "Host unclosed IPv6", "GET / HTTP/1.1\r\nHost: [::1\r\n\r\n", 0, -400, { 0 } },
	{ "Host IPv6 and port", "GET / HTTP/1.1\r\nHost: [::1]:8080\r\n\r\n", 0, RC_ALL, { 0 } },
	{ "Host with empty port", "GET / HTTP/1.1\r\nHost: a:\r\n\r\n", 0, RC_ALL, { 0 } },
	{ "Host pct-encoded", "GET / HTTP/1.1\r\nHost: a%2db\r\n\r\n", 0, RC_ALL, { 0 } },
	{ "bad Host in 1.0", REQ10("Host: a b\r\n"), 0, -400, { 0 } },
	{ "absolute-form, 1.1, no Host", "GET http://a/ HTTP/1.1\r\n\r\n", 0, -400, { 0 } },
	{ "absolute-form, bad Host", "GET http://a/ HTTP/1.1\r\nHost: a b\r\n\r\n", 0, -400, { 0 } },

	/* Content-Length (RFC 9112 6.3) */
	{ "CL letters", REQ("Content-Length: abc\r\n"), 0, -400, { 0 } },
	{ "CL empty", REQ("Content-Length:\r\n"), 0, -400, { 0 } },
	{ "CL inner space", REQ("Content-Length: 1 2\r\n"), 0, -400, { 0 } },
	{ "CL plus", REQ("Content-Length: +1\r\n"), 0, -400, { 0 } },
	{ "CL minus", REQ("Content-Length: -1\r\n"), 0, -400, { 0 } },
	{ "CL hex", REQ("Content-Length: 0x10\r\n"), 0, -400, { 0 } },
	{ "CL list", REQ("Content-Length: 1,1\r\n"), 0, -400, { 0 } },
	{ "CL list with space", REQ("Content-Length: 1, 1\r\n"), 0, -400, { 0 } },
	{ "CL twice, equal", REQ("Content-Length: 5\r\ncontent-length: 5\r\n"), 0, -400, { 0 } },
	{ "CL twice, different", REQ("Content-Length: 5\r\nContent-Length: 6\r\n"), 0, -400, { 0 } },
	{ "CL overflow", REQ("Content-Length: 18446744073709551616\r\n"), 0, -400, { 0 } },
	{ "CL far overflow", REQ("Content-Length: 99999999999999999999999\r\n"), 0, -400, { 0 } },
	{ "CL max", REQ("Content-Length: 18446744073709551615\r\n"), 0, RC_ALL, { 0 } },

	/* Transfer-Encoding (RFC 9112 6.1) */
	{ "TE then CL", REQ("Transfer-Encoding: chunked\r\nContent-Length: 5\r\n"), 0, -400, { 0 } },
	{ "CL then TE", REQ("Content-Length: 5\r\nTransfer-Encoding: chunked\r\n"), 0, -400, { 0 } },
	{ "TE gzip with CL", REQ("Transfer-Encoding: gzip\r\nContent-Length: 5\r\n"), 0, -400, { 0 } },
	{ "TE in 1.0", REQ10("Transfer-Encoding: chunked\r\n"), 0, -400, { 0 } },
	{ "TE gzip in 1.0", REQ10("Transfer-Encoding: gzip\r\n"), 0, -400, { 0 } },
	{ "TE gzip", REQ("Transfer-Encoding: gzip\r\n"), 0, -501, { 0 } },
	{ "TE gzip, chunked", REQ("Transfer-Encoding: gzip, chunked\r\n"), 0, -501, { 0 } },
	{ "TE chunked, chunked", REQ("Transfer-Encoding: chunked, chunked\r\n"), 0, -501, { 0 } },
	{ "TE chunked twice", REQ("Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n"), 0, -501, { 0 } },
	{ "TE chunked;x", REQ("Transfer-Encoding: chunked;x\r\n"), 0, -501, { 0 } },
	{ "TE chunkedx", REQ("Transfer-Encoding: chunkedx\r\n"), 0, -501, { 0 } },
	{ "TE empty", REQ("Transfer-Encoding:\r\n"), 0, -501, { 0 } },
	{ "TE chunked", REQ("Transfer-Encoding: chunked\r\n"), 0, RC_ALL, { 0 } },

	/* limits */
	{ "request line over limit", "GET /aaaaaaaaaaaaaaaaaaaa" H11 "\r\n", 0, -414, { 20, 1000, 10 } },
	{ "request line over limit, unfinished", "GET /aaaaaaaaaaaaaaaaaaaa", 0, -414, { 20, 1000, 10 } },
	{ "request line just fits", "GET /aaaaaa HTTP/1.1\r\nHost: a\r\n\r\n", 0, RC_ALL, { 20, 1000, 10 } },
	{ "request line one over", "GET /aaaaaaa HTTP/1.1\r\nHost: a\r\n\r\n", 0, -414, { 20, 1000, 10 } },
	{ "request line one over, LF", "GET /aaaaaaa HTTP/1.1\nHost: a\n\n", 0, -414, { 20, 1000, 10 } },
	{ "request line fits, CR pending", "GET /aaaaaa HTTP/1.1\r", 0, 0, { 20, 1000, 10 } },
	{ "request line fits, nothing after", "GET /aaaaaa HTTP/1.1", 0, 0, { 20, 1000, 10 } },
	{ "request line one over, unfinished", "GET /aaaaaaa HTTP/1.1", 0, -414, { 20, 1000, 10 } },
	{ "blank lines do not count as request line", "\r\n\r\n\r\nGET /aaaaaa HTTP/1.1\r\nHost: a\r\n\r\n", 0, RC_ALL, { 20, 1000, 10 } },
	{ "head over limit", REQ("X: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n"), 0, -431, { 100, 50, 10 } },
	{ "head unfinished at limit", "GET / HTTP/1.1\r\nHost: a\r\nX: aaaaaaaaaaaaaaaaaaaaa", 0, -431, { 100, 49, 10 } },
	{ "head unfinished below limit", "GET / HTTP/1.1\r\nHost: a\r\nX: aaaaaaaaaaaaaaaaaaaa", 0, 0, { 100, 49, 10 } },
	{ "head exactly at limit", REQ(""), 0, RC_ALL, { 100, sizeof(REQ("")) - 1, 10 } },
	{ "head one over limit", REQ(""), 0, -431, { 100, sizeof(REQ("")) - 2, 10 } },
	{ "head of blank lines", "\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r\n", 0, -431, { 100, 20, 10 } },
	{ "headers at limit", REQ("A: 1\r\nB: 2\r\n"), 0, RC_ALL, { 100, 1000, 3 } },
	{ "headers over limit", REQ("A: 1\r\nB: 2\r\nC: 3\r\n"), 0, -431, { 100, 1000, 3 } },
	{ "headers over limit, unfinished", "GET / HTTP/1.1\r\nHost: a\r\nA: 1\r\nB: 2\r\nC:", 0, -431, { 100, 1000, 3 } },
	{ "zero headers allowed, one sent", REQ10("X: 1\r\n"), 0, -431, { 100, 1000, 0 } },
	{ "request line checked before head", "GET /aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", 0, -414, { 20, 30, 10 } },

	/* pipelining: exactly the first head */
	{ "pipelined, body follows", REQ("Content-Length: 3\r\n") "abcGET / HTTP/1.1\r\n", 0, sizeof(REQ("Content-Length: 3\r\n")) - 1, { 0 } },
	{ "pipelined, garbage follows", REQ("") "\x01\x02\x03", 0, sizeof(REQ("")) - 1, { 0 } },

	/* incomplete but valid so far */
	{ "empty", "", 0, 0, { 0 } },
	{ "CR only", "\r", 0, 0, { 0 } },
	{ "LF only so far", "\n", 0, 0, { 0 } },
	{ "method only", "GET", 0, 0, { 0 } },
	{ "partial version", "GET / HTT", 0, 0, { 0 } },
	{ "header name only", "GET / HTTP/1.1\r\nHos", 0, 0, { 0 } },
	{ "final CR pending", "GET / HTTP/1.1\r\nHost: a\r\n\r", 0, 0, { 0 } },
};

ParameterizedTestParameters(parse, outcome)
{
	TP_INDEX_PARAMS(tp_cases);
}

ParameterizedTest(size_t *i, parse, outcome)
{
	const struct tp_case *c = &tp_cases[*i];
	struct http_request r;
	size_t n = c->len ? c->len : strlen(c->raw);
	const struct http_limits *lim = c->lim.max_head ? &c->lim : NULL;
	int want = c->rc == RC_ALL ? (int)n : c->rc;
	int got = tp_parse(c->raw, n, lim, &r);
	cr_expect_eq(got, want, "%s: got %d, want %d", c->name, got, want);
}

/* ---------------------------------------------------- successes in detail */

struct tp_ok {
	const char *name;
	const char *raw;
	int rc;                  /* RC_ALL: the whole input */
	enum http_method method;
	int minor;
	const char *path, *query, *host; /* NULL: not checked; ABSENT: must be unset */
	int keep_alive;
	int64_t content_length;  /* -1: absent */
	bool chunked;
	size_t headers;
};

static const struct tp_ok tp_oks[] = {
	{ "GET", "GET /index.html HTTP/1.1\r\nHost: example.com\r\n\r\n", RC_ALL,
	  HTTP_GET, 1, "/index.html", ABSENT, "example.com", 1, -1, false, 1 },
	{ "HEAD 1.0", "HEAD /a HTTP/1.0\r\n\r\n", RC_ALL, HTTP_HEAD, 0, "/a", ABSENT, ABSENT, 0, -1, false, 0 },
	{ "query", "GET /a/b?x=1&y=%20 HTTP/1.1\r\nHost: h\r\n\r\n", RC_ALL,
	  HTTP_GET, 1, "/a/b", "x=1&y=%20", "h", 1, -1, false, 1 },
	{ "empty query", "GET /a? HTTP/1.1\r\nHost: h\r\n\r\n", RC_ALL, HTTP_GET, 1, "/a", "", "h", 1, -1, false, 1 },
	{ "second ? stays in query", "GET /?a?b HTTP/1.1\r\nHost: h\r\n\r\n", RC_ALL, HTTP_GET, 1, "/", "a?b", "h", 1, -1, false, 1 },
	{ "unknown method", "FOO /x HTTP/1.1\r\nHost: h\r\n\r\n", RC_ALL, HTTP_METHOD_UNKNOWN, 1, "/x", ABSENT, "h", 1, -1, false, 1 },
	{ "methods are case-sensitive", "get / HTTP/1.1\r\nHost: h\r\n\r\n", RC_ALL, HTTP_METHOD_UNKNOWN, 1, "/", ABSENT, "h", 1, -1, false, 1 },
	{ "PROPFIND", "PROPFIND / HTTP/1.1\r\nHost: h\r\n\r\n", RC_ALL, HTTP_METHOD_UNKNOWN, 1, "/", ABSENT, "h", 1, -1, false, 1 },
	{ "POST with body", "POST /f HTTP/1.1\r\nHost: h\r\nContent-Length: 007\r\n\r\nabcdefg", 50,
	  HTTP_POST, 1, "/f", ABSENT, "h", 1, 7, false, 2 },
	{ "PUT chunked", "PUT /f HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: \t Chunked \t\r\n\r\n", RC_ALL,
	  HTTP_PUT, 1, "/f", ABSENT, "h", 1, -1, true, 2 },
	{ "DELETE", "DELETE /f HTTP/1.1\r\nHost: h\r\n\r\n", RC_ALL, HTTP_DELETE, 1, "/f", ABSENT, "h", 1, -1, false, 1 },
	{ "TRACE", "TRACE /f HTTP/1.1\r\nHost: h\r\n\r\n", RC_ALL, HTTP_TRACE, 1, "/f", ABSENT, "h", 1, -1, false, 1 },
	{ "PATCH", "PATCH /f HTTP/1.1\r\nHost: h\r\n\r\n", RC_ALL, HTTP_PATCH, 1, "/f", ABSENT, "h", 1, -1, false, 1 },
	{ "OPTIONS *", "OPTIONS * HTTP/1.1\r\nHost: h\r\n\r\n", RC_ALL, HTTP_OPTIONS, 1, "*", ABSENT, "h", 1, -1, false, 1 },
	{ "CONNECT", "CONNECT h.example:443 HTTP/1.1\r\nHost: h.example:443\r\n\r\n", RC_ALL,
	  HTTP_CONNECT, 1, "", ABSENT, "h.example:443", 1, -1, false, 1 },
	{ "absolute-form overrides Host", "GET http://Example.com:8080/a/b?q=1 HTTP/1.1\r\nHost: other\r\n\r\n", RC_ALL,
	  HTTP_GET, 1, "/a/b", "q=1", "Example.com:8080", 1, -1, false, 1 },
	{ "absolute-form empty path", "GET http://h HTTP/1.1\r\nHost: h\r\n\r\n", RC_ALL, HTTP_GET, 1, "/", ABSENT, "h", 1, -1, false, 1 },
	{ "absolute-form HTTPS, query only", "GET HTTPS://h?x HTTP/1.1\r\nHost: h\r\n\r\n", RC_ALL, HTTP_GET, 1, "/", "x", "h", 1, -1, false, 1 },
	{ "absolute-form 1.0 without Host", "GET http://[::1]:80/p HTTP/1.0\r\n\r\n", RC_ALL, HTTP_GET, 0, "/p", ABSENT, "[::1]:80", 0, -1, false, 0 },
	{ "HTTP/1.2 is 1.1", "GET / HTTP/1.2\r\nHost: h\r\n\r\n", RC_ALL, HTTP_GET, 1, "/", ABSENT, "h", 1, -1, false, 1 },
	{ "LF only", "GET /l HTTP/1.1\nHost: h\nX: y\n\n", RC_ALL, HTTP_GET, 1, "/l", ABSENT, "h", 1, -1, false, 2 },
	{ "leading empty lines", "\r\n\n\r\nGET /l HTTP/1.1\r\nHost: h\r\n\r\n", RC_ALL, HTTP_GET, 1, "/l", ABSENT, "h", 1, -1, false, 1 },
	{ "trimmed Host", "GET / HTTP/1.1\r\nHost: \t h:80 \t \r\n\r\n", RC_ALL, HTTP_GET, 1, "/", ABSENT, "h:80", 1, -1, false, 1 },
	{ "header names any case", "GET / HTTP/1.1\r\nhOsT: h\r\ncONTENT-lENGTH: 0\r\n\r\n", RC_ALL, HTTP_GET, 1, "/", ABSENT, "h", 1, 0, false, 2 },
	{ "many fields counted", "GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\nHost: h\r\nA: 3\r\nX-Empty:\r\n\r\n", RC_ALL, HTTP_GET, 1, "/", ABSENT, "h", 1, -1, false, 5 },
	{ "pipelined", "GET /1 HTTP/1.1\r\nHost: h\r\n\r\nGET /2 HTTP/1.1\r\nHost: h\r\n\r\n", 28, HTTP_GET, 1, "/1", ABSENT, "h", 1, -1, false, 1 },

	/* Connection (RFC 9112 9.3) */
	{ "1.1 default keep-alive", "GET / HTTP/1.1\r\nHost: h\r\n\r\n", RC_ALL, HTTP_GET, 1, "/", ABSENT, "h", 1, -1, false, 1 },
	{ "1.1 close", "GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n", RC_ALL, HTTP_GET, 1, "/", ABSENT, "h", 0, -1, false, 2 },
	{ "1.1 Close in a list", "GET / HTTP/1.1\r\nHost: h\r\nConnection: Keep-Alive ,\tCLOSE , foo\r\n\r\n", RC_ALL, HTTP_GET, 1, "/", ABSENT, "h", 0, -1, false, 2 },
	{ "1.1 close in second field", "GET / HTTP/1.1\r\nHost: h\r\nConnection: keep-alive\r\nConnection: close\r\n\r\n", RC_ALL, HTTP_GET, 1, "/", ABSENT, "h", 0, -1, false, 3 },
	{ "1.1 closed is not close", "GET / HTTP/1.1\r\nHost: h\r\nConnection: closed, xclose\r\n\r\n", RC_ALL, HTTP_GET, 1, "/", ABSENT, "h", 1, -1, false, 2 },
	{ "1.0 default close", "GET / HTTP/1.0\r\n\r\n", RC_ALL, HTTP_GET, 0, "/", ABSENT, ABSENT, 0, -1, false, 0 },
	{ "1.0 keep-alive", "GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", RC_ALL, HTTP_GET, 0, "/", ABSENT, ABSENT, 1, -1, false, 1 },
	{ "1.0 keep-alive in list", "GET / HTTP/1.0\r\nConnection: te,keep-alive\r\n\r\n", RC_ALL, HTTP_GET, 0, "/", ABSENT, ABSENT, 1, -1, false, 1 },
	{ "1.0 keep-alive and close", "GET / HTTP/1.0\r\nConnection: keep-alive, close\r\n\r\n", RC_ALL, HTTP_GET, 0, "/", ABSENT, ABSENT, 0, -1, false, 1 },
	{ "1.0 unrelated token", "GET / HTTP/1.0\r\nConnection: upgrade\r\n\r\n", RC_ALL, HTTP_GET, 0, "/", ABSENT, ABSENT, 0, -1, false, 1 },
};

ParameterizedTestParameters(parse, success)
{
	TP_INDEX_PARAMS(tp_oks);
}

static void tp_check_ok(const struct tp_ok *c)
{
	struct http_request r;
	char b1[128];
	size_t n = strlen(c->raw);
	int want = c->rc == RC_ALL ? (int)n : c->rc;
	int got = tp_parse(c->raw, n, NULL, &r);

	cr_assert_eq(got, want, "%s: got %d, want %d", c->name, got, want);
	cr_expect_eq(r.method, c->method, "%s: method %d", c->name, r.method);
	cr_expect_eq(r.version_minor, c->minor, "%s: minor %d", c->name, r.version_minor);
	if (c->path)
		cr_expect(tp_span_is(r.path, c->path), "%s: path %s", c->name, tp_show(r.path, b1, sizeof(b1)));
	if (c->query)
		cr_expect(tp_span_is(r.query, c->query), "%s: query %s", c->name, tp_show(r.query, b1, sizeof(b1)));
	if (c->host)
		cr_expect(tp_span_is(r.host, c->host), "%s: host %s", c->name, tp_show(r.host, b1, sizeof(b1)));
	cr_expect_eq(r.keep_alive, c->keep_alive != 0, "%s: keep_alive %d", c->name, r.keep_alive);
	cr_expect_eq(r.has_content_length, c->content_length >= 0, "%s: has_content_length", c->name);
	if (c->content_length >= 0)
		cr_expect_eq(r.content_length, (uint64_t)c->content_length, "%s: content_length", c->name);
	cr_expect_eq(r.chunked, c->chunked, "%s: chunked", c->name);
	cr_expect_eq(r.header_count, c->headers, "%s: header_count %zu", c->name, r.header_count);
	cr_expect(tp_span_is(r.method_name, http_method_name(c->method)) || c->method == HTTP_METHOD_UNKNOWN,
		  "%s: method_name", c->name);
}

ParameterizedTest(size_t *i, parse, success)
{
	const struct tp_ok *c = &tp_oks[*i];
	tp_check_ok(c);
}

ParameterizedTestParameters(parse, prefixes)
{
	TP_INDEX_PARAMS(tp_oks);
}

/* Every strict prefix of a valid head is "need more", never an error. */
ParameterizedTest(size_t *i, parse, prefixes)
{
	const struct tp_ok *c = &tp_oks[*i];
	struct http_request r;
	size_t n = strlen(c->raw);
	size_t head = c->rc == RC_ALL ? n : (size_t)c->rc;

	for (size_t k = 0; k < head; k++) {
		int got = tp_parse(c->raw, k, NULL, &r);
		cr_assert_eq(got, 0, "%s: prefix of %zu bytes gave %d", c->name, k, got);
	}
}

Test(parse, all_selected_fields)
{
	static const char raw[] =
		"GET /doc/a.txt?v=2 HTTP/1.1\r\n"
		"Host: www.example.com\r\n"
		"User-Agent: curl/8.5.0\r\n"
		"Referer: http://x/\r\n"
		"If-None-Match: \"abc\", W/\"def\"\r\n"
		"If-Modified-Since: Sun, 06 Nov 1994 08:49:37 GMT\r\n"
		"Range: bytes=0-99\r\n"
		"If-Range: \"abc\"\r\n"
		"Connection: keep-alive\r\n"
		"Accept: */*\r\n"
		"\r\n";
	struct http_request r;
	int n = tp_parse(raw, sizeof(raw) - 1, NULL, &r);

	cr_assert_eq(n, (int)sizeof(raw) - 1);
	cr_expect(tp_span_is(r.method_name, "GET"));
	cr_expect(tp_span_is(r.target, "/doc/a.txt?v=2"));
	cr_expect(tp_span_is(r.request_line, "GET /doc/a.txt?v=2 HTTP/1.1"));
	cr_expect(tp_span_is(r.user_agent, "curl/8.5.0"));
	cr_expect(tp_span_is(r.referer, "http://x/"));
	cr_expect(tp_span_is(r.if_none_match, "\"abc\", W/\"def\""));
	cr_expect(tp_span_is(r.if_modified_since, "Sun, 06 Nov 1994 08:49:37 GMT"));
	cr_expect(tp_span_is(r.range, "bytes=0-99"));
	cr_expect(tp_span_is(r.if_range, "\"abc\""));
	cr_expect(tp_span_is(r.connection, "keep-alive"));
	cr_expect_eq(r.header_count, 9);
	cr_expect(r.keep_alive);
}

Test(parse, duplicate_conditionals_are_dropped)
{
	static const char raw[] =
		"GET / HTTP/1.1\r\nHost: h\r\n"
		"Range: bytes=0-1\r\nRange: bytes=5-6\r\n"
		"If-Modified-Since: Sun, 06 Nov 1994 08:49:37 GMT\r\n"
		"If-Modified-Since: Mon, 07 Nov 1994 08:49:37 GMT\r\n"
		"User-Agent: first\r\nUser-Agent: second\r\n\r\n";
	struct http_request r;

	cr_assert_eq(tp_parse(raw, sizeof(raw) - 1, NULL, &r), (int)sizeof(raw) - 1);
	cr_expect(tp_span_is(r.range, ABSENT));
	cr_expect(tp_span_is(r.if_range, ABSENT));
	cr_expect(tp_span_is(r.if_modified_since, ABSENT));
	cr_expect(tp_span_is(r.user_agent, "first"));
}

/* Every value of a list field sent on several lines, in order. */
static void tp_expect_lines(struct span field, unsigned lines, const char *name, const char *const *want,
			    size_t nwant)
{
	const char *cursor = NULL;
	struct span v;
	size_t i = 0;
	while (http_field_lines_next(field, lines, name, &cursor, &v)) {
		cr_assert_lt(i, nwant, "more values than %zu", nwant);
		cr_expect(tp_span_is(v, want[i]), "value %zu: '%.*s', want '%s'", i, (int)v.len, v.p, want[i]);
		i++;
	}
	cr_expect_eq(i, nwant, "%zu values, want %zu", i, nwant);
}

Test(parse, list_fields_keep_every_field_line)
{
	/* RFC 9110 5.3: the lines of a list field are one list; a field of the
	 * same name prefix, a look-alike value and an empty line are in between */
	static const char raw[] =
		"GET / HTTP/1.1\r\nHost: h\r\n"
		"If-Match: \"a\", \"b\"\r\n"
		"If-None-Match: \"n1\"\r\n"
		"X-If-Match: \"x\"\r\n"
		"If-Match-Not: \"y\"\r\n"
		"if-match:\t \"c\" \r\n"
		"Expect: 100-continue\r\n"
		"IF-MATCH:\r\n"
		"If-Match: W/\"d\"\n"
		"Expect: foo\r\n\r\n";
	struct http_request r;

	cr_assert_eq(tp_parse(raw, sizeof(raw) - 1, NULL, &r), (int)sizeof(raw) - 1);
	cr_expect_eq(r.if_match_lines, 4);
	static const char *const im[] = { "\"a\", \"b\"", "\"c\"", "", "W/\"d\"" };
	tp_expect_lines(r.if_match, r.if_match_lines, "if-match", im, 4);
	cr_expect_eq(r.if_none_match_lines, 1);
	static const char *const inm[] = { "\"n1\"" };
	tp_expect_lines(r.if_none_match, r.if_none_match_lines, "if-none-match", inm, 1);
	static const char *const ex[] = { "100-continue", "foo" };
	tp_expect_lines(r.expect, r.expect_lines, "expect", ex, 2);
	/* absent: no values */
	cr_expect_eq(r.if_none_match_lines, 1);
	struct http_request r2;
	static const char raw2[] = "GET / HTTP/1.1\r\nHost: h\r\n\r\n";
	cr_assert_gt(tp_parse(raw2, sizeof(raw2) - 1, NULL, &r2), 0);
	tp_expect_lines(r2.if_match, r2.if_match_lines, "if-match", NULL, 0);
}

Test(parse, spans_point_into_buffer)
{
	static const char raw[] = "\r\nGET /a?b HTTP/1.1\r\nHost: h\r\nRange: bytes=1-\r\n\r\n";
	struct http_request r;
	const char *buf = tp_place(raw, sizeof(raw) - 1);

	cr_assert_eq(http_parse_request(buf, sizeof(raw) - 1, &tp_default_lim, &r), (int)sizeof(raw) - 1);
	cr_expect_eq(r.request_line.p, buf + 2);
	cr_expect_eq(r.path.p, buf + 6);
	cr_expect_eq(r.query.p, buf + 9);
	cr_expect_eq(r.host.p, buf + 27);
}

/* Limits computed, not typed: exact boundaries with real-world sizes. */
Test(parse, request_line_limit_boundaries)
{
	static char raw[20000];
	struct http_limits lim = { 8192, 16384, 100 };
	struct http_request r;

	for (size_t rl = 8180; rl <= 8200; rl++) {
		/* "GET /" + a's + " HTTP/1.1" == rl bytes */
		size_t tlen = rl - 4 - 9, n = 0;
		n += (size_t)sprintf(raw, "GET /");
		memset(raw + n, 'a', tlen - 1);
		n += tlen - 1;
		n += (size_t)sprintf(raw + n, " HTTP/1.1\r\nHost: h\r\n\r\n");
		int got = tp_parse(raw, n, &lim, &r);
		cr_expect_eq(got, rl <= 8192 ? (int)n : -414, "line %zu: %d", rl, got);
		/* Unfinished: only the bytes before the line end. */
		got = tp_parse(raw, rl, &lim, &r);
		cr_expect_eq(got, rl <= 8192 ? 0 : -414, "unfinished line %zu: %d", rl, got);
	}
}

Test(parse, head_limit_boundaries)
{
	static char raw[20000];
	struct http_limits lim = { 8192, 16384, 100 };
	struct http_request r;
	size_t base = strlen("GET / HTTP/1.1\r\nHost: h\r\nX: \r\n\r\n");

	for (size_t total = 16380; total <= 16390; total++) {
		size_t n = (size_t)sprintf(raw, "GET / HTTP/1.1\r\nHost: h\r\nX: ");
		memset(raw + n, 'v', total - base);
		n += total - base;
		n += (size_t)sprintf(raw + n, "\r\n\r\n");
		cr_assert_eq(n, total);
		int got = tp_parse(raw, n, &lim, &r);
		cr_expect_eq(got, total <= 16384 ? (int)n : -431, "head %zu: %d", total, got);
		got = tp_parse(raw, n - 1, &lim, &r);
		cr_expect_eq(got, n - 1 >= 16384 ? -431 : 0, "head %zu minus one: %d", total, got);
	}
}

Test(parse, header_count_limit)
{
	static char raw[8000];
	struct http_limits lim = { 8192, 16384, 100 };
	struct http_request r;

	for (size_t k = 98; k <= 102; k++) {
		size_t n = (size_t)sprintf(raw, "GET / HTTP/1.1\r\n");
		for (size_t i = 0; i < k; i++)
			n += (size_t)sprintf(raw + n, "Host%zu: x\r\n", i);
		n += (size_t)sprintf(raw + n, "\r\n");
		int got = tp_parse(raw, n, &lim, &r);
		/* No Host at all: within the limit the answer is 400. */
		cr_expect_eq(got, k <= 100 ? -400 : -431, "%zu fields: %d", k, got);
	}
}

Test(parse, method_names)
{
	cr_expect_str_eq(http_method_name(HTTP_GET), "GET");
	cr_expect_str_eq(http_method_name(HTTP_HEAD), "HEAD");
	cr_expect_str_eq(http_method_name(HTTP_OPTIONS), "OPTIONS");
	cr_expect_str_eq(http_method_name(HTTP_PATCH), "PATCH");
	cr_expect_str_eq(http_method_name(HTTP_METHOD_UNKNOWN), "UNKNOWN");
	cr_expect_str_eq(http_method_name((enum http_method)99), "UNKNOWN");
}

/* ------------------------------------------------------ resumed parsing */

/* A span as an offset into the buffer it came from, so results over buffers
 * at different addresses compare. -1: absent; -2: outside the buffer (the
 * constant "/" of "http://host"). */
static long tp_off(struct span sp, const char *buf, size_t n)
{
	if (!sp.p)
		return -1;
	if (sp.p < buf || sp.p > buf + n)
		return -2;
	return (long)(sp.p - buf);
}

static void tp_expect_same_req(const char *name, size_t cut, const struct http_request *a, const char *abuf,
			       const struct http_request *b, const char *bbuf, size_t n)
{
#define TP_SAME_SPAN(f)                                                                              \
	cr_expect(tp_off(a->f, abuf, n) == tp_off(b->f, bbuf, n) && a->f.len == b->f.len,            \
		  "%s, cut at %zu: span " #f " differs", name, cut)
	TP_SAME_SPAN(method_name);
	TP_SAME_SPAN(target);
	TP_SAME_SPAN(path);
	TP_SAME_SPAN(query);
	TP_SAME_SPAN(request_line);
	TP_SAME_SPAN(host);
	TP_SAME_SPAN(connection);
	TP_SAME_SPAN(if_none_match);
	TP_SAME_SPAN(if_modified_since);
	TP_SAME_SPAN(range);
	TP_SAME_SPAN(if_range);
	TP_SAME_SPAN(user_agent);
	TP_SAME_SPAN(referer);
#undef TP_SAME_SPAN
	cr_expect(a->method == b->method && a->version_minor == b->version_minor &&
		  a->keep_alive == b->keep_alive && a->has_content_length == b->has_content_length &&
		  a->content_length == b->content_length && a->chunked == b->chunked &&
		  a->header_count == b->header_count,
		  "%s, cut at %zu: fields differ", name, cut);
}

/* Feeds raw[0..n) one byte more per call, the buffer moving every time (as a
 * connection's does when it is compacted or grown), and checks each answer
 * against a one-shot parse of the same prefix. Returns the final answer. */
static int tp_trickle(const char *name, const char *raw, size_t n, const struct http_limits *lim)
{
	struct http_parse_state st = { 0 };
	struct http_request r, one;
	static char copy[TP_AREA];

	cr_assert(n <= sizeof(copy));
	for (size_t k = 0; k <= n; k++) {
		/* the one-shot answer, from a copy at another address */
		memcpy(copy, raw, k);
		int want = http_parse_request(copy, k, lim, &one);
		int got = http_parse_request_resume(tp_place(raw, k), k, lim, &r, &st);
		cr_assert_eq(got, want, "%s: after %zu of %zu bytes: resumed %d, one-shot %d", name, k, n, got,
			     want);
		if (got != 0) {
			cr_expect(st.phase == 0 && st.pos == 0, "%s: state not reset after %d", name, got);
			if (got > 0)
				tp_expect_same_req(name, k, &r, tp_place(raw, k), &one, copy, k);
			return got;
		}
	}
	return 0;
}

/* The same, in two pieces: every cut position. */
static void tp_split(const char *name, const char *raw, size_t n, const struct http_limits *lim)
{
	static char copy[TP_AREA];
	struct http_request one;

	memcpy(copy, raw, n);
	int want = http_parse_request(copy, n, lim, &one);
	for (size_t cut = 0; cut <= n; cut++) {
		struct http_parse_state st = { 0 };
		struct http_request r;
		int got = http_parse_request_resume(tp_place(raw, cut), cut, lim, &r, &st);
		if (got == 0)
			got = http_parse_request_resume(tp_place(raw, n), n, lim, &r, &st);
		else
			continue; /* the first piece already decided: checked by tp_trickle */
		cr_assert_eq(got, want, "%s: cut at %zu: resumed %d, one-shot %d", name, cut, got, want);
		if (got > 0)
			tp_expect_same_req(name, cut, &r, tp_place(raw, n), &one, copy, n);
	}
}

ParameterizedTestParameters(parse, trickled_outcome)
{
	TP_INDEX_PARAMS(tp_cases);
}

/* Every outcome in the table, the bytes arriving one at a time or in two
 * pieces: the same answer as one parse over all of them. */
ParameterizedTest(size_t *i, parse, trickled_outcome)
{
	const struct tp_case *c = &tp_cases[*i];
	size_t n = c->len ? c->len : strlen(c->raw);
	const struct http_limits *lim = c->lim.max_head ? &c->lim : &tp_default_lim;
	struct http_request r;
	int want = http_parse_request(tp_place(c->raw, n), n, lim, &r);

	cr_expect_eq(tp_trickle(c->name, c->raw, n, lim), want, "%s", c->name);
	tp_split(c->name, c->raw, n, lim);
}

ParameterizedTestParameters(parse, trickled_success)
{
	TP_INDEX_PARAMS(tp_oks);
}

ParameterizedTest(size_t *i, parse, trickled_success)
{
	const struct tp_ok *c = &tp_oks[*i];
	size_t n = strlen(c->raw);
	int want = c->rc == RC_ALL ? (int)n : c->rc;

	cr_expect_eq(tp_trickle(c->name, c->raw, n, &tp_default_lim), want, "%s", c->name);
	tp_split(c->name, c->raw, n, &tp_default_lim);
}

/* Limits reached while trickling: the same 414 / 431 as one-shot, at the
 * same byte, including one long line and one long field value. */
Test(parse, trickled_limits)
{
	static char raw[20000];
	struct http_limits lim = { 8192, 16384, 100 };
	size_t n;

	n = (size_t)sprintf(raw, "GET /");
	memset(raw + n, 'a', 9000);
	n += 9000;
	cr_expect_eq(tp_trickle("long target", raw, n, &lim), -414);

	n = (size_t)sprintf(raw, "GET / HTTP/1.1\r\nHost: h\r\nX: ");
	memset(raw + n, 'v', 17000);
	n += 17000;
	cr_expect_eq(tp_trickle("long value", raw, n, &lim), -431);

	n = (size_t)sprintf(raw, "GET / HTTP/1.1\r\n");
	for (size_t i = 0; i < 101; i++)
		n += (size_t)sprintf(raw + n, "Host%zu: x\r\n", i);
	cr_expect_eq(tp_trickle("many fields", raw, n, &lim), -431);

	lim.max_headers = 1000; /* about 350 fields */
	n = (size_t)sprintf(raw, "GET / HTTP/1.1\r\nHost: h\r\n");
	while (n < 16000)
		n += (size_t)sprintf(raw + n, "X-Field-%zu: %s\r\n", n, "some value of a realistic length");
	n += (size_t)sprintf(raw + n, "\r\n");
	cr_expect_eq(tp_trickle("16 KiB head", raw, n, &lim), (int)n);
}

/* The point of resuming: a head trickled one byte per call costs about what
 * one parse of it does, not a parse per byte. Timed against a one-shot parse
 * on the same machine, so a loaded machine slows both; re-parsing from the
 * start costs thousands of one-shot parses here (about n/2 bytes a call). */
Test(parse, trickled_head_costs_linear_time)
{
	static char raw[16384];
	struct http_limits lim = { 8192, 16384, 100 };
	struct http_request r;
	size_t n = (size_t)sprintf(raw, "GET / HTTP/1.1\r\nHost: h\r\nX: ");
	struct timespec t0, t1;
	double one = 1e9, trickled = 1e9;

	memset(raw + n, 'v', 16000 - n);
	n = 16000;
	n += (size_t)sprintf(raw + n, "\r\n\r\n");
	for (int rep = 0; rep < 5; rep++) {
		clock_gettime(CLOCK_MONOTONIC, &t0);
		for (int k = 0; k < 100; k++)
			cr_assert_eq(http_parse_request(raw, n, &lim, &r), (int)n);
		clock_gettime(CLOCK_MONOTONIC, &t1);
		double d = ((double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec)) / 100;
		one = d < one ? d : one;

		struct http_parse_state st = { 0 };
		int rc = 0;
		clock_gettime(CLOCK_MONOTONIC, &t0);
		for (size_t k = 1; k <= n && rc == 0; k++)
			rc = http_parse_request_resume(raw, k, &lim, &r, &st);
		clock_gettime(CLOCK_MONOTONIC, &t1);
		cr_assert_eq(rc, (int)n);
		d = (double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec);
		trickled = d < trickled ? d : trickled;
	}
	/* Linear: n calls of a few ns each plus one final pass, well under 200
	 * one-shot parses; quadratic: about n/16 = 1000 of them. */
	cr_expect(trickled < 200 * one, "trickled %.0f ns = %.0f one-shot parses of %.0f ns", trickled,
		  trickled / one, one);
}

/* ------------------------------------------------------------------ chunked */

struct tc_case {
	const char *name;
	const char *raw;
	int result;          /* HTTP_CHUNKED_* for the whole input */
	size_t consumed;     /* for DONE: 0 means the whole input */
	uint64_t total;      /* for DONE */
};

static const struct tc_case tc_cases[] = {
	{ "last chunk only", "0\r\n\r\n", HTTP_CHUNKED_DONE, 0, 0 },
	{ "one chunk", "5\r\nhello\r\n0\r\n\r\n", HTTP_CHUNKED_DONE, 0, 5 },
	{ "two chunks", "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n", HTTP_CHUNKED_DONE, 0, 11 },
	{ "next request follows", "3\r\nabc\r\n0\r\n\r\nGET / HTTP/1.1\r\n", HTTP_CHUNKED_DONE, 13, 3 },
	/* RFC 9112 2.2's bare-LF leniency covers the start line and fields only:
	 * in chunk framing a bare LF is refused (a smuggling vector). */
	{ "LF only", "5\nhello\n0\n\n", HTTP_CHUNKED_ERROR, 0, 0 },
	{ "bare LF after size", "5\nhello\r\n0\r\n\r\n", HTTP_CHUNKED_ERROR, 0, 0 },
	{ "bare LF after extension", "5;a=b\nhello\r\n0\r\n\r\n", HTTP_CHUNKED_ERROR, 0, 0 },
	{ "bare LF after data", "5\r\nhello\n0\r\n\r\n", HTTP_CHUNKED_ERROR, 0, 0 },
	{ "bare LF after a trailer", "0\r\nX: v\n\r\n", HTTP_CHUNKED_ERROR, 0, 0 },
	{ "bare LF ending the trailers", "0\r\n\n", HTTP_CHUNKED_ERROR, 0, 0 },
	{ "hex sizes", "A\r\n0123456789\r\nb\r\n0123456789a\r\n0\r\n\r\n", HTTP_CHUNKED_DONE, 0, 21 },
	{ "leading zeros", "0005\r\nhello\r\n000\r\n\r\n", HTTP_CHUNKED_DONE, 0, 5 },
	{ "data with CRLF inside", "4\r\n\r\n\r\n\r\n0\r\n\r\n", HTTP_CHUNKED_DONE, 0, 4 },
	{ "extensions", "5;foo=bar\r\nhello\r\n0;x;y=\"a b\"\r\n\r\n", HTTP_CHUNKED_DONE, 0, 5 },
	{ "BWS before extension", "5 \t;foo\r\nhello\r\n0\r\n\r\n", HTTP_CHUNKED_DONE, 0, 5 },
	{ "trailers", "1\r\nx\r\n0\r\nX-T: v\r\nY:\r\nZ: a b\r\n\r\n", HTTP_CHUNKED_DONE, 0, 1 },
	{ "huge chunk, unfinished", "ffffffffffffffff\r\nabc", HTTP_CHUNKED_MORE, 0, 0 },
	{ "unfinished", "5\r\nhel", HTTP_CHUNKED_MORE, 0, 0 },
	{ "unfinished trailer", "0\r\nX: y\r\n", HTTP_CHUNKED_MORE, 0, 0 },
	{ "empty size", "\r\nhello\r\n", HTTP_CHUNKED_ERROR, 0, 0 },
	{ "not hex", "x\r\n", HTTP_CHUNKED_ERROR, 0, 0 },
	{ "0x prefix", "0x5\r\nhello\r\n", HTTP_CHUNKED_ERROR, 0, 0 },
	{ "negative", "-1\r\n", HTTP_CHUNKED_ERROR, 0, 0 },
	{ "leading space", " 5\r\nhello\r\n", HTTP_CHUNKED_ERROR, 0, 0 },
	{ "BWS without extension", "5 \r\nhello\r\n0\r\n\r\n", HTTP_CHUNKED_ERROR, 0, 0 },
	{ "overflow", "10000000000000000\r\n", HTTP_CHUNKED_ERROR, 0, 0 },
	{ "bare CR after size", "5\rhello\r\n", HTTP_CHUNKED_ERROR, 0, 0 },
	{ "bare CR in extension", "5;a\rb\r\nhello\r\n", HTTP_CHUNKED_ERROR, 0, 0 },
	{ "CTL in extension", "5;a\x01\r\nhello\r\n", HTTP_CHUNKED_ERROR, 0, 0 },
	{ "data too long", "5\r\nhelloX\r\n0\r\n\r\n", HTTP_CHUNKED_ERROR, 0, 0 },
	{ "bare CR after data", "5\r\nhello\rX0\r\n\r\n", HTTP_CHUNKED_ERROR, 0, 0 },
	{ "trailer obs-fold", "0\r\nX: a\r\n b\r\n\r\n", HTTP_CHUNKED_ERROR, 0, 0 },
	{ "trailer without colon", "0\r\nX\r\n\r\n", HTTP_CHUNKED_ERROR, 0, 0 },
	{ "trailer SP before colon", "0\r\nX : a\r\n\r\n", HTTP_CHUNKED_ERROR, 0, 0 },
	{ "trailer CTL", "0\r\nX: a\x7f\r\n\r\n", HTTP_CHUNKED_ERROR, 0, 0 },
	{ "final bare CR", "0\r\n\rX", HTTP_CHUNKED_ERROR, 0, 0 },
};

ParameterizedTestParameters(chunked, table)
{
	TP_INDEX_PARAMS(tc_cases);
}

/* Feeds raw[0..n) in pieces cut at the given points; returns the result and
 * the absolute offset consumed. */
static int tc_feed(const char *raw, size_t n, const size_t *cuts, size_t ncuts, size_t *at, uint64_t *total)
{
	struct http_chunked st = { 0 };
	size_t from = 0;

	for (size_t i = 0; i <= ncuts; i++) {
		size_t to = i < ncuts ? cuts[i] : n, used = (size_t)-1;
		enum http_chunked_result res = http_chunked_skip(&st, tp_place(raw + from, to - from), to - from, &used);
		cr_assert(used <= to - from, "consumed %zu of %zu", used, to - from);
		if (res != HTTP_CHUNKED_MORE) {
			*at = from + used;
			*total = st.total;
			return res;
		}
		cr_assert_eq(used, to - from);
		from = to;
	}
	*at = n;
	*total = st.total;
	return HTTP_CHUNKED_MORE;
}

ParameterizedTest(size_t *i, chunked, table)
{
	const struct tc_case *c = &tc_cases[*i];
	size_t n = strlen(c->raw), at, want_at = c->consumed ? c->consumed : n;
	uint64_t total;
	int res = tc_feed(c->raw, n, NULL, 0, &at, &total);

	cr_assert_eq(res, c->result, "%s: result %d, want %d", c->name, res, c->result);
	if (res == HTTP_CHUNKED_DONE) {
		cr_expect_eq(at, want_at, "%s: consumed %zu, want %zu", c->name, at, want_at);
		cr_expect_eq(total, c->total, "%s: total %llu", c->name, (unsigned long long)total);
	}

	/* The same outcome whatever the split: every single cut, then one
	 * byte at a time. */
	for (size_t k = 0; k <= n; k++) {
		size_t at2;
		uint64_t total2;
		int res2 = tc_feed(c->raw, n, &k, 1, &at2, &total2);
		cr_assert_eq(res2, res, "%s: split at %zu gave %d", c->name, k, res2);
		if (res == HTTP_CHUNKED_DONE) {
			cr_expect_eq(at2, at, "%s: split at %zu consumed %zu", c->name, k, at2);
			cr_expect_eq(total2, total, "%s: split at %zu total", c->name, k);
		}
	}
	size_t cuts[256];
	cr_assert(n < 256);
	for (size_t k = 0; k + 1 < n; k++)
		cuts[k] = k + 1;
	size_t at3;
	uint64_t total3;
	int res3 = tc_feed(c->raw, n, cuts, n ? n - 1 : 0, &at3, &total3);
	cr_assert_eq(res3, res, "%s: byte by byte gave %d", c->name, res3);
	if (res == HTTP_CHUNKED_DONE)
		cr_expect_eq(at3, at, "%s: byte by byte consumed %zu", c->name, at3);
}

Test(chunked, sticky_after_done_and_error)
{
	struct http_chunked st = { 0 };
	size_t used;

	cr_assert_eq(http_chunked_skip(&st, tp_place("0\r\n\r\n", 5), 5, &used), HTTP_CHUNKED_DONE);
	cr_assert_eq(http_chunked_skip(&st, tp_place("abc", 3), 3, &used), HTTP_CHUNKED_DONE);
	cr_expect_eq(used, 0);

	st = (struct http_chunked){ 0 };
	cr_assert_eq(http_chunked_skip(&st, tp_place("z", 1), 1, &used), HTTP_CHUNKED_ERROR);
	cr_assert_eq(http_chunked_skip(&st, tp_place("0\r\n\r\n", 5), 5, &used), HTTP_CHUNKED_ERROR);
}

Test(chunked, line_length_bounds)
{
	static char raw[40000];
	struct http_chunked st = { 0 };
	size_t used;

	/* A size line of 5000 leading zeros. */
	memset(raw, '0', 5000);
	cr_expect_eq(http_chunked_skip(&st, tp_place(raw, 5000), 5000, &used), HTTP_CHUNKED_ERROR);

	/* A long extension. */
	st = (struct http_chunked){ 0 };
	raw[0] = '1';
	raw[1] = ';';
	memset(raw + 2, 'e', 5000);
	cr_expect_eq(http_chunked_skip(&st, tp_place(raw, 5002), 5002, &used), HTTP_CHUNKED_ERROR);

	/* A long trailer line. */
	st = (struct http_chunked){ 0 };
	memcpy(raw, "0\r\nX: ", 6);
	memset(raw + 6, 'v', 5000);
	cr_expect_eq(http_chunked_skip(&st, tp_place(raw, 5006), 5006, &used), HTTP_CHUNKED_ERROR);

	/* Many short trailer lines: the section as a whole is bounded. */
	st = (struct http_chunked){ 0 };
	size_t n = (size_t)sprintf(raw, "0\r\n");
	while (n < 30000)
		n += (size_t)sprintf(raw + n, "X: 0123456789\r\n");
	cr_expect_eq(http_chunked_skip(&st, tp_place(raw, n), n, &used), HTTP_CHUNKED_ERROR);

	/* A size line just under the bound is fine. */
	st = (struct http_chunked){ 0 };
	memset(raw, '0', 4000);
	memcpy(raw + 4000, "\r\n\r\n", 4);
	cr_expect_eq(http_chunked_skip(&st, tp_place(raw, 4004), 4004, &used), HTTP_CHUNKED_DONE);
	cr_expect_eq(used, 4004);
}

Test(chunked, large_chunk_counts_total)
{
	struct http_chunked st = { 0 };
	static char data[70000];
	size_t used;

	cr_assert_eq(http_chunked_skip(&st, tp_place("10000\r\n", 7), 7, &used), HTTP_CHUNKED_MORE);
	memset(data, 'd', sizeof(data));
	cr_assert_eq(http_chunked_skip(&st, tp_place(data, 0x10000), 0x10000, &used), HTTP_CHUNKED_MORE);
	cr_expect_eq(st.total, 0x10000);
	cr_assert_eq(http_chunked_skip(&st, tp_place("\r\n0\r\n\r\nX", 8), 8, &used), HTTP_CHUNKED_DONE);
	cr_expect_eq(used, 7);
}
