/* floor.h - what the two floor servers share: the one response they send and
 * the scan that counts requests. A floor server does only what every HTTP/1.1
 * keep-alive server must do per request (receive the bytes, find where each
 * request ends, send a response), so its CPU per request is what those kernel
 * calls cost with no HTTP work (not a proven minimum: a server could take
 * cheaper paths); tools/peer_cpu.py measures it beside spindle and its peers. It is a measuring instrument, not a server: every
 * request, whatever it asks, gets the same 200 with spindle's head for the
 * 13-byte /hello.txt. */
#ifndef FLOOR_H
#define FLOOR_H

#include <stddef.h>
#include <string.h>

#define FLOOR_MAX_FDS 65536
#define FLOOR_COPIES 64 /* responses in one send at most */

static const char floor_response[] =
	"HTTP/1.1 200 OK\r\nServer: spindle/0.1.0\r\nDate: Mon, 23 Nov 2026 03:02:31 GMT\r\n"
	"Last-Modified: Mon, 23 Nov 2026 00:41:43 GMT\r\nETag: \"6b038bc7-d\"\r\nAccept-Ranges: bytes\r\n"
	"Content-Type: text/plain; charset=utf-8\r\nContent-Length: 13\r\n\r\nHello, world\n";
#define FLOOR_RESPONSE_LEN (sizeof(floor_response) - 1)

/* FLOOR_COPIES responses back to back, so `owed` bytes starting anywhere in a
 * response go out in one send from floor_out + (sent % FLOOR_RESPONSE_LEN). */
static char floor_out[FLOOR_COPIES * FLOOR_RESPONSE_LEN];

static inline void floor_init(void)
{
	for (size_t i = 0; i < FLOOR_COPIES; i++)
		memcpy(floor_out + i * FLOOR_RESPONSE_LEN, floor_response, FLOOR_RESPONSE_LEN);
}

/* floor_count_requests: how many request heads end ("\r\n\r\n") in buf;
 * *state carries a partial terminator across reads (0-3 bytes of it seen). */
static inline unsigned floor_count_requests(const char *buf, size_t len, int *state)
{
	unsigned n = 0;
	int st = *state;
	for (size_t i = 0; i < len; i++) {
		char c = buf[i];
		if (c == '\r')
			st = (st == 2) ? 3 : 1;
		else if (c == '\n' && (st == 1 || st == 3))
			st++;
		else
			st = 0;
		if (st == 4) {
			n++;
			st = 0;
		}
	}
	*state = st;
	return n;
}

/* floor_chunk: the bytes of the next send: from where the last one stopped,
 * at most to the end of floor_out. */
static inline size_t floor_chunk(size_t sent, size_t owed, const char **at)
{
	size_t off = sent % FLOOR_RESPONSE_LEN;
	*at = floor_out + off;
	return owed < sizeof(floor_out) - off ? owed : sizeof(floor_out) - off;
}

#endif
