/* listen.c - listening sockets, and accepting without spinning on EMFILE. */
#include "listen.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

int listen_open(const char *bind_addr, int port, bool reuseport)
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
	if (bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, 4096) < 0)
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

void listen_tune_accepted(int fd)
{
	/* Nagle would hold a small segment until the previous one is ACKed, and
	 * the peer delays that ACK by up to 40 ms: pipelined or split responses
	 * would stall. We gather what is ready into one write ourselves, and
	 * cork with MSG_MORE where a head and a file must share a packet. */
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)); /* best effort: fails only on non-TCP */
}

void acceptor_init(struct acceptor *a, int listen_fd)
{
	a->fd = listen_fd;
	a->nfds = 1;
	a->fds[0] = listen_fd;
	a->next = 0;
	a->spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
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
		if (epoll_ctl(a->fd, EPOLL_CTL_ADD, fds[i], &ev) < 0)
			return -1;
	}
	return 0;
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

int acceptor_accept(struct acceptor *a, struct sockaddr_storage *peer, socklen_t *peerlen, int flags)
{
	for (;;) {
		int listener;
		int fd = accept_any(a, peer, peerlen, flags, &listener);
		if (fd >= 0) {
			listen_tune_accepted(fd);
			return fd;
		}
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
			/* another thread may have taken the spare's number meanwhile */
			if (a->spare < 0)
				a->spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
			if (a->spare < 0)
				return -EAGAIN; /* nothing to free: wait for a connection to close */
			/* Free one descriptor, take the connection off the queue and drop it.
			 * accept4() reserves a descriptor before looking at the queue, so
			 * EMFILE comes even when nobody waits: then there is nothing to do. */
			close(a->spare);
			fd = accept4(listener, NULL, NULL, SOCK_CLOEXEC);
			if (fd >= 0)
				close(fd);
			a->spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
			return fd >= 0 ? -EMFILE : -EAGAIN;
		default:
			return -errno;
		}
	}
}
