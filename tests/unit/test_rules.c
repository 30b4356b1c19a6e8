/* test_rules.c - redirect and header rules: '*' globs and their captures,
 * hosts, targets with $N and placeholders, bad rules refused, and the steps
 * over a response value (fields added and removed, CORS) and their bytes on
 * the wire. */
#include <criterion/criterion.h>

#include <stdlib.h>
#include <string.h>

#include "../../src/http/date.h"
#include "../../src/http1/serialize.h"
#include "../../src/site/rule_steps.h"
#include "../../src/site/rules.h"

static const struct http_limits lim = { 8192, 16384, 100 };

static struct http_request parse(const char *raw)
{
	struct http_request req;
	cr_assert_gt(http_parse_request(raw, strlen(raw), &lim, &req), 0, "%s", raw);
	return req;
}

Test(rules, glob_captures_in_order)
{
	struct rules_capture cap[RULES_CAPTURES];
	size_t n = 0;
	cr_assert(rules_glob_match("/a/*/b/*", "/a/x/y/b/z", 10, false, cap, &n));
	cr_assert_eq(n, 2);
	cr_assert_eq(cap[0].len, 3);
	cr_assert(strncmp(cap[0].p, "x/y", 3) == 0);
	cr_assert_eq(cap[1].len, 1);
	cr_assert_eq(cap[1].p[0], 'z');
	n = 0;
	cr_assert(rules_glob_match("/old.html", "/old.html", 9, false, cap, &n));
	cr_assert_eq(n, 0);
	cr_assert_not(rules_glob_match("/old.html", "/old.htm", 8, false, cap, &n));
	cr_assert_not(rules_glob_match("/old.html", "/old.html/x", 11, false, cap, &n));
	cr_assert_not(rules_glob_match("/OLD.html", "/old.html", 9, false, cap, &n));
	cr_assert(rules_glob_match("WWW.*", "www.example.com", 15, true, cap, &n));
	cr_assert_eq(n, 1);
	cr_assert_eq(cap[0].len, 11);
	n = 0;
	cr_assert(rules_glob_match("/*", "/", 1, false, cap, &n)); /* '*' matches nothing too */
	cr_assert_eq(cap[0].len, 0);
}

Test(rules, a_hostile_path_is_bounded_not_slow)
{
	/* nine stars against a path of 4000 'a's without the final 'b': each
	 * star backtracks over the rest; the step bound stops it */
	static char path[4001];
	memset(path, 'a', 4000);
	struct rules_capture cap[RULES_CAPTURES];
	size_t n = 0;
	cr_assert_not(rules_glob_match("/*a*a*a*a*a*a*a*a*b", path, 4000, false, cap, &n));
	cr_assert_eq(n, 0);
}

static struct redirect_rules redirects;

static void add_redirect(const char *pattern, const char *value)
{
	char why[256];
	cr_assert_eq(redirect_rule_add(&redirects, pattern, value, why, sizeof(why)), 0, "%s: %s", pattern, why);
}

static const char *redirect(const char *raw, int *status)
{
	static char loc[1024];
	struct http_request req = parse(raw);
	*status = rule_step_redirect(&redirects, &req, loc, sizeof(loc));
	return *status ? loc : NULL;
}

Test(rules, redirects_first_match_wins_with_captures_and_placeholders)
{
	memset(&redirects, 0, sizeof(redirects));
	add_redirect("/old.html", "301 /new.html");
	add_redirect("/blog/*", "308 /posts/$1");
	add_redirect("//www.*/*", "301 https://$1/$2");
	add_redirect("/go/*", "302 https://{host}/to?p={path}&{query}");
	add_redirect("/x*", "301 /$1");
	add_redirect("/h/*", "301 {host}/$1");
	add_redirect("/*", "307 /fallthrough");
	int st;
	cr_assert_str_eq(redirect("GET /old.html HTTP/1.1\r\nHost: a\r\n\r\n", &st), "/new.html");
	cr_assert_eq(st, 301);
	/* the query is kept, the capture percent-encoded again */
	cr_assert_str_eq(redirect("GET /blog/2024/a%20b?x=1 HTTP/1.1\r\nHost: a\r\n\r\n", &st),
			 "/posts/2024/a%20b?x=1");
	cr_assert_eq(st, 308);
	/* decoded and canonical first: no "//evil" Location from a raw path */
	cr_assert_str_eq(redirect("GET /blog//evil.example/../x HTTP/1.1\r\nHost: a\r\n\r\n", &st), "/posts/x");
	cr_assert_str_eq(redirect("GET /a/b HTTP/1.1\r\nHost: WWW.Example.com:8080\r\n\r\n", &st),
			 "https://Example.com/a/b");
	cr_assert_eq(st, 301);
	cr_assert_str_eq(redirect("GET /go/x?q=1 HTTP/1.1\r\nHost: h.example\r\n\r\n", &st),
			 "https://h.example/to?p=/go/x&q=1");
	/* a capture starting with '/' after a path target's '/': still this site */
	cr_assert_str_eq(redirect("GET /x/evil.example/p HTTP/1.1\r\nHost: a\r\n\r\n", &st), "/evil.example/p");
	cr_assert_str_eq(redirect("GET /h/p HTTP/1.0\r\n\r\n", &st), "/p", "no Host: not //p");
	cr_assert_str_eq(redirect("GET /other HTTP/1.1\r\nHost: a\r\n\r\n", &st), "/fallthrough");
	cr_assert_eq(st, 307);
}

Test(rules, no_rule_no_redirect)
{
	memset(&redirects, 0, sizeof(redirects));
	add_redirect("/old.html", "301 /new.html");
	int st;
	cr_assert_null(redirect("GET /old.htm HTTP/1.1\r\nHost: a\r\n\r\n", &st));
	cr_assert_null(redirect("GET /%00 HTTP/1.1\r\nHost: a\r\n\r\n", &st)); /* does not resolve */
	cr_assert_eq(st, 0);
}

Test(rules, bad_redirects_are_refused_with_a_reason)
{
	static const char *const bad[][2] = {
		{ "old.html", "301 /new" },         /* not a path */
		{ "//host", "301 /new" },           /* host without a path */
		{ "/a", "303 /new" },               /* not a redirect status we send */
		{ "/a", "301" },                    /* no target */
		{ "/a", "301 new" },                /* relative target */
		{ "/a", "301 //other.example/" },   /* another site, without a scheme */
		{ "/a/*", "301 /b/$2" },            /* one star, $2 */
		{ "/a", "301 /b/{nope}" },          /* unknown placeholder */
		{ "/a", "301 /b c" },               /* a space in the target */
		{ "/*/*/*/*/*/*/*/*/*/*", "301 /" }, /* ten stars */
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct redirect_rules r = { 0 };
		char why[256] = "";
		cr_assert_eq(redirect_rule_add(&r, bad[i][0], bad[i][1], why, sizeof(why)), -1, "%s = %s", bad[i][0],
			     bad[i][1]);
		cr_assert_neq(why[0], '\0');
		cr_assert_eq(r.n, 0);
	}
}

Test(rules, bad_header_rules_are_refused)
{
	static const char *const bad[][2] = {
		{ "/", "NoColon" }, { "/", "Bad Name: x" }, { "/", "X-A:" },
		{ "/", "Content-Length: 5" }, { "/", "date: -" }, { "nonsense", "X-A: b" },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct header_rules r = { 0 };
		char why[256] = "";
		cr_assert_eq(header_rule_add(&r, bad[i][0], bad[i][1], why, sizeof(why)), -1, "%s = %s", bad[i][0],
			     bad[i][1]);
		cr_assert_neq(why[0], '\0');
	}
}

Test(rules, cors_origin_list)
{
	const char *list = "https://a.example http://localhost:3000";
	cr_assert(cors_origin_allowed(list, "https://a.example", 17));
	cr_assert(cors_origin_allowed(list, "http://localhost:3000", 21));
	cr_assert_not(cors_origin_allowed(list, "https://a.example.evil", 22));
	cr_assert_not(cors_origin_allowed(list, "https://a", 9));
	cr_assert_not(cors_origin_allowed(list, NULL, 0));
	cr_assert(cors_origin_allowed("*", "https://x", 9));
	cr_assert_not(cors_origin_allowed("", "https://x", 9));
}

/* ---- the steps over a response value, and what goes on the wire ---- */

static struct h1_out out;
static struct h1_seg segs[16];
static struct header_rules headers;

static void setup(void)
{
	memset(&out, 0, sizeof(out));
	response_init(&out.resp);
	out.segs = segs;
	out.seg_max = 16;
	out.hdr = malloc(256); /* grown by h1_serialize as the lines need */
	out.hdr_cap = 256;
	memset(&headers, 0, sizeof(headers));
}

static void teardown(void)
{
	h1_out_reset(&out);
	free(out.hdr);
}

static void add_header(const char *pattern, const char *value)
{
	char why[256];
	cr_assert_eq(header_rule_add(&headers, pattern, value, why, sizeof(why)), 0, "%s: %s", pattern, why);
}

/* The head as sent, Date blanked. */
static const char *head(void)
{
	static char b[8192];
	struct h1_framing f = { "Server: t\r\nX-Listener: l\r\n", false, true, false };
	cr_assert_eq(h1_serialize(&out, &f), 0);
	memcpy(b, out.hdr, out.head_len);
	b[out.head_len] = '\0';
	char *d = strstr(b, "Date: ");
	cr_assert_not_null(d);
	memset(d + 6, 'D', HTTP_DATE_LEN);
	return b;
}

#define DATE "DDDDDDDDDDDDDDDDDDDDDDDDDDDDD"

static void file_200(struct response *r)
{
	r->status = 200;
	response_field_str(r, "ETag", "\"1-2\"");
	response_field_str(r, "Content-Type", "text/html; charset=utf-8");
	response_content_length(r);
	response_body_memory(r, "hello", 5, NULL);
}

TestSuite(rule_steps, .init = setup, .fini = teardown);

Test(rule_steps, header_rules_add_by_path_and_type_and_remove)
{
	add_header("/", "X-Content-Type-Options: nosniff");
	add_header("text/html", "Content-Security-Policy: default-src 'self'");
	add_header("/docs/", "Referrer-Policy: no-referrer");
	add_header("*.css", "X-Never: here");
	add_header("/", "ETag: -");
	add_header("/", "Server: -");
	file_200(&out.resp);
	struct http_request req = parse("GET /docs/ HTTP/1.1\r\nHost: a\r\n\r\n");
	rule_step_response(&headers, "", "index.html", &req, &out.resp);
	cr_assert_str_eq(head(), "HTTP/1.1 200 OK\r\nX-Listener: l\r\nDate: " DATE "\r\n"
				 "Content-Type: text/html; charset=utf-8\r\nContent-Length: 5\r\n"
				 "X-Content-Type-Options: nosniff\r\n"
				 "Content-Security-Policy: default-src 'self'\r\n"
				 "Referrer-Policy: no-referrer\r\n\r\n");
}

Test(rule_steps, many_rules_take_no_field_slots)
{
	/* more added fields than a value holds: still one well-formed head */
	for (int i = 0; i < RULES_MAX; i++)
		add_header("/", "X-Many: 0123456789012345678901234567890123456789");
	file_200(&out.resp);
	struct http_request req = parse("GET /x HTTP/1.1\r\nHost: a\r\n\r\n");
	rule_step_response(&headers, "", "index.html", &req, &out.resp);
	const char *h = head();
	size_t n = 0;
	for (const char *p = h; (p = strstr(p, "X-Many: ")); p++)
		n++;
	cr_assert_eq(n, RULES_MAX);
	cr_assert_not(out.resp.broken);
}

Test(rule_steps, added_only_to_success_and_redirect_answers)
{
	add_header("/", "X-Frame-Options: DENY");
	add_header("/", "Server: -");
	out.resp.status = 404;
	response_field_str(&out.resp, "Content-Type", "text/html");
	response_content_length(&out.resp);
	struct http_request req = parse("GET /missing HTTP/1.1\r\nHost: a\r\n\r\n");
	rule_step_response(&headers, "", "index.html", &req, &out.resp);
	const char *h = head();
	cr_assert_null(strstr(h, "X-Frame-Options"), "%s", h);
	cr_assert_null(strstr(h, "Server:"), "a removal applies to every answer: %s", h);
}

Test(rule_steps, a_server_rule_replaces_the_sessions_own)
{
	add_header("/", "Server: example");
	file_200(&out.resp);
	struct http_request req = parse("GET / HTTP/1.1\r\nHost: a\r\n\r\n");
	rule_step_response(&headers, "", "index.html", &req, &out.resp);
	const char *h = head();
	cr_assert_null(strstr(h, "Server: t"), "%s", h);
	cr_assert_not_null(strstr(h, "\r\nServer: example\r\n"), "%s", h);
}

Test(rule_steps, cors_get_from_a_listed_origin)
{
	file_200(&out.resp);
	response_field_str(&out.resp, "Vary", "Accept-Encoding");
	struct http_request req = parse("GET / HTTP/1.1\r\nHost: a\r\nOrigin: https://app.example\r\n\r\n");
	rule_step_response(&headers, "https://app.example", "index.html", &req, &out.resp);
	const char *h = head();
	cr_assert_not_null(strstr(h, "\r\nAccess-Control-Allow-Origin: https://app.example\r\n"), "%s", h);
	cr_assert_not_null(strstr(h, "\r\nVary: Accept-Encoding, Origin\r\n"), "%s", h);
}

Test(rule_steps, cors_get_from_another_origin_varies_but_is_not_allowed)
{
	file_200(&out.resp);
	struct http_request req = parse("GET / HTTP/1.1\r\nHost: a\r\nOrigin: https://evil.example\r\n\r\n");
	rule_step_response(&headers, "https://app.example", "index.html", &req, &out.resp);
	const char *h = head();
	cr_assert_null(strstr(h, "Access-Control"), "%s", h);
	cr_assert_not_null(strstr(h, "\r\nVary: Origin\r\n"), "%s", h);
}

Test(rule_steps, cors_preflight)
{
	struct http_request req = parse("OPTIONS /api/x HTTP/1.1\r\nHost: a\r\nOrigin: https://app.example\r\n"
					"Access-Control-Request-Method: GET\r\n"
					"Access-Control-Request-Headers: x-token\r\n\r\n");
	cr_assert(rule_step_is_preflight("*", &req));
	rule_step_preflight("*", &req, &out.resp);
	cr_assert_str_eq(head(), "HTTP/1.1 204 No Content\r\nServer: t\r\nX-Listener: l\r\nDate: " DATE "\r\n"
				 "Access-Control-Allow-Origin: *\r\n"
				 "Access-Control-Allow-Methods: GET, HEAD\r\n"
				 "Access-Control-Allow-Headers: x-token\r\n"
				 "Access-Control-Max-Age: 86400\r\n\r\n");
	/* not a preflight: no Access-Control-Request-Method, another origin,
	 * another method, or CORS off */
	struct http_request plain = parse("OPTIONS / HTTP/1.1\r\nHost: a\r\nOrigin: https://app.example\r\n\r\n");
	cr_assert_not(rule_step_is_preflight("*", &plain));
	cr_assert_not(rule_step_is_preflight("https://other.example", &req));
	cr_assert_not(rule_step_is_preflight("", &req));
	struct http_request get = parse("GET / HTTP/1.1\r\nHost: a\r\nOrigin: https://app.example\r\n"
					"Access-Control-Request-Method: GET\r\n\r\n");
	cr_assert_not(rule_step_is_preflight("*", &get));
}

Test(rule_steps, cors_on_a_full_store_takes_no_store)
{
	/* a redirect whose Location filled the store and the heap slot: the
	 * CORS fields still fit, the value is not broken */
	out.resp.status = 301;
	char *fill = response_alloc(&out.resp, RESPONSE_STORE - out.resp.stored);
	cr_assert_not_null(fill);
	char *big = response_alloc(&out.resp, 4000);
	cr_assert_not_null(big);
	response_field_str(&out.resp, "Vary", "Accept");
	struct http_request req = parse("GET / HTTP/1.1\r\nHost: a\r\nOrigin: https://app.example\r\n\r\n");
	rule_step_response(&headers, "https://app.example", "index.html", &req, &out.resp);
	cr_assert_not(out.resp.broken);
	const char *h = head();
	cr_assert_not_null(strstr(h, "\r\nVary: Accept\r\n"), "%s", h);
	cr_assert_not_null(strstr(h, "\r\nAccess-Control-Allow-Origin: https://app.example\r\nVary: Origin\r\n"), "%s", h);
}
