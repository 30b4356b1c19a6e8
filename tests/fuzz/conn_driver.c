/* conn_driver.c - a fuzzing driver for the sans-I/O connection core: a
 * temporary docroot, servers over it, and a loop that plays a client and a
 * socket at once, checking the core's invariants after every call.
 *
 * It includes src/http1/session.c (the fuzz build links every other core
 * source) so it can compare the session's own bookkeeping with the bytes
 * that went out. */
#include "../../src/http1/session.c"

#include <errno.h>
#include <fcntl.h>

#include "../../src/http/date.h"
#include "../../src/http/filters.h"

#include <ftw.h>

#include "fuzz_conn.h"

/* ---- the docroot --------------------------------------------------- */

static char fz_root[64];

static int fz_rm(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st, (void)flag, (void)ftw;
	return remove(path);
}

static void fz_root_remove(void)
{
	if (fz_root[0])
		nftw(fz_root, fz_rm, 16, FTW_DEPTH | FTW_PHYS);
}

static void fz_write(const char *rel, const char *data, size_t len)
{
	char path[256];
	snprintf(path, sizeof(path), "%s/%s", fz_root, rel);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	FZ_CHECK(fd >= 0);
	FZ_CHECK(write(fd, data, len) == (ssize_t)len);
	close(fd);
}

static void fz_write_pattern(const char *rel, size_t len)
{
	char *buf = malloc(len ? len : 1);
	FZ_CHECK(buf);
	for (size_t i = 0; i < len; i++)
		buf[i] = (char)fz_pattern(i);
	fz_write(rel, buf, len);
	free(buf);
}

const char *fz_docroot(void)
{
	if (fz_root[0])
		return fz_root;
	strcpy(fz_root, "/tmp/spindle-fuzz-XXXXXX");
	FZ_CHECK(mkdtemp(fz_root));
	atexit(fz_root_remove);
	char path[256];
	static const char *dirs[] = { "dir", "noindex", "errors" };
	for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s", fz_root, dirs[i]);
		FZ_CHECK(mkdir(path, 0755) == 0);
	}
	fz_write("index.html", "<html>hello</html>\n", 19);
	fz_write("dir/index.html", "<p>dir</p>\n", 11);
	fz_write(".hidden", "secret\n", 7);
	fz_write("empty.txt", "", 0);
	fz_write("errors/404.html", "<h1>custom 404</h1>\n", 20);
	fz_write_pattern("mid.txt", 3000);   /* cached when the cache is on, else read whole */
	fz_write_pattern("big.bin", 40000);  /* never cached: goes out as a file range */
	fz_write_pattern("range.bin", 0);
	snprintf(path, sizeof(path), "%s/link-in", fz_root);
	FZ_CHECK(symlink("index.html", path) == 0);
	snprintf(path, sizeof(path), "%s/link-out", fz_root);
	FZ_CHECK(symlink("/etc/hostname", path) == 0);
	return fz_root;
}

void fz_set_range_file(uint64_t size)
{
	/* A new file for each size (write, then rename over): a different
	 * inode, so the cache never serves one size's bytes as another's. */
	static uint64_t current = 0; /* fz_docroot() made it empty */
	if (size == current)
		return;
	current = size;
	fz_write_pattern("range.tmp", (size_t)size);
	char from[256], to[256];
	snprintf(from, sizeof(from), "%s/range.tmp", fz_root);
	snprintf(to, sizeof(to), "%s/range.bin", fz_root);
	FZ_CHECK(rename(from, to) == 0);
}

void fz_config(struct config *cfg, bool cache)
{
	config_defaults(cfg);
	snprintf(cfg->root, sizeof(cfg->root), "%s", fz_docroot());
	cfg->stats = false;
	/* the invariants below are the HTTP/1.1 session's; a preface would hand
	 * the connection to the HTTP/2 one */
	cfg->http2 = false;
	/* Small limits, so 413, 414 and 431 are a few bytes away. */
	cfg->max_request_line = 512;
	cfg->max_head = 2048;
	cfg->max_headers = 20;
	cfg->max_body = 4096;
	cfg->max_ranges = 8;
	cfg->sendfile_min = 1024;
	cfg->cache_size = cache ? 64 * 1024 : 0;
	cfg->cache_max_file = 8192;
	cfg->cache_revalidate_ms = 0;
	/* listings and the SPA fallback on the uncached server, so
	 * the fuzzer reaches them (noindex/ is listed; a missing path without
	 * an extension gets index.html) */
	if (!cache) {
		cfg->autoindex = AUTOINDEX_HTML;
		snprintf(cfg->fallback, sizeof(cfg->fallback), "/index.html");
	}
}

struct server *fz_server(struct config *cfg, bool cache)
{
	fz_config(cfg, cache);
	struct server *srv = calloc(1, sizeof(*srv));
	FZ_CHECK(srv);
	FZ_CHECK(server_init(srv, cfg, NULL) == 0);
	return srv;
}

/* ---- checking responses -------------------------------------------- */

bool fz_u64(const char *p, size_t len, uint64_t *out)
{
	uint64_t v = 0;
	if (len == 0)
		return false;
	for (size_t i = 0; i < len; i++) {
		if (p[i] < '0' || p[i] > '9' || v > (UINT64_MAX - 9) / 10)
			return false;
		v = v * 10 + (uint64_t)(p[i] - '0');
	}
	*out = v;
	return true;
}

bool fz_header(const char *head, size_t len, const char *name, const char **value, size_t *vlen)
{
	size_t nlen = strlen(name);
	const char *end = head + len;
	/* header lines start after a CRLF; the status line is never a match */
	for (const char *p = memmem(head, len, "\r\n", 2); p && p + 2 < end;
	     p = memmem(p + 2, (size_t)(end - p - 2), "\r\n", 2)) {
		const char *line = p + 2;
		if ((size_t)(end - line) > nlen + 2 && memcmp(line, name, nlen) == 0 && line[nlen] == ':' &&
		    line[nlen + 1] == ' ') {
			const char *v = line + nlen + 2;
			const char *eol = memmem(v, (size_t)(end - v), "\r\n", 2);
			FZ_CHECK(eol);
			*value = v;
			*vlen = (size_t)(eol - v);
			return true;
		}
	}
	return false;
}

void fz_check_response(const struct fz_response *r)
{
	FZ_CHECK(r->head_len >= 17 && r->head_len <= r->len);
	FZ_CHECK(memcmp(r->bytes, "HTTP/1.1 ", 9) == 0 && r->bytes[12] == ' ');
	uint64_t status;
	FZ_CHECK(fz_u64(r->bytes + 9, 3, &status) && (int)status == r->status);
	/* the head ends exactly where the core says, at its first blank line */
	FZ_CHECK(memcmp(r->bytes + r->head_len - 4, "\r\n\r\n", 4) == 0);
	FZ_CHECK(memmem(r->bytes, r->head_len, "\r\n\r\n", 4) == r->bytes + r->head_len - 4);
	/* no bare CR or LF, no NUL in the head: a header injected from the request would show */
	for (size_t i = 0; i < r->head_len; i++) {
		char ch = r->bytes[i];
		FZ_CHECK(ch != '\0');
		if (ch == '\r')
			FZ_CHECK(i + 1 < r->head_len && r->bytes[i + 1] == '\n');
		if (ch == '\n')
			FZ_CHECK(i > 0 && r->bytes[i - 1] == '\r');
	}
	const char *v;
	size_t vlen;
	uint64_t body = r->len - r->head_len, clen = 0;
	if (r->status == 304) {
		FZ_CHECK(body == 0);
	} else {
		FZ_CHECK(fz_header(r->bytes, r->head_len, "Content-Length", &v, &vlen));
		FZ_CHECK(fz_u64(v, vlen, &clen));
		FZ_CHECK(body == (r->head_request ? 0 : clen));
	}
	bool close_hdr = fz_header(r->bytes, r->head_len, "Connection", &v, &vlen) && vlen == 5 &&
			 memcmp(v, "close", 5) == 0;
	FZ_CHECK(close_hdr == !r->keep_alive);
	FZ_CHECK(fz_header(r->bytes, r->head_len, "Date", &v, &vlen) && vlen == HTTP_DATE_LEN);
	if (r->status == 206 && !fz_header(r->bytes, r->head_len, "Content-Range", &v, &vlen)) {
		/* no Content-Range: then it is multipart (RFC 9110 14.6) */
		static const char multi[] = "multipart/byteranges; boundary=";
		FZ_CHECK(fz_header(r->bytes, r->head_len, "Content-Type", &v, &vlen));
		FZ_CHECK(vlen > sizeof(multi) - 1 && memcmp(v, multi, sizeof(multi) - 1) == 0);
	}
	if (r->status == 416)
		FZ_CHECK(fz_header(r->bytes, r->head_len, "Content-Range", &v, &vlen) && vlen > 8 &&
			 memcmp(v, "bytes */", 8) == 0);
}

/* ---- the driver ---------------------------------------------------- */

#define FZ_RESPONSE_MAX (4u << 20)
#define FZ_STEPS_MAX 200000

struct fz_drv {
	struct conn *c;
	struct fz_response cur;  /* the response being sent: what went out of it so far */
	size_t cap;
	bool closed;             /* a response said close, or the peer is gone: nothing more to send */
	const uint8_t *payload;
	size_t npayload, fed;
	fz_response_fn fn;
	void *arg;
};

const size_t fz_sizes[32] = {
	1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 14, 16, 20, 24, 28,
	32, 40, 48, 64, 80, 96, 128, 192, 256, 384, 512, 768, 1024, 2048, 4096, SIZE_MAX,
};

static void fz_append(struct fz_drv *d, const void *p, size_t n)
{
	FZ_CHECK(d->cur.len + n <= FZ_RESPONSE_MAX);
	if (d->cur.len + n > d->cap) {
		size_t cap = d->cap ? d->cap : 4096;
		while (cap < d->cur.len + n)
			cap *= 2;
		char *b = realloc(d->cur.bytes, cap);
		FZ_CHECK(b);
		d->cur.bytes = b;
		d->cap = cap;
	}
	memcpy(d->cur.bytes + d->cur.len, p, n);
	d->cur.len += n;
}

/* What is left of the current response, by the core's segment list. */
static uint64_t fz_remaining(const struct conn *c)
{
	const struct h1_out *o = c->out;
	uint64_t left = 0;
	if (!o)
		return 0;
	for (size_t i = o->seg_cur; i < o->nsegs; i++)
		left += o->segs[i].len - (i == o->seg_cur ? o->seg_off : 0);
	return left;
}

/* Unsent bytes of the first parked response (the stream's next one). */
static uint64_t fz_parked_left(const struct parked *p)
{
	uint64_t left = 0;
	for (size_t k = p->out->seg_cur; k < p->out->nsegs; k++)
		left += p->out->segs[k].len - (k == p->out->seg_cur ? p->out->seg_off : 0);
	return left;
}

/* The driver wrote (up to) `limit` bytes of what conn_output offered. With
 * pipelined requests the core parks finished responses and offers them
 * gathered with the current one: the driver then writes at most to the end
 * of the first, so each step still finishes at most one response, and reads
 * that response's facts from its parked record. */
static void fz_write_step(struct fz_drv *d, size_t limit)
{
	struct conn *c = d->c;
	struct conn_output out;

	FZ_CHECK(!d->closed);
	FZ_CHECK(c->state == ST_SEND || c->nq > 0); /* parked responses go out first */
	if (c->nq == 0)
		FZ_CHECK(d->cur.len == c->out->sent); /* the core counts what we saw go out */
	conn_output(c, &out);
	FZ_CHECK(out.total > 0); /* WRITE with nothing to write would spin a driver */
	FZ_CHECK(out.iovcnt >= 0 && out.iovcnt <= CONN_IOV_MAX);
	size_t sum = 0;
	for (int i = 0; i < out.iovcnt; i++) {
		FZ_CHECK(out.iov[i].iov_base && out.iov[i].iov_len > 0);
		sum += out.iov[i].iov_len;
	}
	if (out.iovcnt == 0) {
		FZ_CHECK(out.file_fd >= 0 && out.file_len > 0 && out.file_off >= 0 && !out.more);
		FZ_CHECK(out.total == out.file_len);
	} else {
		FZ_CHECK(out.file_len == 0 && out.total == sum);
	}
	size_t qbytes, qsegs;
	queue_unsent(c, &qbytes, &qsegs);
	FZ_CHECK(out.total <= qbytes + fz_remaining(c));
	const struct parked *first = c->nq ? &c->q[c->q_first] : NULL;
	uint64_t remaining = first ? fz_parked_left(first) : fz_remaining(c);
	if (!first)
		FZ_CHECK(c->out->head_len > 0 && c->out->head_len <= d->cur.len + remaining);
	if (first && out.iovcnt == 0)
		FZ_CHECK(0); /* a file range never comes before parked memory */

	size_t n = limit < out.total ? limit : out.total;
	if (n > remaining)
		n = remaining;
	size_t left = n;
	for (int i = 0; i < out.iovcnt && left > 0; i++) {
		size_t k = out.iov[i].iov_len < left ? out.iov[i].iov_len : left;
		fz_append(d, out.iov[i].iov_base, k);
		left -= k;
	}
	if (out.iovcnt == 0) {
		/* sendfile's view: the range must be there in the file */
		char *tmp = malloc(n);
		FZ_CHECK(tmp);
		FZ_CHECK(pread(out.file_fd, tmp, n, out.file_off) == (ssize_t)n);
		fz_append(d, tmp, n);
		free(tmp);
	}

	bool completes = n == remaining;
	if (first) {
		d->cur.status = first->rec.status;
		d->cur.head_len = first->rec.head_len;
		d->cur.head_request = first->rec.method == STATS_HEAD;
		d->cur.keep_alive = true; /* only keep-alive responses are parked */
	} else {
		d->cur.status = c->out->resp.status;
		d->cur.head_len = c->out->head_len;
		d->cur.head_request = is_head(c);
		d->cur.keep_alive = c->keep_alive;
	}
	conn_output_done(c, n);
	if (!completes) {
		FZ_CHECK(first || (c->state == ST_SEND && c->out->sent == d->cur.len));
		return;
	}
	if (getenv("FUZZ_VERBOSE")) /* when reproducing: what went out */
		fprintf(stderr, "fuzz: response %d, %zu bytes: %.*s\n", d->cur.status, d->cur.len,
			(int)(memchr(d->cur.bytes, '\r', d->cur.len) ? (char *)memchr(d->cur.bytes, '\r', d->cur.len) - d->cur.bytes : 0),
			d->cur.bytes);
	fz_check_response(&d->cur);
	if (d->fn)
		d->fn(&d->cur, d->arg);
	if (!d->cur.keep_alive) {
		FZ_CHECK(c->state == ST_SHUTDOWN || c->state == ST_CLOSE);
		d->closed = true;
	}
	d->cur.len = 0;
}

size_t fz_recv(struct iovec space, const uint8_t *payload, size_t npayload, size_t *fed, size_t limit)
{
	size_t n = npayload - *fed;

	if (n > limit)
		n = limit;
	if (n > space.iov_len)
		n = space.iov_len;
	memcpy(space.iov_base, payload + *fed, n);
	*fed += n;
	return n;
}

/* The driver read up to `limit` bytes of the payload; none left: EOF. */
static void fz_read_step(struct fz_drv *d, size_t limit, bool eof_when_empty)
{
	struct iovec space = conn_input_space(d->c);
	FZ_CHECK(space.iov_len > 0); /* conn.h: never empty while the core wants READ */
	size_t n = fz_recv(space, d->payload, d->npayload, &d->fed, limit);
	if (n > 0)
		conn_input_done(d->c, (ssize_t)n);
	else if (eof_when_empty)
		conn_input_done(d->c, 0);
}

/* Invariants that hold between any two calls. */
static enum conn_want fz_wants(struct fz_drv *d, int64_t *deadline)
{
	const struct conn *c = d->c;
	enum conn_want w = conn_wants(c, deadline);
	switch (w) {
	case CONN_WANT_READ:
		FZ_CHECK(c->state == ST_HEAD || c->state == ST_BODY || c->state == ST_LINGER);
		FZ_CHECK(*deadline >= 0);
		FZ_CHECK(c->in_start <= c->in_end && c->in_end <= c->in_cap);
		FZ_CHECK(d->cur.len == 0); /* no half-sent response is abandoned for reading */
		break;
	case CONN_WANT_WRITE:
		FZ_CHECK(!d->closed); /* no response after one that said close */
		FZ_CHECK(*deadline >= 0);
		FZ_CHECK(c->nq > 0 || (c->out && c->out->nsegs > 0 && c->out->seg_cur < c->out->nsegs)); /* parked, or the current */
		break;
	case CONN_WANT_SHUTDOWN:
	case CONN_WANT_CLOSE:
		FZ_CHECK(*deadline == -1);
		break;
	}
	/* between responses nothing of the last one is held (a closed
	 * connection lets go in conn_free) */
	if (c->state == ST_HEAD || c->state == ST_BODY || c->state == ST_LINGER)
		FZ_CHECK(!c->out || (c->out->resp.body.kind == RESPONSE_BODY_NONE && c->out->resp.body.fd < 0));
	return w;
}

/* The loop every fuzz driver runs: each control byte is one action on the
 * connection, then the natural end. */
void fz_run(const struct fz_ops *ops, void *drv, const uint8_t *ctl, size_t nctl)
{
	size_t ci = 0;
	bool verbose = getenv("FUZZ_VERBOSE") != NULL;

	for (int steps = 0;; steps++) {
		FZ_CHECK(steps < FZ_STEPS_MAX); /* the natural loop always progresses: more is a livelock */
		int64_t deadline;
		enum conn_want w = ops->wants(drv, &deadline);
		if (w == CONN_WANT_CLOSE)
			break;
		if (w == CONN_WANT_SHUTDOWN) {
			ops->shutdown_done(drv);
			continue;
		}
		if (ci == nctl) {
			/* out of controls: read everything, write everything, then EOF */
			if (w == CONN_WANT_WRITE)
				ops->write(drv, SIZE_MAX);
			else
				ops->read(drv, SIZE_MAX, true);
			continue;
		}
		uint8_t op = ctl[ci++];
		size_t amount = fz_sizes[op >> 3];
		if (verbose)
			fprintf(stderr, "fuzz: want %d, op %d, amount %zu\n", (int)w, op & 7, amount);
		switch (op & 7) {
		case 0: case 1: case 2: case 3: case 4:
			/* a read or a write, whichever is wanted, of that size */
			if (w == CONN_WANT_WRITE)
				ops->write(drv, amount);
			else
				ops->read(drv, amount, false);
			break;
		case 5:
			ops->timeout(drv, w);
			break;
		case 6:
			ops->drain(drv);
			break;
		case 7:
			switch ((op >> 3) & 3) {
			case 0:
				if (w == CONN_WANT_WRITE)
					ops->output_failed(drv);
				break;
			case 1:
			case 2:
				if (w == CONN_WANT_READ)
					ops->input_end(drv, (op >> 3) & 1 ? 0 : -ECONNRESET);
				break;
			case 3:
				if (w == CONN_WANT_READ)
					ops->release_idle(drv);
				break;
			}
			break;
		}
	}
}

/* ---- the core's actions, for fz_run ------------------------------------ */

static enum conn_want fz_core_wants(void *drv, int64_t *deadline)
{
	return fz_wants(drv, deadline);
}

static void fz_core_write(void *drv, size_t limit)
{
	fz_write_step(drv, limit);
}

static void fz_core_read(void *drv, size_t limit, bool eof_when_empty)
{
	fz_read_step(drv, limit, eof_when_empty);
}

static void fz_core_shutdown_done(void *drv)
{
	struct fz_drv *d = drv;
	int64_t deadline;

	conn_shutdown_done(d->c);
	FZ_CHECK(conn_wants(d->c, &deadline) == CONN_WANT_READ);
}

static void fz_core_timeout(void *drv, enum conn_want w)
{
	struct fz_drv *d = drv;
	int64_t deadline;

	conn_timeout(d->c);
	if (w == CONN_WANT_WRITE) /* a send timeout abandons the response */
		FZ_CHECK(conn_wants(d->c, &deadline) == CONN_WANT_CLOSE);
	d->cur.len = 0;
}

static void fz_core_drain(void *drv)
{
	conn_drain(((struct fz_drv *)drv)->c);
}

static void fz_core_output_failed(void *drv)
{
	struct fz_drv *d = drv;
	int64_t deadline;

	conn_output_failed(d->c);
	FZ_CHECK(conn_wants(d->c, &deadline) == CONN_WANT_CLOSE);
	d->cur.len = 0;
}

static void fz_core_input_end(void *drv, ssize_t how)
{
	struct fz_drv *d = drv;
	int64_t deadline;

	conn_input_space(d->c);
	conn_input_done(d->c, how);
	FZ_CHECK(conn_wants(d->c, &deadline) == CONN_WANT_CLOSE);
}

static void fz_core_release_idle(void *drv)
{
	conn_release_idle(((struct fz_drv *)drv)->c);
}

static const struct fz_ops fz_core_ops = {
	.wants = fz_core_wants,
	.write = fz_core_write,
	.read = fz_core_read,
	.shutdown_done = fz_core_shutdown_done,
	.timeout = fz_core_timeout,
	.drain = fz_core_drain,
	.output_failed = fz_core_output_failed,
	.input_end = fz_core_input_end,
	.release_idle = fz_core_release_idle,
};

void fz_drive(const struct server *srv, const uint8_t *ctl, size_t nctl, const uint8_t *payload,
	      size_t npayload, fz_response_fn fn, void *arg)
{
	struct sockaddr_in peer = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct fz_drv d = { .payload = payload, .npayload = npayload, .fn = fn, .arg = arg };

	int fd_probe = fz_fd_probe();
	d.c = conn_new(srv, (const struct sockaddr *)&peer, sizeof(peer));
	FZ_CHECK(d.c);
	fz_run(&fz_core_ops, &d, ctl, nctl);
	conn_free(d.c);
	free(d.cur.bytes);
	fz_check_no_fd_leak(fd_probe);
}

int fz_fd_probe(void)
{
	int fd = dup(0);
	if (fd >= 0)
		close(fd);
	return fd;
}

void fz_check_no_fd_leak(int probe)
{
	/* every file the connection opened is closed again: the lowest free
	 * descriptor is the one it was before */
	FZ_CHECK(fz_fd_probe() == probe);
}

/* The gap below which the core merges two ranges (the range filter's own rule). */
uint64_t fz_multipart_gap(const char *mime, uint64_t size)
{
	return http_multipart_part_head_len(strlen(mime), 1, 1, size);
}

static struct config fz_cfg_cached, fz_cfg_plain;
static struct server *fz_srv_cached, *fz_srv_plain;

static void fz_servers_close(void)
{
	server_close(fz_srv_cached);
	server_close(fz_srv_plain);
	free(fz_srv_cached);
	free(fz_srv_plain);
}

void fz_servers_open(const struct server **cached, const struct server **plain)
{
	if (!fz_srv_cached) {
		fz_srv_cached = fz_server(&fz_cfg_cached, true);
		fz_srv_plain = fz_server(&fz_cfg_plain, false);
		atexit(fz_servers_close);
	}
	*cached = fz_srv_cached;
	*plain = fz_srv_plain;
}
