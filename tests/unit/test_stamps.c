/* test_stamps.c - where a request's time goes: the 1-2-5 ladder of the queue
 * wait and service time histograms (bucketing and percentile estimates), and
 * the core's request stamps (conn_readable) counted into a worker slot. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../../src/conn.h"
#include "../../src/stats/snapshot.h"
#include "../../src/stats/stats.h"
#include "testserver.h"

/* ---- the ladder ----------------------------------------------------- */

Test(ladder, bucket_bounds_table)
{
	static const struct {
		int64_t ns;
		int bucket;
	} rows[] = {
		{ -5, 0 },	       { 0, 0 },	     { 1000, 0 },	  { 1001, 1 },	       { 2000, 1 },
		{ 2001, 2 },	       { 5000, 2 },	     { 5001, 3 },	  { 10000, 3 },	       { 20000, 4 },
		{ 50000, 5 },	       { 99999, 6 },	     { 100000, 6 },	  { 1000000, 9 },      { 1000001, 10 },
		{ 20000000, 13 },      { 1000000000, 18 },  { 5000000000, 20 }, { 10000000000, 21 },
		{ 10000000001, 22 },   { INT64_MAX, 22 },
	};
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
		cr_expect_eq(stats_ladder_bucket(rows[i].ns), rows[i].bucket, "%lld ns: bucket %d, want %d",
			     (long long)rows[i].ns, stats_ladder_bucket(rows[i].ns), rows[i].bucket);
}

Test(ladder, upper_bounds_are_1_2_5_from_1us_to_10s)
{
	static const double le_us[STATS_LADDER_BUCKETS - 1] = {
		1, 2, 5, 10, 20, 50, 100, 200, 500, 1e3, 2e3, 5e3, 1e4, 2e4, 5e4, 1e5, 2e5, 5e5, 1e6, 2e6, 5e6, 1e7,
	};
	for (int i = 0; i < STATS_LADDER_BUCKETS - 1; i++) {
		cr_expect_eq(stats_ladder_le_us(i), le_us[i], "bucket %d: le %g, want %g", i, stats_ladder_le_us(i),
			     le_us[i]);
		/* every value lands in the bucket whose bounds hold it */
		int64_t le = (int64_t)le_us[i] * 1000;
		cr_expect_eq(stats_ladder_bucket(le), i);
		cr_expect_eq(stats_ladder_bucket(le + 1), i + 1);
	}
	cr_expect(isinf(stats_ladder_le_us(STATS_LADDER_BUCKETS - 1)));
}

Test(ladder, quantiles_interpolate_within_a_bucket)
{
	uint64_t h[STATS_LADDER_BUCKETS] = { 0 };
	cr_expect_eq(stats_ladder_quantile_us(h, 0.5), 0, "empty: 0");

	/* 100 values in (1, 2] us: the median is estimated mid-bucket */
	h[1] = 100;
	cr_expect_float_eq(stats_ladder_quantile_us(h, 0.5), 1.5, 1e-9);
	cr_expect_float_eq(stats_ladder_quantile_us(h, 0.99), 1.99, 1e-9);

	/* 900 in (10, 20] us and 100 in (50, 100] ms: p50 in the first, p99
	 * and p99.9 in the second, none beyond its bounds */
	memset(h, 0, sizeof(h));
	h[4] = 900;
	h[15] = 100;
	double p50 = stats_ladder_quantile_us(h, 0.5), p99 = stats_ladder_quantile_us(h, 0.99);
	double p999 = stats_ladder_quantile_us(h, 0.999);
	cr_expect(p50 > 10 && p50 <= 20, "p50 %g", p50);
	cr_expect(p99 > 50000 && p99 <= 100000, "p99 %g", p99);
	cr_expect(p999 > p99 && p999 <= 100000, "p99.9 %g", p999);
	cr_expect_float_eq(p99, 50000 + 50000 * 0.9, 1e-6); /* rank 990: 90 of the bucket's 100 */

	/* beyond 10 s there is no upper bound: "at least 10 s" */
	memset(h, 0, sizeof(h));
	h[STATS_LADDER_BUCKETS - 1] = 3;
	cr_expect_float_eq(stats_ladder_quantile_us(h, 0.5), 10e6, 1e-3);
}

/* ---- the core's stamps ---------------------------------------------- */

static struct test_server ts;
static _Alignas(STATS_LINE) struct stats_slot slot;

static void setup(void)
{
	test_server_init(&ts);
	test_server_file(&ts, "a.txt", "hello\n", 6);
	test_server_open(&ts);
	memset(&slot, 0, sizeof(slot));
	stats_thread_slot = &slot; /* the core counts here, as a bound worker does */
}

static void teardown(void)
{
	stats_thread_slot = NULL;
	test_server_close(&ts);
}

static uint64_t get(atomic_ullong *v)
{
	return atomic_load(v);
}

/* Feeds s in one read, then sends every response whole. */
static void serve(struct conn *c, const char *s)
{
	struct iovec sp = conn_input_space(c);
	size_t n = strlen(s);
	cr_assert_geq(sp.iov_len, n);
	memcpy(sp.iov_base, s, n);
	conn_input_done(c, (ssize_t)n);
	int64_t dl;
	while (conn_wants(c, &dl) == CONN_WANT_WRITE) {
		struct conn_output o;
		conn_output(c, &o);
		cr_assert_gt(o.iovcnt, 0);
		conn_output_done(c, o.total);
	}
}

#define GET_A "GET /a.txt HTTP/1.1\r\nHost: x\r\n\r\n"
#define MS 1000000LL

TestSuite(stamps, .init = setup, .fini = teardown);

Test(stamps, a_readable_stamp_becomes_the_queue_wait)
{
	struct conn *c = conn_new(&ts.srv, NULL, 0);
	conn_readable(c, stats_clock_ns() - 5 * MS); /* ready 5 ms before the read */
	serve(c, GET_A);
	cr_assert_eq(get(&slot.requests), 1);
	uint64_t q = get(&slot.queue_ns_sum), s = get(&slot.service_ns_sum);
	cr_expect(q >= 5 * MS && q < 1000 * MS, "queue %llu ns", (unsigned long long)q);
	cr_expect(s > 0 && s < 1000 * MS, "service %llu ns", (unsigned long long)s);
	cr_expect_eq(get(&slot.queue[stats_ladder_bucket((int64_t)q)]), 1);
	cr_expect_eq(get(&slot.service[stats_ladder_bucket((int64_t)s)]), 1);
	conn_free(c);
}

Test(stamps, without_a_stamp_a_read_is_picked_up_as_it_comes)
{
	struct conn *c = conn_new(&ts.srv, NULL, 0);
	serve(c, GET_A);
	/* a stamp taken back (the read found nothing) counts for nothing */
	conn_readable(c, stats_clock_ns() - 50 * MS);
	conn_readable(c, 0);
	serve(c, GET_A);
	cr_assert_eq(get(&slot.requests), 2);
	cr_expect_eq(get(&slot.queue_ns_sum), 0);
	cr_expect_eq(get(&slot.queue[0]), 2);
	cr_expect_eq(get(&slot.service[STATS_LADDER_BUCKETS - 1]), 0);
	conn_free(c);
}

Test(stamps, a_stamp_times_only_the_next_read)
{
	struct conn *c = conn_new(&ts.srv, NULL, 0);
	conn_readable(c, stats_clock_ns() - 20 * MS);
	serve(c, GET_A);
	uint64_t first = get(&slot.queue_ns_sum);
	serve(c, GET_A); /* the next request on the connection: no stamp of its own */
	cr_assert_eq(get(&slot.requests), 2);
	cr_expect(first >= 20 * MS);
	cr_expect_eq(get(&slot.queue_ns_sum), first, "the second request was charged the first one's wait");
	conn_free(c);
}

Test(stamps, pipelined_requests_wait_behind_the_ones_before)
{
	struct conn *c = conn_new(&ts.srv, NULL, 0);
	int64_t ready = stats_clock_ns() - 10 * MS;
	conn_readable(c, ready);
	serve(c, GET_A GET_A GET_A);
	cr_assert_eq(get(&slot.requests), 3);
	/* all three came in one read, 10 ms old: each waited at least that */
	cr_expect(get(&slot.queue_ns_sum) >= 30 * MS, "queue sum %llu", (unsigned long long)get(&slot.queue_ns_sum));
	uint64_t in_10ms_and_up = 0;
	for (int i = stats_ladder_bucket(10 * MS); i < STATS_LADDER_BUCKETS; i++)
		in_10ms_and_up += get(&slot.queue[i]);
	cr_expect_eq(in_10ms_and_up, 3);
	conn_free(c);
}

Test(stamps, a_stamp_in_the_future_counts_no_negative_wait)
{
	struct conn *c = conn_new(&ts.srv, NULL, 0);
	conn_readable(c, stats_clock_ns() + 1000 * MS);
	serve(c, GET_A);
	cr_assert_eq(get(&slot.requests), 1);
	cr_expect_eq(get(&slot.queue_ns_sum), 0);
	conn_free(c);
}

/* A write stamped before the call (conn_writing) ends the service there: a
 * thread that ran again only 30 ms after its write returned does not count
 * those 30 ms, when the client may have had the response long since. */
Test(stamps, a_write_stamp_ends_the_service_time)
{
	struct conn *c = conn_new(&ts.srv, NULL, 0);
	for (int stamped = 1; stamped >= 0; stamped--) {
		struct iovec sp = conn_input_space(c);
		memcpy(sp.iov_base, GET_A, strlen(GET_A));
		conn_input_done(c, (ssize_t)strlen(GET_A));
		int64_t dl;
		cr_assert_eq(conn_wants(c, &dl), CONN_WANT_WRITE);
		struct conn_output o;
		conn_output(c, &o);
		if (stamped)
			conn_writing(c, stats_clock_ns());
		usleep(30 * 1000); /* preempted after the write */
		conn_output_done(c, o.total);
		cr_assert_eq(conn_wants(c, &dl), CONN_WANT_READ, "one write took the whole response");
		uint64_t s = get(&slot.service_ns_sum);
		if (stamped)
			cr_expect(s < 30 * MS, "service %llu ns: the time after the write was counted", (unsigned long long)s);
		else /* and the stamp times that write only */
			cr_expect(s >= 30 * MS, "service %llu ns in all", (unsigned long long)s);
	}
	conn_free(c);
}
