/* test_encoding.c - encoding_choose (Accept-Encoding, RFC 9110 12.5.3) and
 * the precompressed = list: a table of fields -> chosen representation. */
#include <criterion/criterion.h>

#include <string.h>

#include "../../src/http/encoding.h"
#include "../../src/http/parse.h"

#define ID ENCODING_IDENTITY
#define NA ENCODING_NOT_ACCEPTABLE
#define ALL ((1u << CODING_BR) | (1u << CODING_ZSTD) | (1u << CODING_GZIP))
#define GZ_ONLY (1u << CODING_GZIP)

static int choose(const char *field, const char *prefs_text, unsigned avail)
{
	struct encoding_prefs prefs;
	char why[128];
	cr_assert_eq(encoding_prefs_parse(prefs_text, &prefs, why, sizeof(why)), 0, "%s", why);
	struct span s = { field, field ? strlen(field) : 0 };
	return encoding_choose(s, field ? 1 : 0, &prefs, avail);
}

static const struct {
	const char *field;   /* NULL: no Accept-Encoding */
	const char *prefs;
	unsigned avail;
	int want;
} cases[] = {
	{ NULL, "br zstd gzip", ALL, ID },                 /* silent client: identity */
	{ "", "br zstd gzip", ALL, ID },                   /* empty: identity only */
	{ "gzip", "br zstd gzip", ALL, CODING_GZIP },
	{ "gzip, br", "br zstd gzip", ALL, CODING_BR },    /* tie: server's order */
	{ "gzip, br", "gzip br", ALL, CODING_GZIP },
	{ "gzip, deflate, br, zstd", "zstd br gzip", ALL, CODING_ZSTD },
	{ "br;q=0.5, gzip", "br zstd gzip", ALL, CODING_GZIP }, /* client's q first */
	{ "br;q=0.5, gzip;q=0.4", "br zstd gzip", ALL, CODING_BR },
	{ "BR", "br", ALL, CODING_BR },                    /* case-insensitive */
	{ "x-gzip", "gzip", ALL, CODING_GZIP },            /* RFC 9110 8.4.1.3 */
	{ "br", "br zstd gzip", GZ_ONLY, ID },             /* no br sidecar */
	{ "br;q=0", "br", ALL, ID },                       /* refused coding */
	{ "*", "br zstd gzip", ALL, CODING_BR },
	{ "*;q=0.5, br;q=0", "br zstd gzip", ALL, CODING_ZSTD },
	{ "*;q=0", "br zstd gzip", 0, NA },                /* identity refused via * */
	{ "*;q=0, identity", "br", 0, ID },                /* ... unless named */
	{ "identity;q=0", "br zstd gzip", 0, NA },
	{ "identity;q=0", "br zstd gzip", GZ_ONLY, NA },           /* gzip not listed: q 0 */
	{ "gzip, identity;q=0", "br zstd gzip", GZ_ONLY, CODING_GZIP },
	{ "gzip;q=0.5, identity", "gzip", ALL, ID },       /* identity weighed higher */
	{ "gzip, identity;q=0.5", "gzip", ALL, CODING_GZIP },
	{ "gzip;q=1.000", "gzip", ALL, CODING_GZIP },
	{ "gzip;q=1.001", "gzip", ALL, ID },               /* bad qvalue: member ignored */
	{ "gzip;q=0.0001", "gzip", ALL, ID },
	{ "gzip;q=", "gzip", ALL, ID },
	{ "gzip ; q=0.8 , br ; q=0.9", "gzip br", ALL, CODING_BR }, /* OWS around ';' */
	{ "gzip;level=1", "gzip", ALL, CODING_GZIP },      /* other parameters: ignored */
	{ "gzip;q=0, gzip", "gzip", ALL, ID },             /* the first member counts */
	{ ",,gzip,,", "gzip", ALL, CODING_GZIP },          /* empty list members */
	{ "compress, deflate", "br zstd gzip", ALL, ID },
	{ "gzip", "", ALL, ID },                           /* feature off */
};

Test(encoding, choose_table)
{
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int got = choose(cases[i].field, cases[i].prefs, cases[i].avail);
		cr_expect_eq(got, cases[i].want, "case %zu: Accept-Encoding '%s', prefs '%s', avail %#x: got %d want %d",
			     i, cases[i].field ? cases[i].field : "(none)", cases[i].prefs, cases[i].avail, got,
			     cases[i].want);
	}
}

/* Two Accept-Encoding lines are one list (RFC 9110 5.3). */
Test(encoding, several_field_lines)
{
	const char buf[] = "identity;q=0\r\nAccept-Encoding: gzip";
	struct encoding_prefs prefs = { { CODING_GZIP }, 1 };
	struct span s = { buf, sizeof(buf) - 1 };
	cr_assert_eq(encoding_choose(s, 2, &prefs, GZ_ONLY), CODING_GZIP);
	cr_assert_eq(encoding_choose(s, 2, &prefs, 0), ENCODING_NOT_ACCEPTABLE);
}

Test(encoding, prefs_parse_and_format)
{
	struct encoding_prefs p;
	char why[128], out[64];
	cr_assert_eq(encoding_prefs_parse("zstd, gzip br", &p, why, sizeof(why)), 0);
	cr_assert_eq(p.n, 3);
	cr_assert_eq(p.order[0], CODING_ZSTD);
	cr_assert_eq(p.order[2], CODING_BR);
	encoding_prefs_format(&p, out, sizeof(out));
	cr_assert_str_eq(out, "zstd gzip br");
	cr_assert_eq(encoding_prefs_parse("off", &p, why, sizeof(why)), 0);
	cr_assert_eq(p.n, 0);
	cr_assert_eq(encoding_prefs_parse("", &p, why, sizeof(why)), 0);
	cr_assert_eq(p.n, 0);
	cr_assert_eq(encoding_prefs_parse("br deflate", &p, why, sizeof(why)), -1);
	cr_assert(strstr(why, "'deflate'"), "%s", why);
	cr_assert_eq(encoding_prefs_parse("br br", &p, why, sizeof(why)), -1);
	cr_assert(strstr(why, "twice"), "%s", why);
	cr_assert_str_eq(encoding_suffix(CODING_ZSTD), ".zst");
	cr_assert_str_eq(encoding_name(CODING_ZSTD), "zstd");
}

/* The list walk Accept-Encoding and Expect share (parse.c). */
Test(encoding, list_members)
{
	const char v[] = " ,a , b;q=1,,\t c\t,";
	const char *p = v, *end = v + sizeof(v) - 1;
	struct span m;
	const char *want[] = { "a", "b;q=1", "c" };
	for (size_t i = 0; i < 3; i++) {
		cr_assert(http_list_member_next(&p, end, &m));
		cr_assert_eq(m.len, strlen(want[i]));
		cr_assert(memcmp(m.p, want[i], m.len) == 0, "member %zu: '%.*s'", i, (int)m.len, m.p);
	}
	cr_assert_not(http_list_member_next(&p, end, &m));
	p = v;
	cr_assert_not(http_list_member_next(&p, v + 2, &m), "only separators");
}
