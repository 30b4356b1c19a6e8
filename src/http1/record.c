/* record.c - a finished response into the statistics and the access log. */
#include "record.h"

#include "../log/log.h"

void h1_record_account(const struct h1_record *r, const char *peer, uint64_t sent, int64_t now, bool reused)
{
	int64_t elapsed_ns = r->stats_t0 ? now - r->stats_t0 : 0;
	/* a response no request started (none so far) was picked up when its
	 * head was complete, or else as it left */
	int64_t pickup = r->pickup_ns ? r->pickup_ns : r->stats_t0 ? r->stats_t0 : now;
	int64_t ready = r->ready_ns && r->ready_ns <= pickup ? r->ready_ns : pickup;
	int64_t first = r->first_ns >= pickup ? r->first_ns : now;
	int64_t service = now > pickup ? now - pickup : 0;
	/* stats: a few relaxed atomic adds to this worker's slot */
	stats_response(r->method, r->status, sent - r->head_len, elapsed_ns, reused);
	if (r->http2)
		stats_http2_request();
	/* the request-time histograms are those of requests served: a shed
	 * one's long wait is counted as a shed, not as a queue wait served */
	if (r->shed)
		stats_shed();
	else
		stats_request_time(pickup - ready, service);
	if (r->site_stats > 0)
		stats_site_response(r->site_stats - 1);
	if (log_access_enabled()) {
		struct access_entry e = {
			.duration_us = (uint64_t)elapsed_ns / 1000,
			.queue_us = (uint64_t)(pickup - ready) / 1000,
			.service_us = (uint64_t)service / 1000,
			.first_byte_us = (uint64_t)(first > pickup ? first - pickup : 0) / 1000,
			.peer = peer,
			.request_line = r->request_line,
			.status = r->status,
			.bytes = sent - r->head_len,
			.referer = r->referer,
			.user_agent = r->user_agent,
			.site = r->site,
			.shed = r->shed,
		};
		log_access(&e);
	}
}
