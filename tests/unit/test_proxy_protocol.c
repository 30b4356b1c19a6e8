/* test_proxy_protocol.c - the PROXY header parser over a table of raw bytes
 * (versions 1 and 2, good and bad, each against an unreadable page and
 * through every prefix), and the wire's PROXY stage in front of the core:
 * who may send one, what follows it in the same read, LOCAL, refusals and
 * the deadline. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../src/log/log.h"
#include "../../src/net/proxy_protocol.h"
#include "../../src/tls/wire.h"
#include "guard.h"
#include "testserver.h"

#define V2_SIG "\r\n\r\n\0\r\nQUIT\n"
#define REQ "GET /a.txt HTTP/1.1\r\nHost: t\r\n\r\n"

struct pp_case {
	const char *name;
	const char *in;
	size_t len;
	enum proxy_status want;
	size_t hlen;       /* DONE: the header's length */
	int version;
	const char *src;   /* DONE and relayed: the client's address; NULL: not relayed */
	unsigned sport;
};

#define C(name, lit, want, hlen, ver, src, port) { name, lit, sizeof(lit) - 1, want, hlen, ver, src, port }

static const struct pp_case cases[] = {
	/* version 1 */
	C("v1 tcp4", "PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\r\n", PROXY_DONE, 47, 1, "192.168.0.1", 56324),
	C("v1 tcp4 + request", "PROXY TCP4 127.0.0.2 127.0.0.1 1 8080\r\n" REQ, PROXY_DONE, 39, 1, "127.0.0.2", 1),
	C("v1 tcp4 max", "PROXY TCP4 255.255.255.255 255.255.255.255 65535 65535\r\n", PROXY_DONE, 56, 1,
	  "255.255.255.255", 65535),
	C("v1 tcp4 port 0", "PROXY TCP4 1.2.3.4 5.6.7.8 0 0\r\n", PROXY_DONE, 32, 1, "1.2.3.4", 0),
	C("v1 tcp6", "PROXY TCP6 2001:db8::1 ::1 56324 8080\r\n", PROXY_DONE, 39, 1, "2001:db8::1", 56324),
	C("v1 tcp6 mapped", "PROXY TCP6 ::ffff:127.0.0.2 ::1 5 6\r\n", PROXY_DONE, 37, 1, "::ffff:127.0.0.2", 5),
	C("v1 unknown", "PROXY UNKNOWN\r\n", PROXY_DONE, 15, 1, NULL, 0),
	C("v1 unknown, rest ignored", "PROXY UNKNOWN whatever 1 2\r\n" REQ, PROXY_DONE, 28, 1, NULL, 0),
	C("v1 partial", "PROXY TCP4 192.168.0.1 192.168", PROXY_NEED_MORE, 0, 0, NULL, 0),
	C("v1 partial signature", "PROX", PROXY_NEED_MORE, 0, 0, NULL, 0),
	C("v1 CR last", "PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r", PROXY_NEED_MORE, 0, 0, NULL, 0),
	C("v1 leading zero address", "PROXY TCP4 1.2.3.04 5.6.7.8 1 2\r\n", PROXY_ERROR, 0, 0, NULL, 0),
	C("v1 leading zero port", "PROXY TCP4 1.2.3.4 5.6.7.8 01 2\r\n", PROXY_ERROR, 0, 0, NULL, 0),
	C("v1 port too big", "PROXY TCP4 1.2.3.4 5.6.7.8 65536 2\r\n", PROXY_ERROR, 0, 0, NULL, 0),
	C("v1 octet too big", "PROXY TCP4 1.2.3.256 5.6.7.8 1 2\r\n", PROXY_ERROR, 0, 0, NULL, 0),
	C("v1 three octets", "PROXY TCP4 1.2.3 5.6.7.8 1 2\r\n", PROXY_ERROR, 0, 0, NULL, 0),
	C("v1 v6 address as tcp4", "PROXY TCP4 ::1 ::1 1 2\r\n", PROXY_ERROR, 0, 0, NULL, 0),
	C("v1 v4 address as tcp6", "PROXY TCP6 1.2.3.4 5.6.7.8 1 2\r\n", PROXY_ERROR, 0, 0, NULL, 0),
	C("v1 two spaces", "PROXY TCP4 1.2.3.4  5.6.7.8 1 2\r\n", PROXY_ERROR, 0, 0, NULL, 0),
	C("v1 trailing space", "PROXY TCP4 1.2.3.4 5.6.7.8 1 2 \r\n", PROXY_ERROR, 0, 0, NULL, 0),
	C("v1 missing port", "PROXY TCP4 1.2.3.4 5.6.7.8 1\r\n", PROXY_ERROR, 0, 0, NULL, 0),
	C("v1 bare LF", "PROXY TCP4 1.2.3.4 5.6.7.8 1 2\n", PROXY_ERROR, 0, 0, NULL, 0),
	C("v1 CR without LF", "PROXY TCP4 1.2.3.4 5.6.7.8 1 2\rX", PROXY_ERROR, 0, 0, NULL, 0),
	C("v1 udp", "PROXY UDP4 1.2.3.4 5.6.7.8 1 2\r\n", PROXY_ERROR, 0, 0, NULL, 0),
	C("v1 lower case", "proxy TCP4 1.2.3.4 5.6.7.8 1 2\r\n", PROXY_ERROR, 0, 0, NULL, 0),
	C("v1 unknownx", "PROXY UNKNOWNX\r\n", PROXY_ERROR, 0, 0, NULL, 0),
	C("v1 empty protocol", "PROXY \r\n", PROXY_ERROR, 0, 0, NULL, 0),
	/* version 2: signature, ver_cmd, fam, length, addresses */
	C("v2 tcp4", V2_SIG "\x21\x11\x00\x0c" "\x7f\x00\x00\x02" "\x7f\x00\x00\x01" "\xa1\x12" "\x1f\x90",
	  PROXY_DONE, 28, 2, "127.0.0.2", 0xa112),
	C("v2 tcp4 + request", V2_SIG "\x21\x11\x00\x0c" "\x0a\x00\x00\x07" "\x7f\x00\x00\x01" "\x00\x50" "\x1f\x90" REQ,
	  PROXY_DONE, 28, 2, "10.0.0.7", 80),
	C("v2 tcp6", V2_SIG "\x21\x21\x00\x24" "\x20\x01\x0d\xb8\0\0\0\0\0\0\0\0\0\0\0\x01"
	  "\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\x01" "\x01\xbb" "\x1f\x90", PROXY_DONE, 52, 2, "2001:db8::1", 443),
	C("v2 tcp4 + TLVs", V2_SIG "\x21\x11\x00\x17" "\x7f\x00\x00\x02" "\x7f\x00\x00\x01" "\x00\x01" "\x00\x02"
	  "\x02\x00\x04" "host" "\x04\x00\x01" "\x00", PROXY_DONE, 39, 2, "127.0.0.2", 1),
	C("v2 local", V2_SIG "\x20\x00\x00\x00", PROXY_DONE, 16, 2, NULL, 0),
	C("v2 local with addresses", V2_SIG "\x20\x11\x00\x0c" "\x7f\x00\x00\x02" "\x7f\x00\x00\x01" "\0\1\0\2",
	  PROXY_DONE, 28, 2, NULL, 0),
	C("v2 unspec", V2_SIG "\x21\x00\x00\x00", PROXY_DONE, 16, 2, NULL, 0),
	C("v2 udp4: own peer", V2_SIG "\x21\x12\x00\x0c" "\x7f\x00\x00\x02" "\x7f\x00\x00\x01" "\0\1\0\2",
	  PROXY_DONE, 28, 2, NULL, 0),
	C("v2 partial signature", "\r\n\r\n\0\r", PROXY_NEED_MORE, 0, 0, NULL, 0),
	C("v2 partial address", V2_SIG "\x21\x11\x00\x0c" "\x7f\x00", PROXY_NEED_MORE, 0, 0, NULL, 0),
	C("v2 version 1", V2_SIG "\x11\x11\x00\x0c", PROXY_ERROR, 0, 0, NULL, 0),
	C("v2 command 2", V2_SIG "\x22\x11\x00\x0c", PROXY_ERROR, 0, 0, NULL, 0),
	C("v2 family 4", V2_SIG "\x21\x41\x00\x0c", PROXY_ERROR, 0, 0, NULL, 0),
	C("v2 transport 3", V2_SIG "\x21\x13\x00\x0c", PROXY_ERROR, 0, 0, NULL, 0),
	C("v2 tcp4 short block", V2_SIG "\x21\x11\x00\x08" "\x7f\x00\x00\x02" "\x7f\x00\x00\x01", PROXY_ERROR, 0, 0,
	  NULL, 0),
	C("v2 537 bytes", V2_SIG "\x21\x11\x02\x09", PROXY_ERROR, 0, 0, NULL, 0),
	C("v2 bad signature", "\r\n\r\n\0\r\nQUIT\r", PROXY_ERROR, 0, 0, NULL, 0),
	/* neither */
	C("http", REQ, PROXY_ERROR, 0, 0, NULL, 0),
	C("tls", "\x16\x03\x01\x00\xa5\x01", PROXY_ERROR, 0, 0, NULL, 0),
	C("empty", "", PROXY_NEED_MORE, 0, 0, NULL, 0),
};

static void src_text(const struct proxy_header *h, char *buf, size_t len, unsigned *port)
{
	if (h->src.ss_family == AF_INET) {
		const struct sockaddr_in *s = (const struct sockaddr_in *)&h->src;
		inet_ntop(AF_INET, &s->sin_addr, buf, (socklen_t)len);
		*port = ntohs(s->sin_port);
	} else {
		const struct sockaddr_in6 *s = (const struct sockaddr_in6 *)&h->src;
		inet_ntop(AF_INET6, &s->sin6_addr, buf, (socklen_t)len);
		*port = ntohs(s->sin6_port);
	}
}

Test(proxy_parse, table)
{
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const struct pp_case *c = &cases[i];
		struct span in = guarded(c->in, c->len);
		struct proxy_header h;
		enum proxy_status st = proxy_parse(in.p, in.len, &h);
		cr_expect_eq(st, c->want, "%s: status %d, want %d (%s)", c->name, st, c->want,
			     st == PROXY_ERROR ? h.error : "-");
		if (st == PROXY_ERROR)
			cr_expect(h.error && h.error[0], "%s: an error without a reason", c->name);
		if (st == PROXY_DONE && c->want == PROXY_DONE) {
			cr_expect_eq(h.len, c->hlen, "%s: length %zu, want %zu", c->name, h.len, c->hlen);
			cr_expect_eq(h.version, c->version, "%s", c->name);
			cr_expect_eq(h.relayed, c->src != NULL, "%s: relayed %d", c->name, h.relayed);
			if (h.relayed && c->src) {
				char got[INET6_ADDRSTRLEN];
				unsigned port;
				src_text(&h, got, sizeof(got), &port);
				cr_expect_str_eq(got, c->src, "%s", c->name);
				cr_expect_eq(port, c->sport, "%s: port %u", c->name, port);
			}
		}
		unguard(in);
	}
}

/* A header that trickles in is NEED_MORE until its last byte, whatever the
 * split; a refusal comes as soon as the bad byte does, not later. */
Test(proxy_parse, every_prefix_agrees)
{
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const struct pp_case *c = &cases[i];
		bool errored = false;
		for (size_t n = 0; n <= c->len; n++) {
			struct span in = guarded(c->in, n);
			struct proxy_header h;
			enum proxy_status st = proxy_parse(in.p, n, &h);
			unguard(in);
			if (c->want == PROXY_DONE)
				cr_expect_eq(st, n < c->hlen ? PROXY_NEED_MORE : PROXY_DONE, "%s: prefix %zu", c->name, n);
			else if (c->want == PROXY_NEED_MORE || !errored)
				cr_expect_neq(st, PROXY_DONE, "%s: prefix %zu", c->name, n);
			else
				cr_expect_eq(st, PROXY_ERROR, "%s: prefix %zu after an error", c->name, n);
			errored |= st == PROXY_ERROR;
		}
	}
}

/* The limits: a version 1 line gets 107 bytes to end, a version 2 header
 * 536 in all. */
Test(proxy_parse, limits)
{
	char line[200];
	struct proxy_header h;

	/* UNKNOWN's rest is ignored: the longest line that still ends in time */
	memset(line, 'x', sizeof(line));
	memcpy(line, "PROXY UNKNOWN ", 14);
	memcpy(line + PROXY_V1_MAX - 2, "\r\n", 2);
	cr_assert_eq(proxy_parse(line, PROXY_V1_MAX, &h), PROXY_DONE);
	cr_assert_eq(h.len, PROXY_V1_MAX);
	memcpy(line + PROXY_V1_MAX - 2, "xx\r\n", 4);
	cr_assert_eq(proxy_parse(line, PROXY_V1_MAX - 1, &h), PROXY_NEED_MORE);
	cr_assert_eq(proxy_parse(line, PROXY_V1_MAX, &h), PROXY_ERROR);
	cr_assert_eq(proxy_parse(line, PROXY_V1_MAX + 2, &h), PROXY_ERROR);

	static unsigned char v2[PROXY_HEADER_MAX + 1];
	memcpy(v2, V2_SIG "\x21\x11", 14);
	size_t alen = PROXY_HEADER_MAX - 16; /* addresses, then a NOOP TLV to the limit */
	v2[14] = (unsigned char)(alen >> 8);
	v2[15] = (unsigned char)alen;
	v2[28] = 0x04;
	v2[29] = (unsigned char)((alen - 15) >> 8);
	v2[30] = (unsigned char)(alen - 15);
	cr_assert_eq(proxy_parse(v2, PROXY_HEADER_MAX - 1, &h), PROXY_NEED_MORE);
	cr_assert_eq(proxy_parse(v2, PROXY_HEADER_MAX, &h), PROXY_DONE);
	cr_assert_eq(h.len, PROXY_HEADER_MAX);
	alen++;
	v2[14] = (unsigned char)(alen >> 8);
	v2[15] = (unsigned char)alen;
	cr_assert_eq(proxy_parse(v2, 16, &h), PROXY_ERROR, "refused from the length alone");
}

/* ---- the wire's PROXY stage ------------------------------------------ */

#define A_TXT "hello, proxy\n"

static struct test_server ts;
static char logdir[64];

#define SMALL_HEAD 256

/* A server whose one listener takes PROXY headers from 127.0.0.1 and ::1,
 * with its access log in a file of its own; max_head 0: the default. */
static void setup_with(size_t max_head)
{
	test_server_init(&ts);
	if (max_head) {
		ts.cfg.max_head = max_head;
		ts.cfg.max_request_line = 64;
	}
	test_server_file(&ts, "a.txt", A_TXT, strlen(A_TXT));
	strcpy(ts.cfg.real_ip_from, "127.0.0.1 ::1");
	strcpy(logdir, "/tmp/spindle-pp-XXXXXX");
	cr_assert_not_null(mkdtemp(logdir));
	snprintf(ts.cfg.access_log, sizeof(ts.cfg.access_log), "%s/access.log", logdir);
	snprintf(ts.cfg.error_log, sizeof(ts.cfg.error_log), "%s/error.log", logdir);
	ts.cfg.header_timeout_ms = 50;
	test_server_open(&ts);
	cr_assert_eq(log_open(&ts.cfg), 0);
	ts.srv.nlisten_groups = 1;
	ts.srv.listen_group_proxy[0] = true;
}

static void wire_setup(void)
{
	setup_with(0);
}

static void small_setup(void)
{
	setup_with(SMALL_HEAD);
}

static void wire_teardown(void)
{
	log_close();
	test_server_close(&ts);
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", logdir);
	cr_assert_eq(system(cmd), 0);
}

static char *read_log(const char *name)
{
	static char buf[8192];
	char path[128];
	snprintf(path, sizeof(path), "%s/%s", logdir, name);
	int fd = open(path, O_RDONLY);
	ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : 0;
	if (fd >= 0)
		close(fd);
	buf[n > 0 ? n : 0] = '\0';
	return buf;
}

static struct wire *wire_from(const char *addr)
{
	struct sockaddr_storage ss;
	socklen_t len;
	memset(&ss, 0, sizeof(ss));
	if (strchr(addr, ':')) {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons(40000);
		cr_assert_eq(inet_pton(AF_INET6, addr, &s6->sin6_addr), 1);
		len = sizeof(*s6);
	} else {
		struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
		s4->sin_family = AF_INET;
		s4->sin_port = htons(40000);
		cr_assert_eq(inet_pton(AF_INET, addr, &s4->sin_addr), 1);
		len = sizeof(*s4);
	}
	struct wire *w = wire_new(&ts.srv, NULL, -1, (struct sockaddr *)&ss, len);
	cr_assert_not_null(w);
	return w;
}

/* Feeds bytes as reads of at most `chunk` (and of what the wire offers),
 * stopping early if the wire no longer wants to read. */
static enum conn_want feed(struct wire *w, const char *p, size_t len, size_t chunk)
{
	int64_t deadline;
	enum conn_want want = wire_wants(w, &deadline);
	while (len > 0 && want == CONN_WANT_READ) {
		struct iovec space = wire_input_space(w);
		size_t n = len < chunk ? len : chunk;
		if (n > space.iov_len)
			n = space.iov_len;
		cr_assert(n > 0, "the wire offered no room");
		memcpy(space.iov_base, p, n);
		wire_input_done(w, (ssize_t)n);
		p += n;
		len -= n;
		want = wire_wants(w, &deadline);
	}
	return want;
}

/* Takes everything the wire sends until it wants to read or close. */
static size_t drain_output(struct wire *w, char *out, size_t cap)
{
	size_t have = 0;
	int64_t deadline;
	while (wire_wants(w, &deadline) == CONN_WANT_WRITE) {
		struct conn_output o;
		size_t n = 0;
		wire_output(w, &o);
		for (int i = 0; i < o.iovcnt; i++) {
			size_t take = o.iov[i].iov_len < cap - have ? o.iov[i].iov_len : cap - have;
			memcpy(out + have, o.iov[i].iov_base, take);
			have += take;
			n += o.iov[i].iov_len;
		}
		if (o.iovcnt == 0 && o.file_len > 0) {
			ssize_t r = pread(o.file_fd, out + have, o.file_len, o.file_off);
			cr_assert_eq(r, (ssize_t)o.file_len);
			have += o.file_len;
			n = o.file_len;
		}
		wire_output_done(w, n);
	}
	out[have] = '\0';
	return have;
}

static void expect_served(struct wire *w, const char *in, size_t len, size_t chunk)
{
	char out[4096];
	cr_assert_eq(feed(w, in, len, chunk), CONN_WANT_WRITE, "no response after the header and request");
	drain_output(w, out, sizeof(out) - 1);
	cr_assert(strncmp(out, "HTTP/1.1 200", 12) == 0, "%s", out);
	cr_assert(strstr(out, A_TXT), "%s", out);
}

/* The access log's first field, the client, of its last line. */
static const char *logged_client(void)
{
	static char who[64];
	const char *log = read_log("access.log");
	const char *last = log, *p;
	while ((p = strchr(last, '\n')) && p[1])
		last = p + 1;
	size_t n = strcspn(last, " ");
	cr_assert(n > 0 && n < sizeof(who), "access log: %s", log);
	memcpy(who, last, n);
	who[n] = '\0';
	return who;
}

static const char v2_tcp4[] = V2_SIG "\x21\x11\x00\x0c" "\xc0\x00\x02\x07" "\x7f\x00\x00\x01" "\xa1\x12" "\x1f\x90";

TestSuite(proxy_wire, .init = wire_setup, .fini = wire_teardown);

Test(proxy_wire, v1_then_request_in_one_read)
{
	static const char in[] = "PROXY TCP4 192.0.2.7 127.0.0.1 41234 8080\r\n" REQ;
	struct wire *w = wire_from("127.0.0.1");
	expect_served(w, in, sizeof(in) - 1, sizeof(in));
	wire_free(w);
	cr_assert_str_eq(logged_client(), "192.0.2.7");
}

Test(proxy_wire, v2_byte_by_byte)
{
	char in[256];
	memcpy(in, v2_tcp4, sizeof(v2_tcp4) - 1);
	memcpy(in + sizeof(v2_tcp4) - 1, REQ, strlen(REQ));
	struct wire *w = wire_from("::1");
	expect_served(w, in, sizeof(v2_tcp4) - 1 + strlen(REQ), 1);
	wire_free(w);
	cr_assert_str_eq(logged_client(), "192.0.2.7");
}

Test(proxy_wire, v1_tcp6_header_alone_then_request)
{
	static const char hdr[] = "PROXY TCP6 2001:db8::5 ::1 41234 8080\r\n";
	struct wire *w = wire_from("127.0.0.1");
	int64_t deadline;
	cr_assert_eq(feed(w, hdr, sizeof(hdr) - 1, 1000), CONN_WANT_READ);
	cr_assert_eq(wire_wants(w, &deadline), CONN_WANT_READ);
	expect_served(w, REQ, strlen(REQ), 1000);
	wire_free(w);
	cr_assert_str_eq(logged_client(), "2001:db8::5");
}

/* A balancer's health check (v2 LOCAL) is logged as the balancer itself. */
Test(proxy_wire, v2_local_keeps_the_peer)
{
	static const char in[] = V2_SIG "\x20\x00\x00\x00" REQ;
	struct wire *w = wire_from("127.0.0.1");
	expect_served(w, in, sizeof(in) - 1, sizeof(in));
	wire_free(w);
	cr_assert_str_eq(logged_client(), "127.0.0.1");
}

/* The rest of the read goes on whole even when the core's buffer is small:
 * the stage never reads more than the core can take after the header. */
Test(proxy_wire_small, pipelined_requests_after_the_header, .init = small_setup, .fini = wire_teardown)
{
	static const char in[] = "PROXY TCP4 192.0.2.7 127.0.0.1 41234 8080\r\n" REQ REQ REQ REQ REQ REQ REQ REQ;
	static char out[16384];
	size_t len = sizeof(in) - 1, sent = 0, got = 0;
	int64_t deadline;
	struct wire *w = wire_from("127.0.0.1");

	for (int round = 0; round < 1000; round++) {
		enum conn_want want = wire_wants(w, &deadline);
		if (want == CONN_WANT_WRITE) {
			got += drain_output(w, out + got, sizeof(out) - 1 - got);
			continue;
		}
		if (want != CONN_WANT_READ || sent == len)
			break;
		struct iovec space = wire_input_space(w);
		if (sent == 0)
			cr_assert_leq(space.iov_len, SMALL_HEAD, "offered %zu bytes, more than the core takes",
				      space.iov_len);
		size_t n = len - sent < space.iov_len ? len - sent : space.iov_len;
		memcpy(space.iov_base, in + sent, n);
		wire_input_done(w, (ssize_t)n);
		sent += n;
	}
	out[got] = '\0';
	size_t n = 0;
	for (const char *p = out; (p = strstr(p, "HTTP/1.1 200")); p++)
		n++;
	cr_assert_eq(n, 8, "8 pipelined responses after the header, got %zu:\n%s", n, out);
	wire_free(w);
	cr_assert_str_eq(logged_client(), "192.0.2.7");
}

Test(proxy_wire, refused_outside_real_ip_from)
{
	int64_t deadline;
	struct wire *w = wire_from("127.0.0.2");
	cr_assert_eq(wire_wants(w, &deadline), CONN_WANT_CLOSE);
	cr_assert_not(wire_awaits_request(w));
	wire_free(w);
	cr_assert(strstr(read_log("error.log"), "proxy_protocol: refused 127.0.0.2:40000: not in real_ip_from"),
		  "%s", read_log("error.log"));
	cr_assert_str_eq(read_log("access.log"), "");
}

Test(proxy_wire, refused_without_a_header)
{
	struct wire *w = wire_from("127.0.0.1");
	cr_assert_eq(feed(w, REQ, strlen(REQ), 1000), CONN_WANT_CLOSE);
	wire_free(w);
	cr_assert(strstr(read_log("error.log"), "refused 127.0.0.1:40000: no PROXY protocol header"), "%s",
		  read_log("error.log"));
	cr_assert_str_eq(read_log("access.log"), "", "no request was answered");
}

Test(proxy_wire, refused_malformed)
{
	static const char in[] = "PROXY TCP4 192.0.2.7 127.0.0.1 41234\r\n" REQ;
	struct wire *w = wire_from("::1");
	cr_assert_eq(feed(w, in, sizeof(in) - 1, 1000), CONN_WANT_CLOSE);
	wire_free(w);
	cr_assert(strstr(read_log("error.log"), "refused [::1]:40000: a version 1 line with bad ports"), "%s",
		  read_log("error.log"));
}

Test(proxy_wire, ended_inside_the_header)
{
	struct wire *w = wire_from("127.0.0.1");
	int64_t deadline;
	cr_assert_eq(feed(w, v2_tcp4, 20, 1000), CONN_WANT_READ);
	wire_input_space(w);
	wire_input_done(w, 0);
	cr_assert_eq(wire_wants(w, &deadline), CONN_WANT_CLOSE);
	wire_free(w);
	cr_assert(strstr(read_log("error.log"), "the connection ended inside its PROXY header"), "%s",
		  read_log("error.log"));
}

/* A connect-and-close (a port probe) is no refusal worth a line. */
Test(proxy_wire, connect_and_close_is_quiet)
{
	struct wire *w = wire_from("127.0.0.1");
	int64_t deadline;
	wire_input_space(w);
	wire_input_done(w, 0);
	cr_assert_eq(wire_wants(w, &deadline), CONN_WANT_CLOSE);
	wire_free(w);
	cr_assert_eq(strstr(read_log("error.log"), "refused"), NULL, "%s", read_log("error.log"));
}

/* The header must come within header_timeout, as a request's head must. */
Test(proxy_wire, header_deadline)
{
	struct wire *w = wire_from("127.0.0.1");
	int64_t deadline, start = conn_now_ms();
	cr_assert_eq(feed(w, "PROXY TCP4 ", 11, 1000), CONN_WANT_READ);
	cr_assert_eq(wire_wants(w, &deadline), CONN_WANT_READ);
	cr_assert(deadline > 0 && deadline <= start + ts.cfg.header_timeout_ms + 20, "deadline %lld, start %lld",
		  (long long)deadline, (long long)start);
	wire_timeout(w);
	cr_assert_eq(wire_wants(w, &deadline), CONN_WANT_CLOSE);
	wire_free(w);
	cr_assert(strstr(read_log("error.log"), "no complete PROXY header within header_timeout"), "%s",
		  read_log("error.log"));
}

/* Refusals from a client connecting in a loop: ten lines a second, then
 * a count of those left out. */
Test(proxy_wire, refusals_are_rate_limited)
{
	for (int i = 0; i < 50; i++)
		wire_free(wire_from("127.0.0.9"));
	const char *log = read_log("error.log");
	size_t lines = 0;
	for (const char *p = log; (p = strstr(p, "refused 127.0.0.9")); p++)
		lines++;
	cr_assert(lines >= 10 && lines <= 20, "%zu lines:\n%s", lines, log);
}
