/* test_overload.c - the overload controller: when `shed` starts and stops
 * answering requests 503, from the queue waits of the requests it sees; at
 * which limits each policy refuses new connections; and what an HTTP/2
 * client makes of a full server's refusal. */
#include <criterion/criterion.h>
#include <nghttp2/nghttp2.h>
#include <stdint.h>

#include "../../src/config.h"
#include "../../src/http2/session.h"
#include "../../src/overload.h"
#include "../../src/server.h"

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

/* What an HTTP/2 client refused by a full server reads: nghttp2 as the
 * client, its request on stream 1 already sent, takes the refusal's bytes
 * and closes the stream as refused, so a retry is safe (RFC 9113 8.7). */
static uint32_t closed_with = UINT32_MAX;
static uint32_t goaway_code = UINT32_MAX;

static int h2c_stream_closed(nghttp2_session *s, int32_t id, uint32_t code, void *u)
{
	(void)s, (void)u;
	if (id == 1)
		closed_with = code;
	return 0;
}

static int h2c_frame(nghttp2_session *s, const nghttp2_frame *f, void *u)
{
	(void)s, (void)u;
	if (f->hd.type == NGHTTP2_GOAWAY)
		goaway_code = f->goaway.error_code;
	return 0;
}

/* queue never refuses; reject at its queue or its cap; shed at the cap only,
 * where a newcomer would wait unseen (a pool's queue it judges by the wait) */
Test(overload, each_policy_refuses_at_its_limits)
{
	static const struct {
		enum overload_policy policy;
		bool at[3]; /* by enum overload_limit: room, queue full, at the cap */
	} want[] = {
		{ OVERLOAD_QUEUE, { false, false, false } },
		{ OVERLOAD_REJECT, { false, true, true } },
		{ OVERLOAD_SHED, { false, false, true } },
	};
	static struct config cfg; /* large: not on the stack */
	static struct server srv;

	srv.cfg = &cfg;
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		cfg.overload = want[i].policy;
		for (int lim = OVERLOAD_ROOM; lim <= OVERLOAD_AT_CAP; lim++)
			cr_expect_eq(overload_refuses(&srv, (enum overload_limit)lim), want[i].at[lim],
				     "policy %d, limit %d", (int)want[i].policy, lim);
	}
}

Test(overload, an_http2_client_reads_the_refusal_as_a_refused_stream)
{
	char buf[256];
	size_t n = h2_refusal(buf, sizeof(buf));
	cr_assert_gt(n, 9 + 9 + 8);
	cr_assert_eq(h2_refusal(buf, n - 1), 0, "a short buffer gets nothing");

	nghttp2_session_callbacks *cb;
	nghttp2_session *s;
	cr_assert_eq(nghttp2_session_callbacks_new(&cb), 0);
	nghttp2_session_callbacks_set_on_stream_close_callback(cb, h2c_stream_closed);
	nghttp2_session_callbacks_set_on_frame_recv_callback(cb, h2c_frame);
	cr_assert_eq(nghttp2_session_client_new(&s, cb, NULL), 0);
	nghttp2_submit_settings(s, NGHTTP2_FLAG_NONE, NULL, 0);
	const nghttp2_nv nv[] = {
		{ (uint8_t *)":method", (uint8_t *)"GET", 7, 3, 0 },
		{ (uint8_t *)":scheme", (uint8_t *)"http", 7, 4, 0 },
		{ (uint8_t *)":path", (uint8_t *)"/a.txt", 5, 6, 0 },
		{ (uint8_t *)":authority", (uint8_t *)"x", 10, 1, 0 },
	};
	cr_assert_eq(nghttp2_submit_request(s, NULL, nv, 4, NULL, NULL), 1);
	const uint8_t *out;
	while (nghttp2_session_mem_send(s, &out) > 0)
		;
	cr_assert_eq(nghttp2_session_mem_recv(s, (const uint8_t *)buf, n), (ssize_t)n);
	cr_assert_eq(goaway_code, NGHTTP2_REFUSED_STREAM);
	cr_assert_eq(closed_with, NGHTTP2_REFUSED_STREAM, "stream 1 closed with %u", closed_with);
	nghttp2_session_del(s);
	nghttp2_session_callbacks_del(cb);
}
