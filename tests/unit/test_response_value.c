/* test_response_value.c - what a response value owns goes back exactly once:
 * a listing's budget bytes as its body is sent (and shrinks) and when the
 * value is released or replaced, and a file descriptor on release or drop.
 * (Criterion runs each test in its own process, so each starts with the
 * whole budget.) */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../src/budget.h"
#include "../../src/http/response_value.h"

static uint64_t client(const char *addr)
{
	struct sockaddr_storage ss;
	memset(&ss, 0, sizeof(ss));
	struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
	s4->sin_family = AF_INET;
	cr_assert_eq(inet_pton(AF_INET, addr, &s4->sin_addr), 1);
	return budget_client(&ss);
}

/* The client holds exactly `held` bytes of its share. */
static void assert_holds(uint64_t c, size_t held)
{
	cr_assert(budget_take(c, BUDGET_PER_CLIENT - held), "more than %zu bytes are still held", held);
	cr_assert(!budget_take(c, 1), "less than %zu bytes are held", held);
	budget_give(c, BUDGET_PER_CLIENT - held);
}

static char byte_at(size_t i)
{
	return (char)('a' + (i * 7 + i / 251) % 26);
}

/* A listing of len bytes, held in the budget as listing.c holds it. */
static void listing(struct response *r, uint64_t c, size_t len)
{
	char *body = malloc(len);
	cr_assert_not_null(body);
	for (size_t i = 0; i < len; i++)
		body[i] = byte_at(i);
	cr_assert(budget_take(c, len));
	response_init(r);
	r->status = 200;
	response_body_listing(r, body, len, len, c);
}

Test(response_value, listing_budget_given_back_once_across_shrinks_and_release)
{
	uint64_t c = client("192.0.2.10");
	const size_t other = 1000, len = 200000;
	cr_assert(budget_take(c, other)); /* another listing of the same client, still held */

	struct response r;
	listing(&r, c, len);
	assert_holds(c, other + len);

	/* what it holds after each send: the unsent rest moves to the front
	 * once half of what it holds (and at least 64 KiB) is sent */
	size_t marks[] = { 70000, 120000, 190000, 199999 };
	size_t holds[] = { 200000, 80000, 10000, 10000 };
	for (size_t k = 0; k < sizeof(marks) / sizeof(marks[0]); k++) {
		response_body_sent(&r, marks[k]);
		cr_assert_eq(r.body.reserved, holds[k], "after %zu bytes sent the listing holds %zu", marks[k],
			     r.body.reserved);
		assert_holds(c, other + r.body.reserved);
		/* the unsent bytes are where their offsets say, shrunk or not */
		for (size_t i = marks[k]; i < len; i += 997)
			cr_assert_eq(*response_body_bytes(&r, i), byte_at(i), "byte %zu after %zu sent", i, marks[k]);
	}

	response_release(&r);
	assert_holds(c, other);
	response_release(&r); /* released twice: nothing more goes back */
	assert_holds(c, other);
	budget_give(c, other);
	assert_holds(c, 0);
}

Test(response_value, listing_replaced_by_an_error_gives_its_bytes_back)
{
	uint64_t c = client("192.0.2.11");
	struct response r;
	listing(&r, c, 100000);
	response_body_sent(&r, 80000);
	response_error(&r, 500, NULL, 0);
	assert_holds(c, 0);
	cr_assert_eq(r.status, 500);
	cr_assert_eq(r.body.kind, RESPONSE_BODY_INLINE);
	response_release(&r);
	assert_holds(c, 0);
}

Test(response_value, file_descriptor_closed_once_on_drop_and_release)
{
	int fd = open("/dev/null", O_RDONLY);
	cr_assert_geq(fd, 0);
	struct response r;
	response_init(&r);
	response_body_file(&r, fd, 1234);
	r.body.off = 10;
	r.body.len = 20;
	response_body_drop(&r); /* a HEAD: the length stays, the descriptor goes */
	cr_assert_eq(fcntl(fd, F_GETFD), -1, "the descriptor is closed by the drop");
	cr_assert_eq(r.body.kind, RESPONSE_BODY_NONE);
	cr_assert_eq(r.body.fd, -1);
	cr_assert_eq(response_length(&r), 20);
	int again = open("/dev/null", O_RDONLY); /* likely the same number: must survive the release */
	cr_assert_geq(again, 0);
	response_release(&r);
	cr_assert_neq(fcntl(again, F_GETFD), -1, "release closed a descriptor the value no longer owns");
	close(again);
}

/* A connection's response value serves request after request: a shed one's
 * mark must not stay on the next, which would be counted and logged as shed
 * though it was served. */
Test(response_value, a_release_clears_the_shed_mark)
{
	struct response r;
	response_init(&r);
	r.status = 503;
	r.shed = true;
	response_release(&r);
	cr_assert_not(r.shed);
}
