/* session.c - the HTTP/2 session: nghttp2 over buffers (bytes in through
 * nghttp2_session_mem_recv, bytes out through nghttp2_session_mem_send),
 * each stream's request handed to the same site_respond() as HTTP/1.1's,
 * its response value submitted as HEADERS and a DATA provider.
 *
 * Why the HTTP/1.1 session hands the connection over rather than a dispatch
 * in front of two sessions: conn.h's contract stays exactly as every driver
 * knows it. The handover happens inside conn_input_done(), once the receive
 * that brought the preface has completed, so a completion-based driver
 * (uring) never has a receive in flight into the buffer that is dropped;
 * conn_drain() and conn_timeout() never move or free this session's input
 * buffer either, and conn_release_idle() frees it only with no stream open.
 * The TLS wire is unchanged: ALPN "h2" only makes the client send the
 * preface, which is then seen as on a plain listener.
 *
 * A request is not parsed again by new code: its pseudo-header and header
 * fields become an HTTP/1.1 head in the stream's own buffer (":authority"
 * as Host), which the HTTP/1.1 parser reads into a struct http_request, so
 * both protocols obey one set of rules and limits (431, 400, 501...). The
 * fields cannot smuggle anything: nghttp2 has refused names and values with
 * CR, LF or NUL, and connection-specific fields, before they get here.
 *
 * Streams are served in the connection's thread of control, in the order
 * their requests complete: the site's work for a static file is a few
 * microseconds, and handing streams to other threads would add locking to
 * the session for no gain a static server could measure. Their responses'
 * DATA frames are interleaved by nghttp2 as the client's windows allow.
 *
 * Output is gathered: frames from nghttp2 are copied into one buffer of up
 * to H2_OUT_GATHER bytes, handed to the driver as one write; DATA payloads
 * are read (pread, or copied from memory) straight into it, never into
 * nghttp2's frame buffer first. The buffer is refilled only when empty, so
 * the memory conn_output() described never moves while a send may be in
 * flight. Both buffers are pagebuf's, not the heap's: what a burst of
 * connections frees when it goes idle (h2_release_idle) goes back to the
 * kernel instead of staying resident under the sessions that outlive it.
 *
 * A hostile peer meets these limits, each ending the connection with
 * GOAWAY and one warning in the error log (at most one a second):
 * - nghttp2 (Debian's 1.52 has the backports) answers a RST_STREAM flood
 *   (Rapid Reset: a bucket of 1000, 33 a second, GOAWAY INTERNAL_ERROR),
 *   more than 8 CONTINUATION frames, more than 32 entries in a SETTINGS
 *   frame (ENHANCE_YOUR_CALM), more than 1000 SETTINGS and PING
 *   acknowledgements queued, streams beyond SETTINGS_MAX_CONCURRENT_STREAMS
 *   (REFUSED_STREAM) and an HPACK table larger than the 4096 bytes we allow.
 * - New streams per read: at most H2_STREAMS_PER_READ, as nginx (twice the
 *   concurrent streams): a read packed with streams opened and reset costs
 *   a site answer each (ENHANCE_YOUR_CALM). How many a read holds depends
 *   on the driver (uring's reads are 2 KB), hence also:
 * - Streams reset, by the client (Rapid Reset) or by us for its faults
 *   (MadeYouReset: a malformed message, a frame its state forbids): one
 *   bucket of H2_RESET_BURST, H2_RESET_RATE a second, tighter than
 *   nghttp2's (1000, 33 a second, GOAWAY INTERNAL_ERROR), which counts only
 *   the client's; a browser cancels at most a page's streams at once.
 * - Frames that ask nothing (empty DATA, WINDOW_UPDATE, PING, SETTINGS,
 *   PRIORITY): H2_IDLE_FRAMES in a row with no stream opened, no request
 *   byte and no response byte between them.
 * - Memory: what a connection holds for its peer (its streams, their
 *   request heads as they arrive, everything nghttp2 allocates, HPACK
 *   tables and queued frames included, and the input and output buffers)
 *   is counted against a budget (H2_BUDGET, or 64 heads of max_head if
 *   more): 128 streams each holding a head near max_head would otherwise
 *   hold 4 MB per connection until header_timeout. Past the budget no new
 *   stream is taken (GOAWAY ENHANCE_YOUR_CALM); past twice it nghttp2's
 *   allocations fail and the connection is closed.
 * Output floods (PING or SETTINGS acknowledgements to a peer that does not
 * read) cannot pile up: the session does not read while its output waits,
 * and send_timeout cuts a peer that takes nothing. */
#include "session.h"

#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <unistd.h>

#include <nghttp2/nghttp2.h>

#include "../config.h"
#include "../http/date.h"
#include "../http/parse.h"
#include "../http1/record.h"
#include "../log/log.h"
#include "../overload.h"
#include "../outbuf.h"
#include "../pagebuf.h"
#include "../server.h"
#include "../site/site.h"
#include "../stats/stats.h"

#define H2_IN_SIZE (16 * 1024)      /* one receive */
#define H2_OUT_GATHER (64 * 1024)   /* bytes of frames gathered into one write */
/* A DATA frame at least this long whose bytes are a file's goes out by
 * sendfile on a plain connection: its header ends the gathered write (sent
 * with MSG_MORE), the file's bytes follow from the page cache, never copied
 * into the buffer; shorter ones are cheaper copied than a system call each. */
#define H2_SENDFILE_MIN (4 * 1024)
/* A response's fields as nghttp2 takes them, on the stack up to these */
#define H2_NV_STACK 32
#define H2_ARENA_STACK 2048
#define H2_MAX_STREAMS 128          /* SETTINGS_MAX_CONCURRENT_STREAMS, as nginx */
/* SETTINGS_INITIAL_WINDOW_SIZE: what a client may send on a stream before
 * a WINDOW_UPDATE. Request bodies are only discarded here; a window of
 * max_body's default lets one arrive without waiting on round trips. How
 * fast a download goes is the client's window, not this one. */
#define H2_WINDOW (1 << 20)
#define H2_LINGER_MS 2000
/* A graceful stop first announces itself (GOAWAY naming stream 2^31-1: no
 * new requests, please) and names the last stream taken only this much
 * later, so requests already on their way are served, not refused (RFC 9113
 * 6.8; h2o waits a second too). At most half the drain time. */
#define H2_GOAWAY_NOTICE_MS 1000
#define H2_STREAMS_PER_READ (2 * H2_MAX_STREAMS)
#define H2_IDLE_FRAMES 1000
#define H2_RESET_BURST (2 * H2_MAX_STREAMS) /* a page's streams cancelled, twice */
#define H2_RESET_RATE H2_MAX_STREAMS        /* tokens a second */
#define H2_BUDGET (1024 * 1024)
/* HPACK's encoder table. A response's constant fields (server, type,
 * last-modified, accept-ranges, the second's date) go as table indexes
 * instead of literals, which nghttp2 Huffman-codes afresh for every
 * response: the largest part of its cost for a small file. The table is a
 * per-connection memory, so a connection earns it: its first
 * H2_INDEX_AFTER responses index nothing, as nginx's never do, and an idle
 * connection that asked that little holds no entry. 512 bytes hold one
 * file's constant fields and a few seconds' dates; 4,096 saved no more CPU
 * and would hold eight times the entries. */
#ifndef H2_ENCODER_TABLE
#define H2_ENCODER_TABLE 512
#endif
#ifndef H2_INDEX_AFTER
#define H2_INDEX_AFTER 16
#endif
/* A stream is one of pagebuf's pages, not a heap block: what a burst of
 * streams frees does not stay resident under the sessions that outlive it.
 * The page's room beyond the stream's state holds a request of usual size
 * (a browser's, cookies included), so that it costs no allocation: its
 * pseudo-header values, its fields as HTTP/1.1 lines, then its request line
 * and head. A larger request takes the heap for what does not fit. */
#define H2_PSEUDO_INLINE 256
#define H2_FIELDS_INLINE 1024
#define H2_HEAD_INLINE 1280
/* Streams a busy session keeps for its next ones instead of giving them
 * back (a client's usual burst, and then some): a page each, given back when
 * the connection goes idle (h2_release_idle). */
#define H2_SPARE_STREAMS 16
/* What a stream is charged against the budget for itself: its state, as when
 * it was a heap block of that size. Its room is charged as it is used, as the
 * heap blocks it stands for were, so a client's request weighs what it did;
 * the room left unused (a page less the state, at most H2_MAX_STREAMS of
 * them, 0.4 MiB a connection) and the spares (H2_SPARE_STREAMS pages) are
 * the memory the budget leaves out, bounded by those counts. */
#define H2_STREAM_STATE offsetof(struct h2_stream, pseudo_inl)

/* nghttp2 1.60 renamed the buffer calls and the data provider (the old
 * ones are deprecated there); Debian 12 has 1.52. */
#if NGHTTP2_VERSION_NUM >= 0x013c00
typedef nghttp2_ssize h2_ssize;
typedef nghttp2_data_provider2 h2_data_provider;
#define h2_mem_recv nghttp2_session_mem_recv2
#define h2_mem_send nghttp2_session_mem_send2
#define h2_submit_response nghttp2_submit_response2
#else
typedef ssize_t h2_ssize;
typedef nghttp2_data_provider h2_data_provider;
#define h2_mem_recv nghttp2_session_mem_recv
#define h2_mem_send nghttp2_session_mem_send
#define h2_submit_response nghttp2_submit_response
#endif

enum h2_state {
	H2_OPEN,
	H2_SHUTDOWN, /* the session is over: half-close, then linger */
	H2_LINGER,   /* reading and dropping what the client still sends */
	H2_CLOSE,
};

struct h2_stream {
	struct h2_stream *prev, *next;
	int32_t id;
	bool responded;        /* its response is submitted */
	bool too_big;          /* its fields outgrew max_head: 431 */
	bool early;            /* answered before the request's body ended (413) */
	int parsed;            /* http_parse_request() of head: > 0 parsed, < 0 a status */
	char *method, *path, *authority; /* pseudo-header fields */
	char *fields;          /* the regular fields as HTTP/1.1 lines */
	size_t fields_len, fields_cap;
	size_t pseudo_len;     /* bytes of the pseudo-header fields, held to max_head with the rest */
	size_t mem;            /* bytes this stream holds (the session's budget) */
	char *head;            /* the request as an HTTP/1.1 head: req's spans point here */
	char *line;            /* "METHOD PATH HTTP/2.0", for the access log */
	size_t line_len;
	struct http_request req;
	uint64_t body_in;      /* request body bytes received and dropped */
	size_t piece;          /* the body's send position: piece (or 0: the window) ... */
	uint64_t pos;          /* ... and offset in it */
	uint64_t left;         /* body bytes not yet announced in a DATA frame */
	uint64_t sent;         /* DATA payload bytes out */
	int64_t t0, ready_ns, first_ns;
	const struct site *site; /* the site that answered, once it did */
	size_t pseudo_used;    /* of pseudo_inl */
	/* From here on a stream taken again is not zeroed (stream_get): resp
	 * is made empty by response_init, the rest is room */
	struct response resp;
	char pseudo_inl[H2_PSEUDO_INLINE];
	char fields_inl[H2_FIELDS_INLINE];
	char head_inl[H2_HEAD_INLINE];
};
_Static_assert(sizeof(struct h2_stream) <= PAGEBUF_SIZE, "a stream is one page");

struct h2_session {
	nghttp2_session *ng;
	const struct server *srv;
	const struct config *cfg;
	enum h2_state state;
	bool draining;
	int64_t final_goaway_ms;  /* draining: when the GOAWAY naming the last stream goes; 0: none pending */
	char *in;                 /* H2_IN_SIZE, allocated while the connection is busy */
	char *out;                /* gathered frames: out[out_off .. out_len) */
	size_t out_off, out_len, out_cap;
	/* A DATA frame's payload sent from its file: it goes out between
	 * out[.. file_at) and out[file_at ..). One at a time: the frames that
	 * come after it in the same write are gathered behind it. */
	struct h2_stream *file_st; /* whose file (kept until it is out) */
	int file_fd;
	off_t file_off;
	size_t file_len, file_at;
	bool file_closed;         /* nghttp2 closed file_st meanwhile: free it once out */
	struct h2_stream *streams;
	struct h2_stream *spare;  /* streams kept for the next ones (H2_SPARE_STREAMS) */
	size_t nspare;
	size_t nstreams;          /* open streams we know */
	size_t waiting;           /* of them, without a response yet */
	int64_t busy_since;       /* when the oldest request still incomplete began (ms) */
	int64_t progress_ms;      /* last write progress, or response submitted */
	int64_t idle_since;       /* when the last stream closed (ms) */
	int64_t readable_ns, read_ready_ns;
	uint32_t nreq;
	uint32_t nsubmitted;      /* responses submitted (H2_INDEX_AFTER) */
	/* The client's frames as they pass (see scan_frames): where the next
	 * frame header starts, the one being read, the highest stream a HEADERS
	 * opened, and which of the 64 odd ids at or below it did. */
	size_t scan_skip;         /* bytes to pass over: the preface, a payload */
	unsigned char scan_hd[9];
	size_t scan_hd_len;
	uint32_t scan_max;
	uint64_t scan_seen;       /* bit i: stream scan_max - 2 i had HEADERS */
	uint64_t scan_closed;     /* ... is closed, and a DATA or HEADERS on it is an error */
	uint64_t scan_ours;       /* ... was reset by us */
	uint32_t scan_code;       /* the connection error scan_frames() found */
	bool refused;             /* a connection error was found: nothing more is read */
	bool fatal;               /* nghttp2 failed: out holds our own GOAWAY, then the end */
	size_t mem, budget;       /* bytes held for the peer, and the most it may hold */
	void *framebuf;           /* nghttp2's frame buffer (mem_malloc), page-aligned */
	size_t framebuf_len;
	bool creating;            /* inside nghttp2_session_server_new3() */
	bool framebuf_cold;       /* its pages are given back (h2_release_idle) */
	bool framebuf_sure;       /* it is the frame buffer indeed */
	void *table;              /* nghttp2's table of streams (mem_malloc), page-aligned */
	size_t table_len;
	unsigned new_streams;     /* streams opened by this read */
	unsigned idle_frames;     /* frames that asked nothing, in a row */
	uint64_t reset_tokens;    /* streams we may still reset for the peer's faults */
	int64_t reset_refill_ms;  /* when the bucket last gained a token */
	bool tls;                 /* h2_session_set_tls_site: over TLS */
	int sni_site;             /* the site the SNI named, or -1 */
	const char *peer;
	struct sockaddr_storage peer_addr;
};

static uint64_t scan_bit(const struct h2_session *s, int32_t id);

/* ---- the preface ---------------------------------------------------- */

int h2_preface(const char *buf, size_t len)
{
	size_t n = len < H2_PREFACE_LEN ? len : H2_PREFACE_LEN;
	if (memcmp(buf, H2_PREFACE, n) != 0)
		return -1;
	return n == H2_PREFACE_LEN ? 1 : 0;
}

size_t h2_refusal(char *buf, size_t cap)
{
	static const char debug[] = "server full; retry in a second";
	const size_t dlen = sizeof(debug) - 1, glen = 8 + dlen;
	const unsigned char head[] = {
		0, 0, 0, NGHTTP2_SETTINGS, 0, 0, 0, 0, 0,                   /* SETTINGS, empty */
		(unsigned char)(glen >> 16), (unsigned char)(glen >> 8), (unsigned char)glen,
		NGHTTP2_GOAWAY, 0, 0, 0, 0, 0,                              /* GOAWAY on stream 0 */
		0, 0, 0, 0,                                                 /* last stream: none */
		0, 0, 0, NGHTTP2_REFUSED_STREAM,
	};
	if (cap < sizeof(head) + dlen)
		return 0;
	memcpy(buf, head, sizeof(head));
	memcpy(buf + sizeof(head), debug, dlen);
	return sizeof(head) + dlen;
}

/* ---- limits --------------------------------------------------------- */

/* One warning a second at most per process: a flood of hostile peers must
 * not become a flood of log lines. */
static _Atomic int64_t h2_warned_ms;
static atomic_uint h2_unwarned;

static void h2_warn(const struct h2_session *s, const char *why)
{
	int64_t now = conn_now_ms(), last = atomic_load(&h2_warned_ms);
	if (now - last < 1000 || !atomic_compare_exchange_strong(&h2_warned_ms, &last, now)) {
		atomic_fetch_add(&h2_unwarned, 1);
		return;
	}
	unsigned more = atomic_exchange(&h2_unwarned, 0);
	if (more)
		log_warn("http2: %s: %s: closing (and %u more such in the last second)", s->peer, why, more);
	else
		log_warn("http2: %s: %s: closing", s->peer, why);
}

/* The peer broke a limit: GOAWAY with code, nothing more is read. */
static void h2_refuse(struct h2_session *s, uint32_t code, const char *why)
{
	if (s->refused)
		return;
	s->refused = true;
	h2_warn(s, why);
	nghttp2_session_terminate_session(s->ng, code);
}

static void mem_charge(struct h2_session *s, struct h2_stream *st, ptrdiff_t delta)
{
	s->mem += (size_t)delta;
	if (st)
		st->mem += (size_t)delta;
}

/* No new stream is taken past the budget. */
static bool over_budget(struct h2_session *s)
{
	if (s->mem <= s->budget)
		return false;
	h2_refuse(s, NGHTTP2_ENHANCE_YOUR_CALM, "memory budget spent");
	return true;
}

/* nghttp2's allocations, counted in the session's budget by the heap's
 * own record of their size (malloc_usable_size: a size kept before each
 * block cost 16 bytes a block, a few hundred an idle connection). Past
 * twice the budget they fail, and nghttp2 with them (the connection
 * closes).
 *
 * Two blocks are set apart, whole pages of their own (h2_pages_get). One
 * is the buffer nghttp2 writes each frame into before
 * nghttp2_session_mem_send() hands it over (16 KiB and a frame header, made
 * when the session is and kept for its life: the first block of at least
 * H2_FRAMEBUF_MIN bytes it allocates while the session is being created).
 * Its bytes are dead between frames, yet it is most of what an idle
 * connection costs, as the pages were touched by earlier frames or were
 * another buffer's: h2_release_idle() gives its pages back to the kernel.
 * The other is the first block of a page or more (and less than 16 KiB)
 * made then, nghttp2's table of streams: its pages go back while they hold
 * only zeros (release_zero_pages). */
#define H2_FRAMEBUF_MIN (16 * 1024)

static size_t h2_page;

/* The two blocks' whole pages: pagebuf's mappings where its page is the
 * kernel's. From the heap, page-aligned blocks leave up to a page of
 * padding before them, which later small blocks only partly fill: 1.6 KiB
 * a connection free inside the heap with 10,000 idle (malloc_stats). */
static size_t h2_pages_len(size_t n)
{
	return (n + h2_page - 1) / h2_page * h2_page;
}

static void *h2_pages_get(size_t n)
{
	size_t len = h2_pages_len(n);
	if (h2_page != PAGEBUF_SIZE) {
		void *b;
		return posix_memalign(&b, h2_page, len) == 0 ? b : NULL;
	}
	void *p = pagebuf_get();
	if (p && len > PAGEBUF_SIZE) {
		void *q = pagebuf_resize(p, PAGEBUF_SIZE, len);
		if (!q)
			pagebuf_put(p);
		p = q;
	}
	return p;
}

static void h2_pages_free(void *p, size_t n)
{
	if (h2_page != PAGEBUF_SIZE)
		free(p);
	else
		pagebuf_free(p, h2_pages_len(n));
}

static void *mem_malloc(size_t n, void *user)
{
	struct h2_session *s = user;
	if (s->mem + n > 2 * s->budget)
		return NULL;
	bool big = n >= H2_FRAMEBUF_MIN;
	if (s->creating && h2_page && n >= h2_page && !(big ? s->framebuf : s->table)) {
		void *b = h2_pages_get(n);
		if (!b)
			return NULL;
		*(big ? &s->framebuf : &s->table) = b;
		*(big ? &s->framebuf_len : &s->table_len) = n;
		s->mem += n;
		return b;
	}
	void *p = malloc(n);
	if (p)
		s->mem += malloc_usable_size(p);
	return p;
}

static void mem_free(void *ptr, void *user)
{
	struct h2_session *s = user;
	if (!ptr)
		return;
	if (ptr == s->framebuf || ptr == s->table) {
		bool fb = ptr == s->framebuf;
		s->mem -= fb ? s->framebuf_len : s->table_len;
		*(fb ? &s->framebuf : &s->table) = NULL;
		h2_pages_free(ptr, fb ? s->framebuf_len : s->table_len);
		return;
	}
	s->mem -= malloc_usable_size(ptr);
	free(ptr);
}

static void *mem_calloc(size_t nmemb, size_t size, void *user)
{
	if (size && nmemb > SIZE_MAX / 2 / size)
		return NULL;
	void *p = mem_malloc(nmemb * size, user);
	if (p)
		memset(p, 0, nmemb * size);
	return p;
}

static void *mem_realloc(void *ptr, size_t n, void *user)
{
	struct h2_session *s = user;
	if (!ptr)
		return mem_malloc(n, user);
	if (ptr == s->framebuf || ptr == s->table) { /* resized: an ordinary block from then on */
		size_t old = ptr == s->framebuf ? s->framebuf_len : s->table_len;
		void *q = mem_malloc(n, user);
		if (q) {
			memcpy(q, ptr, n < old ? n : old);
			mem_free(ptr, user);
		}
		return q;
	}
	size_t old = malloc_usable_size(ptr);
	if (n > old && s->mem + (n - old) > 2 * s->budget)
		return NULL;
	void *q = realloc(ptr, n);
	if (!q)
		return NULL;
	s->mem = s->mem - old + malloc_usable_size(q);
	return q;
}

/* A stream reset, by the client or by us for its fault, takes a token. */
static void reset_taken(struct h2_session *s)
{
	int64_t now = conn_now_ms();
	uint64_t gained = (uint64_t)((now - s->reset_refill_ms) * H2_RESET_RATE / 1000);
	if (gained > 0) {
		s->reset_tokens = s->reset_tokens + gained > H2_RESET_BURST ? H2_RESET_BURST : s->reset_tokens + gained;
		s->reset_refill_ms = now;
	}
	if (s->reset_tokens == 0) {
		h2_refuse(s, NGHTTP2_ENHANCE_YOUR_CALM, "too many streams reset");
		return;
	}
	s->reset_tokens--;
}

/* ---- streams -------------------------------------------------------- */

/* Whether p is one of st's inline buffers, not the heap's. */
static bool stream_inline(const struct h2_stream *st, const char *p)
{
	return p >= (const char *)st && p < (const char *)(st + 1);
}

static void stream_free_inner(struct h2_stream *st, char *p)
{
	if (!stream_inline(st, p))
		free(p);
}

/* What a stream holds is let go of; the stream is kept for the next one
 * (s->spare) or freed. */
static void stream_free(struct h2_session *s, struct h2_stream *st)
{
	response_release(&st->resp);
	stream_free_inner(st, st->method);
	stream_free_inner(st, st->path);
	stream_free_inner(st, st->authority);
	stream_free_inner(st, st->fields);
	stream_free_inner(st, st->line); /* st->head is in the same block */
	if (s && s->nspare < H2_SPARE_STREAMS) {
		st->next = s->spare;
		s->spare = st;
		s->nspare++;
		return;
	}
	pagebuf_put(st);
}

/* A stream as calloc would give it, its buffers aside. */
static struct h2_stream *stream_get(struct h2_session *s)
{
	struct h2_stream *st = s->spare;
	if (st) {
		s->spare = st->next;
		s->nspare--;
	} else if (!(st = pagebuf_get())) {
		return NULL;
	}
	memset(st, 0, offsetof(struct h2_stream, resp));
	response_init(&st->resp);
	return st;
}

static bool spare_release(struct h2_session *s)
{
	bool any = s->spare != NULL;
	while (s->spare) {
		struct h2_stream *st = s->spare;
		s->spare = st->next;
		pagebuf_put(st);
	}
	s->nspare = 0;
	return any;
}

/* A pseudo-header field's value, NUL-terminated, in st's room if it fits. */
static char *stream_strndup(struct h2_stream *st, const uint8_t *v, size_t n)
{
	if (n < H2_PSEUDO_INLINE - st->pseudo_used) {
		char *p = st->pseudo_inl + st->pseudo_used;
		memcpy(p, v, n);
		p[n] = '\0';
		st->pseudo_used += n + 1;
		return p;
	}
	return strndup((const char *)v, n);
}

static void stream_unlink(struct h2_session *s, struct h2_stream *st)
{
	if (st->prev)
		st->prev->next = st->next;
	else
		s->streams = st->next;
	if (st->next)
		st->next->prev = st->prev;
	s->nstreams--;
	if (!st->responded && --s->waiting == 0)
		s->busy_since = 0;
	if (s->nstreams == 0)
		s->idle_since = conn_now_ms();
}

static bool name_is(const uint8_t *name, size_t len, const char *lit)
{
	return len == strlen(lit) && memcmp(name, lit, len) == 0;
}

/* The inline room counts as an allocation of its size once used (fields_cap). */
static bool fields_append(struct h2_session *s, struct h2_stream *st, const char *p, size_t n)
{
	if (!st->fields) {
		st->fields = st->fields_inl;
		st->fields_cap = H2_FIELDS_INLINE;
		mem_charge(s, st, H2_FIELDS_INLINE);
	}
	if (st->fields_len + n > st->fields_cap) {
		size_t cap = st->fields_cap * 2;
		while (cap < st->fields_len + n)
			cap *= 2;
		char *q;
		if (stream_inline(st, st->fields)) {
			if ((q = malloc(cap)))
				memcpy(q, st->fields, st->fields_len);
		} else {
			q = realloc(st->fields, cap);
		}
		if (!q)
			return false;
		st->fields = q;
		mem_charge(s, st, (ptrdiff_t)(cap - st->fields_cap));
		st->fields_cap = cap;
	}
	memcpy(st->fields + st->fields_len, p, n);
	st->fields_len += n;
	return true;
}

/* The request line, Host and the fields as one HTTP/1.1 head, parsed. */
static void stream_head(struct h2_session *s, struct h2_stream *st)
{
	const char *method = st->method ? st->method : "";
	/* CONNECT has no :path (RFC 9113 8.5): its target is the authority */
	const char *target = st->path ? st->path : st->authority ? st->authority : "";
	size_t mlen = strlen(method), tlen = strlen(target), alen = st->authority ? strlen(st->authority) : 0;
	size_t len = mlen + tlen + st->fields_len + alen + 32;

	/* the log's request line and the head, in one block (the line first:
	 * stream_free frees st->line, and st->head with it) */
	st->line_len = mlen + 1 + tlen + sizeof(" HTTP/2.0") - 1;
	st->line = st->line_len + 1 + len <= H2_HEAD_INLINE ? st->head_inl : malloc(st->line_len + 1 + len);
	mem_charge(s, st, (ptrdiff_t)(st->line_len + 1 + len));
	if (!st->line) {
		st->parsed = -500;
		st->line_len = 0;
		return;
	}
	char *q = st->line;
	q = mempcpy(q, method, mlen);
	*q++ = ' ';
	q = mempcpy(q, target, tlen);
	q = mempcpy(q, " HTTP/2.0", sizeof(" HTTP/2.0"));
	st->head = q;
	if (st->too_big) {
		st->parsed = -431;
		return;
	}
	q = mempcpy(q, method, mlen);
	*q++ = ' ';
	q = mempcpy(q, target, tlen);
	q = mempcpy(q, " HTTP/1.1\r\n", sizeof(" HTTP/1.1\r\n") - 1);
	if (st->authority) {
		q = mempcpy(q, "Host: ", 6);
		q = mempcpy(q, st->authority, alen);
		q = mempcpy(q, "\r\n", 2);
	}
	if (st->fields_len)
		q = mempcpy(q, st->fields, st->fields_len);
	q = mempcpy(q, "\r\n", 2);
	st->parsed = http_parse_request(st->head, (size_t)(q - st->head), &s->srv->limits, &st->req);
	if (st->parsed == 0) /* cannot be: the head is whole */
		st->parsed = -400;
	stream_free_inner(st, st->fields);
	mem_charge(s, st, -(ptrdiff_t)st->fields_cap);
	st->fields = NULL;
	st->fields_len = st->fields_cap = 0;
}

/* ---- responses ------------------------------------------------------ */

/* Fields HTTP/2 forbids (RFC 9113 8.2.2); lower: the name in lowercase. */
static bool connection_specific(const char *lower, size_t n)
{
	switch (n) {
	case 7: return memcmp(lower, "upgrade", 7) == 0;
	case 10: return memcmp(lower, "connection", 10) == 0 || memcmp(lower, "keep-alive", 10) == 0;
	case 16: return memcmp(lower, "proxy-connection", 16) == 0;
	case 17: return memcmp(lower, "transfer-encoding", 17) == 0;
	default: return false;
	}
}

/* The names the session and the site give a file's answer, as static text,
 * and their lowercase form (RFC 9113 8.2.1): such a name needs no copy to
 * lower it, and is no connection-specific field. */
static const char *known_lower(const char *name, size_t n)
{
	/* by length, each compare of a size known here: a few instructions */
#define H2_KNOWN(c, l) \
	if (memcmp(name, c, sizeof(c) - 1) == 0) \
		return l
	switch (n) {
	case 4:
		H2_KNOWN("ETag", "etag");
		H2_KNOWN("Vary", "vary");
		break;
	case 6:
		H2_KNOWN("Server", "server");
		break;
	case 7:
		H2_KNOWN("Expires", "expires");
		break;
	case 8:
		H2_KNOWN("Location", "location");
		break;
	case 12:
		H2_KNOWN("Content-Type", "content-type");
		break;
	case 13:
		H2_KNOWN("Last-Modified", "last-modified");
		H2_KNOWN("Accept-Ranges", "accept-ranges");
		H2_KNOWN("Cache-Control", "cache-control");
		H2_KNOWN("Content-Range", "content-range");
		break;
	case 14:
		H2_KNOWN("Content-Length", "content-length");
		break;
	case 16:
		H2_KNOWN("Content-Encoding", "content-encoding");
		break;
	}
#undef H2_KNOWN
	return NULL;
}

struct nvlist {
	nghttp2_nv *nv;
	size_t n, cap;
	uint8_t flags;            /* each field's: NGHTTP2_NV_FLAG_NO_INDEX or none */
	char *arena;
	size_t used, size;
};

static char *arena_put(struct nvlist *l, const char *p, size_t n, bool lower)
{
	if (l->used + n > l->size)
		return NULL;
	char *q = l->arena + l->used;
	if (!lower) {
		memcpy(q, p, n);
	} else { /* field names are ASCII tokens: no locale to consult */
		for (size_t i = 0; i < n; i++)
			q[i] = (char)(p[i] >= 'A' && p[i] <= 'Z' ? p[i] + ('a' - 'A') : p[i]);
	}
	l->used += n;
	return q;
}

static void nv_add(struct nvlist *l, const char *name, size_t nlen, const char *value, size_t vlen)
{
	if (l->n == l->cap)
		return;
	const char *lname = known_lower(name, nlen);
	if (!lname) {
		char *copy = arena_put(l, name, nlen, true);
		if (!copy || connection_specific(copy, nlen))
			return;
		lname = copy;
	}
	l->nv[l->n++] = (nghttp2_nv){ (uint8_t *)lname, (uint8_t *)value, nlen, vlen, l->flags };
}

/* "Name: value\r\n" lines (the server's own, and what [headers] rules add). */
static void nv_add_lines(struct nvlist *l, const char *p, size_t len, bool no_server)
{
	const char *end = p + len;
	while (p < end) {
		const char *eol = memchr(p, '\n', (size_t)(end - p));
		const char *stop = eol ? eol : end;
		const char *colon = memchr(p, ':', (size_t)(stop - p));
		if (colon) {
			const char *v = colon + 1, *ve = stop;
			while (v < ve && (*v == ' ' || *v == '\t'))
				v++;
			while (ve > v && (ve[-1] == '\r' || ve[-1] == ' ' || ve[-1] == '\t'))
				ve--;
			size_t nlen = (size_t)(colon - p);
			if (!(no_server && nlen == 6 && strncasecmp(p, "server", 6) == 0))
				nv_add(l, p, nlen, v, (size_t)(ve - v));
		}
		p = eol ? eol + 1 : end;
	}
}

static size_t count_lines(const char *p, size_t len)
{
	size_t n = 0;
	for (const char *q = p; q && (q = memchr(q, '\n', len - (size_t)(q - p))); q++)
		n++;
	return n;
}

static bool stream_is_head(const struct h2_stream *st)
{
	if (st->parsed > 0)
		return st->req.method == HTTP_HEAD;
	return st->method && strcmp(st->method, "HEAD") == 0;
}

static h2_ssize read_body(nghttp2_session *ng, int32_t id, uint8_t *buf, size_t length, uint32_t *flags,
			 nghttp2_data_source *source, void *user_data);

/* The window or piece the body is at: false past the last. */
static bool body_piece(const struct h2_stream *st, const char **p, uint64_t *off, uint64_t *len)
{
	const struct response *r = &st->resp;
	if (r->pieces) {
		if (st->piece >= r->npieces)
			return false;
		*p = r->pieces[st->piece].p;
		*off = r->pieces[st->piece].off;
		*len = r->pieces[st->piece].len;
		return true;
	}
	if (st->piece > 0)
		return false;
	*p = NULL;
	*off = r->body.off;
	*len = r->body.len;
	return true;
}

/* Copies the body's next n bytes into buf (memory, or the file by pread),
 * moving the send position; -1 when the file no longer has them. */
static int body_copy(struct h2_stream *st, char *buf, size_t n)
{
	struct response *r = &st->resp;
	const char *p;
	uint64_t off, len;
	size_t done = 0;

	while (done < n && body_piece(st, &p, &off, &len)) {
		if (st->pos == len) {
			st->piece++;
			st->pos = 0;
			continue;
		}
		size_t k = n - done < len - st->pos ? n - done : (size_t)(len - st->pos);
		const char *m = p ? p + st->pos : response_body_bytes(r, off + st->pos);
		if (m) {
			memcpy(buf + done, m, k);
		} else {
			ssize_t got = pread(r->body.fd, buf + done, k, (off_t)(off + st->pos));
			if (got < 0 && errno == EINTR)
				continue;
			if (got <= 0)
				return -1;
			k = (size_t)got;
		}
		st->pos += k;
		done += k;
		if (!p && r->body.kind == RESPONSE_BODY_LISTING) /* a listing gives back what is sent */
			response_body_sent(r, off + st->pos);
	}
	return done == n ? 0 : -1;
}

/* The next DATA frame's length. Its bytes are not copied into nghttp2's
 * frame buffer (NGHTTP2_DATA_FLAG_NO_COPY): send_body() puts them straight
 * into the gathered output, one copy (the pread) instead of two. */
static h2_ssize read_body(nghttp2_session *ng, int32_t id, uint8_t *buf, size_t length, uint32_t *flags,
			 nghttp2_data_source *source, void *user_data)
{
	struct h2_stream *st = source->ptr;
	size_t n = length < st->left ? length : (size_t)st->left;

	(void)buf;
	(void)user_data;
	st->left -= n;
	*flags |= NGHTTP2_DATA_FLAG_NO_COPY;
	if (st->left == 0) {
		*flags |= NGHTTP2_DATA_FLAG_EOF;
		/* answered before the request's body ended (413): the client may
		 * stop sending it (RFC 9113 8.1) */
		if (st->early && !nghttp2_session_get_stream_remote_close(ng, id))
			nghttp2_submit_rst_stream(ng, NGHTTP2_FLAG_NONE, id, NGHTTP2_NO_ERROR);
	}
	return (h2_ssize)n;
}

static bool out_reserve(struct h2_session *s, size_t n);

/* Bytes wait to go out: gathered frames, or a frame's payload from its file. */
static bool out_pending(const struct h2_session *s)
{
	return s->out_off < s->out_len || s->file_st;
}

/* The frame's payload is length bytes of one file, at a plain connection:
 * its header joins the gathered output, and the bytes are noted to follow
 * it by sendfile (h2_output). A file's bytes held in memory (the cache), a
 * range that spans pieces, or a TLS connection (which encrypts in user
 * space: the copy is its own) are copied as before. */
static bool send_body_from_file(struct h2_session *s, struct h2_stream *st, const uint8_t *framehd, size_t length)
{
	const char *p;
	uint64_t off, len;

	if (s->tls || length < H2_SENDFILE_MIN || st->resp.body.fd < 0)
		return false;
	while (body_piece(st, &p, &off, &len) && st->pos == len) {
		st->piece++;
		st->pos = 0;
	}
	if (!body_piece(st, &p, &off, &len) || p || len - st->pos < length ||
	    response_body_bytes(&st->resp, off + st->pos) || st->resp.body.kind == RESPONSE_BODY_LISTING)
		return false;
	if (!out_reserve(s, 9))
		return false;
	memcpy(s->out + s->out_len, framehd, 9);
	s->out_len += 9;
	s->file_st = st;
	s->file_fd = st->resp.body.fd;
	s->file_off = (off_t)(off + st->pos);
	s->file_len = length;
	s->file_at = s->out_len;
	s->file_closed = false;
	st->pos += length;
	return true;
}

/* A DATA frame read_body() announced goes out: its header and its bytes
 * into the gathered output (h2_flush, which runs with the buffer empty, so
 * it may grow). */
static int send_body(nghttp2_session *ng, nghttp2_frame *frame, const uint8_t *framehd, size_t length,
		     nghttp2_data_source *source, void *user_data)
{
	struct h2_session *s = user_data;
	struct h2_stream *st = source->ptr;

	(void)ng;
	if (frame->data.padlen > 0) /* no padding is ever asked for */
		return NGHTTP2_ERR_CALLBACK_FAILURE;
	/* One nghttp2_session_mem_send() call goes on from frame to frame as
	 * long as the client's window allows (megabytes): the write is full,
	 * this frame waits for the next call. */
	if (s->out_len >= H2_OUT_GATHER || s->file_st)
		return NGHTTP2_ERR_WOULDBLOCK;
	if (send_body_from_file(s, st, framehd, length))
		return 0;
	if (!out_reserve(s, 9 + length))
		return NGHTTP2_ERR_CALLBACK_FAILURE;
	memcpy(s->out + s->out_len, framehd, 9);
	/* the file shrank or failed under us: the length announced can't be
	 * kept, the stream is reset */
	if (body_copy(st, s->out + s->out_len + 9, length) < 0)
		return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
	s->out_len += 9 + length;
	return 0;
}

/* The value in st->resp as HEADERS (and DATA from read_body). */
static void stream_submit(struct h2_session *s, struct h2_stream *st)
{
	struct response *r = &st->resp;
	const char *lines = s->srv->server_header;
	size_t lines_len = strlen(lines);

	if (r->broken) {
		log_error("a %d response cannot be sent: answering 500", r->status);
		site_error(st->site ? st->site : server_default_site(s->srv), 500, r);
	}
	struct nvlist l = {
		.cap = 3 + r->nfields + count_lines(lines, lines_len) + count_lines(r->lines, r->lines_len),
		.flags = s->nsubmitted++ < H2_INDEX_AFTER ? NGHTTP2_NV_FLAG_NO_INDEX : NGHTTP2_NV_FLAG_NONE,
	};
	size_t nlen[RESPONSE_FIELDS_MAX];
	l.size = 32 + lines_len + r->lines_len;
	for (size_t i = 0; i < r->nfields; i++)
		l.size += (nlen[i] = strlen(r->fields[i].name)) + 24;
	/* a static file's answer fits on the stack; nghttp2 copies the fields */
	nghttp2_nv nv_stack[H2_NV_STACK];
	char arena_stack[H2_ARENA_STACK];
	l.nv = l.cap <= H2_NV_STACK ? nv_stack : malloc(l.cap * sizeof(*l.nv));
	l.arena = l.size <= sizeof(arena_stack) ? arena_stack : malloc(l.size);
	if (!l.nv || !l.arena) {
		nghttp2_submit_rst_stream(s->ng, NGHTTP2_FLAG_NONE, st->id, NGHTTP2_INTERNAL_ERROR);
		goto out;
	}
	unsigned code = (unsigned)r->status % 1000u;
	char status[4] = { (char)('0' + code / 100), (char)('0' + code / 10 % 10), (char)('0' + code % 10), 0 };
	/* a status of HPACK's static table is one byte, an index, whatever the flags */
	uint8_t flags = l.flags;
	if (code == 200 || code == 204 || code == 206 || code == 304 || code == 400 || code == 404 || code == 500)
		l.flags = NGHTTP2_NV_FLAG_NONE;
	nv_add(&l, ":status", 7, status, 3);
	l.flags = flags;
	nv_add_lines(&l, lines, lines_len, r->no_server);
	nv_add(&l, "date", 4, http_date_now(), HTTP_DATE_LEN);
	uint64_t length = response_length(r);
	for (size_t i = 0; i < r->nfields; i++) {
		const struct response_field *f = &r->fields[i];
		if (f->value) {
			nv_add(&l, f->name, nlen[i], f->value, f->len);
			continue;
		}
		char digits[24];
		struct outbuf d = { digits, 0, sizeof(digits), false };
		outbuf_u64(&d, length);
		const char *v = arena_put(&l, digits, d.len, false);
		if (v)
			nv_add(&l, f->name, nlen[i], v, d.len);
	}
	if (r->lines_len)
		nv_add_lines(&l, r->lines, r->lines_len, false);
	bool body = !stream_is_head(st) && r->body.kind != RESPONSE_BODY_NONE && length > 0;
	st->left = length;
	h2_data_provider dp = { .source.ptr = st, .read_callback = read_body };
	int rv = h2_submit_response(s->ng, st->id, l.nv, l.n, body ? &dp : NULL);
	if (rv != 0) {
		log_error("http2: a response cannot be submitted: %s", nghttp2_strerror(rv));
		nghttp2_submit_rst_stream(s->ng, NGHTTP2_FLAG_NONE, st->id, NGHTTP2_INTERNAL_ERROR);
	} else if (!body && st->early) {
		nghttp2_submit_rst_stream(s->ng, NGHTTP2_FLAG_NONE, st->id, NGHTTP2_NO_ERROR);
	}
out:
	if (l.nv != nv_stack)
		free(l.nv);
	if (l.arena != arena_stack)
		free(l.arena);
}

/* The request on st is complete (or refused with status): the site answers. */
static void stream_respond(struct h2_session *s, struct h2_stream *st, int status)
{
	if (st->responded)
		return;
	st->responded = true;
	st->early = status == 413; /* the only answer given before the request ends */
	if (--s->waiting == 0)
		s->busy_since = 0;
	st->t0 = stats_clock_ns();
	st->ready_ns = s->read_ready_ns && s->read_ready_ns <= st->t0 ? s->read_ready_ns : st->t0;
	s->progress_ms = conn_now_ms(); /* send_timeout counts from here while the client's window is shut */
	if (!status && st->parsed < 0)
		status = -st->parsed;
	if (!status && http_expectation(&st->req) == HTTP_EXPECT_UNKNOWN)
		status = 417; /* RFC 9110 10.1.1, as over HTTP/1.1 */
	st->site = server_default_site(s->srv);
	if (!status && st->parsed > 0)
		status = site_choose(&s->srv->sites, &st->req, s->tls, s->sni_site, &st->site);
	if (status) {
		site_error(st->site, status, &st->resp);
	} else {
		struct sockaddr_storage peer = s->peer_addr;
		st->req.shed = overload_should_shed(st->t0 - st->ready_ns);
		st->req.tls = s->tls;
		site_respond(st->site, &st->req, &peer, &st->resp);
	}
	stream_submit(s, st);
}

static void stream_account(struct h2_session *s, struct h2_stream *st)
{
	struct h1_record rec = {
		.status = st->resp.status,
		.method = STATS_OTHER,
		.stats_t0 = st->t0,
		.ready_ns = st->ready_ns,
		.pickup_ns = st->t0,
		.first_ns = st->first_ns,
		.request_line = { st->line, st->line_len },
		.http2 = true,
		.shed = st->resp.shed,
		.site = st->site ? st->site->log_name : NULL,
		.site_stats = st->site ? st->site->stats_index + 1 : 0,
	};
	if (st->parsed > 0) {
		rec.method = st->req.method == HTTP_GET ? STATS_GET : st->req.method == HTTP_HEAD ? STATS_HEAD : STATS_OTHER;
		rec.referer = st->req.referer;
		rec.user_agent = st->req.user_agent;
	}
	h1_record_account(&rec, s->peer, st->sent, stats_clock_ns(), s->nreq++ > 0);
}

/* ---- nghttp2's callbacks ------------------------------------------- */

static int on_begin_headers(nghttp2_session *ng, const nghttp2_frame *frame, void *user_data)
{
	struct h2_session *s = user_data;

	if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST)
		return 0;
	/* a stream refused here is never served: GOAWAY closes the others */
	if (s->refused || over_budget(s))
		return 0;
	if (++s->new_streams > H2_STREAMS_PER_READ) {
		h2_refuse(s, NGHTTP2_ENHANCE_YOUR_CALM, "too many streams opened at once");
		return 0;
	}
	s->idle_frames = 0;
	struct h2_stream *st = stream_get(s);
	if (!st)
		return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE; /* the stream is reset */
	st->id = frame->hd.stream_id;
	if (nghttp2_session_set_stream_user_data(ng, st->id, st) != 0) { /* no such stream: nothing to serve */
		stream_free(s, st);
		return 0;
	}
	mem_charge(s, st, H2_STREAM_STATE);
	st->next = s->streams;
	if (s->streams)
		s->streams->prev = st;
	s->streams = st;
	s->nstreams++;
	if (s->waiting++ == 0)
		s->busy_since = conn_now_ms();
	return 0;
}

static int on_header(nghttp2_session *ng, const nghttp2_frame *frame, const uint8_t *name, size_t namelen,
		     const uint8_t *value, size_t valuelen, uint8_t flags, void *user_data)
{
	struct h2_session *s = user_data;
	struct h2_stream *st = nghttp2_session_get_stream_user_data(ng, frame->hd.stream_id);

	(void)flags;
	/* trailer fields (a body's end) are dropped, as the body is */
	if (!st || st->head || frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST)
		return 0;
	if (memchr(value, '\r', valuelen) || memchr(value, '\n', valuelen) || memchr(value, '\0', valuelen))
		return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE; /* nghttp2 refuses these already; never pass one on */
	if (st->too_big)
		return 0;
	/* every field counts against max_head, pseudo-header fields too: a
	 * header block that decodes to more is answered 431, never held */
	if (st->fields_len + st->pseudo_len + namelen + valuelen + 4 > s->cfg->max_head) {
		st->too_big = true;
		return 0;
	}
	if (namelen > 0 && name[0] == ':') {
		char **slot = name_is(name, namelen, ":method") ? &st->method
			      : name_is(name, namelen, ":path") ? &st->path
			      : name_is(name, namelen, ":authority") ? &st->authority
								   : NULL;
		if (!slot) /* :scheme: the listener says which */
			return 0;
		if (*slot) {
			mem_charge(s, st, -(ptrdiff_t)(strlen(*slot) + 1));
			st->pseudo_len -= strlen(*slot);
			stream_free_inner(st, *slot);
		}
		*slot = stream_strndup(st, value, valuelen);
		if (!*slot)
			return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
		mem_charge(s, st, (ptrdiff_t)(valuelen + 1));
		st->pseudo_len += valuelen;
		return over_budget(s) ? NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE : 0;
	}
	/* RFC 9113 8.3.1: :authority stands for Host; a Host beside it would
	 * be a duplicate to the HTTP/1.1 parser */
	if (st->authority && name_is(name, namelen, "host"))
		return 0;
	if (!fields_append(s, st, (const char *)name, namelen) || !fields_append(s, st, ": ", 2) ||
	    !fields_append(s, st, (const char *)value, valuelen) || !fields_append(s, st, "\r\n", 2))
		return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
	return over_budget(s) ? NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE : 0;
}

static int on_frame_recv(nghttp2_session *ng, const nghttp2_frame *frame, void *user_data)
{
	struct h2_session *s = user_data;

	switch (frame->hd.type) {
	case NGHTTP2_DATA:
		if (frame->hd.length > 0 || (frame->hd.flags & NGHTTP2_FLAG_END_STREAM))
			break;
		/* an empty DATA frame carries nothing */
		__attribute__((fallthrough));
	case NGHTTP2_WINDOW_UPDATE:
	case NGHTTP2_PING:
	case NGHTTP2_SETTINGS:
	case NGHTTP2_PRIORITY:
		if (++s->idle_frames > H2_IDLE_FRAMES)
			h2_refuse(s, NGHTTP2_ENHANCE_YOUR_CALM, "too many frames that ask nothing");
		break;
	}
	if (frame->hd.type == NGHTTP2_RST_STREAM && nghttp2_session_get_stream_user_data(ng, frame->hd.stream_id))
		reset_taken(s); /* a stream it opened, reset */
	if (frame->hd.type != NGHTTP2_HEADERS && frame->hd.type != NGHTTP2_DATA)
		return 0;
	struct h2_stream *st = nghttp2_session_get_stream_user_data(ng, frame->hd.stream_id);
	if (!st)
		return 0;
	if (frame->hd.type == NGHTTP2_HEADERS && frame->headers.cat == NGHTTP2_HCAT_REQUEST) {
		stream_head(s, st);
		/* a body announced bigger than HTTP/1.1 would read: 413 at once */
		if (!(frame->hd.flags & NGHTTP2_FLAG_END_STREAM) && st->parsed > 0 && st->req.has_content_length &&
		    st->req.content_length > s->cfg->max_body)
			stream_respond(s, st, 413);
	}
	if (frame->hd.flags & NGHTTP2_FLAG_END_STREAM)
		stream_respond(s, st, 0);
	return 0;
}

static int on_data_chunk_recv(nghttp2_session *ng, uint8_t flags, int32_t stream_id, const uint8_t *data,
			      size_t len, void *user_data)
{
	struct h2_session *s = user_data;
	struct h2_stream *st = nghttp2_session_get_stream_user_data(ng, stream_id);

	(void)flags;
	(void)data;
	if (len > 0)
		s->idle_frames = 0;
	if (!st)
		return 0;
	st->body_in += len; /* a static site wants no body: dropped, within max_body */
	if (!st->responded && st->body_in > s->cfg->max_body)
		stream_respond(s, st, 413);
	return 0;
}

static int on_frame_send(nghttp2_session *ng, const nghttp2_frame *frame, void *user_data)
{
	struct h2_session *s = user_data;
	struct h2_stream *st;

	/* a connection error nghttp2 found itself (a limit of its own, a
	 * protocol error) is logged as ours are */
	if (frame->hd.type == NGHTTP2_GOAWAY && frame->goaway.error_code != NGHTTP2_NO_ERROR && !s->refused) {
		s->refused = true;
		char why[64];
		snprintf(why, sizeof(why), "connection error %s", nghttp2_http2_strerror(frame->goaway.error_code));
		h2_warn(s, why);
	}
	/* a reset for the peer's fault (ours for a 413 says NO_ERROR) */
	if (frame->hd.type == NGHTTP2_RST_STREAM)
		s->scan_ours |= scan_bit(s, frame->hd.stream_id);
	if (frame->hd.type == NGHTTP2_RST_STREAM && frame->rst_stream.error_code != NGHTTP2_NO_ERROR)
		reset_taken(s);
	if (frame->hd.type == NGHTTP2_DATA)
		s->idle_frames = 0;
	if (frame->hd.type != NGHTTP2_HEADERS && frame->hd.type != NGHTTP2_DATA)
		return 0;
	st = nghttp2_session_get_stream_user_data(ng, frame->hd.stream_id);
	if (!st)
		return 0;
	/* stamped as the frame is gathered for the next write */
	if (!st->first_ns)
		st->first_ns = stats_clock_ns();
	if (frame->hd.type == NGHTTP2_DATA)
		st->sent += frame->hd.length;
	return 0;
}

/* A closed stream, unlinked: accounted (its last byte is out) and freed. */
static void stream_end(struct h2_session *s, struct h2_stream *st)
{
	if (st->responded)
		stream_account(s, st);
	mem_charge(s, st, -(ptrdiff_t)st->mem);
	stream_free(s, st);
}

static int on_stream_close(nghttp2_session *ng, int32_t stream_id, uint32_t error_code, void *user_data)
{
	struct h2_session *s = user_data;
	struct h2_stream *st = nghttp2_session_get_stream_user_data(ng, stream_id);

	(void)error_code;
	uint64_t bit = scan_bit(s, stream_id);
	if (!(s->scan_ours & bit))
		s->scan_closed |= bit;
	if (!st)
		return 0;
	nghttp2_session_set_stream_user_data(ng, stream_id, NULL);
	stream_unlink(s, st);
	if (st == s->file_st) { /* its file's bytes are still to go: it ends when they are out */
		s->file_closed = true;
		return 0;
	}
	stream_end(s, st);
	return 0;
}

/* One callback table and one option set for every session, read-only once made. */
static nghttp2_session_callbacks *h2_callbacks;
static nghttp2_option *h2_options;
static pthread_once_t h2_once = PTHREAD_ONCE_INIT;

static void h2_init(void)
{
	if (nghttp2_session_callbacks_new(&h2_callbacks) != 0 || nghttp2_option_new(&h2_options) != 0) {
		h2_callbacks = NULL;
		return;
	}
	nghttp2_session_callbacks_set_on_begin_headers_callback(h2_callbacks, on_begin_headers);
	nghttp2_session_callbacks_set_on_header_callback(h2_callbacks, on_header);
	nghttp2_session_callbacks_set_on_frame_recv_callback(h2_callbacks, on_frame_recv);
	nghttp2_session_callbacks_set_on_data_chunk_recv_callback(h2_callbacks, on_data_chunk_recv);
	nghttp2_session_callbacks_set_on_frame_send_callback(h2_callbacks, on_frame_send);
	nghttp2_session_callbacks_set_on_stream_close_callback(h2_callbacks, on_stream_close);
	nghttp2_session_callbacks_set_send_data_callback(h2_callbacks, send_body);
	nghttp2_option_set_max_deflate_dynamic_table_size(h2_options, H2_ENCODER_TABLE);
	/* RFC 9218 priorities (SETTINGS_NO_RFC7540_PRIORITIES below), and RFC
	 * 7540's signals still checked for a client that does not say it
	 * uses the new ones (a PRIORITY on stream 0, a stream depending on itself) */
	nghttp2_option_set_server_fallback_rfc7540_priorities(h2_options, 1);
	nghttp2_option_set_builtin_recv_extension_type(h2_options, NGHTTP2_PRIORITY_UPDATE);
	long page = sysconf(_SC_PAGESIZE);
	h2_page = page > 0 ? (size_t)page : 0;
}

/* ---- the session ---------------------------------------------------- */

void h2_session_set_tls_site(struct h2_session *s, bool tls, int sni_site)
{
	s->tls = tls;
	s->sni_site = sni_site;
}

struct h2_session *h2_session_new(const struct server *srv, const char *peer, const struct sockaddr *peer_addr,
				  socklen_t peerlen)
{
	pthread_once(&h2_once, h2_init);
	if (!h2_callbacks)
		return NULL;
	struct h2_session *s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	s->srv = srv;
	s->cfg = srv->cfg;
	s->sni_site = -1;
	s->peer = peer;
	s->peer_addr.ss_family = AF_UNSPEC;
	if (peer_addr && peerlen <= sizeof(s->peer_addr))
		memcpy(&s->peer_addr, peer_addr, peerlen);
	s->progress_ms = s->idle_since = conn_now_ms();
	s->scan_skip = H2_PREFACE_LEN; /* the first bytes, h2_session_start's */
	s->budget = 64 * s->cfg->max_head > H2_BUDGET ? 64 * s->cfg->max_head : H2_BUDGET;
	s->reset_tokens = H2_RESET_BURST;
	s->reset_refill_ms = conn_now_ms();
	nghttp2_mem mem = { s, mem_malloc, mem_free, mem_calloc, mem_realloc };
	s->creating = true;
	int rv = nghttp2_session_server_new3(&s->ng, h2_callbacks, s, h2_options, &mem);
	s->creating = false;
	if (rv != 0) {
		free(s);
		return NULL;
	}
	/* a session struct that big would be no frame buffer: never given back */
	s->framebuf_cold = (void *)s->ng == s->framebuf;
	s->framebuf_sure = !s->framebuf_cold;
	size_t header_list = s->cfg->max_head;
	nghttp2_settings_entry iv[] = {
		{ NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, H2_MAX_STREAMS },
		{ NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, H2_WINDOW },
		{ NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, header_list > UINT32_MAX ? UINT32_MAX : (uint32_t)header_list },
		{ NGHTTP2_SETTINGS_NO_RFC7540_PRIORITIES, 1 },
	};
	if (nghttp2_submit_settings(s->ng, NGHTTP2_FLAG_NONE, iv, sizeof(iv) / sizeof(iv[0])) != 0) {
		nghttp2_session_del(s->ng);
		free(s);
		return NULL;
	}
	return s;
}

void h2_session_free(struct h2_session *s)
{
	if (!s)
		return;
	nghttp2_session_del(s->ng); /* calls no callback: the streams go below */
	while (s->streams) {
		struct h2_stream *st = s->streams;
		s->streams = st->next;
		stream_free(NULL, st);
	}
	if (s->file_st && s->file_closed) /* no longer among s->streams */
		stream_free(NULL, s->file_st);
	spare_release(s);
	pagebuf_free(s->in, H2_IN_SIZE);
	pagebuf_free(s->out, s->out_cap);
	free(s);
}

/* Room for n more bytes in s->out; only while nothing in it may be in
 * flight (h2_flush). A page first, which holds a busy period's frames when
 * its answers are small; then the gather size and a frame at once. */
static bool out_reserve(struct h2_session *s, size_t n)
{
	if (s->out_len + n <= s->out_cap)
		return true;
	if (!s->out && s->out_len + n <= PAGEBUF_SIZE) {
		if (!(s->out = pagebuf_get()))
			return false;
		mem_charge(s, NULL, PAGEBUF_SIZE);
		s->out_cap = PAGEBUF_SIZE;
		return true;
	}
	size_t cap = s->out_len + n < H2_OUT_GATHER + 32 * 1024 ? H2_OUT_GATHER + 32 * 1024 : s->out_len + n;
	char *q;
	if (s->out) {
		q = pagebuf_resize(s->out, s->out_cap, cap);
	} else {
		char *page = pagebuf_get();
		q = page ? pagebuf_resize(page, PAGEBUF_SIZE, cap) : NULL;
		if (page && !q)
			pagebuf_put(page);
	}
	if (!q)
		return false;
	s->out = q;
	mem_charge(s, NULL, (ptrdiff_t)(cap - s->out_cap));
	s->out_cap = cap;
	return true;
}

/* Gathers what nghttp2 has to send into s->out, when it is empty; a
 * session that wants neither to read nor to write is over. */
static void h2_flush(struct h2_session *s)
{
	if (s->state != H2_OPEN || out_pending(s))
		return;
	s->out_off = s->out_len = 0;
	if (s->fatal) { /* our GOAWAY is out: nghttp2 has nothing more to say */
		s->state = H2_SHUTDOWN;
		return;
	}
	s->framebuf_cold = false; /* nghttp2 may write a frame into it */
	while (s->out_len < H2_OUT_GATHER) {
		const uint8_t *p;
		h2_ssize n = h2_mem_send(s->ng, &p);
		if (n < 0) {
			log_debug("http2: %s", nghttp2_strerror((int)n));
			s->state = H2_CLOSE;
			return;
		}
		if (n == 0)
			break;
		if (!out_reserve(s, (size_t)n)) {
			s->state = H2_CLOSE;
			return;
		}
		memcpy(s->out + s->out_len, p, (size_t)n);
		s->out_len += (size_t)n;
	}
	if (s->out_len == 0 && !nghttp2_session_want_read(s->ng) && !nghttp2_session_want_write(s->ng))
		s->state = H2_SHUTDOWN; /* GOAWAY out, no stream left: half-close, then linger */
}

/* The bit of client stream id in the scan_ bitmaps, or 0: not among the 64
 * below the highest opened. */
static uint64_t scan_bit(const struct h2_session *s, int32_t id)
{
	if (id <= 0 || !(id & 1) || (uint32_t)id > s->scan_max || (s->scan_max - (uint32_t)id) / 2 >= 64)
		return 0;
	return (uint64_t)1 << ((s->scan_max - (uint32_t)id) / 2);
}

/* A HEADERS frame opened (or continued) stream id: false when the id is
 * below one already opened and was itself never opened, which RFC 9113
 * 5.1.1 makes a connection error. nghttp2 lets that pass (it cannot tell a
 * stream it has forgotten from one that never was); the 64 ids below the
 * highest are remembered here, enough for any client that opens streams in
 * order, and an older id is left to nghttp2. */
static bool scan_headers(struct h2_session *s, uint32_t id)
{
	if (!(id & 1))
		return true; /* not a client's stream: nghttp2 answers that */
	if (id > s->scan_max) {
		uint32_t shift = (id - s->scan_max) / 2;
		s->scan_seen = shift >= 64 ? 0 : s->scan_seen << shift;
		s->scan_closed = shift >= 64 ? 0 : s->scan_closed << shift;
		s->scan_ours = shift >= 64 ? 0 : s->scan_ours << shift;
		s->scan_seen |= 1;
		s->scan_max = id;
		return true;
	}
	uint32_t i = (s->scan_max - id) / 2;
	return i >= 64 || (s->scan_seen >> i & 1);
}

/* Follows the frame headers in n received bytes; returns how many of them
 * precede a frame that is a connection error nghttp2 would miss (its code
 * in scan_code), or n.
 *
 * RFC 9113 5.1: a DATA or HEADERS frame on a stream the client reset, or
 * that both ends closed with END_STREAM, is an error (STREAM_CLOSED); one
 * on a stream we reset may have been on its way, and is ignored. nghttp2
 * tells these apart only for the closed streams it keeps for RFC 7540's
 * priority tree, and it keeps none once SETTINGS_NO_RFC7540_PRIORITIES is
 * sent: the 64 streams below the highest opened are remembered here
 * (scan_closed, scan_ours), the client's resets as they pass, before
 * nghttp2 has read the frames after them. */
static size_t scan_frames(struct h2_session *s, const unsigned char *p, size_t n)
{
	size_t i = 0;
	while (i < n) {
		if (s->scan_skip) {
			size_t k = n - i < s->scan_skip ? n - i : s->scan_skip;
			s->scan_skip -= k;
			i += k;
			continue;
		}
		size_t start = i;
		while (i < n && s->scan_hd_len < 9)
			s->scan_hd[s->scan_hd_len++] = p[i++];
		if (s->scan_hd_len < 9)
			break;
		s->scan_hd_len = 0;
		const unsigned char *h = s->scan_hd;
		s->scan_skip = (size_t)h[0] << 16 | (size_t)h[1] << 8 | h[2];
		uint32_t id = ((uint32_t)h[5] << 24 | (uint32_t)h[6] << 16 | (uint32_t)h[7] << 8 | h[8]) & 0x7fffffffu;
		/* the frame's bytes in p begin at start */
		uint64_t bit = scan_bit(s, (int32_t)id);
		if ((h[3] == NGHTTP2_DATA || h[3] == NGHTTP2_HEADERS) && (s->scan_closed & bit) && !(s->scan_ours & bit)) {
			s->scan_code = NGHTTP2_STREAM_CLOSED;
			return start;
		}
		if (h[3] == NGHTTP2_HEADERS && !scan_headers(s, id)) {
			s->scan_code = NGHTTP2_PROTOCOL_ERROR;
			return start;
		}
		if (h[3] == NGHTTP2_RST_STREAM) /* reset by the client: what follows on it is an error */
			s->scan_closed |= bit;
	}
	return n;
}

/* nghttp2 gave up on the session (too many CONTINUATION frames, a flood
 * of acknowledgements, its share of the budget spent): a GOAWAY of our
 * own after whole frames already gathered, then the end. */
static void h2_fatal(struct h2_session *s, int rv)
{
	bool calm = rv == NGHTTP2_ERR_TOO_MANY_CONTINUATIONS || rv == NGHTTP2_ERR_FLOODED || rv == NGHTTP2_ERR_NOMEM;
	if (!s->refused)
		h2_warn(s, nghttp2_strerror(rv));
	s->refused = true;
	s->fatal = true;
	uint32_t last = (uint32_t)nghttp2_session_get_last_proc_stream_id(s->ng);
	uint32_t code = calm ? NGHTTP2_ENHANCE_YOUR_CALM : NGHTTP2_PROTOCOL_ERROR;
	unsigned char goaway[17] = { 0, 0, 8, NGHTTP2_GOAWAY, 0, 0, 0, 0, 0,
				     (unsigned char)(last >> 24), (unsigned char)(last >> 16),
				     (unsigned char)(last >> 8), (unsigned char)last,
				     (unsigned char)(code >> 24), (unsigned char)(code >> 16),
				     (unsigned char)(code >> 8), (unsigned char)code };
	if (out_pending(s) || !out_reserve(s, sizeof(goaway))) {
		s->state = H2_CLOSE; /* a send may be in flight: nothing can be added */
		return;
	}
	memcpy(s->out + s->out_len, goaway, sizeof(goaway));
	s->out_len += sizeof(goaway);
}

/* The bytes of one read (or the HTTP/1.1 session's) into nghttp2. */
static void h2_receive(struct h2_session *s, const char *buf, size_t n)
{
	int64_t now = stats_clock_ns();
	s->read_ready_ns = s->readable_ns && s->readable_ns <= now ? s->readable_ns : now;
	s->readable_ns = 0;
	if (s->refused)
		return;
	s->new_streams = 0;
	size_t good = scan_frames(s, (const unsigned char *)buf, n);
	h2_ssize rv = h2_mem_recv(s->ng, (const uint8_t *)buf, good);
	if (rv >= 0 && good < n) {
		log_debug("http2: %s %s: closing", s->peer, s->scan_code == NGHTTP2_STREAM_CLOSED
								  ? "sent a frame on a closed stream"
								  : "opened a stream below one already opened");
		s->refused = true;
		nghttp2_session_terminate_session(s->ng, s->scan_code);
	}
	if (rv == NGHTTP2_ERR_BAD_CLIENT_MAGIC) {
		/* a connection that is HTTP/2 or nothing (conn_set_h2_only) began
		 * otherwise: RFC 9113 3.4's connection error, told as one, our
		 * preface (SETTINGS) then GOAWAY, which nghttp2 can still send */
		log_debug("http2: %s sent no connection preface: closing", s->peer);
		s->refused = true;
		nghttp2_session_terminate_session(s->ng, NGHTTP2_PROTOCOL_ERROR);
	} else if (rv < 0) {
		/* a protocol error nghttp2 answers with GOAWAY returns >= 0; this
		 * is one it cannot (a flood, no memory): GOAWAY by hand, then close */
		h2_fatal(s, (int)rv);
		return;
	}
	h2_flush(s);
}

void h2_session_start(struct h2_session *s, const char *buf, size_t len, int64_t ready_ns)
{
	s->readable_ns = ready_ns;
	h2_receive(s, buf, len);
}

struct iovec h2_input_space(struct h2_session *s)
{
	if (!s->in) {
		char *p = pagebuf_get();
		if (p && !(s->in = pagebuf_resize(p, PAGEBUF_SIZE, H2_IN_SIZE)))
			pagebuf_put(p);
		if (s->in)
			mem_charge(s, NULL, H2_IN_SIZE);
	}
	if (!s->in) /* an empty span: the driver reads nothing, and closes */
		return (struct iovec){ NULL, 0 };
	return (struct iovec){ s->in, H2_IN_SIZE };
}

void h2_readable(struct h2_session *s, int64_t ns)
{
	s->readable_ns = ns;
}

void h2_input_done(struct h2_session *s, ssize_t n)
{
	if (n <= 0) {
		s->state = H2_CLOSE;
		return;
	}
	if (s->state == H2_LINGER) {
		s->readable_ns = 0;
		return;
	}
	if (s->state != H2_OPEN)
		return;
	h2_receive(s, s->in, (size_t)n);
}

void h2_output(struct h2_session *s, struct conn_output *out)
{
	out->iovcnt = 0;
	out->file_fd = -1;
	out->file_off = 0;
	out->file_len = 0;
	out->more = false;
	if (s->file_st && s->out_off == s->file_at) { /* the frame's payload, from its file */
		out->file_fd = s->file_fd;
		out->file_off = s->file_off;
		out->file_len = s->file_len;
		out->total = s->file_len;
		return;
	}
	size_t end = s->file_st ? s->file_at : s->out_len;
	out->total = end - s->out_off;
	out->more = s->file_st != NULL;
	if (out->total > 0) {
		out->iov[0].iov_base = s->out + s->out_off;
		out->iov[0].iov_len = out->total;
		out->iovcnt = 1;
	}
}

/* The file's bytes are out: the stream nghttp2 closed meanwhile ends. */
static void file_sent(struct h2_session *s)
{
	struct h2_stream *st = s->file_st;
	s->file_st = NULL;
	if (s->file_closed)
		stream_end(s, st);
}

void h2_output_done(struct h2_session *s, size_t n)
{
	if (n > 0)
		s->progress_ms = conn_now_ms();
	if (s->file_st && s->out_off == s->file_at) {
		s->file_off += (off_t)n;
		s->file_len -= n;
		if (s->file_len == 0)
			file_sent(s);
	} else {
		s->out_off += n;
	}
	if (!s->file_st && s->out_off >= s->out_len) {
		s->out_off = s->out_len = 0;
		h2_flush(s);
	}
}

void h2_output_failed(struct h2_session *s)
{
	stats_send_failed(); /* stats */
	s->state = H2_CLOSE;
}

void h2_shutdown_done(struct h2_session *s)
{
	s->state = H2_LINGER;
	s->progress_ms = conn_now_ms();
}

enum conn_want h2_wants(const struct h2_session *s, int64_t *deadline_ms)
{
	const struct config *cfg = s->cfg;

	switch (s->state) {
	case H2_CLOSE:
		*deadline_ms = -1;
		return CONN_WANT_CLOSE;
	case H2_SHUTDOWN:
		*deadline_ms = -1;
		return CONN_WANT_SHUTDOWN;
	case H2_LINGER:
		*deadline_ms = s->progress_ms + H2_LINGER_MS;
		return CONN_WANT_READ;
	case H2_OPEN:
		break;
	}
	enum conn_want want = CONN_WANT_READ;
	if (out_pending(s)) {
		*deadline_ms = s->progress_ms + cfg->send_timeout_ms;
		want = CONN_WANT_WRITE;
	} else if (s->nstreams > s->waiting) { /* responses the client's window holds back: a slow reader */
		*deadline_ms = s->progress_ms + cfg->send_timeout_ms;
	} else if (s->waiting > 0) { /* absolute, as a head's: trickled frames do not extend it */
		*deadline_ms = s->busy_since + cfg->header_timeout_ms;
	} else { /* no stream open: an idle connection */
		*deadline_ms = s->idle_since + cfg->keepalive_timeout_ms;
	}
	if (s->final_goaway_ms && s->final_goaway_ms < *deadline_ms)
		*deadline_ms = s->final_goaway_ms;
	return want;
}

/* The second half of a graceful stop's GOAWAY (h2_drain). */
static void final_goaway(struct h2_session *s)
{
	s->final_goaway_ms = 0;
	nghttp2_submit_goaway(s->ng, NGHTTP2_FLAG_NONE, nghttp2_session_get_last_proc_stream_id(s->ng),
			      NGHTTP2_NO_ERROR, NULL, 0);
	h2_flush(s);
}

void h2_timeout(struct h2_session *s)
{
	if (s->state == H2_OPEN && s->final_goaway_ms && conn_now_ms() >= s->final_goaway_ms) {
		final_goaway(s); /* not a timeout: the stop's next step */
		return;
	}
	if (s->state == H2_LINGER) { /* the end of a linger is routine, not a timeout */
		s->state = H2_CLOSE;
		return;
	}
	stats_timeout(); /* stats */
	if (s->state == H2_OPEN && !out_pending(s) && s->nstreams == 0) {
		/* idle: say goodbye with GOAWAY, as h2o and nginx do; a client
		 * that does not take it meets send_timeout */
		nghttp2_session_terminate_session(s->ng, NGHTTP2_NO_ERROR);
		s->progress_ms = conn_now_ms();
		h2_flush(s);
		return;
	}
	s->state = H2_CLOSE;
}

void h2_drain(struct h2_session *s)
{
	if (s->draining)
		return;
	s->draining = true;
	if (s->state == H2_LINGER)
		s->state = H2_CLOSE;
	if (s->state != H2_OPEN)
		return;
	/* the notice now, the GOAWAY naming the last stream taken a round trip
	 * or more later (h2_timeout): those finish, a client retries anything
	 * later on a new connection */
	int grace = s->cfg->drain_timeout_ms / 2 < H2_GOAWAY_NOTICE_MS ? s->cfg->drain_timeout_ms / 2
									: H2_GOAWAY_NOTICE_MS;
	nghttp2_submit_shutdown_notice(s->ng);
	s->final_goaway_ms = conn_now_ms() + grace;
	h2_flush(s);
}

bool h2_awaits_request(const struct h2_session *s)
{
	return s->state == H2_OPEN && !s->draining && !out_pending(s);
}

/* Gives back the pages of [p, p + len) that hold only zeros: they read
 * the same when the kernel maps a zero page in again. nghttp2's table of
 * streams is a page of buckets that are zeros when empty, as it is while no
 * stream is open (no closed stream is kept: SETTINGS_NO_RFC7540_PRIORITIES). */
static bool release_zero_pages(char *p, size_t len)
{
	static const char zero[4096];
	bool given = false;
	if (h2_page > sizeof(zero))
		return false;
	for (size_t off = 0; off + h2_page <= len; off += h2_page)
		if (memcmp(p + off, zero, h2_page) == 0 && madvise(p + off, h2_page, MADV_DONTNEED) == 0)
			given = true;
	return given;
}

bool h2_release_idle(struct h2_session *s)
{
	if (s->state != H2_OPEN || out_pending(s) || s->nstreams > 0)
		return false;
	bool held = s->in || s->out;
	mem_charge(s, NULL, -(ptrdiff_t)((s->in ? H2_IN_SIZE : 0) + s->out_cap));
	pagebuf_free(s->in, H2_IN_SIZE);
	pagebuf_free(s->out, s->out_cap);
	s->in = s->out = NULL;
	s->out_cap = s->out_off = s->out_len = 0;
	/* The output is empty, so the last nghttp2_session_mem_send() found
	 * nothing more to send (h2_flush): no frame is in nghttp2's buffer, and
	 * the next one is written into it from its start. Once only, until a
	 * frame may have touched it again. */
	if (s->framebuf && s->framebuf_sure && !s->framebuf_cold && !nghttp2_session_want_write(s->ng)) {
		/* its pages are its own to the last (h2_pages_get) */
		size_t len = h2_pages_len(s->framebuf_len);
		if (madvise(s->framebuf, len, MADV_DONTNEED) == 0)
			held = true;
		s->framebuf_cold = true;
	}
	if (s->table && release_zero_pages(s->table, s->table_len))
		held = true;
	if (spare_release(s))
		held = true;
	return held;
}
