/* test_json.c - the JSON escaper (a table of raw bytes -> escaped text, the
 * input against a guard page) and the JSON access-log line. */
#include <criterion/criterion.h>

#include <stdio.h>
#include <string.h>

#include "../../src/log/json.h"
#include "guard.h"

struct esc_case {
	const char *in;
	size_t len;     /* 0: strlen(in) */
	const char *want;
};

#define B(s) s, sizeof(s) - 1

static const struct esc_case esc_cases[] = {
	{ B("plain ascii"), "plain ascii" },
	{ B("q\"uote"), "q\\\"uote" },
	{ B("back\\slash"), "back\\\\slash" },
	{ B("tab\tnl\ncr\r"), "tab\\u0009nl\\u000acr\\u000d" },
	{ B("nul\0x"), "nul\\u0000x" },
	{ B("del\x7f"), "del\\u007f" },
	{ B("\x1b[31m"), "\\u001b[31m" },
	/* well-formed UTF-8 is kept: 2, 3 and 4 bytes */
	{ B("caf\xc3\xa9"), "caf\xc3\xa9" },
	{ B("\xe2\x82\xac"), "\xe2\x82\xac" },
	{ B("\xf0\x9f\x98\x80"), "\xf0\x9f\x98\x80" },
	{ B("\xf4\x8f\xbf\xbf"), "\xf4\x8f\xbf\xbf" }, /* U+10FFFF */
	/* every byte of an ill-formed sequence becomes U+FFFD */
	{ B("\xff"), "\\ufffd" },
	{ B("\x80"), "\\ufffd" },                      /* stray continuation */
	{ B("\xc0\xaf"), "\\ufffd\\ufffd" },           /* overlong '/' */
	{ B("\xc1\xbf"), "\\ufffd\\ufffd" },
	{ B("\xe0\x80\xaf"), "\\ufffd\\ufffd\\ufffd" }, /* overlong, 3 bytes */
	{ B("\xed\xa0\x80"), "\\ufffd\\ufffd\\ufffd" }, /* a surrogate */
	{ B("\xf4\x90\x80\x80"), "\\ufffd\\ufffd\\ufffd\\ufffd" }, /* above U+10FFFF */
	{ B("\xf5\x80\x80\x80"), "\\ufffd\\ufffd\\ufffd\\ufffd" },
	{ B("\xc3"), "\\ufffd" },                      /* truncated at the end */
	{ B("\xe2\x82"), "\\ufffd\\ufffd" },
	{ B("\xc3("), "\\ufffd(" },                    /* a bad continuation is read again */
};

Test(json, escape_table)
{
	for (size_t i = 0; i < sizeof(esc_cases) / sizeof(esc_cases[0]); i++) {
		const struct esc_case *t = &esc_cases[i];
		struct span in = guarded(t->in, t->len);
		char out[256];
		size_t n = json_escape(out, sizeof(out), in.p, in.len);
		unguard(in);
		cr_expect(n == strlen(t->want) && memcmp(out, t->want, n) == 0,
			  "case %zu: got '%.*s', want '%s'", i, (int)n, out, t->want);
	}
}

Test(json, escape_never_splits_an_escape_or_a_character)
{
	char out[16];
	/* "a" then an escape of 6 bytes: with 5 bytes of room only "a" fits */
	cr_expect_eq(json_escape(out, 5, "a\x01", 2), 1);
	/* a 4-byte character does not fit in 3 */
	cr_expect_eq(json_escape(out, 3, "\xf0\x9f\x98\x80", 4), 0);
	cr_expect_eq(json_escape(out, 2, "\"", 1), 2);
	cr_expect_eq(json_escape(out, 1, "\"", 1), 0);
}

Test(json, split_request_line)
{
	struct span m, t, p;
	json_split_request_line(SPAN_LIT("GET /a?b=c HTTP/1.1"), &m, &t, &p);
	cr_expect(m.len == 3 && !memcmp(m.p, "GET", 3));
	cr_expect(t.len == 6 && !memcmp(t.p, "/a?b=c", 6));
	cr_expect(p.len == 8 && !memcmp(p.p, "HTTP/1.1", 8));
	/* junk that is not a request line: all of it is the target */
	json_split_request_line(SPAN_LIT("garbage"), &m, &t, &p);
	cr_expect(m.p == NULL && p.p == NULL && t.len == 7);
	json_split_request_line((struct span){ 0 }, &m, &t, &p);
	cr_expect(m.p == NULL && p.p == NULL && t.len == 0);
}

Test(json, access_line_fields_and_nulls)
{
	char line[4096];
	struct json_access a = {
		.time = "2026-11-22T19:22:38.123Z", .client = "::1",
		.method = SPAN_LIT("GET"), .target = SPAN_LIT("/x\"y"), .protocol = SPAN_LIT("HTTP/1.1"),
		.status = 200, .bytes = 13, .duration_us = 42, .queue_us = 7, .service_us = 35, .first_byte_us = 30,
		.referer = { 0 }, .user_agent = SPAN_LIT("ua\\1"), .model = "epoll", .worker = 1234,
	};
	size_t n = json_access_line(line, sizeof(line), &a);
	const char *want = "{\"time\":\"2026-11-22T19:22:38.123Z\",\"client\":\"::1\",\"method\":\"GET\","
			   "\"target\":\"/x\\\"y\",\"protocol\":\"HTTP/1.1\",\"status\":200,\"bytes\":13,"
			   "\"duration_us\":42,\"queue_us\":7,\"service_us\":35,\"first_byte_us\":30,\"referer\":null,\"user_agent\":\"ua\\\\1\",\"model\":\"epoll\","
			   "\"worker\":1234}\n";
	cr_expect(n == strlen(want) && memcmp(line, want, n) == 0, "got %.*s", (int)n, line);
}

Test(json, access_line_is_cut_to_fit)
{
	/* 8 KiB of quotes in each string: 16 KiB escaped each, into 4 KiB */
	static char big[8192];
	memset(big, '"', sizeof(big));
	char line[4096];
	struct json_access a = {
		.time = "t", .client = "c", .method = SPAN_LIT("GET"), .target = { big, sizeof(big) },
		.protocol = SPAN_LIT("HTTP/1.1"), .status = 200, .referer = { big, sizeof(big) },
		.user_agent = { big, sizeof(big) }, .model = "m", .worker = 1,
	};
	size_t n = json_access_line(line, sizeof(line), &a);
	cr_assert(n <= sizeof(line));
	cr_expect(line[n - 1] == '\n' && line[n - 2] == '}');
	cr_expect(memmem(line, n, "\"model\":\"m\",\"worker\":1}", 23) != NULL, "the tail survives the cut");
	/* no escape is cut in half: every backslash is followed by its quote */
	for (size_t i = 0; i < n; i++)
		if (line[i] == '\\') {
			cr_expect(line[i + 1] == '"', "at %zu", i);
			i++;
		}
}

Test(json, access_line_says_why_a_request_was_shed)
{
	char line[4096];
	struct json_access a = { .time = "t", .client = "c", .status = 503, .model = "m", .worker = 1, .shed = true };
	size_t n = json_access_line(line, sizeof(line), &a);
	cr_expect(memmem(line, n, "\"shed\":\"queue_wait\"", 19) != NULL, "got %.*s", (int)n, line);
	a.refused = "full"; /* a refused connection: the reason that holds is why it was refused */
	n = json_access_line(line, sizeof(line), &a);
	cr_expect(memmem(line, n, "\"shed\":\"full\"", 13) != NULL && memmem(line, n, "queue_wait", 10) == NULL,
		  "got %.*s", (int)n, line);
	a.refused = "connections";
	n = json_access_line(line, sizeof(line), &a);
	cr_expect(memmem(line, n, "\"shed\":\"connections\"", 20) != NULL && memmem(line, n, "queue_wait", 10) == NULL,
		  "got %.*s", (int)n, line);
}
