/* overload.c - the overload policy's controller (see the header). Shared by
 * the threads of one serving process through relaxed atomics: two threads
 * that race on a transition at worst shed one request more or fewer. */
#include "overload.h"

#include <stdatomic.h>

#include "log/log.h"
#include "stats/stats.h"

static struct overload process_overload;
static bool process_sheds;

void overload_init(struct overload *o, int64_t target_ns, int64_t interval_ns)
{
	atomic_store_explicit(&o->above_since_ns, 0, memory_order_relaxed);
	atomic_store_explicit(&o->shedding, false, memory_order_relaxed);
	atomic_store_explicit(&o->shed, 0, memory_order_relaxed);
	o->target_ns = target_ns;
	o->interval_ns = interval_ns;
}

bool overload_shed(struct overload *o, int64_t wait_ns, int64_t now_ns)
{
	if (wait_ns < o->target_ns) {
		/* one request served within the target ends the episode */
		atomic_store_explicit(&o->above_since_ns, 0, memory_order_relaxed);
		if (atomic_exchange_explicit(&o->shedding, false, memory_order_relaxed)) {
			uint64_t n = atomic_exchange_explicit(&o->shed, 0, memory_order_relaxed);
			log_info("overload: a request waited %lld ms, under the %lld ms target: no longer shedding "
				 "(%llu shed)", (long long)(wait_ns / 1000000), (long long)(o->target_ns / 1000000),
				 (unsigned long long)n);
		}
		return false;
	}
	if (atomic_load_explicit(&o->shedding, memory_order_relaxed)) {
		atomic_fetch_add_explicit(&o->shed, 1, memory_order_relaxed);
		return true;
	}
	/* This request has been waiting over the target since `began`, so the
	 * oldest waiting request has too: the wait was above the target from
	 * then at the latest. Checked only as requests start, which a busy
	 * server does rarely, the streak is dated from the evidence, not from
	 * when a thread next got to look. */
	int64_t began = now_ns - (wait_ns - o->target_ns);
	int64_t since = atomic_load_explicit(&o->above_since_ns, memory_order_relaxed);
	while (since == 0 || began < since) {
		if (atomic_compare_exchange_weak_explicit(&o->above_since_ns, &since, began, memory_order_relaxed,
							  memory_order_relaxed)) {
			since = began;
			break;
		}
	}
	if (now_ns - since < o->interval_ns)
		return false;
	if (!atomic_exchange_explicit(&o->shedding, true, memory_order_relaxed))
		log_warn("overload: requests have waited over the %lld ms target for %lld ms: answering those that "
			 "waited longer with 503", (long long)(o->target_ns / 1000000),
			 (long long)((now_ns - since) / 1000000));
	atomic_fetch_add_explicit(&o->shed, 1, memory_order_relaxed);
	return true;
}

void overload_configure(enum overload_policy policy, int target_ms)
{
	process_sheds = policy == OVERLOAD_SHED;
	overload_init(&process_overload, (int64_t)target_ms * 1000000, (int64_t)OVERLOAD_INTERVAL_MS * 1000000);
}

bool overload_should_shed(int64_t wait_ns)
{
	return process_sheds && overload_shed(&process_overload, wait_ns, stats_clock_ns());
}
