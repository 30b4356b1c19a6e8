/* test_slots.c - the connection cap shared by event loops (src/models/slots.c):
 * a loop that found no slot is woken when one frees, and a slot taken and
 * given back with nobody refused in between wakes no loop. */
#include <criterion/criterion.h>
#include <poll.h>

#include "../../src/models/slots.h"

/* Whether loop i's wake-up eventfd is readable now. */
static bool woken(const struct conn_slots *s, int i)
{
	struct pollfd p = { .fd = s->wake_fds[i], .events = POLLIN };
	return poll(&p, 1, 0) == 1;
}

Test(slots, a_loop_refused_at_the_cap_is_woken_when_a_slot_frees)
{
	struct conn_slots s;
	cr_assert_eq(slots_init(&s, 1, 2), 0);
	cr_assert(slots_take(&s));
	cr_assert(!slots_take(&s), "the cap is one");
	cr_assert(!woken(&s, 0) && !woken(&s, 1), "nothing freed yet");
	slots_give(&s);
	cr_assert(woken(&s, 0) && woken(&s, 1), "every loop looks again");
	slots_woken(&s, 0);
	slots_woken(&s, 1);
	cr_assert(!woken(&s, 0) && !woken(&s, 1));
	slots_destroy(&s);
}

Test(slots, a_slot_taken_and_given_back_with_nobody_refused_wakes_no_loop)
{
	/* A woken loop takes a slot before it accepts, and gives it back when
	 * nobody waits; one below the cap that give steps down from the cap.
	 * Waking the loops for it had them wake each other for ever. */
	struct conn_slots s;
	cr_assert_eq(slots_init(&s, 1, 2), 0);
	cr_assert(slots_take(&s));
	slots_give(&s);
	cr_assert(!woken(&s, 0) && !woken(&s, 1), "nobody was refused: nobody to wake");

	cr_assert(slots_take(&s));
	cr_assert(!slots_take(&s));
	slots_give(&s); /* the refused one is told, once */
	slots_woken(&s, 0);
	slots_woken(&s, 1);
	for (int i = 0; i < 3; i++) { /* both loops look, find nobody, give back */
		cr_assert(slots_take(&s));
		slots_give(&s);
	}
	cr_assert(!woken(&s, 0) && !woken(&s, 1), "the wake-up was spent: no second one");
	slots_destroy(&s);
}

Test(slots, the_count_never_passes_the_cap)
{
	struct conn_slots s;
	cr_assert_eq(slots_init(&s, 3, 1), 0);
	for (int i = 0; i < 3; i++)
		cr_assert(slots_take(&s));
	for (int i = 0; i < 5; i++)
		cr_assert(!slots_take(&s));
	cr_assert_eq(atomic_load(&s.used), 3, "a refused take leaves nothing behind");
	slots_give(&s);
	cr_assert(slots_take(&s), "a freed slot is taken again");
	slots_destroy(&s);
}
