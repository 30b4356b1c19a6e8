/* h2_census.c - what an idle nghttp2 server session holds: every block
 * nghttp2 still has allocated after answering one request, set up as
 * src/http2/session.c sets a session up (no encoder entry: a connection
 * indexes nothing in its first 16 responses, so a table of 0 holds what it would; RFC 9218
 * priorities, the same SETTINGS), the request the same as tools/h2_idle.py
 * sends (curl's user-agent and accept put in the decoder's table). Sizes
 * only: the session's own buffers, the connection's state and the heap's
 * holes are not nghttp2's.
 *
 *     cc -O1 -o /tmp/h2_census tools/h2_census.c -lnghttp2 && /tmp/h2_census */
#include <nghttp2/nghttp2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CENSUS_MAX 4096

static struct {
	void *p;
	size_t n;
	int seq;
} census_live[CENSUS_MAX];
static int census_seq;

static void census_note(void *p, size_t n)
{
	for (int i = 0; i < CENSUS_MAX; i++)
		if (!census_live[i].p) {
			census_live[i].p = p;
			census_live[i].n = n;
			census_live[i].seq = census_seq++;
			return;
		}
}

static void census_drop(void *p)
{
	for (int i = 0; i < CENSUS_MAX; i++)
		if (census_live[i].p == p) {
			census_live[i].p = NULL;
			return;
		}
}

static void *census_malloc(size_t n, void *user)
{
	(void)user;
	void *p = malloc(n);
	if (p)
		census_note(p, n);
	return p;
}

static void census_free(void *p, void *user)
{
	(void)user;
	if (p) {
		census_drop(p);
		free(p);
	}
}

static void *census_calloc(size_t nmemb, size_t size, void *user)
{
	(void)user;
	void *p = calloc(nmemb, size);
	if (p)
		census_note(p, nmemb * size);
	return p;
}

static void *census_realloc(void *p, size_t n, void *user)
{
	(void)user;
	if (p)
		census_drop(p);
	void *q = realloc(p, n);
	if (q)
		census_note(q, n);
	return q;
}

static int census_on_frame_recv(nghttp2_session *s, const nghttp2_frame *f, void *user)
{
	(void)user;
	if (f->hd.type == NGHTTP2_HEADERS && (f->hd.flags & NGHTTP2_FLAG_END_STREAM)) {
		nghttp2_nv nv[] = {
			{ (uint8_t *)":status", (uint8_t *)"200", 7, 3, NGHTTP2_NV_FLAG_NONE },
			{ (uint8_t *)"server", (uint8_t *)"spindle/0.1.0", 6, 13, NGHTTP2_NV_FLAG_NONE },
			{ (uint8_t *)"content-length", (uint8_t *)"0", 14, 1, NGHTTP2_NV_FLAG_NONE },
		};
		nghttp2_submit_response(s, f->hd.stream_id, nv, sizeof(nv) / sizeof(nv[0]), NULL);
	}
	return 0;
}

/* Everything the session has to send, sent (and dropped). */
static void census_pump(nghttp2_session *s)
{
	const uint8_t *p;
	while (nghttp2_session_mem_send(s, &p) > 0) {
	}
}

static void census_frame(uint8_t *buf, size_t *len, size_t plen, uint8_t type, uint8_t flags, uint32_t id,
			 const void *payload)
{
	uint8_t h[9] = { (uint8_t)(plen >> 16), (uint8_t)(plen >> 8), (uint8_t)plen, type, flags,
			 (uint8_t)(id >> 24), (uint8_t)(id >> 16), (uint8_t)(id >> 8), (uint8_t)id };
	memcpy(buf + *len, h, 9);
	memcpy(buf + *len + 9, payload, plen);
	*len += 9 + plen;
}

int main(void)
{
	nghttp2_session_callbacks *cb;
	nghttp2_option *opt;
	nghttp2_session *s;
	int rc = 1;

	if (nghttp2_session_callbacks_new(&cb) != 0 || nghttp2_option_new(&opt) != 0)
		return 1;
	nghttp2_session_callbacks_set_on_frame_recv_callback(cb, census_on_frame_recv);
	nghttp2_option_set_max_deflate_dynamic_table_size(opt, 0);
	nghttp2_option_set_server_fallback_rfc7540_priorities(opt, 1);
	nghttp2_option_set_builtin_recv_extension_type(opt, NGHTTP2_PRIORITY_UPDATE);
	nghttp2_mem mem = { NULL, census_malloc, census_free, census_calloc, census_realloc };
	if (nghttp2_session_server_new3(&s, cb, NULL, opt, &mem) != 0)
		goto out;
	nghttp2_settings_entry iv[] = {
		{ NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, 128 },
		{ NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 1 << 20 },
		{ NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, 8192 },
		{ NGHTTP2_SETTINGS_NO_RFC7540_PRIORITIES, 1 },
	};
	nghttp2_submit_settings(s, NGHTTP2_FLAG_NONE, iv, sizeof(iv) / sizeof(iv[0]));
	census_pump(s);
	uint8_t in[512];
	size_t n = 24;
	memcpy(in, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", n);
	census_frame(in, &n, 0, NGHTTP2_SETTINGS, 0, 0, "");
	/* :method GET, :scheme http, :path /index.html, :authority localhost,
	 * user-agent and accept with incremental indexing */
	static const uint8_t block[] = { 0x82, 0x86, 0x04, 11, '/', 'i', 'n', 'd', 'e', 'x', '.', 'h', 't', 'm', 'l',
					 0x01, 9, 'l', 'o', 'c', 'a', 'l', 'h', 'o', 's', 't',
					 0x40 | 58, 11, 'c', 'u', 'r', 'l', '/', '7', '.', '8', '8', '.', '1',
					 0x40 | 19, 3, '*', '/', '*' };
	census_frame(in, &n, sizeof(block), NGHTTP2_HEADERS, NGHTTP2_FLAG_END_STREAM | NGHTTP2_FLAG_END_HEADERS, 1,
		     block);
	census_frame(in, &n, 0, NGHTTP2_SETTINGS, NGHTTP2_FLAG_ACK, 0, "");
	if (nghttp2_session_mem_recv(s, in, n) != (ssize_t)n)
		goto out_session;
	census_pump(s);
	size_t total = 0;
	int blocks = 0;
	for (int i = 0; i < CENSUS_MAX; i++)
		if (census_live[i].p) {
			printf("block %d (allocation %d): %zu bytes\n", blocks, census_live[i].seq, census_live[i].n);
			total += census_live[i].n;
			blocks++;
		}
	printf("%d blocks, %zu bytes held by nghttp2 (their allocator's headers not counted)\n", blocks, total);
	rc = 0;
out_session:
	nghttp2_session_del(s);
out:
	nghttp2_option_del(opt);
	nghttp2_session_callbacks_del(cb);
	return rc;
}
