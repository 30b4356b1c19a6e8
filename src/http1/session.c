/* session.c - the HTTP/1.1 session: the sans-I/O connection state machine
 * behind conn.h. Bytes in, requests to the site handler, response values
 * out through the serializer.
 *
 * Requests are parsed one at a time, and a request's head stays in the input
 * buffer (the parsed spans point into it) until its response has been sent;
 * the buffer is compacted only then. Before writing, every complete request
 * already buffered is answered too: the earlier responses wait, parked, in a
 * small queue, and conn_output() hands them all out as one gathered write
 * (one small write per pipelined response would meet the client's delayed
 * ACK). Responses go out in request order and no received byte is dropped.
 *
 * It knows sessions and requests, never files: what a request is answered
 * with is the site's (site/site.h), as a value.
 *
 * It also owns every struct conn of HTTP/2: when a connection's first bytes
 * are the HTTP/2 preface, it hands the connection to an HTTP/2 session
 * (http2/session.h, where the file comment says why there) and forwards
 * every conn.h call to it from then on. */
#include "../conn.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../http/parse.h"
#include "../http2/session.h"
#include "../log/log.h"
#include "../overload.h"
#include "../pagebuf.h"
#include "../server.h"
#include "../site/site.h"
#include "../stats/stats.h"
#include "record.h"
#include "serialize.h"

enum conn_state {
	ST_HEAD,     /* waiting for (the rest of) a request head */
	ST_BODY,     /* discarding a request body before answering */
	ST_SEND,     /* sending a response */
	ST_SHUTDOWN, /* closing: half-close first */
	ST_LINGER,   /* closing: reading and dropping what the client still sends */
	ST_CLOSE,
};

/* Gathering pipelined responses, as h2o and lighttpd do. A response is
 * parked only when it is in memory (a file range goes out by sendfile, so a
 * gathered write stops there anyway), keeps the connection open and is
 * small; parking stops once the queue would fill a write. */
#define CONN_QUEUE_MAX 16              /* parked responses */
#define CONN_GATHER_BYTES (64 * 1024)  /* unsent bytes parked */
#define PARKED_SEGS 2                  /* a head and a body */

/* A response answered before the current one and waiting to be sent: the
 * whole h1_out, swapped out of the conn. Its record's spans stay valid
 * because the input buffer is never compacted while a response is parked
 * (the core wants WRITE until the queue is empty, and compacts only when it
 * reads). */
struct parked {
	struct h1_out *out;
	struct h1_record rec;
};

#define CONN_LINGER_MS 2000
#define CONN_DRAIN_GRACE_MS 1000 /* how long an idle connection may still send a request on stop */
#define CONN_MIN_INPUT PAGEBUF_SIZE

/* What a connection holds only while a request is in flight: the request,
 * its parser's and body's state, and room for its response (the h1_out,
 * its head buffer and segments are carved from the rest of the page: see
 * busy_alloc). One page from pagebuf.h, taken with the first byte of a
 * request and given back when the connection goes idle, so an idle
 * keep-alive connection holds only its struct conn. */
struct conn_busy {
	struct http_request req;
	struct http_parse_state parse; /* how far its head was parsed: each read scans only new bytes */
	struct http_chunked chunked;
	size_t used;             /* bytes of space[] carved so far */
	_Alignas(16) char space[];
};

struct conn {
	const struct server *srv;
	const struct config *cfg;
	enum conn_state state;

	/* input: unparsed bytes are in[start..end); pages from pagebuf.h, one
	 * unless a long head or a body's head outgrew it */
	char *in;
	size_t in_cap, in_start, in_end;
	size_t next_start;       /* where the request after the current one begins */

	/* the current request: b->req, and all else of it in b (NULL while idle) */
	struct conn_busy *b;
	size_t req_len;          /* bytes of its head, at in[start] */
	/* (the flags of this struct sit side by side: a hole of padding after
	 * each would cost every idle connection) */
	bool have_req;
	bool started;            /* a request was parsed: the preface can no longer come */
	bool h2_only;            /* ALPN chose h2: the preface or nothing */
	bool body_chunked;
	bool interim;            /* sending "100 Continue"; the body is read after it */
	bool tls;                /* conn_set_tls_site: a TLS connection */
	int16_t sni_site;        /* the site its SNI named (conn_set_tls_site), or -1 */
	const struct site *site; /* the site answering the current request (the default one until chosen) */
	uint64_t body_left;      /* Content-Length bytes still to discard */
	int64_t body_started;    /* when its discarding began: the body's deadline counts from here */

	/* the current response */
	bool keep_alive;         /* after this response */
	bool linger;             /* the client may still be sending: half-close, then drain */
	struct h1_out *out;      /* allocated per busy period, as its buffers (conn_out_buffers) */
	size_t seg_max;          /* segments a response may need: a head and a multipart body */

	/* responses answered before the current one and not yet sent: q[q_first
	 * .. q_first + nq), oldest first (allocated with the first one parked) */
	struct parked *q;
	size_t q_first, nq;

	/* deadlines (monotonic ms) */
	int64_t head_started;    /* first byte of the current request head, or accept time */
	int64_t last_progress;
	bool draining;
	bool idle;               /* waiting between requests with nothing buffered */
	int64_t drain_started;

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

	/* The client's address: an inet one whole, another family by its name
	 * only (nothing reads more of it); a sockaddr_storage would add 100
	 * bytes to every idle connection. */
	union {
		struct sockaddr sa;
		struct sockaddr_in in4;
		struct sockaddr_in6 in6;
	} peer_addr;
	char peer[INET6_ADDRSTRLEN];

	struct h2_session *h2;   /* non-NULL: the connection speaks HTTP/2, every call goes there */
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
	c->sni_site = -1;
	c->site = server_default_site(srv);
	c->seg_max = 2 * c->cfg->max_ranges + 3;
	/* buffers come with the first bytes (conn_input_space, conn_out_buffers) */
	c->head_started = c->last_progress = conn_now_ms();
	conn_set_peer(c, peer, peerlen);
	return c;
}

void conn_set_tls_site(struct conn *c, int site)
{
	c->tls = true;
	c->sni_site = (int16_t)(site >= 0 && (size_t)site < c->srv->sites.n ? site : -1);
}

void conn_set_peer(struct conn *c, const struct sockaddr *peer, socklen_t peerlen)
{
	strcpy(c->peer, "-");
	memset(&c->peer_addr, 0, sizeof(c->peer_addr));
	if (peer && peerlen <= sizeof(c->peer_addr))
		memcpy(&c->peer_addr, peer, peerlen);
	else if (peer && peerlen >= sizeof(sa_family_t))
		c->peer_addr.sa.sa_family = peer->sa_family;
	if (peer && peer->sa_family == AF_INET && peerlen >= sizeof(struct sockaddr_in))
		inet_ntop(AF_INET, &((const struct sockaddr_in *)peer)->sin_addr, c->peer, sizeof(c->peer));
	else if (peer && peer->sa_family == AF_INET6 && peerlen >= sizeof(struct sockaddr_in6))
		inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)peer)->sin6_addr, c->peer, sizeof(c->peer));
	else if (peer && peer->sa_family == AF_UNIX)
		strcpy(c->peer, "unix:"); /* a client's socket is unnamed; the log says which family */
}

void conn_set_h2_only(struct conn *c)
{
	c->h2_only = c->cfg->http2;
}

/* After a response with a big head (multipart, long redirect), give the memory back. */
static void hdr_shrink(struct h1_out *o)
{
	if (o->hdr_cap > 1024) {
		char *h = realloc(o->hdr, 1024);
		if (h) {
			o->hdr = h;
			o->hdr_cap = 1024;
		}
	}
}

/* n bytes for the current busy period: from the busy page while it has
 * room (most responses need one h1_out, its head buffer and its segments,
 * and they fit), else from the heap. Freed with busy_free, or all at once
 * with the page. */
static void *busy_alloc(struct conn *c, size_t n)
{
	struct conn_busy *b = c->b;
	size_t room = PAGEBUF_SIZE - offsetof(struct conn_busy, space);
	n = (n + 15) & ~(size_t)15;
	if (b && n <= room - b->used) {
		void *p = b->space + b->used;
		b->used += n;
		return p;
	}
	return malloc(n);
}

static bool busy_owns(const struct conn *c, const void *p)
{
	const char *page = (const char *)c->b;
	return page && (const char *)p >= page && (const char *)p < page + PAGEBUF_SIZE;
}

static void busy_free(struct conn *c, void *p)
{
	if (!busy_owns(c, p))
		free(p);
}

static void out_free(struct conn *c, struct h1_out *o)
{
	if (!o)
		return;
	h1_out_reset(o);
	if (!o->hdr_fixed)
		free(o->hdr);
	busy_free(c, o->segs);
	busy_free(c, o);
}

/* Frees the queue, with any response still parked in it (the connection is
 * closing, or idle with an empty queue). */
static void queue_free(struct conn *c)
{
	if (!c->q)
		return;
	for (size_t i = 0; i < CONN_QUEUE_MAX; i++)
		out_free(c, c->q[i].out);
	busy_free(c, c->q);
	c->q = NULL;
	c->q_first = c->nq = 0;
}

static void in_free(struct conn *c)
{
	pagebuf_free(c->in, c->in_cap);
	c->in = NULL;
	c->in_cap = 0;
}

/* Grows (or moves) the input buffer to cap bytes, keeping in[0..in_end). */
static bool in_grow(struct conn *c, size_t cap)
{
	char *p = pagebuf_resize(c->in, c->in_cap, cap);
	if (!p)
		return false;
	c->in = p;
	c->in_cap = cap;
	return true;
}

/* Everything of the busy period: the response, the queue, the request. */
static void busy_end(struct conn *c)
{
	out_free(c, c->out);
	c->out = NULL;
	queue_free(c);
	pagebuf_put(c->b);
	c->b = NULL;
	c->have_req = false;
}

void conn_free(struct conn *c)
{
	if (!c)
		return;
	stats_conn_closed(); /* stats */
	h2_session_free(c->h2);
	busy_end(c);
	in_free(c);
	free(c);
}

/* The response and the buffers it is built in; allocated per busy period,
 * so an idle keep-alive connection holds only its struct (see
 * conn_release_idle). */
static bool conn_out_buffers(struct conn *c)
{
	if (!c->b) {
		c->b = pagebuf_get();
		if (!c->b)
			return false;
		memset(c->b, 0, sizeof(*c->b));
	}
	if (!c->out) {
		c->out = busy_alloc(c, sizeof(*c->out));
		if (!c->out)
			return false;
		*c->out = (struct h1_out){ .hdr = NULL };
		response_init(&c->out->resp);
	}
	struct h1_out *o = c->out;
	if (!o->segs) {
		o->segs = busy_alloc(c, c->seg_max * sizeof(*o->segs));
		if (o->segs)
			memset(o->segs, 0, c->seg_max * sizeof(*o->segs));
		o->seg_max = o->segs ? c->seg_max : 0;
	}
	if (!o->hdr) {
		o->hdr = busy_alloc(c, 1024);
		o->hdr_cap = o->hdr ? 1024 : 0;
		o->hdr_fixed = busy_owns(c, o->hdr);
	}
	return o->segs && o->hdr;
}

bool conn_release_idle(struct conn *c)
{
	if (c->h2)
		return h2_release_idle(c->h2);
	if (c->state != ST_HEAD || c->in_start != c->in_end || c->nq > 0)
		return false;
	bool held = c->in || c->b || c->out || c->q;
	busy_end(c);
	in_free(c);
	c->in_start = c->in_end = c->next_start = 0;
	return held;
}

/* ---- answering ----------------------------------------------------- */

static bool is_head(const struct conn *c)
{
	return c->have_req && c->b->req.method == HTTP_HEAD;
}

/* The value in c->out->resp is complete: serialize it and send. */
static void answer(struct conn *c)
{
	struct response *r = &c->out->resp;
	if (r->close || r->linger || c->draining)
		c->keep_alive = false;
	c->linger = r->linger;
	struct h1_framing f = {
		.server_header = c->srv->server_header,
		.head_request = is_head(c),
		.keep_alive = c->keep_alive,
		.say_keep_alive = c->have_req && c->b->req.version_minor == 0,
	};
	int err = h1_serialize(c->out, &f);
	if (err < 0) {
		/* the built-in 500's head fits any head buffer: this one goes */
		log_error("a %d response cannot be sent (%s): answering 500", r->status, strerror(-err));
		site_error(c->site, 500, r);
		c->keep_alive = f.keep_alive = false;
		c->linger = true;
		h1_serialize(c->out, &f);
	}
	c->state = ST_SEND;
	c->last_progress = conn_now_ms();
}

/* An error the session itself answers (framing, limits, timeouts), with the
 * site's page for it; close_after: framing is in doubt, close and drain. */
static void answer_error(struct conn *c, int status, bool close_after)
{
	if (c->have_req) /* the page of the site it was for; a refusal of its own is moot */
		(void)site_choose(&c->srv->sites, &c->b->req, c->tls, c->sni_site, &c->site);
	else
		c->site = server_default_site(c->srv); /* no Host to choose one by */
	site_error(c->site, status, &c->out->resp);
	c->out->resp.linger = close_after;
	answer(c);
}

static void respond_request(struct conn *c)
{
	c->keep_alive = c->b->req.keep_alive && !c->draining;
	c->linger = false;
	c->last_progress = conn_now_ms();
	h1_out_reset(c->out);
	struct sockaddr_storage peer = { .ss_family = AF_UNSPEC };
	memcpy(&peer, &c->peer_addr, sizeof(c->peer_addr));
	int refused = site_choose(&c->srv->sites, &c->b->req, c->tls, c->sni_site, &c->site);
	c->b->req.shed = !refused && overload_should_shed(c->req_pickup_ns - c->req_ready_ns);
	c->b->req.tls = c->tls;
	if (refused)
		site_error(c->site, refused, &c->out->resp);
	else
		site_respond(c->site, &c->b->req, &peer, &c->out->resp);
	answer(c);
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
		enum http_chunked_result res = http_chunked_skip(&c->b->chunked, c->in + pos, avail, &used);
		if (res == HTTP_CHUNKED_ERROR) {
			answer_error(c, 400, true);
			return;
		}
		if (c->b->chunked.total > c->cfg->max_body) {
			answer_error(c, 413, true);
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

/* An interim response in the segment list; the final one follows the body. */
static void send_continue(struct conn *c)
{
	static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
	struct h1_out *o = c->out;
	o->nsegs = o->seg_cur = o->seg_off = 0;
	o->sent = 0;
	o->segs[o->nsegs++] = (struct h1_seg){ cont, 0, sizeof(cont) - 1 };
	c->interim = true;
	c->state = ST_SEND;
	c->last_progress = conn_now_ms();
}

/* A request head is complete (r > 0 bytes) or refused (r < 0): decide
 * between answering now, 100 Continue, and reading its body first. */
static void start_request(struct conn *c, int r)
{
	if (r < 0) {
		c->have_req = false;
		c->next_start = c->in_end; /* framing is lost: nothing after this can be trusted */
		answer_error(c, -r, true);
		return;
	}
	c->have_req = true;
	c->started = true;
	c->req_len = (size_t)r;
	c->next_start = c->in_start + (size_t)r;
	c->keep_alive = c->b->req.keep_alive && !c->draining;
	bool has_body = c->b->req.chunked || (c->b->req.has_content_length && c->b->req.content_length > 0);
	enum http_expectation ex = http_expectation(&c->b->req);
	if (ex == HTTP_EXPECT_UNKNOWN) {
		/* RFC 9110 10.1.1: 417. A body announced with it may or may
		 * not follow, so framing is in doubt: close after. */
		answer_error(c, 417, has_body);
		return;
	}
	if (!has_body) {
		respond_request(c);
		return;
	}
	if (c->b->req.has_content_length && c->b->req.content_length > c->cfg->max_body) {
		answer_error(c, 413, true);
		return;
	}
	c->body_chunked = c->b->req.chunked;
	c->body_left = c->b->req.content_length;
	memset(&c->b->chunked, 0, sizeof(c->b->chunked));
	c->body_started = c->last_progress = conn_now_ms();
	if (ex == HTTP_EXPECT_CONTINUE && c->in_end == c->next_start) {
		/* The client waits for us before sending the body: the final
		 * status at once when the site refuses it whatever it holds
		 * (RFC 9110 10.1.1); the client may send the body anyway, so
		 * close after. */
		int refused = site_choose(&c->srv->sites, &c->b->req, c->tls, c->sni_site, &c->site);
		if (refused)
			site_error(c->site, refused, &c->out->resp);
		if (refused || site_refuse(c->site, &c->b->req, &c->out->resp)) {
			c->out->resp.linger = true;
			answer(c);
			return;
		}
		send_continue(c);
		return;
	}
	consume_body(c);
}

/* The connection's first bytes may be HTTP/2's preface (RFC 9113 3.4: by
 * prior knowledge, or after ALPN "h2"): then an HTTP/2 session takes the
 * connection over with the bytes buffered, and this session's buffers go.
 * A connection that is HTTP/2 or nothing (conn_set_h2_only) is handed over
 * with any other bytes too: they are a connection error, which the HTTP/2
 * session answers (its SETTINGS, then GOAWAY with PROTOCOL_ERROR) before it
 * closes. This runs only in conn_input_done(), with the receive complete,
 * so no receive is in flight into the buffer freed here. True when the
 * caller must not parse: handed over, or the bytes so far are the
 * preface's beginning (its first 18 bytes alone would parse as an
 * HTTP/1.1 head). */
static bool h2_handover(struct conn *c)
{
	if (!c->cfg->http2 || c->started)
		return false;
	int m = h2_preface(c->in + c->in_start, c->in_end - c->in_start);
	if (m < 0 && !c->h2_only) {
		c->started = true;
		return false;
	}
	if (m == 0)
		return true; /* more bytes decide, within header_timeout */
	struct h2_session *s = h2_session_new(c->srv, c->peer, &c->peer_addr.sa, sizeof(c->peer_addr));
	if (!s) {
		log_error("out of memory for an HTTP/2 session");
		c->state = ST_CLOSE;
		return true;
	}
	h2_session_set_tls_site(s, c->tls, c->sni_site);
	c->h2 = s;
	c->req_pickup_ns = c->req_ready_ns = 0;
	h2_session_start(s, c->in + c->in_start, c->in_end - c->in_start, c->read_ready_ns);
	if (c->draining)
		h2_drain(s);
	busy_end(c);
	in_free(c);
	c->in_start = c->in_end = c->next_start = 0;
	return true;
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
	if (h2_handover(c))
		return;
	int r = http_parse_request_resume(c->in + c->in_start, c->in_end - c->in_start, &c->srv->limits,
					  &c->b->req, &c->b->parse);
	if (r == 0)
		return;
	c->stats_t0 = now ? now : stats_clock_ns(); /* stats: latency runs from here to the response's last byte */
	start_request(c, r);
}

/* The head of a request whose body is being discarded filled the buffer:
 * move it to the front (or grow the buffer) and parse it again, so its spans
 * point at the new place. */
static void make_body_room(struct conn *c)
{
	size_t keep = c->next_start - c->in_start; /* the head; discarded body bytes are gone */
	if (c->in_start > 0) {
		memmove(c->in, c->in + c->in_start, keep);
	} else if (!in_grow(c, c->in_cap + CONN_MIN_INPUT)) {
		return;
	}
	c->in_start = 0;
	c->next_start = c->in_end = keep;
	http_parse_request(c->in, c->req_len, &c->srv->limits, &c->b->req);
}

struct iovec conn_input_space(struct conn *c)
{
	if (c->h2)
		return h2_input_space(c->h2);
	if (!c->in) {
		c->in = pagebuf_get();
		/* without it, an empty span: the driver reads nothing, and closes */
		c->in_cap = !c->in ? 0 : c->cfg->max_head < CONN_MIN_INPUT ? c->cfg->max_head : CONN_MIN_INPUT;
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
			(void)in_grow(c, cap);
		}
	}
	return (struct iovec){ c->in + c->in_end, c->in_cap - c->in_end };
}

void conn_readable(struct conn *c, int64_t ns)
{
	if (c->h2) {
		h2_readable(c->h2, ns);
		return;
	}
	c->readable_ns = ns;
}

void conn_input_done(struct conn *c, ssize_t n)
{
	int64_t now = 0;

	if (c->h2) {
		h2_input_done(c->h2, n);
		return;
	}
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

/* The current response's record, taken while its request is still parsed. */
static struct h1_record record_of(const struct conn *c)
{
	struct h1_record rec = {
		.status = c->out->resp.status,
		.method = STATS_OTHER,
		.head_len = c->out->head_len,
		.stats_t0 = c->stats_t0,
		.ready_ns = c->req_ready_ns,
		.pickup_ns = c->req_pickup_ns,
		.first_ns = c->first_byte_ns,
		.site = c->site->log_name,
		.site_stats = c->site->stats_index + 1,
		.shed = c->out->resp.shed,
	};
	if (c->have_req) {
		rec.method = c->b->req.method == HTTP_GET ? STATS_GET : c->b->req.method == HTTP_HEAD ? STATS_HEAD : STATS_OTHER;
		rec.request_line = c->b->req.request_line;
		rec.referer = c->b->req.referer;
		rec.user_agent = c->b->req.user_agent;
	} else {
		/* the first line of what the client sent, for the access log of a
		 * request that could not be parsed */
		const char *p = c->in + c->in_start;
		size_t n = c->in_end - c->in_start, i = 0;
		while (i < n && i < 256 && p[i] != '\r' && p[i] != '\n')
			i++;
		rec.request_line = (struct span){ p, i };
	}
	return rec;
}

static void account(struct conn *c, const struct h1_record *rec, uint64_t sent, int64_t now)
{
	h1_record_account(rec, c->peer, sent, now, c->nreq++ > 0);
}

/* Bytes and segments parked and not yet sent. */
static void queue_unsent(const struct conn *c, size_t *bytes, size_t *segs)
{
	*bytes = *segs = 0;
	for (size_t i = c->q_first; i < c->q_first + c->nq; i++) {
		const struct h1_out *p = c->q[i].out;
		for (size_t k = p->seg_cur; k < p->nsegs; k++) {
			*bytes += p->segs[k].len - (k == p->seg_cur ? p->seg_off : 0);
			(*segs)++;
		}
	}
}

/* May the current response wait in the queue while the next one is built? */
static bool response_parkable(struct conn *c)
{
	const struct h1_out *o = c->out; /* set while ST_SEND */
	if (c->state != ST_SEND || c->interim || !c->keep_alive || o->resp.body.kind == RESPONSE_BODY_FILE ||
	    o->nsegs - o->seg_cur > PARKED_SEGS || c->q_first + c->nq == CONN_QUEUE_MAX)
		return false;
	size_t bytes, segs;
	queue_unsent(c, &bytes, &segs);
	for (size_t k = o->seg_cur; k < o->nsegs; k++)
		bytes += o->segs[k].len - (k == o->seg_cur ? o->seg_off : 0);
	segs += o->nsegs - o->seg_cur;
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

/* Moves the current response into the queue: its h1_out trades places
 * with a free slot's (none yet: conn_out_buffers makes one), in which the
 * next response is then built. */
static void response_park(struct conn *c)
{
	struct parked *p = &c->q[c->q_first + c->nq++];
	p->rec = record_of(c);
	struct h1_out *free_slot = p->out;
	p->out = c->out;
	c->out = free_slot;
	c->stats_t0 = 0;
	c->req_pickup_ns = c->first_byte_ns = 0;
}

/* The connection stays open: on to the next request, which may already be
 * buffered (pipelining). */
static void next_request(struct conn *c)
{
	c->have_req = false;
	memset(&c->b->parse, 0, sizeof(c->b->parse)); /* a new head: the parser starts afresh */
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
	/* the cheap test first: parkable allocates the queue, which a client
	 * that does not pipeline never needs */
	while (next_request_buffered(c) && response_parkable(c)) {
		response_park(c);
		next_request(c);
	}
}

/* Appends o's unsent segments to out; false when out is full: the iovecs
 * are used up, or a file range comes (sendfile). */
static bool gather(struct conn_output *out, const struct h1_out *o)
{
	for (size_t i = o->seg_cur; i < o->nsegs; i++) {
		const struct h1_seg *s = &o->segs[i];
		size_t skip = i == o->seg_cur ? o->seg_off : 0;
		const char *p = s->p ? s->p + skip : response_body_bytes(&o->resp, s->off + skip);
		if (!p) {
			if (out->iovcnt == 0) {
				out->file_fd = o->resp.body.fd;
				out->file_off = (off_t)(s->off + skip);
				out->file_len = s->len - skip;
				out->total = out->file_len;
			} else {
				out->more = true; /* the head, then the file: one packet, not two */
			}
			return false;
		}
		if (out->iovcnt == CONN_IOV_MAX)
			return false;
		out->iov[out->iovcnt].iov_base = (void *)p;
		out->iov[out->iovcnt].iov_len = s->len - skip;
		out->total += s->len - skip;
		out->iovcnt++;
	}
	return true;
}

void conn_output(struct conn *c, struct conn_output *out)
{
	if (c->h2) {
		h2_output(c->h2, out);
		return;
	}
	answer_buffered(c);
	out->iovcnt = 0;
	out->file_fd = -1;
	out->file_len = 0;
	out->total = 0;
	out->more = false;
	for (size_t i = c->q_first; i < c->q_first + c->nq; i++)
		if (!gather(out, c->q[i].out))
			return;
	if (c->state == ST_SEND)
		gather(out, c->out);
}

static void finish_response(struct conn *c, int64_t now)
{
	struct h1_record rec = record_of(c);
	account(c, &rec, c->out->sent, now);
	c->stats_t0 = 0;
	c->req_pickup_ns = c->first_byte_ns = 0;
	h1_out_reset(c->out);
	hdr_shrink(c->out);
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
	c->out->nsegs = c->out->seg_cur = c->out->seg_off = 0;
	c->out->sent = c->out->head_len = 0;
	c->state = ST_BODY;
	c->body_started = c->last_progress = conn_now_ms();
}

/* Moves a segment cursor over up to n sent bytes, counting them in o->sent;
 * returns what is left of n after the last segment. */
static size_t segs_advance(struct h1_out *o, size_t n)
{
	while (n > 0 && o->seg_cur < o->nsegs) {
		size_t left = o->segs[o->seg_cur].len - o->seg_off;
		size_t take = n < left ? n : left;
		o->sent += take;
		n -= take;
		if (take < left) {
			o->seg_off += take;
			break;
		}
		o->seg_cur++;
		o->seg_off = 0;
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
	if (c->h2) /* HTTP/2 stamps a response's bytes as it gathers them */
		return;
	c->writing_ns = ns;
}

void conn_output_done(struct conn *c, size_t n)
{
	if (c->h2) {
		h2_output_done(c->h2, n);
		return;
	}
	int64_t now = c->writing_ns; /* 0: clock_once reads the clock */

	c->writing_ns = 0;

	c->last_progress = conn_now_ms();
	/* one write may end several responses: each is finished, in order */
	while (c->nq > 0) {
		struct parked *p = &c->q[c->q_first];
		if (p->out->sent == 0 && n > 0 && !p->rec.first_ns)
			p->rec.first_ns = clock_once(&now);
		n = segs_advance(p->out, n);
		if (p->out->seg_cur < p->out->nsegs)
			return;
		account(c, &p->rec, p->out->sent, clock_once(&now));
		h1_out_reset(p->out);
		if (p->out->hdr_cap > 1024 && !p->out->hdr_fixed) { /* like hdr_shrink: a big head's buffer is not kept */
			free(p->out->hdr);
			p->out->hdr = NULL;
			p->out->hdr_cap = 0;
		}
		c->q_first++;
		if (--c->nq == 0)
			c->q_first = 0;
	}
	if (c->state != ST_SEND)
		return; /* only parked responses were out: now the core reads */
	struct h1_out *o = c->out;
	if (o->sent == 0 && n > 0 && !c->interim && !c->first_byte_ns)
		c->first_byte_ns = clock_once(&now);
	segs_advance(o, n);
	if (o->seg_cur < o->nsegs && !o->segs[o->seg_cur].p) /* a listing may give back what is sent */
		response_body_sent(&o->resp, o->segs[o->seg_cur].off + o->seg_off);
	if (o->seg_cur == o->nsegs) {
		if (c->interim)
			finish_interim(c);
		else
			finish_response(c, clock_once(&now));
	}
}

void conn_output_failed(struct conn *c)
{
	if (c->h2) {
		h2_output_failed(c->h2);
		return;
	}
	stats_send_failed(); /* stats */
	c->state = ST_CLOSE;
}

void conn_shutdown_done(struct conn *c)
{
	if (c->h2) {
		h2_shutdown_done(c->h2);
		return;
	}
	c->state = ST_LINGER;
	c->last_progress = conn_now_ms();
}

enum conn_want conn_wants(const struct conn *c, int64_t *deadline_ms)
{
	const struct config *cfg = c->cfg;

	if (c->h2)
		return h2_wants(c->h2, deadline_ms);
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
	if (c->h2) {
		h2_timeout(c->h2);
		return;
	}
	if (c->state != ST_LINGER)
		stats_timeout(); /* stats: the end of a linger is routine, not a timeout */
	if (c->nq > 0) { /* the client does not take the parked responses */
		c->state = ST_CLOSE;
		return;
	}
	if (c->h2_only) { /* a preface begun, not ended: no HTTP/1.1 answer to it */
		c->state = ST_CLOSE;
		return;
	}
	if ((c->state == ST_HEAD && c->in_start != c->in_end) || c->state == ST_BODY) {
		/* part of a request (its head, or its body) arrived, too slowly:
		 * say so, then close; framing is lost, so nothing after it counts */
		if (c->state == ST_HEAD)
			c->have_req = false;
		c->stats_t0 = stats_clock_ns(); /* stats */
		answer_error(c, 408, true);
		c->next_start = c->in_end;
		return;
	}
	c->state = ST_CLOSE;
}

void conn_drain(struct conn *c)
{
	if (c->h2) {
		h2_drain(c->h2);
		return;
	}
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
	if (c->h2)
		return h2_awaits_request(c->h2);
	/* a draining connection in its grace is watched by whoever holds it */
	return (c->state == ST_HEAD || c->state == ST_BODY) && !c->draining && c->nq == 0;
}
