/* h2_floor.c - the CPU nghttp2 alone spends per request in a server, with
 * nothing else: no system call, no file, no site, no log. A client session
 * (nghttp2's own, as h2load's) keeps 10 requests in flight for the 13-byte
 * body, as the lab's h2 "10x10" cell does on each connection; the server
 * session is set up as src/http2/session.c sets a busy one up (a 512-byte
 * encoder table, RFC 9218 priorities, the same SETTINGS) and answers each request with the
 * fields spindle sends and a 13-byte body copied by its data source. Only
 * the server's calls are timed (nghttp2_session_mem_recv of the client's
 * bytes, then nghttp2_session_mem_send until it has nothing left), on the
 * thread's CPU clock; the client's work is not counted.
 *
 * It is the floor under any nghttp2-based server's user CPU per request at
 * that load: whatever a server adds (reading, routing, a response, writing)
 * comes on top.
 *
 *     cc -O2 -o /tmp/h2_floor tools/h2_floor.c -lnghttp2 && taskset -c 1 /tmp/h2_floor */
#include <nghttp2/nghttp2.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define FLOOR_STREAMS 10      /* requests in flight on the connection */
#define FLOOR_ROUNDS 20000    /* rounds of FLOOR_STREAMS requests per run */
#define FLOOR_RUNS 7
#define FLOOR_BUF (1 << 20)

static const char floor_body[] = "Hello, world\n"; /* 13 bytes, the lab's file */

struct floor_wire {
	uint8_t *buf;
	size_t len;
};

static ssize_t floor_read_body(nghttp2_session *s, int32_t id, uint8_t *buf, size_t len, uint32_t *flags,
			       nghttp2_data_source *src, void *user)
{
	(void)s, (void)id, (void)src, (void)user;
	size_t n = sizeof(floor_body) - 1;
	if (len < n)
		n = len;
	memcpy(buf, floor_body, n);
	*flags |= NGHTTP2_DATA_FLAG_EOF;
	return (ssize_t)n;
}

#define NV(n, v) { (uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, sizeof(v) - 1, NGHTTP2_NV_FLAG_NONE }

/* The fields spindle answers the 13-byte file with. */
static int floor_on_frame_recv(nghttp2_session *s, const nghttp2_frame *f, void *user)
{
	(void)user;
	if (f->hd.type != NGHTTP2_HEADERS || !(f->hd.flags & NGHTTP2_FLAG_END_STREAM))
		return 0;
	static const nghttp2_nv nv[] = {
		NV(":status", "200"),
		NV("server", "spindle/0.1.0"),
		NV("date", "Thu, 26 Nov 2026 16:00:00 GMT"),
		NV("content-type", "text/plain; charset=utf-8"),
		NV("content-length", "13"),
		NV("last-modified", "Thu, 26 Nov 2026 15:00:00 GMT"),
		NV("etag", "\"6a1f-d-19c8e2\""),
		NV("accept-ranges", "bytes"),
	};
	nghttp2_data_provider dp = { .read_callback = floor_read_body };
	return nghttp2_submit_response(s, f->hd.stream_id, nv, sizeof(nv) / sizeof(nv[0]), &dp) == 0 ? 0 :
		NGHTTP2_ERR_CALLBACK_FAILURE;
}

static int floor_on_header(nghttp2_session *s, const nghttp2_frame *f, const uint8_t *name, size_t namelen,
			   const uint8_t *value, size_t valuelen, uint8_t flags, void *user)
{
	(void)s, (void)f, (void)name, (void)namelen, (void)value, (void)valuelen, (void)flags, (void)user;
	return 0;
}

/* Everything s has to send, appended to w. */
static void floor_pump(nghttp2_session *s, struct floor_wire *w)
{
	const uint8_t *p;
	ssize_t n;
	while ((n = nghttp2_session_mem_send(s, &p)) > 0) {
		if (w->len + (size_t)n > FLOOR_BUF) {
			fprintf(stderr, "h2_floor: output past %d bytes\n", FLOOR_BUF);
			exit(1);
		}
		memcpy(w->buf + w->len, p, (size_t)n);
		w->len += (size_t)n;
	}
	if (n < 0) {
		fprintf(stderr, "h2_floor: mem_send: %s\n", nghttp2_strerror((int)n));
		exit(1);
	}
}

static void floor_feed(nghttp2_session *s, struct floor_wire *w)
{
	ssize_t n = nghttp2_session_mem_recv(s, w->buf, w->len);
	if (n != (ssize_t)w->len) {
		fprintf(stderr, "h2_floor: mem_recv: %s\n", n < 0 ? nghttp2_strerror((int)n) : "short");
		exit(1);
	}
	w->len = 0;
}

static int64_t floor_cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* One connection: FLOOR_ROUNDS rounds of FLOOR_STREAMS requests. Returns
 * the server's CPU nanoseconds per request. */
static double floor_run(nghttp2_session_callbacks *scb, nghttp2_session_callbacks *ccb, nghttp2_option *opt,
			struct floor_wire *up, struct floor_wire *down)
{
	nghttp2_session *srv, *cli;
	if (nghttp2_session_server_new2(&srv, scb, NULL, opt) != 0 || nghttp2_session_client_new(&cli, ccb, NULL) != 0)
		exit(1);
	nghttp2_settings_entry siv[] = {
		{ NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, 128 },
		{ NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 1 << 20 },
		{ NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, 8192 },
		{ NGHTTP2_SETTINGS_NO_RFC7540_PRIORITIES, 1 },
	};
	nghttp2_submit_settings(srv, NGHTTP2_FLAG_NONE, siv, sizeof(siv) / sizeof(siv[0]));
	/* h2load's: a 1 GiB stream window (its -w 30), the connection's too */
	nghttp2_settings_entry civ[] = { { NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, (1u << 30) - 1 } };
	nghttp2_submit_settings(cli, NGHTTP2_FLAG_NONE, civ, 1);
	nghttp2_session_set_local_window_size(cli, NGHTTP2_FLAG_NONE, 0, (1 << 30) - 1);
	const nghttp2_nv req[] = {
		NV(":method", "GET"),
		NV(":scheme", "http"),
		NV(":authority", "127.0.0.1:8080"),
		NV(":path", "/bench/f13.txt"),
		NV("user-agent", "h2load nghttp2/1.52.0"),
	};
	int64_t spent = 0;
	long served = 0;
	for (int round = 0; round < FLOOR_ROUNDS + 1; round++) {
		for (int i = 0; i < FLOOR_STREAMS; i++)
			if (nghttp2_submit_request(cli, NULL, req, sizeof(req) / sizeof(req[0]), NULL, NULL) < 0)
				exit(1);
		floor_pump(cli, up);
		int64_t t0 = floor_cpu_ns();
		floor_feed(srv, up);
		floor_pump(srv, down);
		int64_t t1 = floor_cpu_ns();
		floor_feed(cli, down);
		if (round > 0) { /* the first round sets the sessions up */
			spent += t1 - t0;
			served += FLOOR_STREAMS;
		}
	}
	nghttp2_session_del(srv);
	nghttp2_session_del(cli);
	return (double)spent / (double)served;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

int main(void)
{
	nghttp2_session_callbacks *scb, *ccb;
	nghttp2_option *opt;
	if (nghttp2_session_callbacks_new(&scb) != 0 || nghttp2_session_callbacks_new(&ccb) != 0 ||
	    nghttp2_option_new(&opt) != 0)
		return 1;
	nghttp2_session_callbacks_set_on_frame_recv_callback(scb, floor_on_frame_recv);
	nghttp2_session_callbacks_set_on_header_callback(scb, floor_on_header);
	nghttp2_option_set_max_deflate_dynamic_table_size(opt, 512);
	nghttp2_option_set_server_fallback_rfc7540_priorities(opt, 1);
	nghttp2_option_set_builtin_recv_extension_type(opt, NGHTTP2_PRIORITY_UPDATE);
	struct floor_wire up = { malloc(FLOOR_BUF), 0 }, down = { malloc(FLOOR_BUF), 0 };
	if (!up.buf || !down.buf)
		return 1;
	double ns[FLOOR_RUNS];
	for (int r = 0; r < FLOOR_RUNS; r++)
		ns[r] = floor_run(scb, ccb, opt, &up, &down);
	qsort(ns, FLOOR_RUNS, sizeof(ns[0]), cmp_double);
	printf("nghttp2 %s, server side, %d streams in flight, 13-byte body: %.2f us of CPU per request "
	       "(median of %d runs of %d requests; range %.2f-%.2f)\n",
	       nghttp2_version(0)->version_str, FLOOR_STREAMS, ns[FLOOR_RUNS / 2] / 1000, FLOOR_RUNS,
	       FLOOR_ROUNDS * FLOOR_STREAMS, ns[0] / 1000, ns[FLOOR_RUNS - 1] / 1000);
	free(up.buf);
	free(down.buf);
	nghttp2_option_del(opt);
	nghttp2_session_callbacks_del(scb);
	nghttp2_session_callbacks_del(ccb);
	return 0;
}
