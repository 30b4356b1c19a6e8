/* test_budget.c - the in-memory body budget: the total, each client's share,
 * giving back, and which addresses count as one client. (Criterion runs each
 * test in its own process, so each starts with the whole budget.) */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

#include "../../src/budget.h"

static uint64_t client(const char *addr)
{
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
	return budget_client(&ss);
}

Test(budget, one_client_holds_at_most_its_share)
{
	uint64_t a = client("192.0.2.1"), b = client("192.0.2.2");
	cr_assert(budget_take(a, BUDGET_PER_CLIENT - 10));
	cr_assert(!budget_take(a, 11));
	cr_assert(budget_take(a, 10));
	cr_assert(budget_take(b, BUDGET_PER_CLIENT), "another client is not held back by the first");
	budget_give(a, 4096);
	cr_assert(budget_take(a, 4096), "bytes given back can be taken again");
	cr_assert(!budget_take(a, 1));
}

Test(budget, the_total_bounds_all_clients)
{
	char addr[32];
	size_t clients = BUDGET_TOTAL / BUDGET_PER_CLIENT;
	for (size_t i = 0; i < clients; i++) {
		snprintf(addr, sizeof(addr), "198.51.100.%zu", i + 1);
		cr_assert(budget_take(client(addr), BUDGET_PER_CLIENT));
	}
	cr_assert(!budget_take(client("203.0.113.1"), 1), "the total is spent");
	budget_give(client("198.51.100.1"), 100);
	cr_assert(budget_take(client("203.0.113.1"), 100));
}

Test(budget, more_holders_than_slots_are_refused_not_lost)
{
	char addr[32];
	for (size_t i = 0; i < BUDGET_CLIENTS; i++) {
		snprintf(addr, sizeof(addr), "10.0.%zu.%zu", i / 256, i % 256);
		cr_assert(budget_take(client(addr), 1));
	}
	cr_assert(!budget_take(client("10.9.9.9"), 1));
	cr_assert(budget_take(client("10.0.0.0"), 1), "a holder still adds to its own slot");
	budget_give(client("10.0.0.5"), 1);
	cr_assert(budget_take(client("10.9.9.9"), 1), "a slot given back is free again");
}

Test(budget, who_is_one_client)
{
	cr_assert_eq(client("192.0.2.7"), client("::ffff:192.0.2.7"), "IPv4-mapped is the IPv4 client");
	cr_assert_neq(client("192.0.2.7"), client("192.0.2.8"));
	cr_assert_eq(client("2001:db8:1:2::1"), client("2001:db8:1:2:ffff::9"), "one /64 is one client");
	cr_assert_neq(client("2001:db8:1:2::1"), client("2001:db8:1:3::1"));
}
