/* sweep.c - the deadline sweep and drain clock of the event-driven models
 * (see the header). */
#include "sweep.h"

#include <malloc.h>
#include <stdlib.h>

#include "../conn.h"
#include "../pagebuf.h"
#include "../sanitizers.h"

/* Gives the heap's free pages back to the kernel. Not under a sanitizer:
 * its allocator replaces glibc's, whose arena then stays uninitialised
 * until malloc_trim initialises it, and two loops doing so at once read a
 * bin that is still NULL (a SEGV in mtrim); there is nothing of ours in
 * that arena to give back anyway. */
static void heap_trim(void)
{
#ifndef SPINDLE_SANITIZED
	malloc_trim(0);
	/* malloc_trim returns the free pages inside an arena, but not a
	 * thread arena's top chunk: where all the freed memory ends up once
	 * the connections it held have closed (merged, it borders the top).
	 * glibc trims that top when a free of at least 64 KiB reaches the
	 * arena, and this one does: taken and given back at once, below the
	 * mmap threshold (128 KiB) so that it comes from the arena. */
	void *volatile nudge = malloc(SWEEP_TOP_NUDGE);
	free(nudge);
#endif
}

void sweep_init(struct sweep *s, int interval_ms)
{
	*s = (struct sweep){ .interval_ms = interval_ms, .next = conn_now_ms() + interval_ms };
}

int sweep_wait_ms(const struct sweep *s, bool any_open, int also_ms)
{
	int ms = -1;

	/* also to trim after the last connections closed */
	if (any_open || s->closed > 0 || s->released >= SWEEP_TRIM_MIN) {
		int64_t now = conn_now_ms();
		ms = s->next > now ? (int)(s->next - now) : 0;
	}
	if (also_ms >= 0 && (ms < 0 || also_ms < ms))
		ms = also_ms;
	return ms;
}

bool sweep_due(struct sweep *s, int64_t now)
{
	if (now < s->next)
		return false;
	s->next = now + s->interval_ms;
	return true;
}

enum sweep_verdict sweep_check(const struct sweep *s, int64_t deadline, int64_t now)
{
	if (sweep_drain_over(s, now, 0))
		return SWEEP_DRAINED;
	if (deadline >= 0 && now >= deadline)
		return SWEEP_EXPIRED;
	return SWEEP_WAITING;
}

void sweep_begin_stop(struct sweep *s, int drain_ms)
{
	s->stopping = true;
	s->drain_deadline = conn_now_ms() + drain_ms;
}

bool sweep_drain_over(const struct sweep *s, int64_t now, int grace_ms)
{
	return s->stopping && now >= s->drain_deadline + grace_ms;
}

void sweep_closed(struct sweep *s)
{
	s->closed++;
}

bool sweep_settle(struct sweep *s, unsigned released)
{
	released += s->closed;
	s->closed = 0;
	s->released += released;
	if (s->released < SWEEP_TRIM_MIN || (released > 0 && s->released < SWEEP_TRIM_MAX))
		return false;
	s->released = 0;
	pagebuf_trim();
	heap_trim();
	return true;
}
