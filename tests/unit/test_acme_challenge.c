/* test_acme_challenge.c - which request paths are ACME challenges (a table
 * of raw paths), and which files beneath a webroot may answer one. */
#include <criterion/criterion.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../src/site/acme_challenge.h"
#include "guard.h"

#define TOKEN43 "LoqXcYV8q5ONbJQxbmR7SCTNo3tiAXDfowyjxAjEuX0"
#define DIR_ ".well-known/acme-challenge/"

struct acme_case {
	const char *raw;
	enum acme_match want;
	const char *rel; /* for ACME_TOKEN */
};

static const struct acme_case acme_cases[] = {
	/* a token, as certbot and uacme name them */
	{ "/.well-known/acme-challenge/" TOKEN43, ACME_TOKEN, DIR_ TOKEN43 },
	{ "/.well-known/acme-challenge/a", ACME_TOKEN, DIR_ "a" },
	{ "/.well-known/acme-challenge/A-z_09", ACME_TOKEN, DIR_ "A-z_09" },
	/* spelled otherwise, it is still the same path once canonical */
	{ "//.well-known///acme-challenge/abc", ACME_TOKEN, DIR_ "abc" },
	{ "/x/../.well-known/./acme-challenge/abc", ACME_TOKEN, DIR_ "abc" },
	{ "/%2Ewell-known/acme-challenge/%61bc", ACME_TOKEN, DIR_ "abc" },
	{ "/.well-known%2Facme-challenge%2Fabc", ACME_TOKEN, DIR_ "abc" },
	/* the directory, or no safe token beneath it: 404, never the site */
	{ "/.well-known/acme-challenge", ACME_NO_TOKEN, NULL },
	{ "/.well-known/acme-challenge/", ACME_NO_TOKEN, NULL },
	{ "/.well-known/acme-challenge/abc/", ACME_NO_TOKEN, NULL },
	{ "/.well-known/acme-challenge/a/b", ACME_NO_TOKEN, NULL },
	{ "/.well-known/acme-challenge/abc.gz", ACME_NO_TOKEN, NULL },
	{ "/.well-known/acme-challenge/.htaccess", ACME_NO_TOKEN, NULL },
	{ "/.well-known/acme-challenge/a%20b", ACME_NO_TOKEN, NULL },
	{ "/.well-known/acme-challenge/a+b", ACME_NO_TOKEN, NULL },
	{ "/.well-known/acme-challenge/a~b", ACME_NO_TOKEN, NULL },
	{ "/.well-known/acme-challenge/\xc3\xa9", ACME_NO_TOKEN, NULL },
	{ "/.well-known/acme-challenge/" TOKEN43 TOKEN43 TOKEN43, ACME_NO_TOKEN, NULL }, /* 129 */
	/* ".." leaves the directory: the site's own path */
	{ "/.well-known/acme-challenge/../x", ACME_NOT_CHALLENGE, NULL },
	{ "/.well-known/acme-challenge/..", ACME_NOT_CHALLENGE, NULL },
	/* other paths */
	{ "/", ACME_NOT_CHALLENGE, NULL },
	{ "/index.html", ACME_NOT_CHALLENGE, NULL },
	{ "/.well-known/", ACME_NOT_CHALLENGE, NULL },
	{ "/.well-known/security.txt", ACME_NOT_CHALLENGE, NULL },
	{ "/.well-known/acme-challengex/abc", ACME_NOT_CHALLENGE, NULL },
	{ "/.well-known/acme-challeng", ACME_NOT_CHALLENGE, NULL },
	{ "/.Well-Known/acme-challenge/abc", ACME_NOT_CHALLENGE, NULL }, /* paths are case-sensitive */
	{ "/well-known/acme-challenge/abc", ACME_NOT_CHALLENGE, NULL },
	{ "/a/.well-known/acme-challenge/abc", ACME_NOT_CHALLENGE, NULL },
	/* what path_resolve refuses is the site's to answer (400) */
	{ "/.well-known/acme-challenge/%zz", ACME_NOT_CHALLENGE, NULL },
	{ "/.well-known/acme-challenge/a%00b", ACME_NOT_CHALLENGE, NULL },
	{ "/../.well-known/acme-challenge/abc", ACME_NOT_CHALLENGE, NULL },
	{ ".well-known/acme-challenge/abc", ACME_NOT_CHALLENGE, NULL },
};

Test(acme_challenge, table)
{
	for (size_t i = 0; i < sizeof(acme_cases) / sizeof(acme_cases[0]); i++) {
		const struct acme_case *c = &acme_cases[i];
		struct span raw = guarded(c->raw, strlen(c->raw));
		char rel[ACME_REL_MAX];
		memset(rel, 'X', sizeof(rel));
		enum acme_match m = acme_challenge_match(raw, rel, sizeof(rel));
		cr_expect_eq(m, c->want, "'%s': %d, expected %d", c->raw, m, c->want);
		if (m == ACME_TOKEN && c->want == ACME_TOKEN)
			cr_expect_str_eq(rel, c->rel, "'%s'", c->raw);
		unguard(raw);
	}
}

Test(acme_challenge, longest_token_fits_the_buffer)
{
	char raw[256], want[256], rel[ACME_REL_MAX];
	char token[ACME_TOKEN_MAX + 1];
	memset(token, 'a', ACME_TOKEN_MAX);
	token[ACME_TOKEN_MAX] = '\0';
	snprintf(raw, sizeof(raw), "/" DIR_ "%s", token);
	snprintf(want, sizeof(want), DIR_ "%s", token);
	cr_assert_eq(acme_challenge_match((struct span){ raw, strlen(raw) }, rel, sizeof(rel)), ACME_TOKEN);
	cr_assert_str_eq(rel, want);
	/* a buffer one byte short is never overrun: no token then */
	cr_assert_eq(acme_challenge_match((struct span){ raw, strlen(raw) }, rel, sizeof(rel) - 1), ACME_NO_TOKEN);
}

static void put(int dir, const char *rel, const char *text)
{
	int fd = openat(dir, rel, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	cr_assert_geq(fd, 0, "%s: %s", rel, strerror(errno));
	cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
}

Test(acme_challenge, only_regular_files_beneath_the_webroot_open)
{
	char dir[] = "/tmp/spindle-acme-XXXXXX", cmd[128];
	cr_assert_not_null(mkdtemp(dir));
	int d = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	cr_assert_geq(d, 0);
	cr_assert_eq(mkdirat(d, "outside", 0755), 0);
	put(d, "outside/secret", "not a challenge");
	cr_assert_eq(mkdirat(d, "web", 0755), 0);
	cr_assert_eq(mkdirat(d, "web/.well-known", 0755), 0);
	cr_assert_eq(mkdirat(d, "web/" ACME_CHALLENGE_DIR, 0755), 0);
	put(d, "web/" DIR_ "tok", "tok.thumbprint");
	cr_assert_eq(mkdirat(d, "web/" DIR_ "dir", 0755), 0);
	cr_assert_eq(mkfifoat(d, "web/" DIR_ "fifo", 0644), 0);
	cr_assert_eq(symlinkat("tok", d, "web/" DIR_ "inside"), 0);
	cr_assert_eq(symlinkat("../../../outside/secret", d, "web/" DIR_ "out"), 0);
	int web = openat(d, "web", O_PATH | O_DIRECTORY | O_CLOEXEC);
	cr_assert_geq(web, 0);

	struct stat st;
	char buf[32] = { 0 };
	int fd = acme_challenge_open(web, DIR_ "tok", &st);
	cr_assert_geq(fd, 0, "%s", strerror(-fd));
	cr_assert_eq(st.st_size, 14);
	cr_assert_eq(read(fd, buf, sizeof(buf) - 1), 14);
	cr_assert_str_eq(buf, "tok.thumbprint");
	close(fd);
	fd = acme_challenge_open(web, DIR_ "inside", &st); /* a link that stays inside */
	cr_assert_geq(fd, 0, "%s", strerror(-fd));
	close(fd);
	cr_assert_eq(acme_challenge_open(web, DIR_ "missing", &st), -ENOENT);
	cr_assert_eq(acme_challenge_open(web, DIR_ "dir", &st), -ENOENT);
	cr_assert_eq(acme_challenge_open(web, DIR_ "fifo", &st), -ENOENT); /* and it did not block */
	fd = acme_challenge_open(web, DIR_ "out", &st);
	cr_assert_lt(fd, 0, "a link out of the webroot was followed");
	cr_assert_neq(fd, -ENOENT);

	close(web);
	close(d);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	cr_assert_eq(system(cmd), 0);
}
