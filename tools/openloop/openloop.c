/* openloop: an open-loop HTTP/1.1 load generator that measures every request's
 * latency from the moment it was due (its intended send time), not from when
 * it was sent, so a server that stalls is charged for every request that
 * should have gone out during the stall (wrk2's method; a closed loop or a
 * generator timing from its own send hides them: coordinated omission).
 *
 * One thread, epoll, keep-alive connections opened as needed up to a cap, one
 * request in flight per connection. Arrivals are constant (every 1/rate s) or
 * Poisson (exponential gaps, seeded). A request due while every connection is
 * busy waits in a queue, and that wait is part of its latency.
 *
 *   openloop -h HOST -p PORT -u PATH -r RATE -d SECONDS [-a constant|poisson]
 *            [-c MAXCONN] [-t TIMEOUT_MS] [-s SEED] [-H HISTFILE] [-D DEADLINE_MS]
 *
 * Prints one JSON object on stdout; HISTFILE gets the latency histogram
 * (upper bound in microseconds, count; buckets 1/64 of a power of two wide).
 * Past a server's capacity, what a user gets is the 200s answered in time:
 * `good` counts the 200s answered within DEADLINE_MS of their due time
 * (default: TIMEOUT_MS), and `good_in_window` those of them answered before
 * the schedule ended: past capacity the requests due in the last second are
 * answered in the tail after it, with server time no steady state has, so
 * only the latter per second of schedule is bounded by what the server can
 * do (`good` per second read up to 118% of a measured capacity), `ok_p50_ms`/`ok_p99_ms` are the 200s' own
 * percentiles (an early 503 would pull the all-responses ones down), and
 * `status_503` counts the refusals. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define OL_SUB 64                  /* sub-buckets per power of two: ~1.6% resolution */
#define OL_POW 40
#define OL_BUCKETS (OL_SUB * OL_POW)

struct ol_conn {
	int fd;
	int busy;                  /* a request is in flight */
	int connecting;
	uint64_t due_ns;           /* the in-flight request's intended send time */
	uint64_t sent_ns;
	char buf[8192];
	size_t have;
};

struct ol_run {
	struct sockaddr_in addr;
	char req[512];
	size_t req_len;
	struct ol_conn *conns;
	int nconn, maxconn;
	uint64_t *queue;           /* due times of requests waiting for a connection */
	size_t qhead, qtail, qcap;
	uint64_t *lat_ns;          /* every completed request's latency */
	size_t nlat, latcap;
	uint64_t *ok_ns;           /* the 200s' latencies */
	size_t nok, okcap;
	uint64_t deadline_ns, good, s503;
	uint64_t window_end_ns, good_in_window; /* the schedule's end; good answers before it */
	uint64_t hist[OL_BUCKETS];
	uint64_t sent, ok, errors, timeouts, connect_errors, non200, max_lag_ns, lag_sum_ns;
	int ep;
};

static uint64_t ol_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static size_t ol_bucket(uint64_t us)
{
	if (us < OL_SUB)
		return (size_t)us;
	int p = 63 - __builtin_clzll(us);          /* us in [2^p, 2^(p+1)) */
	int shift = p - 6;                         /* 64 sub-buckets per power */
	size_t b = (size_t)(shift + 1) * OL_SUB + (size_t)((us >> shift) - OL_SUB);
	return b < OL_BUCKETS ? b : OL_BUCKETS - 1;
}

static uint64_t ol_bucket_top(size_t b)
{
	if (b < OL_SUB)
		return b;
	size_t shift = b / OL_SUB - 1;
	return ((OL_SUB + b % OL_SUB + 1) << shift) - 1;
}

static void ol_record(struct ol_run *r, uint64_t lat)
{
	if (r->nlat == r->latcap) {
		r->latcap = r->latcap ? r->latcap * 2 : 65536;
		r->lat_ns = realloc(r->lat_ns, r->latcap * sizeof *r->lat_ns);
		if (!r->lat_ns) {
			perror("openloop: realloc");
			exit(1);
		}
	}
	r->lat_ns[r->nlat++] = lat;
	r->hist[ol_bucket(lat / 1000)]++;
}

static void ol_record_ok(struct ol_run *r, uint64_t lat)
{
	if (r->nok == r->okcap) {
		r->okcap = r->okcap ? r->okcap * 2 : 65536;
		r->ok_ns = realloc(r->ok_ns, r->okcap * sizeof *r->ok_ns);
		if (!r->ok_ns) {
			perror("openloop: realloc");
			exit(1);
		}
	}
	r->ok_ns[r->nok++] = lat;
	if (lat <= r->deadline_ns) {
		r->good++;
		r->good_in_window += ol_now() < r->window_end_ns;
	}
}

static void ol_push(struct ol_run *r, uint64_t due)
{
	if (r->qtail - r->qhead == r->qcap) {
		size_t n = r->qtail - r->qhead, cap = r->qcap ? r->qcap * 2 : 4096;
		uint64_t *q = malloc(cap * sizeof *q);
		if (!q) {
			perror("openloop: malloc");
			exit(1);
		}
		for (size_t i = 0; i < n; i++)
			q[i] = r->queue[(r->qhead + i) % r->qcap];
		free(r->queue);
		r->queue = q, r->qcap = cap, r->qhead = 0, r->qtail = n;
	}
	r->queue[r->qtail++ % r->qcap] = due;
}

static void ol_close(struct ol_run *r, struct ol_conn *c)
{
	if (c->fd >= 0) {
		epoll_ctl(r->ep, EPOLL_CTL_DEL, c->fd, NULL);
		close(c->fd);
	}
	c->fd = -1, c->busy = 0, c->connecting = 0, c->have = 0;
}

static int ol_open(struct ol_run *r, struct ol_conn *c)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	if (connect(fd, (struct sockaddr *)&r->addr, sizeof r->addr) < 0 && errno != EINPROGRESS) {
		int e = errno;
		close(fd);
		return -e;
	}
	struct epoll_event ev = { .events = EPOLLIN | EPOLLOUT | EPOLLRDHUP, .data.ptr = c };
	if (epoll_ctl(r->ep, EPOLL_CTL_ADD, fd, &ev) < 0) {
		int e = errno;
		close(fd);
		return -e;
	}
	c->fd = fd, c->connecting = 1, c->busy = 0, c->have = 0;
	return 0;
}

/* Sends the request now; a short write on an empty socket buffer does not
 * happen for a few hundred bytes, so it is treated as an error. */
static void ol_send(struct ol_run *r, struct ol_conn *c, uint64_t due)
{
	uint64_t now = ol_now();
	c->busy = 1, c->due_ns = due, c->sent_ns = now, c->have = 0;
	r->sent++;
	uint64_t lag = now > due ? now - due : 0;
	r->lag_sum_ns += lag;
	if (lag > r->max_lag_ns)
		r->max_lag_ns = lag;
	ssize_t n = send(c->fd, r->req, r->req_len, MSG_NOSIGNAL);
	if (n != (ssize_t)r->req_len) {
		r->errors++;
		ol_close(r, c);
	}
}

/* Hands waiting requests to idle connections, opening new ones up to the cap. */
static void ol_dispatch(struct ol_run *r)
{
	for (int i = 0; i < r->nconn && r->qhead < r->qtail; i++) {
		struct ol_conn *c = &r->conns[i];
		if (c->fd >= 0 && !c->busy && !c->connecting)
			ol_send(r, c, r->queue[r->qhead++ % r->qcap]);
	}
	size_t waiting = r->qtail - r->qhead;
	int opening = 0;
	for (int i = 0; i < r->nconn; i++)
		opening += r->conns[i].connecting;
	/* reopen closed slots first, then new ones, one per waiting request */
	for (int i = 0; i < r->maxconn && (size_t)opening < waiting; i++) {
		struct ol_conn *c = &r->conns[i];
		if (i >= r->nconn) {
			c->fd = -1;
			r->nconn = i + 1;
		} else if (c->fd >= 0) {
			continue;
		}
		int e = ol_open(r, c);
		if (e < 0) {
			r->connect_errors++;
			r->errors++;
			r->qhead++;        /* this request is lost */
			waiting--;
			continue;
		}
		opening++;
	}
}

/* Parses a complete response in c->buf: 1 done, 0 need more, -1 bad. */
static int ol_parse(struct ol_conn *c, int *status, int *keep)
{
	char *end = memmem(c->buf, c->have, "\r\n\r\n", 4);
	if (!end)
		return c->have == sizeof c->buf ? -1 : 0;
	size_t head = (size_t)(end - c->buf) + 4;
	if (c->have < 12 || memcmp(c->buf, "HTTP/1.", 7))
		return -1;
	*status = atoi(c->buf + 9);
	long len = -1;
	*keep = 1;
	for (char *p = c->buf; p < end; ) {
		char *nl = memmem(p, (size_t)(end - p) + 2, "\r\n", 2);
		if (!nl)
			break;
		if (!strncasecmp(p, "Content-Length:", 15))
			len = strtol(p + 15, NULL, 10);
		else if (!strncasecmp(p, "Connection:", 11) && memmem(p, (size_t)(nl - p), "close", 5))
			*keep = 0;
		p = nl + 2;
	}
	if (len < 0)
		return -1;         /* chunked or unframed: not what the lab serves */
	if (head + (size_t)len > sizeof c->buf)
		return -1;         /* the lab's open loop asks for small files only */
	return c->have >= head + (size_t)len;
}

static void ol_readable(struct ol_run *r, struct ol_conn *c)
{
	for (;;) {
		if (c->have == sizeof c->buf) {
			r->errors++;
			ol_close(r, c);
			return;
		}
		ssize_t n = recv(c->fd, c->buf + c->have, sizeof c->buf - c->have, 0);
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			return;
		if (n <= 0) {
			if (c->busy)
				r->errors++;
			ol_close(r, c);
			return;
		}
		c->have += (size_t)n;
		if (!c->busy) {            /* bytes nobody asked for */
			r->errors++;
			ol_close(r, c);
			return;
		}
		int status = 0, keep = 1;
		int p = ol_parse(c, &status, &keep);
		if (p < 0) {
			r->errors++;
			ol_close(r, c);
			return;
		}
		if (p == 0)
			continue;
		uint64_t lat = ol_now() - c->due_ns;
		ol_record(r, lat);
		if (status == 200) {
			r->ok++;
			ol_record_ok(r, lat);
		} else {
			r->non200++, r->errors++;
			r->s503 += status == 503;
		}
		c->busy = 0, c->have = 0;
		if (!keep) {
			ol_close(r, c);
			return;
		}
	}
}

static int ol_cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static double ol_pct_of(const uint64_t *v, size_t n, double q)
{
	if (!n)
		return -1;
	size_t i = (size_t)ceil(q * (double)n);
	i = i ? i - 1 : 0;
	if (i >= n)
		i = n - 1;
	return (double)v[i] / 1e6;
}

static double ol_pct(const struct ol_run *r, double q)
{
	return ol_pct_of(r->lat_ns, r->nlat, q);
}

static double ol_exp(uint64_t *s)
{
	/* xorshift64*: reproducible for a seed, no libc state */
	*s ^= *s >> 12, *s ^= *s << 25, *s ^= *s >> 27;
	double u = (double)((*s * 2685821657736338717ull) >> 11) / 9007199254740992.0;
	return -log1p(-u);
}

static void ol_usage(void)
{
	fprintf(stderr, "usage: openloop -h HOST -p PORT -u PATH -r RATE -d SECONDS [-a constant|poisson] "
			"[-c MAXCONN] [-t TIMEOUT_MS] [-s SEED] [-H HISTFILE] [-D DEADLINE_MS]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	const char *host = "127.0.0.1", *path = "/", *arrivals = "constant", *histfile = NULL;
	int port = 0, opt;
	double rate = 0, seconds = 0, timeout_ms = 2000, deadline_ms = -1;
	uint64_t seed = 1;
	static struct ol_run r;
	r.maxconn = 1000;
	while ((opt = getopt(argc, argv, "h:p:u:r:d:a:c:t:s:H:D:")) != -1) {
		switch (opt) {
		case 'h': host = optarg; break;
		case 'p': port = atoi(optarg); break;
		case 'u': path = optarg; break;
		case 'r': rate = atof(optarg); break;
		case 'd': seconds = atof(optarg); break;
		case 'a': arrivals = optarg; break;
		case 'c': r.maxconn = atoi(optarg); break;
		case 't': timeout_ms = atof(optarg); break;
		case 's': seed = strtoull(optarg, NULL, 10) | 1; break;
		case 'H': histfile = optarg; break;
		case 'D': deadline_ms = atof(optarg); break;
		default: ol_usage();
		}
	}
	int poisson = !strcmp(arrivals, "poisson");
	if (port <= 0 || rate <= 0 || seconds <= 0 || r.maxconn <= 0 || (!poisson && strcmp(arrivals, "constant")))
		ol_usage();
	r.deadline_ns = (uint64_t)((deadline_ms >= 0 ? deadline_ms : timeout_ms) * 1e6);
	r.addr.sin_family = AF_INET;
	r.addr.sin_port = htons((uint16_t)port);
	if (inet_pton(AF_INET, host, &r.addr.sin_addr) != 1) {
		fprintf(stderr, "openloop: %s is not an IPv4 address\n", host);
		return 2;
	}
	int n = snprintf(r.req, sizeof r.req, "GET %s HTTP/1.1\r\nHost: %s:%d\r\nUser-Agent: openloop\r\n\r\n",
			 path, host, port);
	if (n <= 0 || (size_t)n >= sizeof r.req)
		ol_usage();
	r.req_len = (size_t)n;
	r.conns = calloc((size_t)r.maxconn, sizeof *r.conns);
	r.ep = epoll_create1(EPOLL_CLOEXEC);
	if (!r.conns || r.ep < 0) {
		perror("openloop");
		return 1;
	}
	signal(SIGPIPE, SIG_IGN);

	/* a few connections opened before the clock starts, so the first
	 * requests do not all pay for a handshake */
	int pre = r.maxconn < 8 ? r.maxconn : 8;
	struct epoll_event evs[256];
	for (int i = 0; i < pre; i++)
		if (ol_open(&r, &r.conns[i]) == 0)
			r.nconn = i + 1;
	for (uint64_t stop = ol_now() + 1000000000ull; ol_now() < stop; ) {
		int opening = 0;
		for (int i = 0; i < r.nconn; i++)
			opening += r.conns[i].connecting;
		if (!opening)
			break;
		int k = epoll_wait(r.ep, evs, 256, 10);
		for (int i = 0; i < k; i++) {
			struct ol_conn *c = evs[i].data.ptr;
			int err = 0;
			socklen_t l = sizeof err;
			getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &l);
			if (err) {
				ol_close(&r, c);
				continue;
			}
			c->connecting = 0;
			struct epoll_event ev = { .events = EPOLLIN | EPOLLRDHUP, .data.ptr = c };
			epoll_ctl(r.ep, EPOLL_CTL_MOD, c->fd, &ev);
		}
	}

	const uint64_t gap = (uint64_t)(1e9 / rate), timeout = (uint64_t)(timeout_ms * 1e6);
	const uint64_t t0 = ol_now() + 1000000, end = t0 + (uint64_t)(seconds * 1e9);
	r.window_end_ns = end;
	uint64_t next = t0, idx = 0, scheduled = 0;
	for (;;) {
		uint64_t now = ol_now();
		while (next <= now && next < end) {
			ol_push(&r, next);
			scheduled++;
			idx++;
			next = poisson ? next + (uint64_t)(ol_exp(&seed) * 1e9 / rate) : t0 + idx * gap;
		}
		ol_dispatch(&r);
		/* a request unanswered after the timeout is an error; so is one that
		 * waited that long for a connection */
		for (int i = 0; i < r.nconn; i++) {
			struct ol_conn *c = &r.conns[i];
			if (c->fd >= 0 && c->busy && now - c->due_ns > timeout) {
				r.timeouts++, r.errors++;
				ol_close(&r, c);
			}
		}
		while (r.qhead < r.qtail && now > r.queue[r.qhead % r.qcap] + timeout)
			r.qhead++, r.timeouts++, r.errors++;
		int inflight = 0;
		for (int i = 0; i < r.nconn; i++)
			inflight += r.conns[i].busy;
		if (next >= end && !inflight && r.qhead == r.qtail)
			break;
		int64_t wait_ns = next < end ? (int64_t)(next - now) : 1000000;
		if (wait_ns > 1000000)
			wait_ns = 1000000;
		if (wait_ns < 0)
			wait_ns = 0;
		struct timespec ts = { 0, wait_ns };
		int k = epoll_pwait2(r.ep, evs, 256, &ts, NULL);
		for (int i = 0; i < k; i++) {
			struct ol_conn *c = evs[i].data.ptr;
			if (c->fd < 0)
				continue;
			if (c->connecting) {
				int err = 0;
				socklen_t l = sizeof err;
				getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &l);
				if (err) {
					r.connect_errors++;
					ol_close(&r, c);
					continue;
				}
				if (evs[i].events & EPOLLOUT) {
					c->connecting = 0;
					struct epoll_event ev = { .events = EPOLLIN | EPOLLRDHUP, .data.ptr = c };
					epoll_ctl(r.ep, EPOLL_CTL_MOD, c->fd, &ev);
					if (r.qhead < r.qtail)
						ol_send(&r, c, r.queue[r.qhead++ % r.qcap]);
				}
				continue;
			}
			if (evs[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))
				ol_readable(&r, c);
		}
	}
	uint64_t finish = ol_now();
	int maxopen = r.nconn;
	for (int i = 0; i < r.nconn; i++)
		ol_close(&r, &r.conns[i]);
	qsort(r.lat_ns, r.nlat, sizeof *r.lat_ns, ol_cmp);
	qsort(r.ok_ns, r.nok, sizeof *r.ok_ns, ol_cmp);
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	double cpu = (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
		     ru.ru_stime.tv_usec / 1e6;
	double mean = 0;
	for (size_t i = 0; i < r.nlat; i++)
		mean += (double)r.lat_ns[i];
	mean = r.nlat ? mean / (double)r.nlat / 1e6 : -1;
	printf("{\"arrivals\": \"%s\", \"rate\": %g, \"seconds\": %g, \"scheduled\": %llu, \"sent\": %llu, "
	       "\"completed\": %zu, \"ok\": %llu, \"errors\": %llu, \"timeouts\": %llu, \"non200\": %llu, "
	       "\"connect_errors\": %llu, \"achieved_rate\": %.3f, \"sent_rate\": %.3f, \"wall_s\": %.6f, "
	       "\"connections\": %d, \"mean_ms\": %.6f, \"p50_ms\": %.6f, \"p90_ms\": %.6f, \"p99_ms\": %.6f, "
	       "\"p999_ms\": %.6f, \"max_ms\": %.6f, \"send_lag_mean_ms\": %.6f, \"send_lag_max_ms\": %.6f, "
	       "\"gen_cpu_s\": %.6f, \"gen_user_s\": %.6f, \"gen_sys_s\": %.6f, \"deadline_ms\": %g, "
	       "\"good\": %llu, \"good_rate\": %.3f, \"status_503\": %llu, \"ok_p50_ms\": %.6f, "
	       "\"ok_p99_ms\": %.6f, \"good_in_window\": %llu}\n",
	       arrivals, rate, seconds, (unsigned long long)scheduled, (unsigned long long)r.sent, r.nlat,
	       (unsigned long long)r.ok, (unsigned long long)r.errors, (unsigned long long)r.timeouts,
	       (unsigned long long)r.non200, (unsigned long long)r.connect_errors, (double)r.ok / seconds,
	       (double)r.sent / seconds, (double)(finish - t0) / 1e9, maxopen, mean, ol_pct(&r, 0.5),
	       ol_pct(&r, 0.9), ol_pct(&r, 0.99), ol_pct(&r, 0.999), r.nlat ? (double)r.lat_ns[r.nlat - 1] / 1e6 : -1,
	       r.sent ? (double)r.lag_sum_ns / (double)r.sent / 1e6 : 0, (double)r.max_lag_ns / 1e6, cpu,
	       ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6, ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6,
	       (double)r.deadline_ns / 1e6, (unsigned long long)r.good, (double)r.good / seconds,
	       (unsigned long long)r.s503, ol_pct_of(r.ok_ns, r.nok, 0.5), ol_pct_of(r.ok_ns, r.nok, 0.99),
	       (unsigned long long)r.good_in_window);
	if (histfile) {
		FILE *f = fopen(histfile, "w");
		if (!f) {
			perror(histfile);
			return 1;
		}
		fprintf(f, "# latency from the intended send time; upper_us count\n");
		for (size_t b = 0; b < OL_BUCKETS; b++)
			if (r.hist[b])
				fprintf(f, "%llu %llu\n", (unsigned long long)ol_bucket_top(b), (unsigned long long)r.hist[b]);
		fclose(f);
	}
	return 0;
}
