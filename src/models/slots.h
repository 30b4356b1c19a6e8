/* slots.h - a process-wide connection cap shared by several event loops.
 *
 * With one SO_REUSEPORT listener per loop the kernel picks the loop, so a
 * per-loop share of max_connections would refuse a client on a full loop
 * while another loop has room. Loops instead reserve a slot before accept()
 * and a loop that found none pauses; freeing a slot at the cap wakes every
 * loop's eventfd so the paused ones try again. Only if one paused: a loop
 * woken takes a slot before it knows a client waits, and gives it back
 * when none does; at one below the cap that give is itself a step down from
 * the cap, and waking every loop for it had them wake each other in turn
 * for ever (15-40% of a core on an idle server), and refuse, under
 * overload = reject or shed, a client that came meanwhile with a slot free. */
#ifndef SPINDLE_MODELS_SLOTS_H
#define SPINDLE_MODELS_SLOTS_H

#include <stdatomic.h>
#include <stdbool.h>

#define SLOTS_MAX_LOOPS 256

struct conn_slots {
	atomic_int used;
	atomic_bool full_seen; /* a take found no slot since the last wake-up: a loop may be paused */
	int max;
	int nloops;
	int wake_fds[SLOTS_MAX_LOOPS]; /* eventfd per loop, readable after a slot frees at the cap */
};

/* Creates one eventfd per loop; -1 on failure. */
int slots_init(struct conn_slots *s, int max, int nloops);
void slots_destroy(struct conn_slots *s);

/* Reserves a slot; false when all are taken. */
bool slots_take(struct conn_slots *s);
/* Returns a slot (an accepted connection closed, or accept found nothing). */
void slots_give(struct conn_slots *s);
/* Clears a loop's wake-up after it woke. */
void slots_woken(struct conn_slots *s, int loop);

#endif
