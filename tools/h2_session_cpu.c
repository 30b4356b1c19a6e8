/* h2_session_cpu.c - the user CPU spindle's HTTP/2 session spends per
 * request, site included, with no system call on the way: the lab's h2
 * "10x10" cell's shape on one connection, driven through conn.h as a driver
 * would, with a client session of nghttp2's own (as h2load's) making the
 * requests for a 13-byte file. Only the server's calls are timed
 * (conn_input_done with the client's bytes, then conn_output and
 * conn_output_done until it wants to read), on the thread's CPU clock.
 *
 * Beside tools/h2_floor.c (nghttp2 alone at the same shape) it says what
 * spindle adds; beside a load test it is free of the scheduler's noise
 * (how many requests a read happens to bring), so two builds compare
 * within a few percent.
 *
 * Linked with the server's own objects, main.o aside:
 *
 *     make build/h2_session_cpu && taskset -c 1 build/h2_session_cpu */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <nghttp2/nghttp2.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../src/config.h"
#include "../src/conn.h"
#include "../src/server.h"

#define CPU_STREAMS 10      /* requests in flight on the connection */
#define CPU_ROUNDS 20000    /* rounds of CPU_STREAMS requests per run */
#define CPU_RUNS 7
#define CPU_BUF (1 << 20)

struct cpu_wire {
	uint8_t *buf;
	size_t len;
};

static long cpu_answers;

static int cpu_on_frame_recv(nghttp2_session *s, const nghttp2_frame *f, void *user)
{
	(void)s, (void)user;
	if (f->hd.type == NGHTTP2_DATA && (f->hd.flags & NGHTTP2_FLAG_END_STREAM))
		cpu_answers++;
	return 0;
}

static void cpu_pump_client(nghttp2_session *s, struct cpu_wire *w)
{
	const uint8_t *p;
	ssize_t n;
	while ((n = nghttp2_session_mem_send(s, &p)) > 0) {
		if (w->len + (size_t)n > CPU_BUF)
			exit(1);
		memcpy(w->buf + w->len, p, (size_t)n);
		w->len += (size_t)n;
	}
	if (n < 0)
		exit(1);
}

static int64_t cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The client's bytes into the server, and everything it answers (memory or
 * a file range, as sendfile would send it) into down. */
static void cpu_serve(struct conn *c, struct cpu_wire *up, struct cpu_wire *down)
{
	size_t off = 0;
	for (int guard = 0; guard < 1000000; guard++) {
		int64_t deadline;
		enum conn_want w = conn_wants(c, &deadline);
		if (w == CONN_WANT_WRITE) {
			struct conn_output o;
			conn_output(c, &o);
			size_t n = 0;
			if (o.iovcnt == 0) {
				if (pread(o.file_fd, down->buf + down->len, o.file_len, o.file_off) != (ssize_t)o.file_len)
					exit(1);
				n = o.file_len;
			}
			for (int i = 0; i < o.iovcnt; i++) {
				memcpy(down->buf + down->len + n, o.iov[i].iov_base, o.iov[i].iov_len);
				n += o.iov[i].iov_len;
			}
			down->len += n;
			conn_output_done(c, n);
			continue;
		}
		if (w != CONN_WANT_READ) {
			fprintf(stderr, "h2_session_cpu: the connection wants %d\n", (int)w);
			exit(1);
		}
		if (off == up->len)
			break;
		struct iovec sp = conn_input_space(c);
		size_t n = up->len - off < sp.iov_len ? up->len - off : sp.iov_len;
		memcpy(sp.iov_base, up->buf + off, n);
		conn_input_done(c, (ssize_t)n);
		off += n;
	}
	up->len = 0;
}

#define NV(n, v) { (uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, sizeof(v) - 1, NGHTTP2_NV_FLAG_NONE }

static double cpu_run(const struct server *srv, nghttp2_session_callbacks *ccb, struct cpu_wire *up,
		      struct cpu_wire *down)
{
	nghttp2_session *cli;
	if (nghttp2_session_client_new(&cli, ccb, NULL) != 0)
		exit(1);
	struct sockaddr_in peer = { .sin_family = AF_INET, .sin_port = htons(40000) };
	peer.sin_addr.s_addr = htonl(0x7f000001);
	struct conn *c = conn_new(srv, (struct sockaddr *)&peer, sizeof(peer));
	if (!c)
		exit(1);
	/* h2load's: a 1 GiB stream window (its -w 30), the connection's too */
	nghttp2_settings_entry civ[] = { { NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, (1u << 30) - 1 } };
	nghttp2_submit_settings(cli, NGHTTP2_FLAG_NONE, civ, 1);
	nghttp2_session_set_local_window_size(cli, NGHTTP2_FLAG_NONE, 0, (1 << 30) - 1);
	const nghttp2_nv req[] = {
		NV(":method", "GET"),
		NV(":scheme", "http"),
		NV(":authority", "127.0.0.1:8080"),
		NV(":path", "/hello.txt"),
		NV("user-agent", "h2load nghttp2/1.52.0"),
	};
	int64_t spent = 0;
	long served = 0;
	cpu_answers = 0;
	for (int round = 0; round < CPU_ROUNDS + 1; round++) {
		for (int i = 0; i < CPU_STREAMS; i++)
			if (nghttp2_submit_request(cli, NULL, req, sizeof(req) / sizeof(req[0]), NULL, NULL) < 0)
				exit(1);
		cpu_pump_client(cli, up);
		int64_t t0 = cpu_ns();
		cpu_serve(c, up, down);
		int64_t t1 = cpu_ns();
		if (nghttp2_session_mem_recv(cli, down->buf, down->len) != (ssize_t)down->len)
			exit(1);
		down->len = 0;
		if (round > 0) { /* the first round sets the sessions up */
			spent += t1 - t0;
			served += CPU_STREAMS;
		}
	}
	if (cpu_answers != (long)(CPU_ROUNDS + 1) * CPU_STREAMS) {
		fprintf(stderr, "h2_session_cpu: %ld answers of %d\n", cpu_answers, (CPU_ROUNDS + 1) * CPU_STREAMS);
		exit(1);
	}
	conn_free(c);
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
	static struct config cfg;
	static struct server srv;
	char dir[] = "/tmp/h2_session_cpu-XXXXXX", path[64];
	if (!mkdtemp(dir))
		return 1;
	snprintf(path, sizeof(path), "%s/hello.txt", dir);
	FILE *f = fopen(path, "w");
	if (!f || fputs("Hello, world!", f) < 0 || fclose(f) != 0)
		return 1;
	config_defaults(&cfg);
	snprintf(cfg.root, sizeof(cfg.root), "%s", dir);
	cfg.stats = false; /* no shared-memory segment: the counting hooks find no slot */
	if (server_init(&srv, &cfg, NULL) != 0)
		return 1;
	nghttp2_session_callbacks *ccb;
	if (nghttp2_session_callbacks_new(&ccb) != 0)
		return 1;
	nghttp2_session_callbacks_set_on_frame_recv_callback(ccb, cpu_on_frame_recv);
	struct cpu_wire up = { malloc(CPU_BUF), 0 }, down = { malloc(CPU_BUF), 0 };
	if (!up.buf || !down.buf)
		return 1;
	double ns[CPU_RUNS];
	for (int r = 0; r < CPU_RUNS; r++)
		ns[r] = cpu_run(&srv, ccb, &up, &down);
	qsort(ns, CPU_RUNS, sizeof(ns[0]), cmp_double);
	printf("spindle's HTTP/2 session and site, %d streams in flight, 13-byte file: %.2f us of CPU per request "
	       "(median of %d runs of %d requests; range %.2f-%.2f)\n",
	       CPU_STREAMS, ns[CPU_RUNS / 2] / 1000, CPU_RUNS, CPU_ROUNDS * CPU_STREAMS, ns[0] / 1000,
	       ns[CPU_RUNS - 1] / 1000);
	server_close(&srv);
	unlink(path);
	rmdir(dir);
	free(up.buf);
	free(down.buf);
	nghttp2_session_callbacks_del(ccb);
	return 0;
}
