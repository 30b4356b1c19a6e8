/* listen.c - listening sockets, and accepting without spinning on EMFILE. */
#include "listen.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#include "log/log.h"

/* How long an acceptor leaves a readable listener alone when it can neither
 * accept nor drop: short enough that service resumes promptly once
 * descriptors free up, long enough that the wake-ups cost nothing. */
#define ACCEPT_PAUSE_MS 100
#define DROP_LOG_MS 1000

static int64_t monotonic_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A TCP socket bound to bind_addr:port, not yet listening; -errno on failure. */
static int open_bound(const char *bind_addr, int port, bool reuseport)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_PASSIVE | AI_NUMERICHOST | AI_NUMERICSERV };
	struct addrinfo *ai;
	char portstr[8];
	int one = 1, fd, err;

	snprintf(portstr, sizeof(portstr), "%d", port);
	err = getaddrinfo(bind_addr[0] && strcmp(bind_addr, "*") ? bind_addr : NULL, portstr, &hints, &ai);
	if (err)
		return -EINVAL;
	fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		goto fail;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (reuseport && setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) < 0)
		goto fail;
	if (bind(fd, ai->ai_addr, ai->ai_addrlen) < 0)
		goto fail;
	freeaddrinfo(ai);
	return fd;
fail:
	err = -errno;
	if (fd >= 0)
		close(fd);
	freeaddrinfo(ai);
	return err;
}

int listen_open(const char *bind_addr, int port, bool reuseport)
{
	int fd = open_bound(bind_addr, port, reuseport);

	if (fd >= 0 && listen(fd, 4096) < 0) {
		int err = -errno;
		close(fd);
		return err;
	}
	return fd;
}

int listen_port_free(const char *bind_addr, int port)
{
	/* Without SO_REUSEPORT, bind() fails while anyone listens there, also
	 * in a reuseport group (SO_REUSEADDR only forgives TIME_WAIT). */
	int fd = open_bound(bind_addr, port, false);

	if (fd < 0)
		return fd;
	close(fd);
	return 0;
}

int listen_set_grow(struct listen_set *ls, const char *bind_addr, int port, int want)
{
	if (!ls->reuseport)
		want = 1; /* a second socket without SO_REUSEPORT could not bind */
	if (want > LISTEN_MAX)
		want = LISTEN_MAX;
	while (ls->n < want) {
		int fd = listen_open(bind_addr, port, ls->reuseport);
		if (fd < 0)
			return fd;
		/* appended: the kernel adds it at the end of the group too */
		ls->fds[ls->n++] = fd;
	}
	return 0;
}

int listen_set_steer(struct listen_set *ls, int n)
{
	if (n > ls->n)
		n = ls->n;
	if (!ls->reuseport || n < 1 || n == ls->steered)
		return 0;
	/* Returns an index into the group, which the kernel keeps in the order
	 * the sockets started listening (= fds[]): a random one below n. The
	 * SYN alone is steered; the handshake then stays with that socket. */
	struct sock_filter code[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, (unsigned)(SKF_AD_OFF + SKF_AD_RANDOM)),
		BPF_STMT(BPF_ALU | BPF_MOD | BPF_K, (unsigned)n),
		BPF_STMT(BPF_RET | BPF_A, 0),
	};
	struct sock_fprog prog;
	memset(&prog, 0, sizeof(prog)); /* the padding after .len goes to the kernel too */
	prog.len = sizeof(code) / sizeof(code[0]);
	prog.filter = code;
	/* one program per group: set through any member, it replaces the last */
	if (setsockopt(ls->fds[0], SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF, &prog, sizeof(prog)) < 0)
		return -errno;
	ls->steered = n;
	return 0;
}

void listen_set_refuse(const struct listen_set *ls)
{
	for (int i = 0; i < ls->n; i++)
		shutdown(ls->fds[i], SHUT_RD);
}

void listen_set_close(struct listen_set *ls)
{
	for (int i = 0; i < ls->n; i++)
		close(ls->fds[i]);
	ls->n = 0;
	ls->steered = 0;
}

void listen_tune_listener(int fd)
{
	/* Nagle would hold a small segment until the previous one is ACKed, and
	 * the peer delays that ACK by up to 40 ms: pipelined or split responses
	 * would stall. We gather what is ready into one write ourselves, and
	 * cork with MSG_MORE where a head and a file must share a packet.
	 * Set on the listener, Linux copies it to every socket accepted from it
	 * (by accept4 or by io_uring): no setsockopt per connection. */
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)); /* best effort: fails only on non-TCP */
}

void acceptor_init(struct acceptor *a, int listen_fd)
{
	a->fd = listen_fd;
	a->nfds = 1;
	a->fds[0] = listen_fd;
	a->next = 0;
	a->paused_until = 0;
	a->dropped = 0;
	a->drop_logged = 0;
	a->spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
	listen_tune_listener(listen_fd);
}

int acceptor_init_set(struct acceptor *a, const int *fds, int n)
{
	if (n <= 1) {
		acceptor_init(a, fds[0]);
		return 0;
	}
	acceptor_init(a, fds[0]);
	a->fd = epoll_create1(EPOLL_CLOEXEC);
	if (a->fd < 0)
		return -1;
	a->nfds = n < 256 ? n : 256;
	for (int i = 0; i < a->nfds; i++) {
		struct epoll_event ev = { .events = EPOLLIN, .data.fd = fds[i] }; /* level-triggered */
		a->fds[i] = fds[i];
		listen_tune_listener(fds[i]);
		if (epoll_ctl(a->fd, EPOLL_CTL_ADD, fds[i], &ev) < 0)
			return -1;
	}
	return 0;
}

int acceptor_init_share(struct acceptor *a, const int *fds, int n, int id, int nloops)
{
	int mine[LISTEN_MAX], k = 0;

	if (n < nloops)
		return acceptor_init_set(a, fds, n) < 0 ? -1 : 1;
	for (int j = id; j < n && k < LISTEN_MAX; j += nloops)
		mine[k++] = fds[j];
	return acceptor_init_set(a, mine, k) < 0 ? -1 : 0;
}

void acceptor_close(struct acceptor *a)
{
	if (a->spare >= 0)
		close(a->spare);
	a->spare = -1;
	if (a->nfds > 1 && a->fd >= 0)
		close(a->fd); /* the epoll set, not a listener */
	a->fd = -1;
}

/* Tries each listener once, starting after the last one that had a connection. */
static int accept_any(struct acceptor *a, struct sockaddr_storage *peer, socklen_t *peerlen, int flags,
		      int *listener)
{
	for (int i = 0; i < a->nfds; i++) {
		int idx = (a->next + i) % a->nfds;
		*peerlen = sizeof(*peer);
		int fd = accept4(a->fds[idx], (struct sockaddr *)peer, peerlen, flags | SOCK_CLOEXEC);
		*listener = a->fds[idx];
		if (fd >= 0) {
			a->next = idx + 1;
			return fd;
		}
		if (errno != EAGAIN && errno != EWOULDBLOCK)
			return -1;
	}
	errno = EAGAIN;
	return -1;
}

int acceptor_pause_ms(const struct acceptor *a)
{
	if (a->paused_until == 0)
		return -1;
	int64_t left = a->paused_until - monotonic_ms();
	return left > 0 ? (int)left : 0;
}

bool acceptor_pause_over(struct acceptor *a)
{
	if (acceptor_pause_ms(a) != 0)
		return false;
	a->paused_until = 0;
	return true;
}

void acceptor_wait(const struct acceptor *a, int wake_fd)
{
	int pause = acceptor_pause_ms(a);
	struct pollfd pfd[2] = { { .fd = wake_fd, .events = POLLIN },
				 { .fd = pause < 0 ? a->fd : -1, .events = POLLIN } };
	poll(pfd, 2, pause); /* EINTR: the caller loops and looks again */
}

/* One warning per DROP_LOG_MS at most, with how many were dropped since
 * the last: the first drop is told at once. */
static void drop_logged(struct acceptor *a)
{
	int64_t now = monotonic_ms();
	a->dropped++;
	if (a->drop_logged != 0 && now - a->drop_logged < DROP_LOG_MS)
		return;
	log_warn("out of file descriptors: %llu connection%s dropped%s", (unsigned long long)a->dropped,
		 a->dropped == 1 ? "" : "s", a->drop_logged ? " since the last report" : "");
	a->dropped = 0;
	a->drop_logged = now;
}

/* Out of descriptors with a connection (maybe) waiting: frees the spare,
 * takes one connection off the queue and drops it, then takes the spare
 * back. Returns -EMFILE when one was dropped, -EAGAIN when none waited, or
 * pauses the acceptor and returns -EAGAIN when it could not act. */
static int accept_drop_one(struct acceptor *a, int listener)
{
	/* another thread may have taken the spare's number meanwhile */
	if (a->spare < 0)
		a->spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (a->spare < 0)
		goto pause; /* nothing to free: wait for a connection to close */
	/* accept4() reserves a descriptor before looking at the queue, so
	 * EMFILE comes even when nobody waits: EAGAIN then, nothing to do. */
	close(a->spare);
	int fd = accept4(listener, NULL, NULL, SOCK_CLOEXEC);
	int err = errno;
	if (fd >= 0)
		close(fd);
	a->spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		drop_logged(a);
		return -EMFILE;
	}
	if (err == EMFILE || err == ENFILE)
		goto pause; /* the freed number went to another thread first */
	return -EAGAIN;
pause:
	a->paused_until = monotonic_ms() + ACCEPT_PAUSE_MS;
	return -EAGAIN;
}

int acceptor_accept(struct acceptor *a, struct sockaddr_storage *peer, socklen_t *peerlen, int flags)
{
	if (a->paused_until) {
		if (acceptor_pause_ms(a) > 0)
			return -EAGAIN;
		a->paused_until = 0;
	}
	for (;;) {
		int listener;
		int fd = accept_any(a, peer, peerlen, flags, &listener);
		if (fd >= 0)
			return fd;
		switch (errno) {
		case EINTR:
		case ECONNABORTED:
			continue;
		case EINVAL:
			/* The master shut the listener down (final stop) and our own
			 * stop signal is on its way: nothing to accept, and a short
			 * pause so a poll on the dead listener cannot spin. */
			usleep(10000);
			return -EAGAIN;
		case EMFILE:
		case ENFILE:
			return accept_drop_one(a, listener);
		default:
			return -errno;
		}
	}
}
