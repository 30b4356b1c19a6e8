/* spindle-stat.c - a live view of a running spindle's statistics, read from
 * its shared-memory segment (/dev/shm/spindle-NAME) without disturbing it:
 * the mapping is read-only and the server never waits for a reader.
 *
 *   spindle-stat [--port N | --name NAME] [--interval SEC] [--once [--json]]
 *
 * Refreshes like top (plain ANSI escapes); --once prints one snapshot (rates
 * since the server started), --json makes that snapshot machine-readable. */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../src/stats/snapshot.h"

#define MAX_INSTANCES 64
#define BAR_WIDTH 40
#define MAX_WORKER_LINES 32

static volatile sig_atomic_t quit;

static void on_quit(int sig)
{
	(void)sig;
	quit = 1;
}

static void usage(FILE *out)
{
	fprintf(out,
		"usage: spindle-stat [--port N | --name NAME] [--interval SEC] [--once [--json]]\n"
		"\n"
		"Shows a running spindle's live statistics (from /dev/shm/spindle-NAME).\n"
		"\n"
		"  -p, --port N        the instance serving port N (stats_name = auto)\n"
		"  -n, --name NAME     the instance with stats_name NAME\n"
		"  -i, --interval SEC  refresh period (default 1; fractions allowed)\n"
		"  -1, --once          print one snapshot and exit\n"
		"  -j, --json          with --once: print it as JSON\n"
		"  -h, --help          this help\n"
		"\n"
		"Without --port or --name, the only running instance is shown.\n");
}

/* Names of /dev/shm/spindle-* segments; returns how many. */
static int list_instances(char names[][64], int max)
{
	DIR *d = opendir("/dev/shm");
	int n = 0;
	if (!d)
		return 0;
	for (struct dirent *e; (e = readdir(d)) && n < max;) {
		if (strncmp(e->d_name, "spindle-", 8) != 0 || !e->d_name[8] || strlen(e->d_name + 8) >= 64)
			continue;
		snprintf(names[n++], 64, "%s", e->d_name + 8);
	}
	closedir(d);
	return n;
}

static bool owner_alive(const struct stats_header *h)
{
	if (h->pid <= 0) /* kill(0 or -1, ...) would mean process groups */
		return false;
	return kill(h->pid, 0) == 0 || errno == EPERM;
}

/* A string field of the segment: whoever can write the segment chose its
 * bytes, so it is read up to its field's end even without a NUL, and nothing
 * reaches the terminal raw. For JSON, quotes and backslashes are escaped and
 * every control or non-ASCII byte becomes \u00XX (Latin-1: the output stays
 * valid UTF-8); on the screen such bytes show as \xNN. */
#define FIELD_ESCAPED(cap) ((cap) * 6 + 1)

static const char *escape(char *out, size_t outcap, const char *s, size_t cap, bool json)
{
	size_t o = 0;
	for (size_t i = 0; i < cap && s[i] && o + 7 <= outcap; i++) {
		unsigned char c = (unsigned char)s[i];
		if (json && (c == '"' || c == '\\')) {
			out[o++] = '\\';
			out[o++] = (char)c;
		} else if (c < 0x20 || c >= 0x7f) {
			o += (size_t)snprintf(out + o, outcap - o, json ? "\\u%04x" : "\\x%02x", c);
		} else {
			out[o++] = (char)c;
		}
	}
	out[o] = '\0';
	return out;
}

#define ESC(buf, field, json) escape(buf, sizeof(buf), field, sizeof(field), json)

/* The segment's owner (or anyone who can write it) may truncate it under
 * our mapping: the copy then faults with SIGBUS, reported, not a crash. */
static sigjmp_buf bus_jump;

static void on_sigbus(int sig)
{
	(void)sig;
	siglongjmp(bus_jump, 1);
}

static const struct stats_header *read_segment(const void *map, size_t len, struct stats_copy *c, char *err,
					       size_t errlen)
{
	struct sigaction sa = { .sa_handler = on_sigbus }, old;
	const struct stats_header *h = NULL;

	sigemptyset(&sa.sa_mask);
	sigaction(SIGBUS, &sa, &old);
	if (sigsetjmp(bus_jump, 1) == 0)
		h = stats_read_copy(map, len, c, err, errlen);
	else
		snprintf(err, errlen, "the segment shrank while being read");
	sigaction(SIGBUS, &old, NULL);
	return h;
}

static double human(double v, const char **unit)
{
	static const char *const units[] = { "", "k", "M", "G", "T" };
	int i = 0;
	while (v >= 1000 && i < 4) {
		v /= 1000;
		i++;
	}
	*unit = units[i];
	return v;
}

static double human_bytes(double v, const char **unit)
{
	static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB" };
	int i = 0;
	while (v >= 1024 && i < 4) {
		v /= 1024;
		i++;
	}
	*unit = units[i];
	return v;
}

static void fmt_us(char *buf, size_t len, double us)
{
	if (us < 1000)
		snprintf(buf, len, "%.0fus", us);
	else if (us < 1e6)
		snprintf(buf, len, "%.2fms", us / 1e3);
	else
		snprintf(buf, len, "%.2fs", us / 1e6);
}

/* "name": {p50, p99, p999, mean, count, sum, buckets} of a request timing
 * histogram; the percentiles are estimated from its buckets. */
static void json_ladder(const char *name, const uint64_t hist[STATS_LADDER_BUCKETS], uint64_t sum_ns)
{
	uint64_t n = 0;
	for (int i = 0; i < STATS_LADDER_BUCKETS; i++)
		n += hist[i];
	printf("  \"%s\": {\"p50\": %.1f, \"p99\": %.1f, \"p999\": %.1f, \"mean\": %.1f, \"count\": %" PRIu64
	       ", \"sum\": %.3f, \"buckets\": [",
	       name, stats_ladder_quantile_us(hist, 0.5), stats_ladder_quantile_us(hist, 0.99),
	       stats_ladder_quantile_us(hist, 0.999), n ? (double)sum_ns / 1e3 / (double)n : 0.0, n,
	       (double)sum_ns / 1e3);
	for (int i = 0; i < STATS_LADDER_BUCKETS; i++) {
		if (i < STATS_LADDER_BUCKETS - 1)
			printf("%s{\"le\": %g, \"count\": %" PRIu64 "}", i ? ", " : "", stats_ladder_le_us(i), hist[i]);
		else
			printf(", {\"le\": null, \"count\": %" PRIu64 "}", hist[i]);
	}
	printf("]},\n");
}

static void print_json(const struct stats_header *h, const struct stats_totals *t)
{
	static const char *const methods[] = { "GET", "HEAD", "other" };
	double up = (double)(t->taken_mono_ns - h->start_mono_ns) / 1e9;

	char name[FIELD_ESCAPED(sizeof(h->name))], version[FIELD_ESCAPED(sizeof(h->version_str))];
	char model[FIELD_ESCAPED(sizeof(h->model))], bind[FIELD_ESCAPED(sizeof(h->bind))];

	printf("{\n  \"instance\": \"%s\", \"pid\": %d, \"alive\": %s, \"version\": \"%s\", \"model\": \"%s\",\n",
	       ESC(name, h->name, true), (int)h->pid, owner_alive(h) ? "true" : "false",
	       ESC(version, h->version_str, true), ESC(model, h->model, true));
	/* null when listen lines serve (the server leaves both empty then) */
	if (h->bind[0])
		printf("  \"bind\": \"%s\", ", ESC(bind, h->bind, true));
	else
		printf("  \"bind\": null, ");
	if (h->port > 0)
		printf("\"port\": %d, ", h->port);
	else
		printf("\"port\": null, ");
	printf("\"workers\": %d, \"threads\": %d, \"generation\": %llu,\n", h->workers, h->threads,
	       (unsigned long long)atomic_load(&((struct stats_header *)h)->generation));
	if (STATS_HAS_LISTEN(h)) {
		char listen[FIELD_ESCAPED(sizeof(h->listen))];
		printf("  \"listen\": \"%s\",\n", ESC(listen, h->listen, true));
	}
	printf("  \"start_time\": %.3f, \"uptime_seconds\": %.3f,\n", (double)h->start_unix_ns / 1e9, up);
	printf("  \"connections_accepted\": %" PRIu64 ", \"connections_active\": %" PRId64 ",\n", t->accepted,
	       t->active);
	printf("  \"requests\": %" PRIu64 ", \"requests_per_second\": %.3f,\n", t->requests,
	       up > 0 ? (double)t->requests / up : 0.0);
	printf("  \"methods\": {");
	for (int i = 0; i < STATS_NMETHODS; i++)
		printf("%s\"%s\": %" PRIu64, i ? ", " : "", methods[i], t->method[i]);
	printf("},\n  \"status_classes\": {");
	for (int i = 0; i < 5; i++)
		printf("%s\"%dxx\": %" PRIu64, i ? ", " : "", i + 1, t->status_class[i]);
	printf("},\n  \"status_codes\": {");
	for (int i = 0; i < STATS_NCODES; i++)
		printf("%s\"%d\": %" PRIu64, i ? ", " : "", stats_code_values[i], t->code[i]);
	printf("},\n");
	printf("  \"bytes_sent\": %" PRIu64 ", \"keepalive_reuses\": %" PRIu64 ", \"timeouts\": %" PRIu64
	       ", \"errors\": %" PRIu64 ", \"send_failures\": %" PRIu64 ", \"shed\": %" PRIu64
	       ", \"shed_full\": %" PRIu64 ", \"shed_connections\": %" PRIu64 ", \"http2_requests\": %" PRIu64 ",\n",
	       t->bytes_sent, t->keepalive_reuses, t->timeouts, t->errors, t->send_failures, t->shed, t->shed_full,
	       t->shed_connections, t->http2_requests);
	printf("  \"tls\": {\"handshakes\": %" PRIu64 ", \"resumed\": %" PRIu64 ", \"handshake_failures\": %" PRIu64
	       "},\n",
	       t->tls_handshakes, t->tls_resumed, t->tls_handshake_failures);
	printf("  \"cache\": {\"hits\": %" PRIu64 ", \"misses\": %" PRIu64 ", \"evictions\": %" PRIu64
	       ", \"bytes\": %" PRId64 ", \"entries\": %" PRId64 "},\n",
	       t->cache_hits, t->cache_misses, t->cache_evictions, t->cache_bytes, t->cache_entries);
	printf("  \"latency_us\": {\"p50\": %.1f, \"p90\": %.1f, \"p99\": %.1f, \"mean\": %.1f, \"buckets\": [",
	       stats_quantile_us(t->latency, 0.5), stats_quantile_us(t->latency, 0.9),
	       stats_quantile_us(t->latency, 0.99), t->requests ? (double)t->latency_ns_sum / 1e3 / (double)t->requests : 0.0);
	for (int i = 0; i < STATS_LAT_BUCKETS; i++) {
		if (i < STATS_LAT_BUCKETS - 1)
			printf("%s{\"le\": %.0f, \"count\": %" PRIu64 "}", i ? ", " : "", stats_bucket_le_us(i), t->latency[i]);
		else
			printf(", {\"le\": null, \"count\": %" PRIu64 "}", t->latency[i]);
	}
	printf("]},\n");
	if (t->has_times) {
		json_ladder("queue_us", t->queue, t->queue_ns_sum);
		json_ladder("service_us", t->service, t->service_ns_sum);
	} else { /* an older build's segment: it does not time requests */
		printf("  \"queue_us\": null,\n  \"service_us\": null,\n");
	}
	printf("  \"workers\": [");
	bool first = true;
	for (uint32_t i = 0; i < h->nslots; i++) {
		bool bound;
		uint64_t n = stats_slot_requests(h, i, &bound);
		if (!bound && !n)
			continue;
		printf("%s{\"slot\": %u, \"requests\": %" PRIu64 "}", first ? "" : ", ", i, n);
		first = false;
	}
	printf("]\n}\n");
}

struct view {
	struct stats_totals prev;
	uint64_t prev_slot[STATS_MAX_SLOTS];
	bool have_prev;
	unsigned long long generation;
};

static void bar(int width, double frac)
{
	int n = (int)(frac * width + 0.5);
	for (int i = 0; i < width; i++)
		fputs(i < n ? "#" : " ", stdout);
}

/* One screen. With a previous sample, rates and the latency mix cover the
 * interval between the two; else everything since the start. */
static void print_screen(const struct stats_header *h, const struct stats_totals *t, struct view *v, bool once)
{
	double up = (double)(t->taken_mono_ns - h->start_mono_ns) / 1e9;
	bool delta = v->have_prev;
	double secs = delta ? (double)(t->taken_mono_ns - v->prev.taken_mono_ns) / 1e9 : up;
	const struct stats_totals *p = &v->prev;
	struct stats_totals zero = { 0 };
	if (!delta)
		p = &zero;
	if (secs <= 0)
		secs = 1e-9;
	uint64_t reqs = t->requests - p->requests;
	uint64_t hist[STATS_LAT_BUCKETS];
	for (int i = 0; i < STATS_LAT_BUCKETS; i++)
		hist[i] = t->latency[i] - p->latency[i];
	const char *u1, *u2;
	char p50[16], p90[16], p99[16];
	time_t now = time(NULL);
	char clock[16];
	strftime(clock, sizeof(clock), "%H:%M:%S", localtime(&now));

	if (!once)
		fputs("\033[H\033[2J", stdout); /* home, clear */
	char name[FIELD_ESCAPED(sizeof(h->name))], model[FIELD_ESCAPED(sizeof(h->model))];
	char bind[FIELD_ESCAPED(sizeof(h->bind))], root[FIELD_ESCAPED(sizeof(h->root))];
	char listen[FIELD_ESCAPED(sizeof(h->listen))], who[128];
	stats_concurrency(h, who, sizeof(who));
	printf("spindle-stat  %s  instance %s  pid %d%s  %s model, %s  up %.0fs\n", clock,
	       ESC(name, h->name, false), (int)h->pid, owner_alive(h) ? "" : " (NOT RUNNING)",
	       ESC(model, h->model, false), who, up);
	if (STATS_HAS_LISTEN(h))
		printf("%s  root %s\n\n", ESC(listen, h->listen, false), ESC(root, h->root, false));
	else /* an older server's segment: its summary of bind and port */
		printf("%s:%d  root %s\n\n", ESC(bind, h->bind, false), h->port, ESC(root, h->root, false));
	double rps = human((double)reqs / secs, &u1);
	double bps = human_bytes((double)(t->bytes_sent - p->bytes_sent) / secs, &u2);
	printf("  requests/s %8.1f%-2s  body bytes/s %8.1f %-4s  %s\n", rps, u1, bps, u2,
	       delta ? "(last interval)" : "(since start)");
	printf("  requests   %10" PRIu64 "  connections %7" PRId64 " active, %" PRIu64 " accepted, %" PRIu64
	       " keep-alive reuses\n",
	       t->requests, t->active, t->accepted, t->keepalive_reuses);
	uint64_t lookups = (t->cache_hits - p->cache_hits) + (t->cache_misses - p->cache_misses);
	double cb = human_bytes((double)t->cache_bytes, &u2);
	printf("  cache      %7.1f%% hits  %" PRId64 " %s, %.1f %s, %" PRIu64 " %s\n",
	       lookups ? 100.0 * (double)(t->cache_hits - p->cache_hits) / (double)lookups : 0.0, t->cache_entries,
	       t->cache_entries == 1 ? "file" : "files", cb, u2, t->cache_evictions,
	       t->cache_evictions == 1 ? "eviction" : "evictions");
	printf("  timeouts   %8" PRIu64 "   errors %" PRIu64 " (send failures %" PRIu64 ")\n", t->timeouts, t->errors,
	       t->send_failures);
	if (t->shed)
		printf("  shed       %8" PRIu64 "   answered 503 by the overload policy (queue wait)\n", t->shed);
	if (t->shed_full)
		printf("  rejected   %8" PRIu64 "   connections answered 503 at once, the server full\n", t->shed_full);
	if (t->shed_connections)
		printf("  refused    %8" PRIu64 "   connections answered 503 at once, at max_connections (shed)\n",
		       t->shed_connections);
	printf("\n");
	if (t->tls_handshakes || t->tls_handshake_failures)
		printf("  tls        %8" PRIu64 "   handshakes, %" PRIu64 " resumed, %" PRIu64 " failed\n\n",
		       t->tls_handshakes, t->tls_resumed, t->tls_handshake_failures);

	printf("  status    ");
	for (int i = 0; i < 5; i++) {
		uint64_t n = t->status_class[i] - p->status_class[i];
		printf("  %dxx %5.1f%%", i + 1, reqs ? 100.0 * (double)n / (double)reqs : 0.0);
	}
	printf("\n  codes     ");
	for (int i = 0; i < STATS_NCODES; i++)
		printf("  %d:%" PRIu64, stats_code_values[i], t->code[i]);
	fmt_us(p50, sizeof(p50), stats_quantile_us(hist, 0.5));
	fmt_us(p90, sizeof(p90), stats_quantile_us(hist, 0.9));
	fmt_us(p99, sizeof(p99), stats_quantile_us(hist, 0.99));
	printf("\n  latency     p50 %s   p90 %s   p99 %s\n", p50, p90, p99);
	/* where the time went: percentiles estimated from the 1-2-5 buckets */
	for (int k = 0; k < 2 && t->has_times; k++) {
		uint64_t lh[STATS_LADDER_BUCKETS];
		const uint64_t *cur = k ? t->service : t->queue, *before = k ? p->service : p->queue;
		for (int i = 0; i < STATS_LADDER_BUCKETS; i++)
			lh[i] = cur[i] - before[i];
		char q50[16], q99[16], q999[16];
		fmt_us(q50, sizeof(q50), stats_ladder_quantile_us(lh, 0.5));
		fmt_us(q99, sizeof(q99), stats_ladder_quantile_us(lh, 0.99));
		fmt_us(q999, sizeof(q999), stats_ladder_quantile_us(lh, 0.999));
		printf("  %-10s  p50 %s   p99 %s   p99.9 %s\n", k ? "service" : "queue wait", q50, q99, q999);
	}
	printf("\n");

	/* per worker: requests in the interval, as bars against the busiest */
	uint64_t most = 1, shown = 0, d[STATS_MAX_SLOTS];
	bool bound[STATS_MAX_SLOTS];
	for (uint32_t i = 0; i < h->nslots; i++) {
		uint64_t n = stats_slot_requests(h, i, &bound[i]);
		d[i] = n - (delta ? v->prev_slot[i] : 0);
		v->prev_slot[i] = n;
		if (d[i] > most)
			most = d[i];
	}
	printf("  worker   requests%s\n", delta ? "/s" : "");
	for (uint32_t i = 0; i < h->nslots; i++) {
		if (!bound[i] && !d[i])
			continue;
		if (shown++ == MAX_WORKER_LINES) {
			printf("  ... more workers (see --once --json)\n");
			break;
		}
		if (delta) /* a rate */
			printf("  %6u %10.1f |", i, (double)d[i] / secs);
		else /* a count */
			printf("  %6u %10" PRIu64 " |", i, d[i]);
		bar(BAR_WIDTH, (double)d[i] / (double)most);
		printf("|\n");
	}
	fflush(stdout);
	v->prev = *t;
	v->have_prev = true;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "port", required_argument, NULL, 'p' },     { "name", required_argument, NULL, 'n' },
		{ "interval", required_argument, NULL, 'i' }, { "once", no_argument, NULL, '1' },
		{ "json", no_argument, NULL, 'j' },           { "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	char name[64] = "";
	double interval = 1.0;
	bool once = false, json = false;
	int opt;

	while ((opt = getopt_long(argc, argv, "p:n:i:1jh", opts, NULL)) != -1) {
		switch (opt) {
		case 'p': {
			char *end;
			long port = strtol(optarg, &end, 10);
			if (*end || port < 1 || port > 65535) {
				fprintf(stderr, "spindle-stat: --port %s: expected 1..65535\n", optarg);
				return 2;
			}
			snprintf(name, sizeof(name), "%ld", port);
			break;
		}
		case 'n': snprintf(name, sizeof(name), "%s", optarg); break;
		case 'i': {
			char *end;
			interval = strtod(optarg, &end);
			if (*end || !(interval >= 0.05 && interval <= 3600)) {
				fprintf(stderr, "spindle-stat: --interval %s: expected 0.05..3600 seconds\n", optarg);
				return 2;
			}
			break;
		}
		case '1': once = true; break;
		case 'j': json = true; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "spindle-stat: unexpected argument '%s'\n", argv[optind]);
		return 2;
	}
	if (json && !once) {
		fprintf(stderr, "spindle-stat: --json needs --once\n");
		return 2;
	}
	if (!name[0]) {
		char names[MAX_INSTANCES][64];
		int n = list_instances(names, MAX_INSTANCES);
		if (n == 0) {
			fprintf(stderr, "spindle-stat: no running spindle found (no /dev/shm/spindle-* segment)\n");
			return 1;
		}
		if (n > 1) {
			fprintf(stderr, "spindle-stat: %d spindle instances; choose one with --port or --name:\n", n);
			for (int i = 0; i < n; i++)
				fprintf(stderr, "  %s\n", names[i]);
			return 1;
		}
		snprintf(name, sizeof(name), "%s", names[0]);
	}

	char err[256], path[128];
	size_t maplen;
	const void *map = stats_map_segment(name, &maplen, err, sizeof(err));
	if (!map) {
		fprintf(stderr, "spindle-stat: %s\n", err);
		return 1;
	}
	/* every refresh reads a private copy and checks it before use */
	struct stats_copy copy = { 0 };
	const struct stats_header *h = read_segment(map, maplen, &copy, err, sizeof(err));
	if (!h) {
		fprintf(stderr, "spindle-stat: /dev/shm/spindle-%s: %s\n", name, err);
		stats_detach(map, maplen);
		return 1;
	}
	struct stats_totals t;
	if (once) {
		stats_sum(h, &t);
		if (json)
			print_json(h, &t);
		else {
			static struct view v;
			print_screen(h, &t, &v, true);
		}
		stats_copy_free(&copy);
		stats_detach(map, maplen);
		return 0;
	}

	/* live: until ^C, or the server goes away */
	struct sigaction sa = { .sa_handler = on_quit };
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	struct stat first;
	snprintf(path, sizeof(path), "/dev/shm/spindle-%s", name);
	if (stat(path, &first) < 0)
		memset(&first, 0, sizeof(first));
	static struct view v;
	v.generation = atomic_load(&((struct stats_header *)h)->generation);
	int rc = 0;
	fputs("\033[?25l", stdout); /* hide the cursor */
	while (!quit) {
		h = read_segment(map, maplen, &copy, err, sizeof(err));
		if (!h) {
			printf("\nspindle-stat: /dev/shm/spindle-%s: %s\n", name, err);
			rc = 1;
			break;
		}
		unsigned long long gen = atomic_load(&((struct stats_header *)h)->generation);
		if (gen != v.generation) { /* serving processes replaced: start the deltas again */
			v.have_prev = false;
			v.generation = gen;
		}
		stats_sum(h, &t);
		print_screen(h, &t, &v, false);
		struct stat now;
		if (!owner_alive(h) || stat(path, &now) < 0 || now.st_ino != first.st_ino) {
			printf("\nspindle-stat: instance %s (pid %d) has stopped\n", name, (int)h->pid);
			rc = 1;
			break;
		}
		struct timespec ts = { (time_t)interval, (long)((interval - (double)(time_t)interval) * 1e9) };
		while (nanosleep(&ts, &ts) < 0 && errno == EINTR && !quit)
			;
	}
	fputs("\033[?25h", stdout); /* show the cursor */
	fflush(stdout);
	stats_copy_free(&copy);
	stats_detach(map, maplen);
	return rc;
}
