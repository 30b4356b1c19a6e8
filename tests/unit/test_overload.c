/* test_overload.c - the overload controller: when `shed` starts and stops
 * answering requests 503, from the queue waits of the requests it sees. */
#include <criterion/criterion.h>

#include "../../src/overload.h"

#define MS 1000000LL

static struct overload ctl(void)
{
	struct overload o;
	overload_init(&o, 20 * MS, 100 * MS);
	return o;
}

Test(overload, requests_under_the_target_are_never_shed)
{
	struct overload o = ctl();
	for (int i = 0; i < 1000; i++)
		cr_assert_not(overload_shed(&o, 19 * MS, i * MS));
}

Test(overload, a_short_spell_above_the_target_is_waited_out)
{
	struct overload o = ctl();
	/* waits of 30 ms for 80 ms: above the target, but not for an interval */
	for (int64_t t = 0; t <= 80; t += 10)
		cr_assert_not(overload_shed(&o, 30 * MS, t * MS), "shed at %lld ms", (long long)t);
}

Test(overload, a_wait_above_the_target_for_an_interval_sheds_until_one_is_served_in_time)
{
	struct overload o = ctl();
	cr_assert_not(overload_shed(&o, 30 * MS, 0));           /* above since -10 ms */
	cr_assert_not(overload_shed(&o, 40 * MS, 80 * MS));     /* 90 ms of it */
	cr_assert(overload_shed(&o, 40 * MS, 95 * MS));         /* 105 ms: shedding */
	cr_assert(overload_shed(&o, 25 * MS, 96 * MS));         /* whatever waited over the target */
	cr_assert_not(overload_shed(&o, 5 * MS, 97 * MS));      /* served in time: the episode ends */
	cr_assert_not(overload_shed(&o, 30 * MS, 98 * MS));     /* a new streak starts from nothing */
}

Test(overload, a_request_that_itself_waited_past_target_and_interval_is_evidence_enough)
{
	/* a busy server starts few requests: the first it sees may have
	 * waited long, and the queue was above the target for all of it */
	struct overload o = ctl();
	cr_assert(overload_shed(&o, 121 * MS, 1000 * MS));
	struct overload p = ctl();
	cr_assert_not(overload_shed(&p, 119 * MS, 1000 * MS));
}
