/* parse_json.c - prints what spindle's request parser makes of raw bytes,
 * as JSON, for the differential test against h11
 * (tests/integration/test_differential.py).
 *
 * Input: one request per line of standard input, hex-encoded. Output: one
 * JSON object per line: the parser's return code and, for a complete head,
 * the method, target, version, the header values the parser keeps, the
 * body framing, and what http_chunked_skip makes of the bytes after the
 * head (or how much of a Content-Length body is there). Strings are bytes
 * as code points U+0000-U+00FF (read them back as latin-1). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/http/parse.h"

static void put_str(const char *name, struct span s)
{
	printf(", \"%s\": ", name);
	if (!s.p) {
		printf("null");
		return;
	}
	putchar('"');
	for (size_t i = 0; i < s.len; i++) {
		unsigned char ch = (unsigned char)s.p[i];
		if (ch == '"' || ch == '\\')
			printf("\\%c", ch);
		else if (ch >= 0x20 && ch < 0x7f)
			putchar(ch);
		else
			printf("\\u%04x", ch);
	}
	putchar('"');
}

static int hex(int c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

static void describe(const char *buf, size_t len)
{
	static const struct http_limits lim = { 8192, 16384, 100 }; /* server.conf's defaults */
	struct http_request r;
	int rc = http_parse_request(buf, len, &lim, &r);

	printf("{\"rc\": %d", rc);
	if (rc <= 0) {
		printf("}\n");
		return;
	}
	put_str("method", r.method_name);
	put_str("target", r.target);
	printf(", \"version_minor\": %d", r.version_minor);
	put_str("host", r.host);
	put_str("connection", r.connection);
	put_str("if-none-match", r.if_none_match);
	put_str("if-modified-since", r.if_modified_since);
	put_str("range", r.range);
	put_str("if-range", r.if_range);
	put_str("user-agent", r.user_agent);
	put_str("referer", r.referer);
	printf(", \"keep_alive\": %s, \"header_count\": %zu", r.keep_alive ? "true" : "false", r.header_count);
	size_t rest = len - (size_t)rc;
	if (r.chunked) {
		struct http_chunked st = { 0 };
		size_t used = 0;
		enum http_chunked_result res = http_chunked_skip(&st, buf + rc, rest, &used);
		printf(", \"framing\": \"chunked\", \"body\": \"%s\", \"body_len\": %llu, \"consumed\": %zu",
		       res == HTTP_CHUNKED_DONE ? "done" : res == HTTP_CHUNKED_MORE ? "more" : "error",
		       (unsigned long long)st.total, (size_t)rc + used);
	} else if (r.has_content_length) {
		bool whole = rest >= r.content_length;
		printf(", \"framing\": \"length\", \"body\": \"%s\", \"body_len\": %llu, \"consumed\": %llu",
		       whole ? "done" : "more", (unsigned long long)r.content_length,
		       (unsigned long long)(whole ? (size_t)rc + r.content_length : len));
	} else {
		printf(", \"framing\": \"none\", \"body\": \"done\", \"body_len\": 0, \"consumed\": %d", rc);
	}
	printf("}\n");
}

int main(void)
{
	char *line = NULL;
	size_t cap = 0;
	ssize_t n;
	while ((n = getline(&line, &cap, stdin)) > 0) {
		size_t len = 0;
		for (ssize_t i = 0; i + 1 < n; i += 2) {
			int hi = hex(line[i]), lo = hex(line[i + 1]);
			if (hi < 0 || lo < 0)
				break;
			line[len++] = (char)(hi << 4 | lo);
		}
		/* an exact-size copy, so an over-read shows under ASan */
		char *buf = malloc(len ? len : 1);
		if (!buf)
			return 1;
		memcpy(buf, line, len);
		describe(buf, len);
		free(buf);
		fflush(stdout);
	}
	free(line);
	return 0;
}
