/* record.h - what a response's access log line and statistics need once its
 * last byte is out, and the one place that writes both. */
#ifndef SPINDLE_HTTP1_RECORD_H
#define SPINDLE_HTTP1_RECORD_H

#include <stdbool.h>
#include <stdint.h>

#include "../span.h"
#include "../stats/stats.h"

struct h1_record {
	int status;
	enum stats_method method;
	uint64_t head_len;       /* bytes of the head: the rest of what is sent is body */
	int64_t stats_t0;
	int64_t ready_ns, pickup_ns, first_ns; /* its request's stamps (conn_readable) */
	struct span request_line, referer, user_agent; /* into the input buffer */
	const char *site;        /* the site's name for the log, or NULL (a server of one site) */
	int site_stats;          /* its per-site counter + 1; 0 (as a record that names none is): none */
	bool shed;               /* answered 503 by the overload policy, not served */
	bool http2;              /* served on an HTTP/2 stream */
};

/* A response's last byte is out (at now, CLOCK_MONOTONIC ns), sent bytes in
 * all, to peer; reused: not the connection's first response. Stats and the
 * access log line, once each. */
void h1_record_account(const struct h1_record *r, const char *peer, uint64_t sent, int64_t now, bool reused);

#endif
