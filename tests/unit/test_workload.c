/* test_workload.c - the seed-002 endpoint: its query parsing (a table of raw
 * queries against an unreadable page), then the endpoint over a real
 * struct server: counts, bounds and its 400s. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/endpoints.h"
#include "../../src/http/parse.h"
#include "../../src/workload/workload.h"
#include "guard.h"
#include "testserver.h"

struct query_case {
	const char *q;
	int want;          /* 0 or -1 */
	uint64_t delay, bucket;
	const char *why;   /* a word the reason must contain */
};

Test(workload, parse_query_table)
{
	static const struct query_case cases[] = {
		{ "delay=1&bucket=2", 0, 1, 2, NULL },
		{ "bucket=2&delay=1", 0, 1, 2, NULL },              /* either order */
		{ "delay=0&bucket=0", 0, 0, 0, NULL },
		{ "x=1&delay=5&y&bucket=7&z=", 0, 5, 7, NULL },     /* other keys ignored */
		{ "&&delay=1&&bucket=2&&", 0, 1, 2, NULL },         /* empty pieces */
		{ "delay=007&bucket=010", 0, 7, 10, NULL },         /* decimal, never octal */
		{ "delay=999999999&bucket=1", 0, 999999999, 1, NULL }, /* nine digits: the most */
		{ "delay=1000000000&bucket=1", -1, 0, 0, "delay" },
		{ "delay=99999999999999999999999&bucket=1", -1, 0, 0, "delay" },
		{ "", -1, 0, 0, "missing delay" },
		{ "delay=1", -1, 0, 0, "missing bucket" },
		{ "bucket=1", -1, 0, 0, "missing delay" },
		{ "delay=&bucket=1", -1, 0, 0, "delay" },
		{ "delay&bucket=1", -1, 0, 0, "delay" },
		{ "delay=1&bucket=", -1, 0, 0, "bucket" },
		{ "delay=-1&bucket=1", -1, 0, 0, "delay" },
		{ "delay=+1&bucket=1", -1, 0, 0, "delay" },
		{ "delay=1a&bucket=1", -1, 0, 0, "delay" },
		{ "delay=0x1&bucket=1", -1, 0, 0, "delay" },
		{ "delay= 1&bucket=1", -1, 0, 0, "delay" },
		{ "delay=1&bucket=2=3", -1, 0, 0, "bucket" },
		{ "delay=1&delay=1&bucket=1", -1, 0, 0, "twice" },
		{ "delay=1&bucket=1&bucket=2", -1, 0, 0, "twice" },
		{ "Delay=1&bucket=1", -1, 0, 0, "missing delay" },  /* keys are case-sensitive */
		{ "delayx=1&bucket=1", -1, 0, 0, "missing delay" },
		{ "dela=1&bucket=1", -1, 0, 0, "missing delay" },
		{ "delay=1%30&bucket=1", -1, 0, 0, "delay" },       /* no percent-decoding */
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const struct query_case *k = &cases[i];
		struct span q = guarded(k->q, strlen(k->q));
		struct work_query wq = { 12345, 12345, 12345 };
		const char *why = NULL;
		int r = workload_parse_query(q.p, q.len, &wq, &why);
		unguard(q);
		cr_expect_eq(r, k->want, "'%s': got %d", k->q, r);
		if (k->want == 0 && r == 0) {
			cr_expect_eq(wq.delay, k->delay, "'%s': delay %llu", k->q, (unsigned long long)wq.delay);
			cr_expect_eq(wq.bucket, k->bucket, "'%s': bucket %llu", k->q, (unsigned long long)wq.bucket);
			cr_expect_eq(wq.hold, 0, "'%s': hold %llu without hold=", k->q, (unsigned long long)wq.hold);
		} else if (r < 0) {
			cr_expect(why && strstr(why, k->why), "'%s': reason '%s' should mention '%s'", k->q,
				  why ? why : "(none)", k->why);
		}
	}
}

Test(workload, parse_query_absent)
{
	struct work_query wq;
	const char *why = NULL;
	cr_assert_eq(workload_parse_query(NULL, 0, &wq, &why), -1);
	cr_assert_str_eq(why, "missing delay");
}

/* Only len bytes are read: what follows is not part of the query. */
Test(workload, parse_query_stops_at_len)
{
	const char *s = "delay=1&bucket=2&bucket=3";
	struct work_query wq;
	const char *why = NULL;
	cr_assert_eq(workload_parse_query(s, 16, &wq, &why), 0, "%s", why);
	cr_assert_eq(wq.bucket, 2);
	cr_assert_eq(workload_parse_query(s, 15, &wq, &why), -1, "'bucket=' is cut empty");

	/* hold= is parsed too, and counts as a key seen once */
	const char *h = "delay=1&bucket=2&hold=7";
	cr_assert_eq(workload_parse_query(h, strlen(h), &wq, &why), 0, "%s", why);
	cr_assert_eq(wq.hold, 7);
	const char *hh = "delay=1&bucket=2&hold=7&hold=8";
	cr_assert_eq(workload_parse_query(hh, strlen(hh), &wq, &why), -1);
}

static struct test_server ts;

static void setup(void)
{
	test_server_init(&ts);
	ts.cfg.workload = true;
	ts.cfg.buckets = 4;
	ts.cfg.work_unit_us = 1;
	test_server_open(&ts);
	cr_assert_not_null(ts.srv.workload);
}

static void teardown(void)
{
	test_server_close(&ts);
}

/* Parses a GET for target and offers it to the endpoints. */
static bool ask(const char *target, struct dyn_response *out)
{
	char head[256];
	snprintf(head, sizeof(head), "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", target);
	struct http_request req;
	cr_assert_gt(http_parse_request(head, strlen(head), &ts.srv.limits, &req), 0, "%s", head);
	struct sockaddr_storage peer = { 0 };
	memset(out, 0, sizeof(*out));
	return endpoints_dispatch(&ts.srv, &peer, &req, out);
}

static void expect(const char *target, int status, const char *body)
{
	struct dyn_response r;
	cr_assert(ask(target, &r), "%s is the workload's", target);
	cr_expect_eq(r.status, status, "%s: %d", target, r.status);
	cr_expect(r.len >= strlen(body) && memcmp(r.body, body, strlen(body)) == 0, "%s: body '%.*s', want '%s'",
		  target, (int)r.len, r.body, body);
	free(r.body);
}

Test(workload, endpoint_counts_per_bucket, .init = setup, .fini = teardown)
{
	expect("/work?delay=0&bucket=3", 200, "1\n");
	expect("/work?bucket=3&delay=2", 200, "2\n");
	expect("/work?delay=0&bucket=0", 200, "1\n");
	expect("/work?delay=0&bucket=3", 200, "3\n");
}

Test(workload, endpoint_refuses_bad_queries, .init = setup, .fini = teardown)
{
	expect("/work?delay=0&bucket=4", 400, "workload: bucket 4 out of range (0..3)");
	expect("/work?delay=0", 400, "workload: missing bucket");
	expect("/work", 400, "workload: missing delay");
	/* 60 s of 1 us units is the most one request may ask for */
	expect("/work?delay=60000001&bucket=0", 400, "workload: delay+hold 60000001 x 1 us exceeds 60 s");
	expect("/work?delay=30000000&bucket=0&hold=30000001", 400, "workload: delay+hold 60000001 x 1 us exceeds 60 s");
	/* nothing was counted by the refusals */
	expect("/work?delay=0&bucket=0", 200, "1\n");
}

Test(workload, endpoint_claims_only_its_path, .init = setup, .fini = teardown)
{
	struct dyn_response r;
	cr_assert_not(ask("/work/", &r));
	cr_assert_not(ask("/workx?delay=0&bucket=0", &r));
	cr_assert_not(ask("/wor?delay=0&bucket=0", &r));
	cr_assert_not(ask("/", &r));
}
