/* endpoint.c - /metrics (Prometheus text exposition format 0.0.4) and the
 * /status page, rendered from the same shared segment spindle-stat reads. */
#include "endpoint.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../log/log.h"
#include "../server.h"
#include "snapshot.h"
#include "stats.h"

static bool path_is(const struct http_request *req, const char *path)
{
	size_t n = strlen(path);
	return n && req->path.len == n && memcmp(req->path.p, path, n) == 0;
}

/* A string field of the segment, which need not hold a NUL nor anything
 * printable: what it holds when spindle wrote it (a stats_name, a model, a
 * version) is letters, digits and ".-_"; anything else is shown as '?', so
 * it can stand in HTML and in a Prometheus label value alike. */
static void field(FILE *f, const char *s, size_t cap)
{
	for (size_t i = 0; i < cap && s[i]; i++) {
		unsigned char c = (unsigned char)s[i];
		bool plain = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '.' ||
			     c == '-' || c == '_';
		fputc(plain ? c : '?', f);
	}
}
#define FIELD(f, arr) field((f), (arr), sizeof(arr))

/* The listen field, for HTML text only: addresses hold ':', '[', '/', ','
 * and spaces; HTML's specials become entities, any other byte outside
 * printable ASCII '?'. */
static void html_field(FILE *f, const char *s, size_t cap)
{
	for (size_t i = 0; i < cap && s[i]; i++) {
		unsigned char c = (unsigned char)s[i];
		switch (c) {
		case '&': fputs("&amp;", f); break;
		case '<': fputs("&lt;", f); break;
		case '>': fputs("&gt;", f); break;
		case '"': fputs("&quot;", f); break;
		case '\'': fputs("&#39;", f); break;
		default: fputc(c >= 0x20 && c < 0x7f ? c : '?', f);
		}
	}
}

static void counter(FILE *f, const char *name, const char *help, uint64_t v)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s counter\n%s %" PRIu64 "\n", name, help, name, name, v);
}

static void gauge(FILE *f, const char *name, const char *help, double v)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s gauge\n%s %.17g\n", name, help, name, name, v);
}

/* One of the request timing histograms, labelled with the model (the same
 * model for every worker of a generation: the sum is that model's). */
static void ladder_histogram(FILE *f, const struct stats_header *h, const char *name, const char *help,
			     const uint64_t hist[STATS_LADDER_BUCKETS], uint64_t sum_ns)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
	uint64_t cum = 0;
	for (int i = 0; i < STATS_LADDER_BUCKETS; i++) {
		cum += hist[i];
		fprintf(f, "%s_bucket{model=\"", name);
		FIELD(f, h->model);
		if (i < STATS_LADDER_BUCKETS - 1)
			fprintf(f, "\",le=\"%.9g\"} %" PRIu64 "\n", stats_ladder_le_us(i) / 1e6, cum);
		else
			fprintf(f, "\",le=\"+Inf\"} %" PRIu64 "\n", cum);
	}
	fprintf(f, "%s_sum{model=\"", name);
	FIELD(f, h->model);
	fprintf(f, "\"} %.9f\n%s_count{model=\"", (double)sum_ns / 1e9, name);
	FIELD(f, h->model);
	fprintf(f, "\"} %" PRIu64 "\n", cum);
}

static void render_metrics(FILE *f, const struct stats_header *h, const struct stats_totals *t)
{
	static const char *const methods[] = { "GET", "HEAD", "other" };

	fprintf(f, "# HELP spindle_info The running server.\n# TYPE spindle_info gauge\n"
		   "spindle_info{version=\"");
	FIELD(f, h->version_str);
	fprintf(f, "\",model=\"");
	FIELD(f, h->model);
	fprintf(f, "\",instance=\"");
	FIELD(f, h->name);
	fprintf(f, "\"} 1\n");
	gauge(f, "spindle_start_time_seconds", "Start time of the server since the Unix epoch.",
	      (double)h->start_unix_ns / 1e9);
	counter(f, "spindle_connections_accepted_total", "Connections accepted.", t->accepted);
	gauge(f, "spindle_connections_active", "Connections open now.", (double)t->active);

	fprintf(f, "# HELP spindle_requests_total Responses completed, by request method.\n"
		   "# TYPE spindle_requests_total counter\n");
	for (int i = 0; i < STATS_NMETHODS; i++)
		fprintf(f, "spindle_requests_total{method=\"%s\"} %" PRIu64 "\n", methods[i], t->method[i]);

	fprintf(f, "# HELP spindle_responses_total Responses completed, by status code (common codes).\n"
		   "# TYPE spindle_responses_total counter\n");
	for (int i = 0; i < STATS_NCODES; i++)
		fprintf(f, "spindle_responses_total{code=\"%d\"} %" PRIu64 "\n", stats_code_values[i], t->code[i]);
	fprintf(f, "# HELP spindle_responses_class_total Responses completed, by status class.\n"
		   "# TYPE spindle_responses_class_total counter\n");
	for (int i = 0; i < 5; i++)
		fprintf(f, "spindle_responses_class_total{class=\"%dxx\"} %" PRIu64 "\n", i + 1, t->status_class[i]);

	counter(f, "spindle_bytes_sent_total", "Response body bytes sent.", t->bytes_sent);
	counter(f, "spindle_keepalive_reuses_total", "Requests after the first on a connection.",
		t->keepalive_reuses);
	counter(f, "spindle_http2_requests_total", "Requests served on an HTTP/2 stream (the rest: HTTP/1.x).",
		t->http2_requests);
	counter(f, "spindle_timeouts_total", "Connections that reached a deadline (header, body, send, idle).",
		t->timeouts);
	counter(f, "spindle_errors_total", "5xx responses plus failed sends.", t->errors);
	fprintf(f, "# HELP spindle_requests_shed_total Requests answered 503 by the overload policy, by reason.\n"
		   "# TYPE spindle_requests_shed_total counter\n"
		   "spindle_requests_shed_total{reason=\"queue_wait\"} %" PRIu64 "\n"
		   "spindle_requests_shed_total{reason=\"full\"} %" PRIu64 "\n"
		   "spindle_requests_shed_total{reason=\"connections\"} %" PRIu64 "\n",
		t->shed, t->shed_full, t->shed_connections);
	counter(f, "spindle_send_failures_total", "Responses cut short by the peer.", t->send_failures);
	counter(f, "spindle_tls_handshakes_total", "TLS handshakes completed (resumed ones included).",
		t->tls_handshakes);
	counter(f, "spindle_tls_resumed_total", "TLS handshakes that resumed a session.", t->tls_resumed);
	counter(f, "spindle_tls_handshake_failures_total", "TLS handshakes that failed, were cut off or timed out.",
		t->tls_handshake_failures);
	counter(f, "spindle_cache_hits_total", "File cache lookups that hit.", t->cache_hits);
	counter(f, "spindle_cache_misses_total", "File cache lookups that missed.", t->cache_misses);
	counter(f, "spindle_cache_evictions_total", "Cache entries dropped to make room.", t->cache_evictions);
	gauge(f, "spindle_cache_bytes", "Bytes held by the file cache(s).", (double)t->cache_bytes);
	gauge(f, "spindle_cache_entries", "Files held by the file cache(s).", (double)t->cache_entries);

	fprintf(f, "# HELP spindle_request_duration_seconds From a request head's arrival to its response's last byte.\n"
		   "# TYPE spindle_request_duration_seconds histogram\n");
	uint64_t cum = 0;
	for (int i = 0; i < STATS_LAT_BUCKETS - 1; i++) {
		cum += t->latency[i];
		fprintf(f, "spindle_request_duration_seconds_bucket{le=\"%.9g\"} %" PRIu64 "\n",
			stats_bucket_le_us(i) / 1e6, cum);
	}
	cum += t->latency[STATS_LAT_BUCKETS - 1];
	fprintf(f, "spindle_request_duration_seconds_bucket{le=\"+Inf\"} %" PRIu64 "\n", cum);
	fprintf(f, "spindle_request_duration_seconds_sum %.9f\n", (double)t->latency_ns_sum / 1e9);
	fprintf(f, "spindle_request_duration_seconds_count %" PRIu64 "\n", cum);

	if (t->has_times) {
		ladder_histogram(f, h, "spindle_request_queue_seconds",
				 "From readable (accepted, or reported ready) to picked up by the thread or loop that served it.",
				 t->queue, t->queue_ns_sum);
		ladder_histogram(f, h, "spindle_request_service_seconds",
				 "From picked up to the response's last byte handed to the kernel.", t->service,
				 t->service_ns_sum);
	}

	bool sites = false;
	for (int i = 0; t->has_sites && i < STATS_SITES_MAX; i++) {
		if (!h->site[i][0])
			continue;
		if (!sites)
			fprintf(f, "# HELP spindle_site_requests_total Responses completed, by site ([site NAME]; default: "
				   "the top level's).\n# TYPE spindle_site_requests_total counter\n");
		sites = true;
		fprintf(f, "spindle_site_requests_total{site=\"");
		FIELD(f, h->site[i]);
		fprintf(f, "\"} %" PRIu64 "\n", t->site_requests[i]);
	}

	fprintf(f, "# HELP spindle_worker_requests_total Responses completed by each worker slot.\n"
		   "# TYPE spindle_worker_requests_total counter\n");
	for (uint32_t i = 0; i < h->nslots; i++) {
		bool bound;
		uint64_t n = stats_slot_requests(h, i, &bound);
		if (bound || n)
			fprintf(f, "spindle_worker_requests_total{worker=\"%u\"} %" PRIu64 "\n", i, n);
	}
}

static void render_status(FILE *f, const struct stats_header *h, const struct stats_totals *t)
{
	double up = (double)(t->taken_mono_ns - h->start_mono_ns) / 1e9;
	uint64_t done = t->requests;
	fprintf(f, "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>spindle status</title>\n"
		   "<style>body{font-family:sans-serif;margin:2em}td,th{padding:2px 10px;text-align:right}"
		   "th{text-align:left}.bar{background:#48c;height:10px;display:inline-block}</style></head><body>\n");
	fprintf(f, "<h1>spindle ");
	FIELD(f, h->version_str);
	fprintf(f, "</h1>\n<table>\n<tr><th>instance</th><td>");
	FIELD(f, h->name);
	fprintf(f, "</td></tr>\n<tr><th>model</th><td>");
	FIELD(f, h->model);
	char who[128];
	stats_concurrency(h, who, sizeof(who));
	fprintf(f, ", %s</td></tr>\n", who);
	if (STATS_HAS_LISTEN(h)) {
		fprintf(f, "<tr><th>listening on</th><td>");
		html_field(f, h->listen, sizeof(h->listen));
		fprintf(f, "</td></tr>\n");
	}
	fprintf(f, "<tr><th>pid</th><td>%d</td></tr>\n<tr><th>uptime</th><td>%.0f s</td></tr>\n", (int)h->pid, up);
	fprintf(f, "<tr><th>requests</th><td>%" PRIu64 "</td></tr>\n<tr><th>requests/s since start</th><td>%.1f</td></tr>\n",
		done, up > 0 ? (double)done / up : 0.0);
	fprintf(f, "<tr><th>connections</th><td>%" PRId64 " active, %" PRIu64 " accepted</td></tr>\n", t->active,
		t->accepted);
	fprintf(f, "<tr><th>body bytes sent</th><td>%" PRIu64 "</td></tr>\n", t->bytes_sent);
	uint64_t lookups = t->cache_hits + t->cache_misses;
	fprintf(f, "<tr><th>cache</th><td>%.1f%% hits, %" PRId64 " files, %" PRId64 " bytes, %" PRIu64 " evictions</td></tr>\n",
		lookups ? 100.0 * (double)t->cache_hits / (double)lookups : 0.0, t->cache_entries, t->cache_bytes,
		t->cache_evictions);
	fprintf(f, "<tr><th>timeouts / errors</th><td>%" PRIu64 " / %" PRIu64 "</td></tr>\n", t->timeouts,
		t->errors);
	fprintf(f, "<tr><th>shed (overload)</th><td>%" PRIu64 " queue_wait, %" PRIu64 " full, %" PRIu64
		   " connections</td></tr>\n</table>\n",
		t->shed, t->shed_full, t->shed_connections);

	fprintf(f, "<h2>status mix</h2>\n<table>\n");
	for (int i = 0; i < 5; i++)
		fprintf(f, "<tr><th>%dxx</th><td>%" PRIu64 "</td><td>%.1f%%</td></tr>\n", i + 1, t->status_class[i],
			done ? 100.0 * (double)t->status_class[i] / (double)done : 0.0);
	fprintf(f, "</table>\n<h2>latency</h2>\n<table>\n");
	static const double qs[] = { 0.5, 0.9, 0.99, 0.999 };
	for (size_t i = 0; i < sizeof(qs) / sizeof(qs[0]); i++)
		fprintf(f, "<tr><th>p%g</th><td>%.0f &micro;s</td></tr>\n", qs[i] * 100, stats_quantile_us(t->latency, qs[i]));
	fprintf(f, "<tr><th>mean</th><td>%.0f &micro;s</td></tr>\n</table>\n",
		done ? (double)t->latency_ns_sum / 1e3 / (double)done : 0.0);

	/* estimated from the 1-2-5 buckets: within a bucket's width */
	fprintf(f, "<h2>queue wait and service time</h2>\n<p>percentiles estimated from histogram buckets "
		   "(1-2-5 steps)</p>\n<table>\n<tr><th></th><th>p50</th><th>p99</th><th>p99.9</th><th>mean</th></tr>\n");
	static const double tq[] = { 0.5, 0.99, 0.999 };
	for (int k = 0; k < 2 && t->has_times; k++) {
		const uint64_t *hist = k ? t->service : t->queue;
		uint64_t n = 0;
		for (int i = 0; i < STATS_LADDER_BUCKETS; i++)
			n += hist[i];
		fprintf(f, "<tr><th>%s</th>", k ? "service" : "queue wait");
		for (size_t i = 0; i < sizeof(tq) / sizeof(tq[0]); i++)
			fprintf(f, "<td>%.1f &micro;s</td>", stats_ladder_quantile_us(hist, tq[i]));
		fprintf(f, "<td>%.1f &micro;s</td></tr>\n",
			n ? (double)(k ? t->service_ns_sum : t->queue_ns_sum) / 1e3 / (double)n : 0.0);
	}
	fprintf(f, "</table>\n");

	fprintf(f, "<h2>per worker</h2>\n<table>\n");
	uint64_t most = 1;
	for (uint32_t i = 0; i < h->nslots; i++) {
		uint64_t n = stats_slot_requests(h, i, NULL);
		if (n > most)
			most = n;
	}
	for (uint32_t i = 0; i < h->nslots; i++) {
		bool bound;
		uint64_t n = stats_slot_requests(h, i, &bound);
		if (bound || n)
			fprintf(f, "<tr><th>%u</th><td>%" PRIu64 "</td><td style=\"text-align:left\"><span class=\"bar\" "
				   "style=\"width:%dpx\"></span></td></tr>\n",
				i, n, (int)(300 * n / most));
	}
	fprintf(f, "</table>\n</body></html>\n");
}

/* Closes the stream (which is when buf and len become final) and answers. */
static bool finish(FILE *f, char **buf, size_t *len, int status, const char *type, struct dyn_response *out)
{
	if (!f || fclose(f) != 0 || !*buf) {
		free(*buf);
		*out = (struct dyn_response){ .status = 500, .content_type = "text/plain; charset=utf-8" };
		out->body = strdup("statistics unavailable\n");
		out->len = out->body ? strlen(out->body) : 0;
		return true;
	}
	*out = (struct dyn_response){ .status = status, .content_type = type, .body = *buf, .len = *len };
	return true;
}

bool stats_endpoint(const struct server *srv, const struct sockaddr_storage *peer,
		    const struct http_request *req, struct dyn_response *out)
{
	const struct config *cfg = srv->cfg;
	if (!cfg->metrics)
		return false;
	bool metrics = path_is(req, cfg->metrics_path);
	if (!metrics && !path_is(req, cfg->status_path))
		return false;
	if (!stats_enabled(srv) || !stats_peer_allowed(srv, peer)) {
		static const char msg[] = "403 Forbidden: statistics are not available to this address\n";
		*out = (struct dyn_response){ .status = 403, .content_type = "text/plain; charset=utf-8" };
		out->body = strdup(msg);
		out->len = out->body ? sizeof(msg) - 1 : 0;
		return true;
	}
	/* rendered from a checked copy: anyone running as this user can write
	 * the segment, and its layout and strings are believed only once checked */
	struct stats_copy copy = { 0 };
	char why[128];
	const struct stats_header *h = stats_snapshot(srv, &copy, why, sizeof(why));
	char *buf = NULL;
	size_t len = 0;
	if (!h) {
		log_warn("stats: %s %.*s: the segment is unreadable: %s", metrics ? "metrics" : "status",
			 (int)req->path.len, req->path.p, why);
		stats_copy_free(&copy);
		return finish(NULL, &buf, &len, 500, NULL, out);
	}
	struct stats_totals t;
	stats_sum(h, &t);
	FILE *f = open_memstream(&buf, &len);
	bool done;
	if (!f)
		done = finish(NULL, &buf, &len, 500, NULL, out);
	else if (metrics) {
		render_metrics(f, h, &t);
		done = finish(f, &buf, &len, 200, "text/plain; version=0.0.4; charset=utf-8", out);
	} else {
		render_status(f, h, &t);
		done = finish(f, &buf, &len, 200, "text/html; charset=utf-8", out);
	}
	stats_copy_free(&copy);
	return done;
}
