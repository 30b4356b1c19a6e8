/* listen.c - listening sockets, and accepting without spinning on EMFILE. */
#include "listen.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
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

void acceptor_init(struct acceptor *a, int listen_fd)
{
	a->fd = listen_fd;
	a->spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
}

void acceptor_close(struct acceptor *a)
{
	if (a->spare >= 0)
		close(a->spare);
	a->spare = -1;
}

int acceptor_accept(struct acceptor *a, struct sockaddr_storage *peer, socklen_t *peerlen, int flags)
{
	for (;;) {
		*peerlen = sizeof(*peer);
		int fd = accept4(a->fd, (struct sockaddr *)peer, peerlen, flags | SOCK_CLOEXEC);
		if (fd >= 0)
			return fd;
		switch (errno) {
		case EINTR:
		case ECONNABORTED:
			continue;
		case EMFILE:
		case ENFILE:
			if (a->spare < 0)
				return -errno;
			/* Free one descriptor, take the connection off the queue and drop it. */
			close(a->spare);
			fd = accept4(a->fd, NULL, NULL, SOCK_CLOEXEC);
			if (fd >= 0)
				close(fd);
			a->spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
			return -EMFILE;
		default:
			return -errno;
		}
	}
}
