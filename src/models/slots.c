/* slots.c - the shared connection cap of the event-loop models. */
#include "slots.h"

#include <stdint.h>
#include <sys/eventfd.h>
#include <unistd.h>

int slots_init(struct conn_slots *s, int max, int nloops)
{
	atomic_init(&s->used, 0);
	atomic_init(&s->full_seen, false);
	s->max = max;
	s->nloops = 0;
	for (int i = 0; i < nloops && i < SLOTS_MAX_LOOPS; i++) {
		s->wake_fds[i] = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
		if (s->wake_fds[i] < 0)
			return -1;
		s->nloops++;
	}
	return 0;
}

void slots_destroy(struct conn_slots *s)
{
	for (int i = 0; i < s->nloops; i++)
		close(s->wake_fds[i]);
	s->nloops = 0;
}

/* Returns a slot; what `used` was before. Only the step down from the cap
 * can have paused a loop, and only after a take found no slot and marked
 * it (sequentially consistent with that mark, see slots_take). */
static int give(struct conn_slots *s)
{
	int before = atomic_fetch_sub(&s->used, 1);
	if (before == s->max && atomic_exchange(&s->full_seen, false)) {
		uint64_t one = 1;
		for (int i = 0; i < s->nloops; i++) {
			ssize_t n = write(s->wake_fds[i], &one, sizeof(one));
			(void)n;
		}
	}
	return before;
}

bool slots_take(struct conn_slots *s)
{
	for (;;) {
		if (atomic_fetch_add(&s->used, 1) < s->max)
			return true;
		/* Marked while our count holds `used` over the cap: if the others
		 * still fill it once ours is back, whichever give later steps
		 * down from the cap comes after the mark, and wakes us. */
		atomic_store(&s->full_seen, true);
		if (give(s) > s->max)
			return false;
		/* a slot was freed while ours was counted, its give maybe before
		 * our mark (no wake-up then): it is free now, take it */
	}
}

void slots_give(struct conn_slots *s)
{
	give(s);
}

void slots_woken(struct conn_slots *s, int loop)
{
	uint64_t v;
	ssize_t n = read(s->wake_fds[loop], &v, sizeof(v));
	(void)n;
}
