/* slots.c - the shared connection cap of the event-loop models. */
#include "slots.h"

#include <stdint.h>
#include <sys/eventfd.h>
#include <unistd.h>

int slots_init(struct conn_slots *s, int max, int nloops)
{
	atomic_init(&s->used, 0);
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

bool slots_take(struct conn_slots *s)
{
	if (atomic_fetch_add_explicit(&s->used, 1, memory_order_relaxed) < s->max)
		return true;
	slots_give(s);
	return false;
}

void slots_give(struct conn_slots *s)
{
	/* Only the step down from the cap can have paused a loop. */
	if (atomic_fetch_sub_explicit(&s->used, 1, memory_order_relaxed) == s->max) {
		uint64_t one = 1;
		for (int i = 0; i < s->nloops; i++) {
			ssize_t n = write(s->wake_fds[i], &one, sizeof(one));
			(void)n;
		}
	}
}

void slots_woken(struct conn_slots *s, int loop)
{
	uint64_t v;
	ssize_t n = read(s->wake_fds[loop], &v, sizeof(v));
	(void)n;
}
