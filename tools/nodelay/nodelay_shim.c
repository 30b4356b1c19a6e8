/* nodelay_shim.c: an LD_PRELOAD library for the lab's delayed-ACK experiment
 * (bench/experiments.py nodelay). It changes one thing in the server it is
 * loaded into, chosen by the environment, and nothing in the server's code:
 *
 *   NODELAY_SHIM=off  every setsockopt(IPPROTO_TCP, TCP_NODELAY, 1) sets 0:
 *                     spindle sets it once on each listener and its accepted
 *                     sockets inherit it, so they all run with Nagle on;
 *   NODELAY_SHIM=on   every socket accept() or accept4() returns gets
 *                     TCP_NODELAY, as a server that sets it at once would
 *                     (nginx sets it only when a connection goes idle in
 *                     keep-alive, so pipelined requests run with Nagle on).
 *
 * Nagle holds a small segment while an earlier one is unacknowledged, and the
 * client delays its ACK (Linux: 40 ms at least) while it waits for more of
 * the answer: a server that writes a batch of pipelined responses in more
 * than one write then stalls about 40 ms a batch. Turning TCP_NODELAY off
 * in spindle, and on in nginx, tests that explanation both ways.
 *
 * Build: cc -shared -fPIC -O2 -o nodelay_shim.so nodelay_shim.c -ldl */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

typedef int (*setsockopt_fn)(int, int, int, const void *, socklen_t);
typedef int (*accept_fn)(int, struct sockaddr *, socklen_t *);
typedef int (*accept4_fn)(int, struct sockaddr *, socklen_t *, int);

/* -1: the variable is unset or unknown, so the shim does nothing */
static int shim_mode(void)
{
	const char *m = getenv("NODELAY_SHIM");
	if (!m)
		return -1;
	if (strcmp(m, "off") == 0)
		return 0;
	if (strcmp(m, "on") == 0)
		return 1;
	return -1;
}

static setsockopt_fn real_setsockopt(void)
{
	static setsockopt_fn fn;
	if (!fn)
		fn = (setsockopt_fn)dlsym(RTLD_NEXT, "setsockopt");
	return fn;
}

int setsockopt(int fd, int level, int name, const void *val, socklen_t len)
{
	if (level == IPPROTO_TCP && name == TCP_NODELAY && shim_mode() == 0) {
		int zero = 0;
		return real_setsockopt()(fd, level, name, &zero, sizeof zero);
	}
	return real_setsockopt()(fd, level, name, val, len);
}

static int shim_accepted(int fd)
{
	if (fd >= 0 && shim_mode() == 1) {
		int one = 1;
		real_setsockopt()(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one); /* fails only on non-TCP */
	}
	return fd;
}

int accept(int fd, struct sockaddr *addr, socklen_t *len)
{
	static accept_fn fn;
	if (!fn)
		fn = (accept_fn)dlsym(RTLD_NEXT, "accept");
	return shim_accepted(fn(fd, addr, len));
}

int accept4(int fd, struct sockaddr *addr, socklen_t *len, int flags)
{
	static accept4_fn fn;
	if (!fn)
		fn = (accept4_fn)dlsym(RTLD_NEXT, "accept4");
	return shim_accepted(fn(fd, addr, len, flags));
}
