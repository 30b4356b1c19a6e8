/* test_site_choose.c - which site answers a request (site_choose): by Host,
 * by an absolute-form target's authority, by the TLS handshake's SNI, and
 * the refusals: 421 when Host and SNI name different sites, and
 * default_site = reject (404 over plain HTTP, 421 over TLS). */
#include <criterion/criterion.h>

#include <stdio.h>
#include <string.h>

#include "../../src/config.h"
#include "../../src/http/parse.h"
#include "../../src/site/site.h"

static struct site_config conf[3];
static struct site site[3];
static struct site_table table = { site, 3, false };
static struct config cfg;

static void setup(void)
{
	memset(conf, 0, sizeof(conf));
	memset(site, 0, sizeof(site));
	strcpy(conf[0].name, "default");
	strcpy(conf[1].name, "a");
	strcpy(conf[1].names, "a.test www.a.test");
	strcpy(conf[2].name, "b");
	strcpy(conf[2].names, "b.test *.b.test");
	memset(&cfg, 0, sizeof(cfg));
	strcpy(cfg.health_path, "/healthz");
	for (int i = 0; i < 3; i++) {
		site[i].conf = &conf[i];
		site[i].cfg = &cfg;
	}
	table.reject_unknown = false;
}

TestSuite(site_choose, .init = setup);

/* The site index chosen for raw request bytes; *status the refusal (0: none). */
static long choose(const char *raw, bool tls, int sni, int *status)
{
	static char buf[1024];
	struct http_request req;
	struct http_limits lim = { 8192, 16384, 100 };
	snprintf(buf, sizeof(buf), "%s", raw);
	cr_assert_gt(http_parse_request(buf, strlen(buf), &lim, &req), 0, "%s", raw);
	const struct site *out = NULL;
	*status = site_choose(&table, &req, tls, sni, &out);
	cr_assert_not_null(out);
	return out - site;
}

Test(site_choose, by_host_with_case_port_and_wildcards)
{
	int st;
	cr_assert_eq(choose("GET / HTTP/1.1\r\nHost: a.test\r\n\r\n", false, -1, &st), 1);
	cr_assert_eq(st, 0);
	cr_assert_eq(choose("GET / HTTP/1.1\r\nHost: WWW.A.TEST:8080\r\n\r\n", false, -1, &st), 1);
	cr_assert_eq(choose("GET / HTTP/1.1\r\nHost: deep.x.b.test\r\n\r\n", false, -1, &st), 2);
	cr_assert_eq(choose("GET / HTTP/1.1\r\nHost: other.test\r\n\r\n", false, -1, &st), 0);
	cr_assert_eq(st, 0);
	cr_assert_eq(choose("GET / HTTP/1.0\r\n\r\n", false, -1, &st), 0);
}

Test(site_choose, an_absolute_form_authority_wins_over_host)
{
	int st;
	cr_assert_eq(choose("GET http://b.test/x HTTP/1.1\r\nHost: a.test\r\n\r\n", false, -1, &st), 2);
	cr_assert_eq(st, 0);
}

Test(site_choose, a_host_naming_another_site_than_the_sni_is_421)
{
	int st;
	choose("GET / HTTP/1.1\r\nHost: b.test\r\n\r\n", true, 1, &st);
	cr_assert_eq(st, 421);
	choose("GET / HTTP/1.1\r\nHost: other.test\r\n\r\n", true, 1, &st);
	cr_assert_eq(st, 421);
	choose("GET / HTTP/1.1\r\nHost: a.test\r\n\r\n", true, 0, &st); /* an SNI no site claims */
	cr_assert_eq(st, 421);
	cr_assert_eq(choose("GET / HTTP/1.1\r\nHost: www.a.test\r\n\r\n", true, 1, &st), 1);
	cr_assert_eq(st, 0);
	/* no SNI: the Host alone decides */
	cr_assert_eq(choose("GET / HTTP/1.1\r\nHost: b.test\r\n\r\n", true, -1, &st), 2);
	cr_assert_eq(st, 0);
}

Test(site_choose, reject_refuses_unknown_names_404_plain_421_tls)
{
	int st;
	table.reject_unknown = true;
	choose("GET / HTTP/1.1\r\nHost: other.test\r\n\r\n", false, -1, &st);
	cr_assert_eq(st, 404);
	choose("GET / HTTP/1.1\r\nHost: other.test\r\n\r\n", true, 0, &st);
	cr_assert_eq(st, 421);
	choose("GET / HTTP/1.0\r\n\r\n", false, -1, &st);
	cr_assert_eq(st, 404);
	cr_assert_eq(choose("GET / HTTP/1.1\r\nHost: a.test\r\n\r\n", false, -1, &st), 1);
	cr_assert_eq(st, 0);
}

Test(site_choose, server_wide_paths_are_never_refused)
{
	int st;
	table.reject_unknown = true;
	cr_assert_eq(choose("GET /healthz HTTP/1.0\r\n\r\n", false, -1, &st), 0);
	cr_assert_eq(st, 0, "a balancer's check, with no Host");
	cr_assert_eq(choose("GET /healthz HTTP/1.1\r\nHost: b.test\r\n\r\n", true, 1, &st), 0);
	cr_assert_eq(st, 0, "whatever the SNI");
	cr_assert_eq(choose("GET /status HTTP/1.0\r\n\r\n", false, -1, &st), 0);
	cr_assert_eq(st, 404, "metrics off: /status is nobody's");
	cfg.metrics = true;
	strcpy(cfg.status_path, "/status");
	strcpy(cfg.metrics_path, "/metrics");
	cr_assert_eq(choose("GET /metrics HTTP/1.1\r\nHost: nope.test\r\n\r\n", true, 0, &st), 0);
	cr_assert_eq(st, 0);
	cr_assert_eq(choose("GET /.well-known/acme-challenge/t HTTP/1.0\r\n\r\n", false, -1, &st), 0);
	cr_assert_eq(st, 404, "acme_webroot off");
	strcpy(cfg.acme_webroot, "/var/lib/acme");
	cr_assert_eq(choose("GET /.well-known/acme-challenge/t HTTP/1.0\r\n\r\n", false, -1, &st), 0);
	cr_assert_eq(st, 0);
}
