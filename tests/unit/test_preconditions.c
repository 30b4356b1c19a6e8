/* test_preconditions.c - conditional request evaluation (RFC 9110 13.2.2) and
 * entity-tag list comparison, over hand-built requests. */
#include <criterion/criterion.h>

#include <string.h>
#include <time.h>

#include "../../src/http/response.h"

#define ETAG "\"5f5e1000-7c\""
#define MTIME ((time_t)1600000000)                   /* Sun, 13 Sep 2020 12:26:40 GMT */
#define D_MTIME "Sun, 13 Sep 2020 12:26:40 GMT"
#define D_OLDER "Sat, 01 Jan 2000 00:00:00 GMT"
#define D_NEWER "Fri, 01 Jan 2100 00:00:00 GMT"

static const struct http_validators V = { ETAG, sizeof(ETAG) - 1, MTIME };

static struct span sp(const char *s)
{
	return s ? (struct span){ s, strlen(s) } : (struct span){ NULL, 0 };
}

struct pre_case {
	enum http_method method;
	const char *if_match, *ius, *inm, *ims;
	int want;
};

static const struct pre_case pre_cases[] = {
	/* nothing conditional */
	{ HTTP_GET, NULL, NULL, NULL, NULL, 0 },
	/* 1. If-Match: strong comparison, "*" matches, lists */
	{ HTTP_GET, ETAG, NULL, NULL, NULL, 0 },
	{ HTTP_GET, "*", NULL, NULL, NULL, 0 },
	{ HTTP_GET, "\"a\", " ETAG, NULL, NULL, NULL, 0 },
	{ HTTP_GET, "\"a\"", NULL, NULL, NULL, 412 },
	{ HTTP_GET, "W/" ETAG, NULL, NULL, NULL, 412 },
	{ HTTP_GET, "\"a\", W/" ETAG, NULL, NULL, NULL, 412 },
	{ HTTP_HEAD, "\"a\"", NULL, NULL, NULL, 412 },
	{ HTTP_GET, "", NULL, NULL, NULL, 412 },
	/* only a lone "*" is "*" */
	{ HTTP_GET, "*junk", NULL, NULL, NULL, 412 },
	{ HTTP_GET, "**", NULL, NULL, NULL, 412 },
	{ HTTP_GET, "*\"a\"", NULL, NULL, NULL, 412 },
	{ HTTP_GET, " * ", NULL, NULL, NULL, 0 },
	{ HTTP_GET, NULL, NULL, "*junk", NULL, 0 },
	/* 2. If-Unmodified-Since: only without If-Match; invalid dates ignored */
	{ HTTP_GET, NULL, D_MTIME, NULL, NULL, 0 },
	{ HTTP_GET, NULL, D_NEWER, NULL, NULL, 0 },
	{ HTTP_GET, NULL, D_OLDER, NULL, NULL, 412 },
	{ HTTP_GET, NULL, "yesterday", NULL, NULL, 0 },
	{ HTTP_GET, ETAG, D_OLDER, NULL, NULL, 0 },    /* If-Match wins */
	{ HTTP_GET, "\"a\"", D_NEWER, NULL, NULL, 412 },
	/* 3. If-None-Match after both: a failed precondition beats a 304 */
	{ HTTP_GET, NULL, NULL, ETAG, NULL, 304 },
	{ HTTP_GET, NULL, NULL, "W/" ETAG, NULL, 304 }, /* weak comparison */
	{ HTTP_GET, NULL, NULL, "*", NULL, 304 },
	{ HTTP_GET, NULL, NULL, "\"a\"", NULL, 0 },
	{ HTTP_GET, "\"a\"", NULL, ETAG, NULL, 412 },
	{ HTTP_GET, NULL, D_OLDER, ETAG, NULL, 412 },
	{ HTTP_GET, ETAG, NULL, ETAG, NULL, 304 },
	{ HTTP_GET, ETAG, D_OLDER, ETAG, NULL, 304 },
	{ HTTP_POST, NULL, NULL, ETAG, NULL, 412 },      /* not GET/HEAD: 412, not 304 */
	/* 4. If-Modified-Since only without If-None-Match, only for GET/HEAD */
	{ HTTP_GET, NULL, NULL, NULL, D_MTIME, 304 },
	{ HTTP_HEAD, NULL, NULL, NULL, D_NEWER, 304 },
	{ HTTP_GET, NULL, NULL, NULL, D_OLDER, 0 },
	{ HTTP_GET, NULL, NULL, NULL, "garbage", 0 },
	{ HTTP_GET, NULL, NULL, "\"a\"", D_MTIME, 0 },  /* If-None-Match decides */
	{ HTTP_POST, NULL, NULL, NULL, D_MTIME, 0 },
	{ HTTP_GET, "\"a\"", NULL, NULL, D_MTIME, 412 },
	{ HTTP_GET, NULL, D_OLDER, NULL, D_MTIME, 412 },
};

Test(preconditions, precondition_order)
{
	for (size_t i = 0; i < sizeof(pre_cases) / sizeof(pre_cases[0]); i++) {
		const struct pre_case *c = &pre_cases[i];
		struct http_request r = { .method = c->method };
		r.if_match = sp(c->if_match);
		r.if_unmodified_since = sp(c->ius);
		r.if_none_match = sp(c->inm);
		r.if_modified_since = sp(c->ims);
		int got = http_preconditions(&r, &V);
		cr_expect_eq(got, c->want,
			     "case %zu (%s; If-Match %s; IUS %s; INM %s; IMS %s): %d, want %d", i,
			     http_method_name(c->method), c->if_match ? c->if_match : "-",
			     c->ius ? c->ius : "-", c->inm ? c->inm : "-", c->ims ? c->ims : "-", got,
			     c->want);
	}
}

/* Step 5: If-Range only decides whether a Range is honoured. */
Test(preconditions, range_applies)
{
	time_t now = MTIME + 100;
	struct http_request r = { .method = HTTP_GET };
	cr_expect(!http_range_applies(&r, &V, now), "no Range");
	r.range = sp("bytes=0-1");
	cr_expect(http_range_applies(&r, &V, now));
	r.if_range = sp(ETAG);
	cr_expect(http_range_applies(&r, &V, now));
	r.if_range = sp("W/" ETAG);
	cr_expect(!http_range_applies(&r, &V, now), "weak tag in If-Range");
	r.if_range = sp("\"other\"");
	cr_expect(!http_range_applies(&r, &V, now));
	r.if_range = sp(D_MTIME);
	cr_expect(http_range_applies(&r, &V, now));
	cr_expect(!http_range_applies(&r, &V, MTIME), "Last-Modified of this second is weak");
	r.if_range = sp(D_OLDER);
	cr_expect(!http_range_applies(&r, &V, now));
	r.if_range = sp(NULL);
	r.method = HTTP_POST;
	cr_expect(!http_range_applies(&r, &V, now), "Range is defined for GET only");
}

Test(preconditions, etag_lists)
{
	struct span f = sp("W/\"x\", " ETAG);
	cr_expect(http_etag_list_matches(f, ETAG, strlen(ETAG)));
	cr_expect(http_etag_list_matches_strong(f, ETAG, strlen(ETAG)));
	f = sp("\"x\",W/" ETAG);
	cr_expect(http_etag_list_matches(f, ETAG, strlen(ETAG)));
	cr_expect(!http_etag_list_matches_strong(f, ETAG, strlen(ETAG)));
	f = sp("\"5f5e1000-7\"");
	cr_expect(!http_etag_list_matches_strong(f, ETAG, strlen(ETAG)), "a prefix is no match");
}

/* RFC 9110 5.3: If-Match / If-None-Match over several field lines (as the
 * parser records them: first value to last, other fields between) */
Test(preconditions, lists_over_several_field_lines)
{
	static const char im[] = "\"a\"\r\nX-Other: " ETAG "\r\nIf-Match: \"b\", " ETAG;
	static const char im_no[] = "\"a\"\r\nX-Other: " ETAG "\r\nif-match: \"b\"";
	static const char inm[] = "\"a\"\r\nIf-None-Match: W/" ETAG;
	struct http_request r = { .method = HTTP_GET };

	r.if_match = sp(im);
	r.if_match_lines = 2;
	cr_expect_eq(http_preconditions(&r, &V), 0, "the tag on the second If-Match line counts");
	r.if_match = sp(im_no);
	cr_expect_eq(http_preconditions(&r, &V), 412, "a tag in another field does not");
	r.if_match = sp(NULL);
	r.if_match_lines = 0;
	r.if_none_match = sp(inm);
	r.if_none_match_lines = 2;
	cr_expect_eq(http_preconditions(&r, &V), 304);
}

Test(preconditions, status_texts)
{
	cr_expect_str_eq(http_status_text(100), "Continue");
	cr_expect_str_eq(http_status_text(412), "Precondition Failed");
	cr_expect_str_eq(http_status_text(417), "Expectation Failed");
}
