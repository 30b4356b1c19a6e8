/* conn.c - the sans-I/O connection state machine: bytes in, responses out.
 *
 * Requests are parsed one at a time, and a request's head stays in the input
 * buffer (the parsed spans point into it) until its response has been sent;
 * the buffer is compacted only then. Before writing, every complete request
 * already buffered is answered too: the earlier responses wait, parked, in a
 * small queue, and conn_output() hands them all out as one gathered write
 * (one small write per pipelined response would meet the client's delayed
 * ACK). Responses go out in request order and no received byte is dropped. */
#include "conn.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "acme_challenge.h"
#include "budget.h"
#include "endpoints.h"
#include "fs/cache.h"
#include "fs/dirlist.h"
#include "fs/file.h"
#include "fs/path.h"
#include "http/autoindex.h"
#include "fs/sidecar.h"
#include "http/cache_control.h"
#include "http/date.h"
#include "http/encoding.h"
#include "http/mime_file.h"
#include "http/parse.h"
#include "http/range.h"
#include "http/response.h"
#include "log/log.h"
#include "outbuf.h"
#include "server.h"
#include "stats/stats.h"

enum conn_state {
	ST_HEAD,     /* waiting for (the rest of) a request head */
	ST_BODY,     /* discarding a request body before answering */
	ST_SEND,     /* sending a response */
	ST_SHUTDOWN, /* closing: half-close first */
	ST_LINGER,   /* closing: reading and dropping what the client still sends */
	ST_CLOSE,
};

/* A piece of the response: memory, or (p == NULL) a range of file_fd. */
struct seg {
	const char *p;
	off_t off;
	size_t len;
};

/* Gathering pipelined responses, as h2o and lighttpd do. A
 * response is parked only when it is in memory (a file range goes out by
 * sendfile, so a gathered write stops there anyway), keeps the connection open
 * and is small; parking stops once the queue would fill a write. */
#define CONN_QUEUE_MAX 16              /* parked responses */
#define CONN_GATHER_BYTES (64 * 1024)  /* unsent bytes parked */
#define PARKED_SEGS 2                  /* a head and a body */

/* What a response's access log line and stats need once its last byte is out. */
struct resp_record {
	int status;
	enum stats_method method;
	uint64_t head_len;       /* bytes of the head: the rest of what is sent is body */
	int64_t stats_t0;
	int64_t ready_ns, pickup_ns, first_ns; /* its request's stamps (conn_readable) */
	struct span request_line, referer, user_agent; /* into the input buffer */
};

/* A response answered before the current one and waiting to be sent: it
 * owns everything its segments point into. Its record's spans stay valid because
 * the input buffer is never compacted while a response is parked (the core
 * wants WRITE until the queue is empty, and compacts only when it reads). */
struct parked {
	struct seg segs[PARKED_SEGS];
	size_t nsegs, seg_cur, seg_off;
	uint64_t sent;
	char *hdr;               /* the head: the conn's head buffer, swapped in */
	size_t hdr_cap;
	char *body;
	struct cache_entry *entry;
	char errpage[256];       /* a built-in error page, copied out of the conn's */
	struct resp_record rec;
};

#define CONN_LINGER_MS 2000
#define CONN_DRAIN_GRACE_MS 1000 /* how long an idle connection may still send a request on stop */
#define CONN_MIN_INPUT 4096
#define CONN_PATH_MAX 4096

struct conn {
	const struct server *srv;
	const struct config *cfg;
	enum conn_state state;

	/* input: unparsed bytes are in[start..end) */
	char *in;
	size_t in_cap, in_start, in_end;
	size_t next_start;       /* where the request after the current one begins */

	/* the current request */
	struct http_request req;
	struct http_parse_state parse; /* how far its head was parsed: each read scans only new bytes */
	size_t req_len;          /* bytes of its head, at in[start] */
	bool have_req;
	uint64_t body_left;      /* Content-Length bytes still to discard */
	int64_t body_started;    /* when its discarding began: the body's deadline counts from here */
	bool body_chunked;
	struct http_chunked chunked;
	bool interim;            /* sending "100 Continue"; the body is read after it */

	/* the current response */
	int status;
	bool keep_alive;         /* after this response */
	bool linger;             /* the client may still be sending: half-close, then drain */
	char *hdr;               /* response head (+ multipart part headers) */
	size_t hdr_cap;
	char *body;              /* small uncached file contents we own, or NULL */
	size_t listing_reserved; /* body is a listing: its bytes in the process's listing budget */
	struct cache_entry *entry; /* cached file the body points into, or NULL */
	const char *mem;         /* the body in memory (body or entry->data), or NULL: file_fd */
	int file_fd;
	struct seg *segs;
	size_t nsegs, seg_max, seg_cur, seg_off;
	uint64_t sent, head_len;

	/* responses answered before the current one and not yet sent: q[q_first
	 * .. q_first + nq), oldest first (allocated with the first one parked) */
	struct parked *q;
	size_t q_first, nq;

	/* deadlines (monotonic ms) */
	int64_t head_started;    /* first byte of the current request head, or accept time */
	int64_t last_progress;
	bool draining;
	int64_t drain_started;
	bool idle;               /* waiting between requests with nothing buffered */

	/* stats */
	int64_t stats_t0;        /* CLOCK_MONOTONIC ns when the current request head arrived; 0: none */
	uint32_t nreq;           /* responses completed on this connection */
	/* Request stamps, CLOCK_MONOTONIC ns (see conn_readable). Every
	 * pipelined request's first byte came in the latest read: the core reads
	 * only while it waits for a head or a body, never while responses are
	 * pending, so bytes past a request arrived with its last read. */
	int64_t readable_ns;     /* the driver's stamp for the next read; 0: none */
	int64_t writing_ns;      /* the driver's stamp for the next write (conn_writing); 0: none */
	int64_t read_ready_ns;   /* since when the latest read's bytes were readable */
	int64_t req_ready_ns, req_pickup_ns, first_byte_ns; /* the current request's; pickup 0: none started */

	struct sockaddr_storage peer_addr;
	char peer[INET6_ADDRSTRLEN];
	char errpage[256];
};

int64_t conn_now_ms(void)
{
	struct timespec ts;
	/* The coarse clock is a vDSO read of the last tick: deadlines need no
	 * better than a few milliseconds. */
	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

struct conn *conn_new(const struct server *srv, const struct sockaddr *peer, socklen_t peerlen)
{
	struct conn *c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	stats_conn_opened(); /* stats: conn_free() counts the close, even on failure below */
	c->srv = srv;
	c->cfg = srv->cfg;
	c->state = ST_HEAD;
	c->file_fd = -1;
	c->seg_max = 2 * c->cfg->max_ranges + 3;
	/* buffers come with the first bytes (conn_input_space, conn_out_buffers) */
	c->head_started = c->last_progress = conn_now_ms();
	conn_set_peer(c, peer, peerlen);
	return c;
}

void conn_set_peer(struct conn *c, const struct sockaddr *peer, socklen_t peerlen)
{
	strcpy(c->peer, "-");
	memset(&c->peer_addr, 0, sizeof(c->peer_addr));
	if (peer && peerlen <= sizeof(c->peer_addr))
		memcpy(&c->peer_addr, peer, peerlen);
	if (peer && peer->sa_family == AF_INET && peerlen >= sizeof(struct sockaddr_in))
		inet_ntop(AF_INET, &((const struct sockaddr_in *)peer)->sin_addr, c->peer, sizeof(c->peer));
	else if (peer && peer->sa_family == AF_INET6 && peerlen >= sizeof(struct sockaddr_in6))
		inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)peer)->sin6_addr, c->peer, sizeof(c->peer));
	else if (peer && peer->sa_family == AF_UNIX)
		strcpy(c->peer, "unix:"); /* a client's socket is unnamed; the log says which family */
}

/* Listings are built whole in memory (up to AUTOINDEX_MAX_BODY each) and held
 * until sent: without a bound, clients that ask for big listings and never
 * read them hold max_connections x 4 MiB. Their bodies hold bytes of the
 * process's budget (budget.h), which also bounds each client's share; beyond
 * it a listing is answered 503 (Retry-After), as a server out of a resource
 * should. A listing holds what its body takes, and less as it is sent
 * (listing_shrink). */
static void listing_give(struct conn *c, size_t n)
{
	budget_give(budget_client(&c->peer_addr), n);
	c->listing_reserved -= n;
}

static void response_release(struct conn *c)
{
	free(c->body);
	c->body = NULL;
	if (c->listing_reserved)
		listing_give(c, c->listing_reserved);
	cache_release(c->entry);
	c->entry = NULL;
	c->mem = NULL;
	if (c->file_fd >= 0)
		close(c->file_fd);
	c->file_fd = -1;
	c->nsegs = c->seg_cur = c->seg_off = 0;
	c->sent = c->head_len = 0;
}

/* After a response with a big head (multipart, long redirect), give the memory back. */
static void hdr_shrink(struct conn *c)
{
	if (c->hdr_cap > 1024) {
		char *h = realloc(c->hdr, 1024);
		if (h) {
			c->hdr = h;
			c->hdr_cap = 1024;
		}
	}
}

static void parked_release(struct parked *p)
{
	free(p->body);
	p->body = NULL;
	cache_release(p->entry);
	p->entry = NULL;
	p->nsegs = p->seg_cur = p->seg_off = 0;
	p->sent = 0;
	/* like hdr_shrink: a big head's buffer is not kept for the next one */
	if (p->hdr_cap > 1024) {
		free(p->hdr);
		p->hdr = NULL;
		p->hdr_cap = 0;
	}
}

/* Frees the queue, with any response still parked in it (the connection is
 * closing, or idle with an empty queue). */
static void queue_free(struct conn *c)
{
	if (!c->q)
		return;
	for (size_t i = 0; i < CONN_QUEUE_MAX; i++) {
		parked_release(&c->q[i]);
		free(c->q[i].hdr);
	}
	free(c->q);
	c->q = NULL;
	c->q_first = c->nq = 0;
}

void conn_free(struct conn *c)
{
	if (!c)
		return;
	stats_conn_closed(); /* stats */
	response_release(c);
	queue_free(c);
	free(c->in);
	free(c->segs);
	free(c->hdr);
	free(c);
}

/* The buffers a response is built in; allocated per busy period, so an idle
 * keep-alive connection holds only its struct (see conn_release_idle). */
static bool conn_out_buffers(struct conn *c)
{
	if (!c->segs)
		c->segs = calloc(c->seg_max, sizeof(*c->segs));
	if (!c->hdr) {
		c->hdr = malloc(1024);
		c->hdr_cap = c->hdr ? 1024 : 0;
	}
	return c->segs && c->hdr;
}

void conn_release_idle(struct conn *c)
{
	if (c->state != ST_HEAD || c->in_start != c->in_end || c->nq > 0)
		return;
	queue_free(c);
	free(c->in);
	free(c->hdr);
	free(c->segs);
	c->in = c->hdr = NULL;
	c->segs = NULL;
	c->in_cap = c->hdr_cap = 0;
	c->in_start = c->in_end = c->next_start = 0;
}

/* ---- building responses ---------------------------------------------- */

static void add_seg(struct conn *c, const char *p, off_t off, size_t len)
{
	if (len == 0 || c->nsegs == c->seg_max)
		return;
	c->segs[c->nsegs++] = (struct seg){ p, off, len };
}

static void respond_status(struct conn *c, int status, bool close_after, const char *extra);

/* Status line, Server, Date; the caller adds the rest. */
static void head_start(struct conn *c, struct outbuf *b, int status)
{
	c->status = status;
	outbuf_puts(b, "HTTP/1.1 ");
	outbuf_u64(b, (uint64_t)status);
	outbuf_put(b, " ", 1);
	outbuf_puts(b, http_status_text(status));
	outbuf_puts(b, "\r\n");
	outbuf_puts(b, c->srv->server_header);
	outbuf_puts(b, "Date: ");
	outbuf_put(b, http_date_now(), HTTP_DATE_LEN);
	outbuf_puts(b, "\r\n");
}

/* Ends the head and queues it; false if it did not fit, and then a 500 that
 * closes has replaced the response (a head cut short would lack the blank
 * line that ends it, and the client would read the body as fields). The
 * caller adds no body then. respond_status's own head, under 512 bytes with
 * no extra, always fits hdr's 1024, so the 500 is not itself refused. */
static bool head_end(struct conn *c, struct outbuf *b)
{
	if (!c->keep_alive)
		outbuf_puts(b, "Connection: close\r\n");
	else if (c->have_req && c->req.version_minor == 0)
		outbuf_puts(b, "Connection: keep-alive\r\n");
	outbuf_puts(b, "\r\n");
	if (b->overflow) {
		log_error("a %d response's head is over its %zu-byte buffer: answering 500", c->status, b->cap);
		if (c->status != 500 || c->keep_alive)
			respond_status(c, 500, true, NULL);
		return false;
	}
	c->head_len = b->len;
	add_seg(c, c->hdr, 0, b->len);
	return true;
}

static bool is_head(const struct conn *c)
{
	return c->have_req && c->req.method == HTTP_HEAD;
}

/* An error or redirect: a small HTML body, custom page when one exists. */
static void respond_status(struct conn *c, int status, bool close_after, const char *extra)
{
	const struct error_page *page = server_error_page(c->srv, status);
	const char *body;
	size_t len;

	response_release(c);
	struct outbuf b = { c->hdr, 0, c->hdr_cap, false };
	if (close_after || c->draining) {
		c->keep_alive = false;
		c->linger = close_after;
	}
	if (page) {
		body = page->body;
		len = page->len;
	} else {
		len = http_builtin_page(status, c->errpage, sizeof(c->errpage));
		body = c->errpage;
	}
	head_start(c, &b, status);
	outbuf_puts(&b, "Content-Type: text/html; charset=utf-8\r\nContent-Length: ");
	outbuf_u64(&b, len);
	outbuf_puts(&b, "\r\n");
	if (extra)
		outbuf_puts(&b, extra);
	if (head_end(c, &b) && !is_head(c))
		add_seg(c, body, 0, len);
	c->state = ST_SEND;
	c->last_progress = conn_now_ms();
}

static bool ensure_hdr_cap(struct conn *c, size_t need)
{
	if (need <= c->hdr_cap)
		return true;
	char *h = realloc(c->hdr, need);
	if (!h)
		return false;
	c->hdr = h;
	c->hdr_cap = need;
	return true;
}

/* Percent-encodes a decoded path for a Location header: everything but
 * unreserved characters, sub-delims, ':', '@' and '/' (RFC 3986 3.3). */
static size_t encode_path(const char *in, size_t len, char *out)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t o = 0;
	for (size_t i = 0; i < len; i++) {
		unsigned char ch = (unsigned char)in[i];
		if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
		    strchr("-._~!$&'()*+,;=:@/", ch)) {
			out[o++] = (char)ch;
		} else {
			out[o++] = '%';
			out[o++] = hex[ch >> 4];
			out[o++] = hex[ch & 15];
		}
	}
	return o;
}

/* 301 to the same directory with a slash, the query kept (RFC 9110 15.4.2).
 * Built from the canonical path, never the raw one: "//host" as a Location
 * would send the client to another site. */
static void respond_redirect_slash(struct conn *c, const char *rel, size_t rel_len)
{
	const struct http_request *r = &c->req;
	size_t cap = 3 * rel_len + r->query.len + 32;
	char *loc = malloc(cap);

	if (!loc || !ensure_hdr_cap(c, cap + 512)) {
		free(loc);
		respond_status(c, 500, false, NULL);
		return;
	}
	size_t n = (size_t)snprintf(loc, cap, "Location: /");
	n += encode_path(rel, rel_len, loc + n);
	if (r->query.p)
		snprintf(loc + n, cap - n, "/?%.*s\r\n", (int)r->query.len, r->query.p);
	else
		snprintf(loc + n, cap - n, "/\r\n");
	respond_status(c, 301, false, loc);
	free(loc);
}

/* redirect_https: 301 to the same target on the HTTPS port, for the host
 * the client asked for (its port replaced). A Host with anything but name,
 * address or port characters gets a 400: it would go into a header. */
static void respond_redirect_https(struct conn *c)
{
	const struct http_request *r = &c->req;
	struct span host = r->host;
	char loc[64 + 3 * 256];

	if (host.p && host.len && host.p[0] == '[') { /* an IPv6 literal keeps its brackets */
		const char *end = memchr(host.p, ']', host.len);
		host.len = end ? (size_t)(end - host.p) + 1 : 0;
	} else if (host.p) {
		const char *colon = memchr(host.p, ':', host.len);
		if (colon)
			host.len = (size_t)(colon - host.p);
	}
	bool ok = host.p && host.len > 0 && host.len <= 255;
	for (size_t i = 0; ok && i < host.len; i++)
		ok = isalnum((unsigned char)host.p[i]) || strchr(".-_[]:", host.p[i]);
	size_t need = host.len + r->path.len + r->query.len + 64;
	if (!ok || !ensure_hdr_cap(c, need + 512)) {
		respond_status(c, 400, true, NULL);
		return;
	}
	char *buf = need <= sizeof(loc) ? loc : malloc(need);
	if (!buf) {
		respond_status(c, 500, false, NULL);
		return;
	}
	int n = snprintf(buf, need, "Location: https://%.*s", (int)host.len, host.p);
	if (c->cfg->redirect_https_port != 443)
		n += snprintf(buf + n, need - (size_t)n, ":%d", c->cfg->redirect_https_port);
	snprintf(buf + n, need - (size_t)n, "%.*s%s%.*s\r\n", (int)r->path.len, r->path.p, r->query.p ? "?" : "",
		 (int)r->query.len, r->query.p ? r->query.p : "");
	respond_status(c, 301, false, buf);
	if (buf != loc)
		free(buf);
}

/* At log_level = debug, why a request got 403: nothing else tells an
 * operator whether a file's mode, Landlock or a setting refused it. The path
 * comes from the client: bytes outside printable ASCII are written as '?'
 * so they cannot forge log lines. */
static void log_refusal(const char *rel, const char *why)
{
	char safe[256];
	size_t n = 0;

	if (!log_wants(LOG_DEBUG))
		return;
	for (; rel[n] && n < sizeof(safe) - 1; n++)
		safe[n] = rel[n] >= 0x20 && rel[n] < 0x7f ? rel[n] : '?';
	safe[n] = '\0';
	log_debug("403 for '/%s%s': %s", safe, rel[n] ? "..." : "", why);
}

static const char *open_refusal_reason(int err)
{
	switch (err) {
	case EACCES: return "permission denied (the file's mode or owner, or Landlock: outside the root)";
	case EPERM: return "operation not permitted";
	case EXDEV: return "a symbolic link leads out of the root";
	case ELOOP: return "a symbolic link, refused by the symlinks setting";
	default: return strerror(err);
	}
}

static int status_for_open_error(int err)
{
	switch (err) {
	case ENOENT:
	case ENOTDIR:
		return 404;
	case EACCES:
	case EPERM:
	case EXDEV:   /* a symlink leading out of the root */
	case ELOOP:   /* a symlink refused by policy */
		return 403;
	case ENAMETOOLONG:
		return 414;
	case EMFILE:  /* out of descriptors (the kernel says so before it */
	case ENFILE:  /* looks the path up): an overload, not a fault, */
	case ENOMEM:  /* RFC 9110 15.6.4 */
		return 503;
	default:
		return 500;
	}
}

/* A failed open of rel, answered (403s explained at debug level). */
static void respond_open_error(struct conn *c, const char *rel, int err)
{
	int status = status_for_open_error(err);
	if (status == 403)
		log_refusal(rel, open_refusal_reason(err));
	respond_status(c, status, false, NULL);
}

/* Reads a small file whole, so head and body leave in one writev. */
static int read_small_body(struct conn *c, int fd, size_t size, size_t *got)
{
	c->body = malloc(size ? size : 1);
	if (!c->body)
		return -ENOMEM;
	size_t off = 0;
	while (off < size) {
		ssize_t n = pread(fd, c->body + off, size - off, (off_t)off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			break; /* truncated since fstat: send what is there */
		off += (size_t)n;
	}
	*got = off;
	return 0;
}


/* The body part of segment list for [first,last] of the file. */
static void add_body_range(struct conn *c, uint64_t first, uint64_t last)
{
	size_t len = (size_t)(last - first + 1);
	if (c->mem)
		add_seg(c, c->mem + first, 0, len);
	else
		add_seg(c, NULL, (off_t)first, len);
}

#define MULTIPART_BOUNDARY_LEN 16

static size_t decimal_digits(uint64_t v)
{
	size_t n = 1;
	while (v >= 10) {
		v /= 10;
		n++;
	}
	return n;
}

/* Bytes of one multipart part head ("\r\n--B\r\nContent-Type: T\r\n
 * Content-Range: bytes F-L/S\r\n\r\n") with offsets of the given widths:
 * sized from the real type, so a long one (.pptx) fits. */
static size_t multipart_part_head_len(size_t mime_len, size_t first_digits, size_t last_digits,
				      uint64_t size)
{
	return sizeof("\r\n--") - 1 + MULTIPART_BOUNDARY_LEN + sizeof("\r\nContent-Type: ") - 1 + mime_len +
	       sizeof("\r\nContent-Range: bytes ") - 1 + first_digits + 1 + last_digits + 1 +
	       decimal_digits(size) + sizeof("\r\n\r\n") - 1;
}

/* What the rest of a multipart head can take after the common fields. */
#define MULTIPART_HEAD_TAIL 160

/* multipart/byteranges (RFC 9110 14.6): part headers live in hdr after the head. */
static void respond_multipart(struct conn *c, struct outbuf *b, const char *mime, uint64_t size,
			      const struct byte_range *ranges, size_t n)
{
	/* A random boundary: it must not occur in the parts, and should not
	 * reveal anything (an address, a counter) about the server. */
	static _Thread_local uint64_t state;
	char boundary[MULTIPART_BOUNDARY_LEN + 1];
	while (state == 0 && getrandom(&state, sizeof(state), 0) != sizeof(state))
		;
	state ^= state << 13; /* xorshift64 */
	state ^= state >> 7;
	state ^= state << 17;
	snprintf(boundary, sizeof(boundary), "%016llx", (unsigned long long)state);

	/* Parts first (to know the length), into the space after the head:
	 * what is built of it so far plus a bound on what it still needs. */
	size_t mime_len = strlen(mime), digits = decimal_digits(size);
	size_t head_reserve = b->len + MULTIPART_HEAD_TAIL;
	size_t parts_cap = n * multipart_part_head_len(mime_len, digits, digits, size) +
			   sizeof("\r\n----\r\n") - 1 + MULTIPART_BOUNDARY_LEN;
	if (!ensure_hdr_cap(c, head_reserve + parts_cap)) {
		respond_status(c, 500, true, NULL);
		return;
	}
	b->p = c->hdr;
	b->cap = head_reserve;
	struct outbuf parts = { c->hdr + head_reserve, 0, parts_cap, false };
	size_t part_start[n + 1], part_len[n + 1];
	uint64_t total = 0;
	for (size_t i = 0; i < n; i++) {
		part_start[i] = parts.len;
		outbuf_puts(&parts, "\r\n--");
		outbuf_puts(&parts, boundary);
		outbuf_puts(&parts, "\r\nContent-Type: ");
		outbuf_puts(&parts, mime);
		outbuf_puts(&parts, "\r\nContent-Range: bytes ");
		outbuf_u64(&parts, ranges[i].first);
		outbuf_put(&parts, "-", 1);
		outbuf_u64(&parts, ranges[i].last);
		outbuf_put(&parts, "/", 1);
		outbuf_u64(&parts, size);
		outbuf_puts(&parts, "\r\n\r\n");
		part_len[i] = parts.len - part_start[i];
		total += part_len[i] + (ranges[i].last - ranges[i].first + 1);
	}
	part_start[n] = parts.len;
	outbuf_puts(&parts, "\r\n--");
	outbuf_puts(&parts, boundary);
	outbuf_puts(&parts, "--\r\n");
	part_len[n] = parts.len - part_start[n];
	total += part_len[n];

	outbuf_puts(b, "Content-Type: multipart/byteranges; boundary=");
	outbuf_puts(b, boundary);
	outbuf_puts(b, "\r\nContent-Length: ");
	outbuf_u64(b, total);
	outbuf_puts(b, "\r\n");
	if (!head_end(c, b))
		return;
	if (parts.overflow) {
		respond_status(c, 500, true, NULL);
		return;
	}
	if (is_head(c))
		return;
	for (size_t i = 0; i <= n; i++) {
		add_seg(c, parts.p + part_start[i], 0, part_len[i]);
		if (i < n)
			add_body_range(c, ranges[i].first, ranges[i].last);
	}
}

/* A response an endpoint generated; takes over its body. */
static void respond_dynamic(struct conn *c, struct dyn_response *d)
{
	response_release(c);
	if (!ensure_hdr_cap(c, 512 + (d->extra ? strlen(d->extra) : 0))) {
		free(d->body);
		respond_status(c, 500, false, NULL);
		return;
	}
	struct outbuf b = { c->hdr, 0, c->hdr_cap, false };
	c->body = d->body;
	if (d->close)
		c->keep_alive = false;
	head_start(c, &b, d->status);
	outbuf_puts(&b, "Content-Type: ");
	outbuf_puts(&b, d->content_type);
	outbuf_puts(&b, "\r\nContent-Length: ");
	outbuf_u64(&b, d->len);
	outbuf_puts(&b, "\r\nCache-Control: no-store\r\n");
	if (d->extra)
		outbuf_puts(&b, d->extra);
	if (head_end(c, &b) && !is_head(c))
		add_seg(c, c->body, 0, d->len);
	c->state = ST_SEND;
}

static void put_validators(struct outbuf *b, const char *last_modified, const char *etag, size_t etag_len)
{
	outbuf_puts(b, "Last-Modified: ");
	outbuf_puts(b, last_modified);
	outbuf_puts(b, "\r\nETag: ");
	outbuf_put(b, etag, etag_len);
	outbuf_puts(b, "\r\n");
}

/* 304 (RFC 9110 15.4.5): the validators, no body. */
static void respond_not_modified(struct conn *c, const char *last_modified, const char *etag, size_t etag_len)
{
	struct outbuf b = { c->hdr, 0, c->hdr_cap, false };
	head_start(c, &b, 304);
	put_validators(&b, last_modified, etag, etag_len);
	head_end(c, &b);
	c->state = ST_SEND;
}

/* A listing of the directory rel, whose index file is missing:
 * an ordinary 200 whose validators come from the directory, so a conditional
 * request is answered before the directory is read. Built whole in memory,
 * within AUTOINDEX_MAX_BODY. */
static void respond_autoindex(struct conn *c, const char *rel, const struct stat *dir_st)
{
	const struct config *cfg = c->cfg;
	struct autoindex_order order = autoindex_parse_query(c->req.query);
	char etag[HTTP_ETAG_MAX], lastmod[HTTP_DATE_LEN + 1];
	size_t etag_len = autoindex_etag(etag, dir_st->st_mtim, cfg->autoindex, order);
	http_date_format(dir_st->st_mtime, lastmod);

	struct http_validators v = { etag, etag_len, dir_st->st_mtime };
	int pre = http_preconditions(&c->req, &v);
	if (pre == 412) {
		respond_status(c, 412, false, NULL);
		return;
	}
	if (pre == 304) {
		respond_not_modified(c, lastmod, etag, etag_len);
		return;
	}
	struct dirlist dl;
	int err = dirlist_read(c->srv->root_fd, rel, cfg->symlinks, cfg->dotfiles, AUTOINDEX_MAX_ENTRIES, &dl);
	if (err < 0) {
		respond_open_error(c, rel, -err);
		return;
	}
	autoindex_sort(dl.entries, dl.n, order);
	/* the worst case while it is built, then what the body really takes */
	size_t cap = autoindex_body_bound(rel, &dl);
	if (!budget_take(budget_client(&c->peer_addr), cap)) {
		dirlist_free(&dl);
		respond_status(c, 503, false, "Retry-After: 1\r\n");
		return;
	}
	c->listing_reserved = cap;
	c->body = malloc(cap);
	size_t len = c->body ? autoindex_render(c->body, cap, cfg->autoindex, rel, &dl, order) : 0;
	dirlist_free(&dl);
	if (len == 0) {
		respond_status(c, c->body ? 414 : 503, false, NULL); /* a path too long to list, or no memory */
		return;
	}
	char *fit = realloc(c->body, len);
	if (fit)
		c->body = fit;
	listing_give(c, cap - len);
	c->mem = c->body;
	struct outbuf b = { c->hdr, 0, c->hdr_cap, false };
	head_start(c, &b, 200);
	put_validators(&b, lastmod, etag, etag_len);
	outbuf_puts(&b, cfg->autoindex == AUTOINDEX_JSON ? "Content-Type: application/json\r\nContent-Length: "
						     : "Content-Type: text/html; charset=utf-8\r\nContent-Length: ");
	outbuf_u64(&b, len);
	outbuf_puts(&b, "\r\n");
	if (head_end(c, &b) && !is_head(c))
		add_seg(c, c->body, 0, len);
	c->state = ST_SEND;
}

/* A file to answer with: from the cache (entry set), or open (fd >= 0). */
struct file_view {
	uint64_t size;
	time_t mtime;
	const char *etag;
	size_t etag_len;
	const char *last_modified;
	const char *mime;
	struct cache_entry *entry;
	int fd;
	/* set only when the features are configured */
	const char *content_encoding;          /* a sidecar's coding, or NULL */
	char lm_buf[HTTP_DATE_LEN + 1];        /* last_modified's storage for an opened file */
	bool vary;                             /* the file has sidecars: Vary: Accept-Encoding */
	const struct cache_control_rule *cc;   /* the Cache-Control rule that matched, or NULL */
};

/* What a request resolved to: the file's root-relative path, and the URL
 * paths Cache-Control rules are matched against. */
struct target {
	const char *rel;
	size_t len;
	const char *url_path;                  /* NULL when there are no rules */
	const char *index_path;                /* a directory's index file ("/docs/index.html"), or NULL */
};

/* Validators, Vary, Cache-Control and Expires: what a 200, 206 and 304 for
 * the file all carry (RFC 9110 15.4.5: a 304 sends the fields a 200 would). */
static void put_file_fields(struct conn *c, struct outbuf *b, const struct file_view *f)
{
	outbuf_puts(b, "Last-Modified: ");
	outbuf_puts(b, f->last_modified);
	outbuf_puts(b, "\r\nETag: ");
	outbuf_put(b, f->etag, f->etag_len);
	outbuf_puts(b, "\r\n");
	if (f->vary)
		outbuf_puts(b, "Vary: Accept-Encoding\r\n");
	if (!f->cc)
		return;
	outbuf_puts(b, "Cache-Control: ");
	outbuf_puts(b, f->cc->value);
	outbuf_puts(b, "\r\n");
	if (c->cfg->cache_expires && f->cc->max_age >= 0) {
		/* for HTTP/1.0 caches, which know no max-age (RFC 9111 5.3);
		 * formatted once a second per thread and rule, as the Date is */
		static _Thread_local struct {
			time_t at;
			long long max_age;
			char date[HTTP_DATE_LEN + 1];
		} last;
		time_t now = time(NULL);
		if (now != last.at || f->cc->max_age != last.max_age) {
			http_date_format(now + (time_t)f->cc->max_age, last.date);
			last.at = now;
			last.max_age = f->cc->max_age;
		}
		outbuf_puts(b, "Expires: ");
		outbuf_put(b, last.date, HTTP_DATE_LEN);
		outbuf_puts(b, "\r\n");
	}
}

/* What a file's head takes besides the server header, ETag, type,
 * Cache-Control value and coding: the longest status line (40), Date (37),
 * the names and ends of Last-Modified (46), ETag (8), Cache-Control (17) and
 * Content-Encoding (20), Vary (23), Expires (40), Accept-Ranges (22),
 * Content-Range with three 20-digit numbers (85), Content-Type and
 * Content-Length (54), Connection (24), the blank line (2): 418, rounded up. */
#define FILE_HEAD_FIXED 512

/* Takes over the view's fd or entry reference. */
static void respond_file(struct conn *c, struct file_view *f)
{
	const struct http_request *r = &c->req;
	uint64_t size = f->size;
	int status = 200;

	c->entry = f->entry;
	c->mem = f->entry ? f->entry->data : NULL;
	/* The configured and per-file fields can add up to more than hdr's
	 * first 1024 bytes (a long HSTS, Cache-Control and type together). */
	size_t head_need = FILE_HEAD_FIXED + strlen(c->srv->server_header) + f->etag_len + strlen(f->mime) +
			   (f->cc ? strlen(f->cc->value) : 0) +
			   (f->content_encoding ? strlen(f->content_encoding) : 0);
	if (!ensure_hdr_cap(c, head_need)) {
		if (f->fd >= 0)
			close(f->fd);
		respond_status(c, 500, false, NULL); /* releases the entry */
		return;
	}
	struct outbuf b = { c->hdr, 0, c->hdr_cap, false };

	/* RFC 9110 13.2.2: If-Match, If-Unmodified-Since, If-None-Match,
	 * If-Modified-Since in that order (response.c), then If-Range. */
	struct http_validators v = { f->etag, f->etag_len, f->mtime };
	int pre = http_preconditions(r, &v);
	if (pre == 412) {
		if (f->fd >= 0)
			close(f->fd);
		/* releases the entry */
		respond_status(c, 412, false, f->vary ? "Vary: Accept-Encoding\r\n" : NULL);
		return;
	}
	if (pre == 304) {
		if (f->fd >= 0)
			close(f->fd);
		head_start(c, &b, 304);
		put_file_fields(c, &b, f);
		head_end(c, &b);
		c->state = ST_SEND;
		return;
	}

	struct byte_range ranges[c->cfg->max_ranges];
	size_t nranges = 0;
	enum range_result rr = RANGE_IGNORE;
	if (http_range_applies(r, &v, time(NULL)))
		rr = range_parse(r->range, size, ranges, c->cfg->max_ranges, &nranges);
	if (rr == RANGE_OK && nranges > 1) {
		/* Bound the cost (CVE-2011-3192): merge what overlaps or lies closer
		 * than one part head, and send the file once when the ranges add
		 * up to more than it. */
		uint64_t gap = multipart_part_head_len(strlen(f->mime), 1, 1, size);
		rr = range_coalesce(ranges, &nranges, size, gap);
	}
	if (rr == RANGE_UNSATISFIABLE) {
		if (f->fd >= 0)
			close(f->fd);
		char extra[64];
		snprintf(extra, sizeof(extra), "Content-Range: bytes */%llu\r\n%s", (unsigned long long)size,
			 f->vary ? "Vary: Accept-Encoding\r\n" : "");
		respond_status(c, 416, false, extra);
		return;
	}
	if (rr == RANGE_OK)
		status = 206;

	/* The body: cached or small files from memory (one writev with the
	 * head), big ones by sendfile. */
	if (f->fd >= 0) {
		if (!is_head(c) && size < c->cfg->sendfile_min) {
			size_t got = 0;
			int err = read_small_body(c, f->fd, (size_t)size, &got);
			close(f->fd);
			if (err < 0) {
				log_error("read: %s", strerror(-err));
				respond_status(c, 500, false, NULL);
				return;
			}
			c->mem = c->body;
			if (got != size) /* the file shrank since fstat: send what is there, whole */
				size = got, rr = RANGE_IGNORE, status = 200;
		} else if (is_head(c)) {
			close(f->fd);
		} else {
			c->file_fd = f->fd;
		}
	}

	head_start(c, &b, status);
	put_file_fields(c, &b, f);
	outbuf_puts(&b, "Accept-Ranges: bytes\r\n");
	if (f->content_encoding) {
		outbuf_puts(&b, "Content-Encoding: ");
		outbuf_puts(&b, f->content_encoding);
		outbuf_puts(&b, "\r\n");
	}
	if (status == 206 && nranges > 1) {
		respond_multipart(c, &b, f->mime, size, ranges, nranges);
		c->state = ST_SEND;
		return;
	}
	uint64_t first = 0, last = size ? size - 1 : 0, len = size;
	if (status == 206) {
		first = ranges[0].first;
		last = ranges[0].last;
		len = last - first + 1;
		outbuf_puts(&b, "Content-Range: bytes ");
		outbuf_u64(&b, first);
		outbuf_put(&b, "-", 1);
		outbuf_u64(&b, last);
		outbuf_put(&b, "/", 1);
		outbuf_u64(&b, size);
		outbuf_puts(&b, "\r\n");
	}
	outbuf_puts(&b, "Content-Type: ");
	outbuf_puts(&b, f->mime);
	outbuf_puts(&b, "\r\nContent-Length: ");
	outbuf_u64(&b, len);
	outbuf_puts(&b, "\r\n");
	if (!head_end(c, &b))
		return;
	if (!is_head(c) && len > 0) {
		/* A small body from memory goes right after the head, so the
		 * response is one buffer: one send(), which TCP copies in one
		 * piece (a sendmsg of two iovecs costs measurably more per
		 * request on the keep-alive path). */
		if (c->mem && len <= c->hdr_cap - c->head_len) {
			memcpy(c->hdr + c->head_len, c->mem + first, (size_t)len);
			c->segs[c->nsegs - 1].len += (size_t)len;
		} else {
			add_body_range(c, first, last);
		}
	}
	c->state = ST_SEND;
}

static int cache_reopen(const char *key, void *arg)
{
	const struct server *srv = arg;
	return file_open_beneath(srv->root_fd, key, srv->cfg->symlinks);
}

static void view_of_entry(struct file_view *f, struct cache_entry *e)
{
	*f = (struct file_view){
		.size = e->len, .mtime = e->mtime, .etag = e->etag, .etag_len = e->etag_len,
		.last_modified = e->last_modified, .mime = e->mime, .entry = e, .fd = -1,
	};
}

/* The cached file at rel, referenced, or NULL (counted in the stats). */
static struct cache_entry *cached_file(struct conn *c, const char *rel, size_t len)
{
	struct cache_entry *hit = cache_lookup(c->srv->cache, rel, len, conn_now_ms(), cache_reopen,
					       (void *)c->srv);
	if (c->srv->cache)
		stats_cache_lookup(hit != NULL); /* stats */
	return hit;
}

/* The sidecars of a cached file, worked out at most once per revalidation
 * window (so a sidecar made or deleted later is seen as the file itself would
 * be) and kept with the entry: a hit costs no stat for them. */
#define SIDECARS_KNOWN (1u << 31)

static unsigned cached_sidecars(struct conn *c, struct cache_entry *e, const struct target *t)
{
	int64_t now = conn_now_ms();
	unsigned mask = atomic_load_explicit(&e->aux, memory_order_relaxed);
	long long checked = atomic_load_explicit(&e->aux_checked_ms, memory_order_relaxed);
	if ((mask & SIDECARS_KNOWN) && now - checked < c->cfg->cache_revalidate_ms)
		return mask;
	/* one thread per window looks; the others use what is known */
	if ((mask & SIDECARS_KNOWN) &&
	    !atomic_compare_exchange_strong(&e->aux_checked_ms, &checked, (long long)now))
		return mask;
	mask = SIDECARS_KNOWN | sidecar_probe(c->srv->root_fd, c->cfg->symlinks, t->rel, t->len, e->mtime,
					      &c->cfg->precompressed);
	atomic_store_explicit(&e->aux, mask, memory_order_relaxed);
	atomic_store_explicit(&e->aux_checked_ms, (long long)now, memory_order_relaxed);
	return mask;
}

/* The view of the chosen sidecar, from the cache or opened; false when it is
 * gone or stale since the look (the original is sent instead). Keeps the
 * original's Content-Type; the ETag gets the coding as a suffix, so no cache
 * mistakes one encoding's bytes for another's (RFC 9110 8.8.3). */
static bool sidecar_view(struct conn *c, const struct target *t, const struct file_view *orig, int coding,
			 struct file_view *f, char *etag)
{
	char key[t->len + SIDECAR_SUFFIX_MAX];
	size_t keylen = t->len + strlen(encoding_suffix(coding));
	struct stat st;

	memcpy(key, t->rel, t->len);
	strcpy(key + t->len, encoding_suffix(coding));
	struct cache_entry *e = cached_file(c, key, keylen); /* a sidecar is looked up like any file */
	if (e && e->mtime < orig->mtime) {
		cache_release(e);
		return false;
	}
	if (!e) {
		int fd = sidecar_open(c->srv->root_fd, c->cfg->symlinks, t->rel, t->len, coding, orig->mtime, key, &st);
		if (fd < 0)
			return false;
		e = cache_insert(c->srv->cache, key, keylen, fd, &st, mime_lookup(c->srv->mime, key, keylen,
										 c->cfg->default_type),
				 conn_now_ms());
		if (e) {
			close(fd);
		} else {
			*f = (struct file_view){
				.size = (uint64_t)st.st_size, .mtime = st.st_mtime, .fd = fd,
				.etag_len = http_etag(etag, st.st_mtime, (uint64_t)st.st_size),
			};
			http_date_format(st.st_mtime, f->lm_buf);
			f->last_modified = f->lm_buf;
		}
	}
	if (e) {
		view_of_entry(f, e);
		memcpy(etag, e->etag, e->etag_len);
		f->etag_len = e->etag_len;
	}
	/* "mtime-size" becomes "mtime-size-br" */
	f->etag_len += (size_t)snprintf(etag + f->etag_len - 1, HTTP_ETAG_MAX - f->etag_len + 1, "-%s\"",
					 encoding_name(coding)) - 1;
	f->etag = etag;
	f->mime = orig->mime;
	f->content_encoding = encoding_name(coding);
	f->vary = true;
	f->cc = orig->cc;
	return true;
}

/* Sends the file f, or the sidecar Accept-Encoding picks for it;
 * applies the Cache-Control rules. Takes over f's fd or entry. */
static void respond_target(struct conn *c, struct file_view *f, const struct target *t)
{
	const struct config *cfg = c->cfg;
	if (t->url_path)
		f->cc = cache_control_match(&cfg->cache_control, t->url_path, t->index_path, f->mime);
	if (cfg->precompressed.n == 0) {
		respond_file(c, f);
		return;
	}
	unsigned avail = f->entry ? cached_sidecars(c, f->entry, t) & ~SIDECARS_KNOWN
				  : sidecar_probe(c->srv->root_fd, cfg->symlinks, t->rel, t->len, f->mtime,
						  &cfg->precompressed);
	f->vary = avail != 0;
	int coding = encoding_choose(c->req.accept_encoding, c->req.accept_encoding_lines, &cfg->precompressed,
				     avail);
	if (coding == ENCODING_NOT_ACCEPTABLE) {
		/* RFC 9110 12.5.3: identity refused and no coding on offer */
		if (f->fd >= 0)
			close(f->fd);
		cache_release(f->entry);
		respond_status(c, 406, false, f->vary ? "Vary: Accept-Encoding\r\n" : NULL);
		return;
	}
	struct file_view side;
	char etag[HTTP_ETAG_MAX];
	if (coding >= 0 && sidecar_view(c, t, f, coding, &side, etag)) {
		if (f->fd >= 0)
			close(f->fd);
		cache_release(f->entry);
		respond_file(c, &side);
		return;
	}
	respond_file(c, f);
}

static void respond_cached(struct conn *c, struct cache_entry *e, const struct target *t)
{
	struct file_view f;
	view_of_entry(&f, e);
	respond_target(c, &f, t);
}

/* A file just opened: cache it when it fits, else serve it from the fd. */
static void respond_opened(struct conn *c, int fd, const struct stat *st, const struct target *t)
{
	const char *mime = mime_lookup(c->srv->mime, t->rel, t->len, c->cfg->default_type);
	struct cache_entry *e = cache_insert(c->srv->cache, t->rel, t->len, fd, st, mime, conn_now_ms());
	if (e) {
		close(fd);
		respond_cached(c, e, t);
		return;
	}
	char etag[HTTP_ETAG_MAX];
	struct file_view f = {
		.size = (uint64_t)st->st_size, .mtime = st->st_mtime, .etag = etag,
		.etag_len = http_etag(etag, st->st_mtime, (uint64_t)st->st_size),
		.mime = mime, .entry = NULL, .fd = fd,
	};
	http_date_format(st->st_mtime, f.lm_buf);
	f.last_modified = f.lm_buf;
	respond_target(c, &f, t);
}

/* The status a request gets whatever its body holds, or 0: lets a client
 * that waits for "100 Continue" learn it before it sends the body. Must
 * agree with respond_request()'s first checks. */
static int request_refusal(const struct http_request *r)
{
	if (r->method == HTTP_METHOD_UNKNOWN)
		return 501;
	if (r->method != HTTP_GET && r->method != HTTP_HEAD)
		return 405;
	return 0;
}

/* "app.js" has one, "settings" and "v1/" none: only a path without one
 * takes the SPA fallback, so a missing asset stays a 404. */
static bool last_segment_has_extension(const char *rel, size_t len)
{
	size_t start = len;
	while (start > 0 && rel[start - 1] != '/')
		start--;
	const char *dot = memchr(rel + start, '.', len - start);
	return dot && dot > rel + start; /* a leading dot names a dotfile, not a type */
}

/* The SPA fallback file, for a GET/HEAD whose path does not
 * exist: as nginx's `try_files $uri /index.html`. Tried once: when it is
 * missing too, the answer is 404, never another fallback. */
static void respond_fallback(struct conn *c)
{
	const struct config *cfg = c->cfg;
	char rel[CONN_PATH_MAX];
	struct path_result pr;
	struct stat st;

	int err = path_resolve((struct span){ cfg->fallback, strlen(cfg->fallback) }, rel, sizeof(rel), &pr);
	if (err < 0 || pr.len == 0 || pr.trailing_slash) {
		respond_status(c, 404, false, NULL);
		return;
	}
	/* Cache-Control rules see the fallback's own path: its content is served */
	struct target t = { rel, pr.len, cfg->cache_control.n ? cfg->fallback : NULL, NULL };
	struct cache_entry *hit = cached_file(c, rel, pr.len);
	if (hit) {
		respond_cached(c, hit, &t);
		return;
	}
	int fd = file_open_beneath(c->srv->root_fd, rel, cfg->symlinks);
	if (fd < 0) {
		if (fd == -ENOENT || fd == -ENOTDIR)
			respond_status(c, 404, false, NULL);
		else
			respond_open_error(c, rel, -fd);
		return;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		respond_status(c, 404, false, NULL);
		return;
	}
	respond_opened(c, fd, &st, &t);
}

/* An ACME HTTP-01 challenge file from acme_webroot (acme_challenge.h), or
 * false when the path is not one. Anything but a token's regular file is
 * 404: no listing, no sidecar, no fallback. */
static bool respond_acme(struct conn *c)
{
	char rel[ACME_REL_MAX];
	enum acme_match m = acme_challenge_match(c->req.path, rel, sizeof(rel));
	if (m == ACME_NOT_CHALLENGE)
		return false;
	struct stat st;
	int fd = m == ACME_TOKEN ? acme_challenge_open(c->srv->acme_fd, rel, &st) : -ENOENT;
	if (fd < 0) {
		respond_status(c, 404, false, NULL);
		return true;
	}
	char etag[HTTP_ETAG_MAX];
	struct file_view f = {
		.size = (uint64_t)st.st_size, .mtime = st.st_mtime, .etag = etag,
		.etag_len = http_etag(etag, st.st_mtime, (uint64_t)st.st_size),
		.mime = "text/plain", .entry = NULL, .fd = fd,
	};
	http_date_format(st.st_mtime, f.lm_buf);
	f.last_modified = f.lm_buf;
	respond_file(c, &f);
	return true;
}

/* Static files: resolve, confine, open, then answer. */
static void respond_request(struct conn *c)
{
	const struct http_request *r = &c->req;
	const struct config *cfg = c->cfg;
	char rel[CONN_PATH_MAX];
	struct path_result pr;

	c->keep_alive = r->keep_alive && !c->draining;
	c->linger = false;
	c->last_progress = conn_now_ms();

	int refused = request_refusal(r);
	if (refused) {
		respond_status(c, refused, false, refused == 405 ? "Allow: GET, HEAD\r\n" : NULL);
		return;
	}
	/* before any redirect: the ACME server asks over plain HTTP */
	if (cfg->acme_webroot[0] && respond_acme(c))
		return;
	if (cfg->redirect_https) { /* config_validate: no TLS listener then */
		respond_redirect_https(c);
		return;
	}
	struct dyn_response dyn;
	if (endpoints_dispatch(c->srv, &c->peer_addr, r, &dyn)) {
		respond_dynamic(c, &dyn);
		return;
	}
	int err = path_resolve(r->path, rel, sizeof(rel) - sizeof(cfg->index) - 1, &pr);
	if (err < 0) {
		respond_status(c, -err, false, NULL);
		return;
	}
	if (pr.has_dot_segment && !cfg->dotfiles) {
		respond_status(c, 404, false, NULL);
		return;
	}
	/* Cache-Control rules see the URL path as decoded and, for a directory,
	 * the path of the index file that answers it (cache_control.h) */
	bool rules = cfg->cache_control.n > 0;
	char url_path[rules ? pr.len + 3 : 1];
	char index_path[rules && pr.trailing_slash ? pr.len + 3 + strlen(cfg->index) : 1];
	if (rules) {
		url_path[0] = '/';
		memcpy(url_path + 1, rel, pr.len);
		size_t n = pr.len + 1;
		if (pr.trailing_slash && pr.len)
			url_path[n++] = '/';
		url_path[n] = '\0';
		if (pr.trailing_slash) {
			memcpy(index_path, url_path, n);
			strcpy(index_path + n, cfg->index);
		}
	}
	struct target t = { rel, 0, rules ? url_path : NULL, rules && pr.trailing_slash ? index_path : NULL };
	/* A directory request is looked up as its index file. */
	size_t keylen = pr.len;
	if (pr.trailing_slash) {
		if (keylen)
			rel[keylen++] = '/';
		strcpy(rel + keylen, cfg->index);
		keylen += strlen(cfg->index);
	}
	struct cache_entry *hit = cached_file(c, rel, keylen);
	if (hit) {
		t.len = keylen;
		respond_cached(c, hit, &t);
		return;
	}
	rel[pr.len] = '\0';
	int fd = file_open_beneath(c->srv->root_fd, rel, cfg->symlinks);
	if (fd < 0) {
		if ((fd == -ENOENT || fd == -ENOTDIR) && cfg->fallback[0] && !last_segment_has_extension(rel, pr.len))
			respond_fallback(c);
		else
			respond_open_error(c, rel, -fd);
		return;
	}
	struct stat st;
	if (fstat(fd, &st) < 0) {
		close(fd);
		respond_status(c, 500, false, NULL);
		return;
	}
	if (S_ISDIR(st.st_mode)) {
		close(fd);
		if (!pr.trailing_slash) {
			respond_redirect_slash(c, rel, pr.len);
			return;
		}
		struct stat dir_st = st;
		size_t dir_len = pr.len;
		/* Open the index by its full path, so a symlinked index is confined too. */
		size_t n = pr.len;
		if (n)
			rel[n++] = '/';
		strcpy(rel + n, cfg->index);
		pr.len = n + strlen(cfg->index);
		fd = file_open_beneath(c->srv->root_fd, rel, cfg->symlinks);
		if (fd == -ENOENT && cfg->autoindex != AUTOINDEX_OFF) {
			rel[dir_len] = '\0';
			respond_autoindex(c, rel, &dir_st);
			return;
		}
		if (fd == -ENOENT) {
			/* no index, and listings are off */
			char why[300];
			snprintf(why, sizeof(why), "a directory without %s, and autoindex is off", cfg->index);
			rel[dir_len] = '\0';
			log_refusal(rel, why);
			respond_status(c, 403, false, NULL);
			return;
		}
		if (fd < 0) {
			respond_open_error(c, rel, -fd);
			return;
		}
		if (fstat(fd, &st) < 0) {
			close(fd);
			respond_status(c, 500, false, NULL);
			return;
		}
	} else if (pr.trailing_slash) {
		close(fd); /* "/file.txt/" names no directory */
		respond_status(c, 404, false, NULL);
		return;
	}
	if (!S_ISREG(st.st_mode)) {
		close(fd);
		log_refusal(rel, "not a regular file (a device, FIFO or socket)");
		respond_status(c, 403, false, NULL);
		return;
	}
	t.len = pr.len;
	respond_opened(c, fd, &st, &t);
}

/* ---- input --------------------------------------------------------- */

static void finish_body(struct conn *c, size_t body_end)
{
	c->next_start = body_end;
	respond_request(c);
}

/* Drops request-body bytes that have arrived; answers once the body ends. */
static void consume_body(struct conn *c)
{
	size_t pos = c->next_start;
	size_t avail = c->in_end - pos;

	if (c->body_chunked) {
		size_t used;
		enum http_chunked_result res = http_chunked_skip(&c->chunked, c->in + pos, avail, &used);
		if (res == HTTP_CHUNKED_ERROR) {
			respond_status(c, 400, true, NULL);
			return;
		}
		if (c->chunked.total > c->cfg->max_body) {
			respond_status(c, 413, true, NULL);
			return;
		}
		if (res == HTTP_CHUNKED_DONE) {
			finish_body(c, pos + used);
			return;
		}
		/* everything given was consumed: reuse the space */
		c->in_end = pos;
	} else {
		size_t take = avail < c->body_left ? avail : (size_t)c->body_left;
		c->body_left -= take;
		if (c->body_left == 0) {
			finish_body(c, pos + take);
			return;
		}
		c->in_end = pos;
	}
	c->state = ST_BODY;
}

/* The first line of what the client sent, for the access log of a request
 * that could not be parsed. */
static struct span raw_first_line(const struct conn *c)
{
	const char *p = c->in + c->in_start;
	size_t n = c->in_end - c->in_start, i = 0;
	while (i < n && i < 256 && p[i] != '\r' && p[i] != '\n')
		i++;
	return (struct span){ p, i };
}

enum expectation {
	EXPECT_NONE,     /* no Expect, or one we ignore (HTTP/1.0) */
	EXPECT_CONTINUE, /* 100-continue */
	EXPECT_UNKNOWN,  /* anything else -> 417 */
};

static enum expectation expectation_of(const struct http_request *r)
{
	/* RFC 9110 10.1.1: a 100-continue from an HTTP/1.0 client MUST be
	 * ignored (1.0 has no interim responses); Apache ignores any Expect
	 * from 1.0, and so do we. */
	if (!r->expect.p || r->version_minor == 0)
		return EXPECT_NONE;
	/* A list over every Expect line (RFC 9110 5.3, 5.6.1): empty members
	 * are nothing; any member but 100-continue is one we cannot meet. */
	enum expectation ex = EXPECT_NONE;
	const char *cursor = NULL;
	struct span line;
	while (http_field_lines_next(r->expect, r->expect_lines, "expect", &cursor, &line)) {
		const char *p = line.p, *end = line.p + line.len;
		struct span m;
		while (http_list_member_next(&p, end, &m)) {
			if (!span_eq_nocase(m, "100-continue"))
				return EXPECT_UNKNOWN;
			ex = EXPECT_CONTINUE;
		}
	}
	return ex;
}

/* An interim response in the segment list; the final one follows the body. */
static void send_continue(struct conn *c)
{
	static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
	c->nsegs = c->seg_cur = c->seg_off = 0;
	c->sent = 0;
	add_seg(c, cont, 0, sizeof(cont) - 1);
	c->interim = true;
	c->state = ST_SEND;
	c->last_progress = conn_now_ms();
}

/* Parses and answers as many buffered requests as possible (one at a time).
 * now: the clock read of the read that brought bytes, or 0 (none yet). */
static void process_input(struct conn *c, int64_t now)
{
	if (c->state != ST_HEAD)
		return;
	if (c->in_start == c->in_end) {
		c->idle = true;
		return;
	}
	if (c->idle) {
		c->idle = false;
		c->head_started = conn_now_ms();
	}
	if (c->req_pickup_ns == 0) {
		/* a request starts: picked up now, by the read that brought its
		 * first byte, or (buffered behind another) as the core gets to it */
		if (!now)
			now = stats_clock_ns();
		c->req_pickup_ns = now;
		c->req_ready_ns = c->read_ready_ns && c->read_ready_ns <= now ? c->read_ready_ns : now;
	}
	if (!conn_out_buffers(c)) {
		log_error("out of memory for a response");
		c->state = ST_CLOSE;
		return;
	}
	int r = http_parse_request_resume(c->in + c->in_start, c->in_end - c->in_start, &c->srv->limits,
					  &c->req, &c->parse);
	if (r == 0)
		return;
	c->stats_t0 = now ? now : stats_clock_ns(); /* stats: latency runs from here to the response's last byte */
	if (r < 0) {
		c->have_req = false;
		c->next_start = c->in_end; /* framing is lost: nothing after this can be trusted */
		respond_status(c, -r, true, NULL);
		return;
	}
	c->have_req = true;
	c->req_len = (size_t)r;
	c->next_start = c->in_start + (size_t)r;
	c->keep_alive = c->req.keep_alive && !c->draining;
	bool has_body = c->req.chunked || (c->req.has_content_length && c->req.content_length > 0);
	enum expectation ex = expectation_of(&c->req);
	if (ex == EXPECT_UNKNOWN) {
		/* RFC 9110 10.1.1: 417. A body announced with it may or may
		 * not follow, so framing is in doubt: close after. */
		respond_status(c, 417, has_body, NULL);
		return;
	}
	if (has_body) {
		if (c->req.has_content_length && c->req.content_length > c->cfg->max_body) {
			respond_status(c, 413, true, NULL);
			return;
		}
		c->body_chunked = c->req.chunked;
		c->body_left = c->req.content_length;
		memset(&c->chunked, 0, sizeof(c->chunked));
		c->body_started = c->last_progress = conn_now_ms();
		if (ex == EXPECT_CONTINUE && c->in_end == c->next_start) {
			/* The client waits for us before sending the body. */
			int refused = request_refusal(&c->req);
			if (refused) {
				/* the final status at once (RFC 9110 10.1.1); the
				 * client may send the body anyway: close after */
				respond_status(c, refused, true, refused == 405 ? "Allow: GET, HEAD\r\n" : NULL);
				return;
			}
			send_continue(c);
			return;
		}
		consume_body(c);
		return;
	}
	respond_request(c);
}

/* The head of a request whose body is being discarded filled the buffer:
 * move it to the front (or grow the buffer) and parse it again, so its spans
 * point at the new place. */
static void make_body_room(struct conn *c)
{
	size_t keep = c->next_start - c->in_start; /* the head; discarded body bytes are gone */
	if (c->in_start > 0) {
		memmove(c->in, c->in + c->in_start, keep);
	} else {
		char *p = realloc(c->in, c->in_cap + CONN_MIN_INPUT);
		if (!p)
			return;
		c->in = p;
		c->in_cap += CONN_MIN_INPUT;
	}
	c->in_start = 0;
	c->next_start = c->in_end = keep;
	http_parse_request(c->in, c->req_len, &c->srv->limits, &c->req);
}

struct iovec conn_input_space(struct conn *c)
{
	if (!c->in) {
		c->in_cap = c->cfg->max_head < CONN_MIN_INPUT ? c->cfg->max_head : CONN_MIN_INPUT;
		c->in = malloc(c->in_cap);
		if (!c->in)
			c->in_cap = 0; /* an empty span: the driver reads nothing, and closes */
	}
	if (c->state == ST_LINGER) {
		c->in_start = c->in_end = 0;
		return (struct iovec){ c->in, c->in_cap };
	}
	if (c->state == ST_BODY && c->in_end == c->in_cap)
		make_body_room(c);
	if (c->state == ST_HEAD && c->in_end == c->in_cap) {
		if (c->in_start > 0) {
			/* no request is live in ST_HEAD, and none is parked while
			 * we read: nothing points into the buffer */
			memmove(c->in, c->in + c->in_start, c->in_end - c->in_start);
			c->in_end -= c->in_start;
			c->in_start = 0;
		} else if (c->in_cap < c->cfg->max_head) {
			size_t cap = c->in_cap * 2 < c->cfg->max_head ? c->in_cap * 2 : c->cfg->max_head;
			char *p = realloc(c->in, cap);
			if (p) {
				c->in = p;
				c->in_cap = cap;
			}
		}
	}
	return (struct iovec){ c->in + c->in_end, c->in_cap - c->in_end };
}

void conn_readable(struct conn *c, int64_t ns)
{
	c->readable_ns = ns;
}

void conn_input_done(struct conn *c, ssize_t n)
{
	int64_t now = 0;

	if (n <= 0) {
		/* EOF or error: whatever was half-received cannot be answered. */
		c->state = ST_CLOSE;
		return;
	}
	c->in_end += (size_t)n;
	if (c->state == ST_HEAD || c->state == ST_BODY) {
		/* one clock read per read: it stamps these bytes, the request they
		 * may start and the head they may complete */
		now = stats_clock_ns();
		c->read_ready_ns = c->readable_ns && c->readable_ns <= now ? c->readable_ns : now;
	}
	c->readable_ns = 0;
	switch (c->state) {
	case ST_LINGER:
		c->in_start = c->in_end = 0;
		break;
	case ST_BODY:
		c->last_progress = conn_now_ms();
		consume_body(c);
		break;
	case ST_HEAD:
		process_input(c, now);
		break;
	default:
		break;
	}
}

/* ---- output -------------------------------------------------------- */

static enum stats_method stats_method_of(const struct conn *c)
{
	if (!c->have_req)
		return STATS_OTHER;
	return c->req.method == HTTP_GET ? STATS_GET : c->req.method == HTTP_HEAD ? STATS_HEAD : STATS_OTHER;
}

/* The current response's record, taken while its request is still parsed. */
static struct resp_record record_of(const struct conn *c)
{
	return (struct resp_record){
		.status = c->status,
		.method = stats_method_of(c),
		.head_len = c->head_len,
		.stats_t0 = c->stats_t0,
		.ready_ns = c->req_ready_ns,
		.pickup_ns = c->req_pickup_ns,
		.first_ns = c->first_byte_ns,
		.request_line = c->have_req ? c->req.request_line : raw_first_line(c),
		.referer = c->have_req ? c->req.referer : (struct span){ 0 },
		.user_agent = c->have_req ? c->req.user_agent : (struct span){ 0 },
	};
}

/* A response's last byte is out (at now): stats and the access log line,
 * once each. */
static void response_account(struct conn *c, const struct resp_record *r, uint64_t sent, int64_t now)
{
	int64_t elapsed_ns = r->stats_t0 ? now - r->stats_t0 : 0;
	/* a response no request started (none so far) was picked up when its
	 * head was complete, or else as it left */
	int64_t pickup = r->pickup_ns ? r->pickup_ns : r->stats_t0 ? r->stats_t0 : now;
	int64_t ready = r->ready_ns && r->ready_ns <= pickup ? r->ready_ns : pickup;
	int64_t first = r->first_ns >= pickup ? r->first_ns : now;
	int64_t service = now > pickup ? now - pickup : 0;
	/* stats: a few relaxed atomic adds to this worker's slot */
	stats_response(r->method, r->status, sent - r->head_len, elapsed_ns, c->nreq++ > 0);
	stats_request_time(pickup - ready, service);
	if (log_access_enabled()) {
		struct access_entry e = {
			.duration_us = (uint64_t)elapsed_ns / 1000,
			.queue_us = (uint64_t)(pickup - ready) / 1000,
			.service_us = (uint64_t)service / 1000,
			.first_byte_us = (uint64_t)(first > pickup ? first - pickup : 0) / 1000,
			.peer = c->peer,
			.request_line = r->request_line,
			.status = r->status,
			.bytes = sent - r->head_len,
			.referer = r->referer,
			.user_agent = r->user_agent,
		};
		log_access(&e);
	}
}

/* Bytes and segments parked and not yet sent. */
static void queue_unsent(const struct conn *c, size_t *bytes, size_t *segs)
{
	*bytes = *segs = 0;
	for (size_t i = c->q_first; i < c->q_first + c->nq; i++) {
		const struct parked *p = &c->q[i];
		for (size_t k = p->seg_cur; k < p->nsegs; k++) {
			*bytes += p->segs[k].len - (k == p->seg_cur ? p->seg_off : 0);
			(*segs)++;
		}
	}
}

/* May the current response wait in the queue while the next one is built? */
static bool response_parkable(struct conn *c)
{
	if (c->state != ST_SEND || c->interim || !c->keep_alive || c->file_fd >= 0 ||
	    c->nsegs - c->seg_cur > PARKED_SEGS || c->q_first + c->nq == CONN_QUEUE_MAX)
		return false;
	size_t bytes, segs;
	queue_unsent(c, &bytes, &segs);
	for (size_t k = c->seg_cur; k < c->nsegs; k++)
		bytes += c->segs[k].len - (k == c->seg_cur ? c->seg_off : 0);
	segs += c->nsegs - c->seg_cur;
	/* the next response must still fit the same write */
	if (segs >= CONN_IOV_MAX || bytes >= CONN_GATHER_BYTES)
		return false;
	if (!c->q && !(c->q = calloc(CONN_QUEUE_MAX, sizeof(*c->q))))
		return false; /* no memory: simply no gathering */
	return true;
}

/* The whole head of the next request is buffered. Only a hint: when the
 * parser still wants more, the queue is sent first and then the core reads.
 * The parser takes a bare LF as a line end (RFC 9112 2.2), so a head ends in
 * "\n\n" or "\n\r\n", not only in CRLF CRLF. */
static bool next_request_buffered(const struct conn *c)
{
	const char *p = c->in + c->next_start, *end = c->in + c->in_end;
	while (p < end && (p = memchr(p, '\n', (size_t)(end - p)))) {
		p++;
		if (p < end && (*p == '\n' || (*p == '\r' && p + 1 < end && p[1] == '\n')))
			return true;
	}
	return false;
}

/* Moves the current response into the queue; the conn's response storage is
 * then free for the next one. */
static void response_park(struct conn *c)
{
	struct parked *p = &c->q[c->q_first + c->nq++];
	size_t n = 0;

	for (size_t k = c->seg_cur; k < c->nsegs; k++) {
		struct seg s = c->segs[k];
		if (s.p >= c->errpage && s.p < c->errpage + sizeof(c->errpage)) {
			memcpy(p->errpage, c->errpage, sizeof(p->errpage));
			s.p = p->errpage + (s.p - c->errpage);
		}
		p->segs[n++] = s;
	}
	p->nsegs = n;
	p->seg_cur = 0;
	p->seg_off = c->seg_off;
	p->sent = c->sent;
	/* The head lives in c->hdr: the queue entry takes that buffer and
	 * gives back its own (or none: conn_out_buffers makes one). */
	char *h = p->hdr;
	size_t cap = p->hdr_cap;
	p->hdr = c->hdr;
	p->hdr_cap = c->hdr_cap;
	c->hdr = h;
	c->hdr_cap = cap;
	p->body = c->body;
	p->entry = c->entry;
	c->body = NULL;
	c->entry = NULL;
	p->rec = record_of(c);
	c->stats_t0 = 0;
	c->req_pickup_ns = c->first_byte_ns = 0;
	response_release(c);
}

static void parked_finish(struct conn *c, struct parked *p, int64_t now)
{
	response_account(c, &p->rec, p->sent, now);
	parked_release(p);
}

/* The connection stays open: on to the next request, which may already be
 * buffered (pipelining). */
static void next_request(struct conn *c)
{
	c->have_req = false;
	memset(&c->parse, 0, sizeof(c->parse)); /* a new head: the parser starts afresh */
	c->in_start = c->next_start;
	if (c->in_start == c->in_end)
		c->in_start = c->in_end = 0;
	c->state = ST_HEAD;
	c->idle = true;
	c->last_progress = conn_now_ms();
	process_input(c, 0);
}

/* Answers every complete request already buffered, parking the responses
 * before it, so they leave in one write rather than one small write each. */
static void answer_buffered(struct conn *c)
{
	while (response_parkable(c) && next_request_buffered(c)) {
		response_park(c);
		next_request(c);
	}
}

/* Appends segs[cur..] (the first one from off) to out; false when out is
 * full: the iovecs are used up, or a file range comes (sendfile). */
static bool gather(struct conn_output *out, const struct seg *segs, size_t nsegs, size_t cur, size_t off,
		   int file_fd)
{
	for (size_t i = cur; i < nsegs; i++) {
		const struct seg *s = &segs[i];
		size_t skip = i == cur ? off : 0;
		if (!s->p) {
			if (out->iovcnt == 0) {
				out->file_fd = file_fd;
				out->file_off = s->off + (off_t)skip;
				out->file_len = s->len - skip;
				out->total = out->file_len;
			} else {
				out->more = true; /* the head, then the file: one packet, not two */
			}
			return false;
		}
		if (out->iovcnt == CONN_IOV_MAX)
			return false;
		out->iov[out->iovcnt].iov_base = (void *)(s->p + skip);
		out->iov[out->iovcnt].iov_len = s->len - skip;
		out->total += s->len - skip;
		out->iovcnt++;
	}
	return true;
}

void conn_output(struct conn *c, struct conn_output *out)
{
	answer_buffered(c);
	out->iovcnt = 0;
	out->file_fd = -1;
	out->file_len = 0;
	out->total = 0;
	out->more = false;
	for (size_t i = c->q_first; i < c->q_first + c->nq; i++) {
		const struct parked *p = &c->q[i];
		if (!gather(out, p->segs, p->nsegs, p->seg_cur, p->seg_off, -1))
			return;
	}
	if (c->state == ST_SEND)
		gather(out, c->segs, c->nsegs, c->seg_cur, c->seg_off, c->file_fd);
}

static void finish_response(struct conn *c, int64_t now)
{
	struct resp_record rec = record_of(c);
	response_account(c, &rec, c->sent, now);
	c->stats_t0 = 0;
	c->req_pickup_ns = c->first_byte_ns = 0;
	response_release(c);
	hdr_shrink(c);
	if (!c->keep_alive) {
		c->have_req = false;
		bool unread = c->in_end > c->next_start;
		c->state = (c->linger || unread) ? ST_SHUTDOWN : ST_CLOSE;
		return;
	}
	next_request(c);
}

/* "100 Continue" is out: now the client sends the body, which is read and
 * discarded before the final response, as without Expect. */
static void finish_interim(struct conn *c)
{
	c->interim = false;
	c->nsegs = c->seg_cur = c->seg_off = 0;
	c->sent = c->head_len = 0;
	c->state = ST_BODY;
	c->body_started = c->last_progress = conn_now_ms();
}

/* Once half of a listing's body is sent, the unsent rest moves to the front
 * and the memory behind it goes back, with its bytes in the budget: a client
 * that reads slowly holds less and less (each byte moves about once). Drivers
 * take conn_output() afresh after each conn_output_done(), so moving the
 * body under the segment is safe. */
#define LISTING_SHRINK_MIN (64 * 1024)

static void listing_shrink(struct conn *c)
{
	if (!c->listing_reserved || c->seg_cur >= c->nsegs || c->segs[c->seg_cur].p != c->body)
		return;
	struct seg *s = &c->segs[c->seg_cur];
	size_t left = s->len - c->seg_off;
	if (c->seg_off < LISTING_SHRINK_MIN || c->seg_off < left)
		return;
	memmove(c->body, c->body + c->seg_off, left);
	char *fit = realloc(c->body, left);
	if (fit)
		c->body = fit;
	c->mem = c->body;
	s->p = c->body;
	s->len = left;
	c->seg_off = 0;
	listing_give(c, c->listing_reserved > left ? c->listing_reserved - left : 0);
}

/* Moves a segment cursor over up to n sent bytes, counting them in *sent;
 * returns what is left of n after the last segment. */
static size_t segs_advance(const struct seg *segs, size_t nsegs, size_t *cur, size_t *off, uint64_t *sent,
			   size_t n)
{
	while (n > 0 && *cur < nsegs) {
		size_t left = segs[*cur].len - *off;
		size_t take = n < left ? n : left;
		*sent += take;
		n -= take;
		if (take < left) {
			*off += take;
			break;
		}
		(*cur)++;
		*off = 0;
	}
	return n;
}

/* One clock read for every response a write starts or ends. */
static int64_t clock_once(int64_t *now)
{
	if (!*now)
		*now = stats_clock_ns();
	return *now;
}

void conn_writing(struct conn *c, int64_t ns)
{
	c->writing_ns = ns;
}

void conn_output_done(struct conn *c, size_t n)
{
	int64_t now = c->writing_ns; /* 0: clock_once reads the clock */

	c->writing_ns = 0;

	c->last_progress = conn_now_ms();
	/* one write may end several responses: each is finished, in order */
	while (c->nq > 0) {
		struct parked *p = &c->q[c->q_first];
		if (p->sent == 0 && n > 0 && !p->rec.first_ns)
			p->rec.first_ns = clock_once(&now);
		n = segs_advance(p->segs, p->nsegs, &p->seg_cur, &p->seg_off, &p->sent, n);
		if (p->seg_cur < p->nsegs)
			return;
		parked_finish(c, p, clock_once(&now));
		c->q_first++;
		if (--c->nq == 0)
			c->q_first = 0;
	}
	if (c->state != ST_SEND)
		return; /* only parked responses were out: now the core reads */
	if (c->sent == 0 && n > 0 && !c->interim && !c->first_byte_ns)
		c->first_byte_ns = clock_once(&now);
	segs_advance(c->segs, c->nsegs, &c->seg_cur, &c->seg_off, &c->sent, n);
	listing_shrink(c);
	if (c->seg_cur == c->nsegs) {
		if (c->interim)
			finish_interim(c);
		else
			finish_response(c, clock_once(&now));
	}
}

void conn_output_failed(struct conn *c)
{
	stats_send_failed(); /* stats */
	c->state = ST_CLOSE;
}

void conn_shutdown_done(struct conn *c)
{
	c->state = ST_LINGER;
	c->last_progress = conn_now_ms();
}

enum conn_want conn_wants(const struct conn *c, int64_t *deadline_ms)
{
	const struct config *cfg = c->cfg;

	if (c->nq > 0 && c->state != ST_CLOSE) {
		/* parked responses go first, whatever the next request needs */
		*deadline_ms = c->last_progress + cfg->send_timeout_ms;
		return CONN_WANT_WRITE;
	}
	switch (c->state) {
	case ST_HEAD:
		if (c->in_start == c->in_end && c->draining)
			*deadline_ms = c->drain_started + (cfg->keepalive_timeout_ms < CONN_DRAIN_GRACE_MS
							   ? cfg->keepalive_timeout_ms : CONN_DRAIN_GRACE_MS);
		else if (c->idle && c->in_start == c->in_end)
			*deadline_ms = c->last_progress + cfg->keepalive_timeout_ms;
		else /* absolute: trickling bytes do not extend it */
			*deadline_ms = c->head_started + cfg->header_timeout_ms;
		return CONN_WANT_READ;
	case ST_BODY:
		/* absolute too: a body dribbled a byte at a time must not hold a worker */
		*deadline_ms = c->body_started + cfg->header_timeout_ms;
		return CONN_WANT_READ;
	case ST_SEND:
		*deadline_ms = c->last_progress + cfg->send_timeout_ms;
		return CONN_WANT_WRITE;
	case ST_SHUTDOWN:
		*deadline_ms = -1;
		return CONN_WANT_SHUTDOWN;
	case ST_LINGER:
		*deadline_ms = c->last_progress + CONN_LINGER_MS;
		return CONN_WANT_READ;
	case ST_CLOSE:
		break;
	}
	*deadline_ms = -1;
	return CONN_WANT_CLOSE;
}

void conn_timeout(struct conn *c)
{
	if (c->state != ST_LINGER)
		stats_timeout(); /* stats: the end of a linger is routine, not a timeout */
	if (c->nq > 0) { /* the client does not take the parked responses */
		c->state = ST_CLOSE;
		return;
	}
	if ((c->state == ST_HEAD && c->in_start != c->in_end) || c->state == ST_BODY) {
		/* part of a request (its head, or its body) arrived, too slowly:
		 * say so, then close; framing is lost, so nothing after it counts */
		if (c->state == ST_HEAD)
			c->have_req = false;
		c->stats_t0 = stats_clock_ns(); /* stats */
		respond_status(c, 408, true, NULL);
		c->next_start = c->in_end;
		return;
	}
	c->state = ST_CLOSE;
}

void conn_drain(struct conn *c)
{
	if (c->draining)
		return;
	c->draining = true;
	c->drain_started = conn_now_ms();
	/* An idle keep-alive connection is not closed at once: its client may
	 * be sending the next request right now, and closing under it would
	 * fail that request. It gets a short grace; a request that comes is
	 * answered with "Connection: close". */
	if (c->state == ST_LINGER)
		c->state = ST_CLOSE;
}

bool conn_awaits_request(const struct conn *c)
{
	/* a draining connection in its grace is watched by whoever holds it */
	return (c->state == ST_HEAD || c->state == ST_BODY) && !c->draining && c->nq == 0;
}
