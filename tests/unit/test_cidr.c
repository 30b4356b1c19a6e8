/* test_cidr.c - stats_allow lists: parsing (good and bad) and matching
 * IPv4, IPv6 and IPv4-mapped clients. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <sys/un.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

#include "../../src/stats/cidr.h"

static bool allowed(const char *list, const char *addr)
{
	struct cidr_list l;
	char err[128];
	cr_assert_eq(cidr_list_parse(list, &l, err, sizeof(err)), 0, "%s: %s", list, err);
	struct sockaddr_storage ss;
	memset(&ss, 0, sizeof(ss));
	if (strchr(addr, ':')) {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
		s6->sin6_family = AF_INET6;
		cr_assert_eq(inet_pton(AF_INET6, addr, &s6->sin6_addr), 1);
	} else {
		struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
		s4->sin_family = AF_INET;
		cr_assert_eq(inet_pton(AF_INET, addr, &s4->sin_addr), 1);
	}
	return cidr_list_match(&l, (struct sockaddr *)&ss);
}

Test(cidr, match_table)
{
	static const struct { const char *list, *addr; bool want; } cases[] = {
		{ "127.0.0.0/8 ::1/128", "127.0.0.1", true },
		{ "127.0.0.0/8 ::1/128", "127.255.3.4", true },
		{ "127.0.0.0/8 ::1/128", "128.0.0.1", false },
		{ "127.0.0.0/8 ::1/128", "::1", true },
		{ "127.0.0.0/8 ::1/128", "::2", false },
		{ "127.0.0.0/8", "::ffff:127.0.0.1", true },   /* dual-stack listener */
		{ "10.0.0.0/8", "127.0.0.1", false },
		{ "10.0.0.0/8", "10.200.1.1", true },
		{ "192.168.1.0/24", "192.168.1.255", true },
		{ "192.168.1.0/24", "192.168.2.0", false },
		{ "192.168.1.7", "192.168.1.7", true },          /* no /N: one host */
		{ "192.168.1.7", "192.168.1.8", false },
		{ "10.1.2.3/8", "10.9.9.9", true },              /* host bits ignored */
		{ "172.16.0.0/12", "172.31.255.255", true },
		{ "172.16.0.0/12", "172.32.0.0", false },
		{ "0.0.0.0/0", "8.8.8.8", true },
		{ "0.0.0.0/0", "2001:db8::1", false },           /* IPv4 /0 is not all of IPv6 */
		{ "::/0", "2001:db8::1", true },
		{ "2001:db8::/32", "2001:db8:ffff::1", true },
		{ "2001:db8::/33", "2001:db8:8000::1", false },
		{ "fe80::/10", "febf::1", true },
		{ "fe80::/10", "fec0::1", false },
		{ "", "127.0.0.1", false },                      /* empty: nobody */
		{ "10.0.0.0/8,127.0.0.1", "127.0.0.1", true },   /* commas too */
		{ "  ::1/128\t127.0.0.1  ", "127.0.0.1", true },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		cr_expect_eq(allowed(cases[i].list, cases[i].addr), cases[i].want, "list '%s', client %s: want %d",
			     cases[i].list, cases[i].addr, cases[i].want);
}

Test(cidr, bad_lists)
{
	static const char *const bad[] = {
		"10.0.0.0/33", "::/129", "10.0.0.0/", "10.0.0.0/-1", "10.0.0.0/8x", "300.1.1.1", "10.0.0",
		"localhost", "::1::2", "1.2.3.4/0008", "fe80::1%eth0",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct cidr_list l;
		char err[128] = "";
		cr_expect_eq(cidr_list_parse(bad[i], &l, err, sizeof(err)), -1, "'%s' should be refused", bad[i]);
		cr_expect(strlen(err) > 0, "'%s': no message", bad[i]);
	}
}

/* CIDR_MAX prefixes is the limit: exactly that many are accepted (and the last
 * one matches), one more is refused with a message. */
Test(cidr, count_boundary)
{
	char list[(CIDR_MAX + 1) * 16] = "";
	for (int i = 0; i < CIDR_MAX; i++)
		sprintf(list + strlen(list), "10.0.%d.0/24 ", i);
	struct cidr_list l;
	char err[128] = "";
	cr_assert_eq(cidr_list_parse(list, &l, err, sizeof(err)), 0, "%d prefixes: %s", CIDR_MAX, err);
	cr_assert_eq(l.n, CIDR_MAX);
	char last[32];
	snprintf(last, sizeof(last), "10.0.%d.9", CIDR_MAX - 1);
	cr_assert(allowed(list, last), "the %dth prefix is in force", CIDR_MAX);
	cr_assert_not(allowed(list, "10.0.200.1"));

	sprintf(list + strlen(list), "10.0.%d.0/24", CIDR_MAX);
	cr_assert_eq(cidr_list_parse(list, &l, err, sizeof(err)), -1);
	char want[32];
	snprintf(want, sizeof(want), "more than %d", CIDR_MAX);
	cr_assert(strstr(err, want), "%s", err);

	/* separators after the last prefix do not count as one more */
	list[0] = '\0';
	for (int i = 0; i < CIDR_MAX; i++)
		sprintf(list + strlen(list), "10.0.%d.0/24, \t", i);
	cr_assert_eq(cidr_list_parse(list, &l, err, sizeof(err)), 0, "%s", err);
}

/* Prefix lengths at their ends: 0 and 32 (IPv4), 0 and 128 (IPv6). */
Test(cidr, prefix_length_boundaries)
{
	cr_assert(allowed("10.1.2.3/32", "10.1.2.3"));
	cr_assert_not(allowed("10.1.2.3/32", "10.1.2.2"));
	cr_assert(allowed("10.1.2.3/31", "10.1.2.2"));
	cr_assert(allowed("::1/128", "::1"));
	cr_assert_not(allowed("::1/128", "::0"));
	cr_assert(allowed("::1/127", "::0"));
	cr_assert(allowed("1.2.3.4/0", "255.255.255.255"));
	cr_assert(allowed("::/0", "::ffff:1.2.3.4"));
	struct cidr_list l;
	char err[128];
	cr_assert_eq(cidr_list_parse("10.0.0.0/32", &l, err, sizeof(err)), 0);
	cr_assert_eq(cidr_list_parse("::/128", &l, err, sizeof(err)), 0);
	cr_assert_eq(cidr_list_parse("::/129", &l, err, sizeof(err)), -1);
}

/* A UNIX socket's clients have no address; "unix:" lets them in,
 * and nothing else does. */
Test(cidr, unix_clients)
{
	struct cidr_list l;
	char err[128];
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	cr_assert_eq(cidr_list_parse("127.0.0.0/8 ::1/128", &l, err, sizeof(err)), 0, "%s", err);
	cr_expect(!cidr_list_match(&l, (const struct sockaddr *)&sun), "not without unix:");
	cr_assert_eq(cidr_list_parse("127.0.0.1, unix:", &l, err, sizeof(err)), 0, "%s", err);
	cr_expect(cidr_list_match(&l, (const struct sockaddr *)&sun));
	cr_expect_eq(l.n, 1, "unix: is no prefix");
	cr_assert_eq(cidr_list_parse("unix:", &l, err, sizeof(err)), 0, "%s", err);
	struct sockaddr_in lo = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	cr_expect(!cidr_list_match(&l, (const struct sockaddr *)&lo), "unix: alone allows no TCP client");
	cr_expect_eq(cidr_list_parse("unix:/x", &l, err, sizeof(err)), -1);
}
