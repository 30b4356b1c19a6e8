/* test_sweep.c - the deadline sweep and drain clock of the event-driven
 * models (src/models/sweep.c): when a loop may sleep, when a sweep is due,
 * and what a sweep does with a connection, before and during a drain. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../src/conn.h"
#include "../../src/models/sweep.h"

Test(sweep, a_deadline_expires_at_its_millisecond)
{
	struct sweep s;
	sweep_init(&s, 200);
	cr_assert_eq(sweep_check(&s, -1, 1000), SWEEP_WAITING, "no deadline never expires");
	cr_assert_eq(sweep_check(&s, 1001, 1000), SWEEP_WAITING);
	cr_assert_eq(sweep_check(&s, 1000, 1000), SWEEP_EXPIRED);
	cr_assert_eq(sweep_check(&s, 10, 1000), SWEEP_EXPIRED);
}

Test(sweep, no_drain_ends_anything_before_a_stop)
{
	struct sweep s;
	sweep_init(&s, 200);
	cr_assert(!s.stopping);
	cr_assert(!sweep_drain_over(&s, INT64_MAX / 2, 0));
	cr_assert_eq(sweep_check(&s, -1, INT64_MAX / 2), SWEEP_WAITING);
}

Test(sweep, the_drain_ends_every_connection_once_its_time_is_up)
{
	struct sweep s;
	sweep_init(&s, 200);
	int64_t now = conn_now_ms();
	sweep_begin_stop(&s, 5000);
	cr_assert(s.stopping);
	cr_assert_geq(s.drain_deadline, now + 5000);
	cr_assert_eq(sweep_check(&s, -1, now), SWEEP_WAITING, "the drain time is still running");
	cr_assert_eq(sweep_check(&s, now, now), SWEEP_EXPIRED, "deadlines still expire while draining");
	cr_assert_eq(sweep_check(&s, -1, s.drain_deadline), SWEEP_DRAINED);
	cr_assert_eq(sweep_check(&s, s.drain_deadline + 10, s.drain_deadline), SWEEP_DRAINED);
	cr_assert_eq(sweep_check(&s, s.drain_deadline, s.drain_deadline), SWEEP_DRAINED,
		     "the drain's end outranks an expiry");
	cr_assert(!sweep_drain_over(&s, s.drain_deadline + 99, 100), "a grace after the drain time");
	cr_assert(sweep_drain_over(&s, s.drain_deadline + 100, 100));
}

Test(sweep, sweeps_come_an_interval_apart)
{
	struct sweep s;
	int64_t before = conn_now_ms();
	sweep_init(&s, 200);
	int64_t first = s.next;
	cr_assert_geq(first, before + 200, "the first sweep is an interval away");
	cr_assert(!sweep_due(&s, first - 1));
	cr_assert_eq(s.next, first, "not due: nothing moves");
	cr_assert(sweep_due(&s, first + 5));
	cr_assert_eq(s.next, first + 205, "the next counts from when this one ran");
	cr_assert(!sweep_due(&s, first + 204));
}

Test(sweep, a_loop_sleeps_until_the_next_sweep_only_with_connections_open)
{
	struct sweep s;
	sweep_init(&s, 60000);
	cr_assert_eq(sweep_wait_ms(&s, false, -1), -1, "nothing open: no deadline can pass");
	cr_assert_eq(sweep_wait_ms(&s, false, 7), 7, "another reason to wake");
	int w = sweep_wait_ms(&s, true, -1);
	cr_assert(w > 50000 && w <= 60000, "until the next sweep: %d ms", w);
	cr_assert_eq(sweep_wait_ms(&s, true, 3), 3, "the shorter wait wins");
	cr_assert_eq(sweep_wait_ms(&s, true, 0), 0);
	s.next = conn_now_ms() - 5;
	cr_assert_eq(sweep_wait_ms(&s, true, -1), 0, "a sweep overdue: no sleep");
	cr_assert_eq(sweep_wait_ms(&s, true, 9), 0);
}

Test(sweep, the_allocator_is_trimmed_once_a_burst_of_releases_is_over)
{
	struct sweep s;
	sweep_init(&s, 200);
	cr_assert(!sweep_settle(&s, 0), "nothing released: nothing to trim");
	cr_assert(!sweep_settle(&s, SWEEP_TRIM_MIN - 1), "too few released to be worth a trim");
	cr_assert(!sweep_settle(&s, 0), "still too few, though the burst is over");
	cr_assert(!sweep_settle(&s, 1), "enough now, but connections still go idle");
	cr_assert(sweep_settle(&s, 0), "a sweep released none: the burst is over");
	cr_assert(!sweep_settle(&s, 0), "once per burst");
	cr_assert(!sweep_settle(&s, SWEEP_TRIM_MAX - 1));
	cr_assert(sweep_settle(&s, 1), "a long wave of releases is trimmed on the way");
	cr_assert_eq(s.released, 0);
}

static pthread_barrier_t settle_together;

static void *settle_a_burst(void *arg)
{
	(void)arg;
	struct sweep s;
	sweep_init(&s, 200);
	pthread_barrier_wait(&settle_together);
	return (void *)(intptr_t)sweep_settle(&s, SWEEP_TRIM_MAX);
}

/* Two loops of a fresh serving process whose bursts end at the same sweep
 * both trim at once, the first trim of the process (under AddressSanitizer,
 * glibc's malloc_trim raced to initialise its arena: a SEGV in one run of
 * about seven). Each round is a fresh process. */
Test(sweep, two_loops_trimming_at_once_in_a_fresh_process_both_survive)
{
	int failed = 0, rounds = 100;
	for (int i = 0; i < rounds; i++) {
		pid_t pid = fork();
		cr_assert_geq(pid, 0);
		if (pid == 0) {
			pthread_t t[2];
			void *trimmed[2];
			pthread_barrier_init(&settle_together, NULL, 2);
			for (int k = 0; k < 2; k++)
				if (pthread_create(&t[k], NULL, settle_a_burst, NULL))
					_exit(3);
			for (int k = 0; k < 2; k++)
				pthread_join(t[k], &trimmed[k]);
			_exit(trimmed[0] && trimmed[1] ? 0 : 2);
		}
		int st;
		cr_assert_eq(waitpid(pid, &st, 0), pid);
		failed += !WIFEXITED(st) || WEXITSTATUS(st) != 0;
	}
	cr_assert_eq(failed, 0, "%d of %d processes died or did not trim", failed, rounds);
}
