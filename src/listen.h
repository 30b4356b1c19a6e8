/* listen.h - listening sockets and accept with an fd budget. */
#ifndef SPINDLE_LISTEN_H
#define SPINDLE_LISTEN_H

#include <stdbool.h>
#include <sys/socket.h>

/* A bound, listening TCP socket (non-blocking, close-on-exec); -errno on failure. */
int listen_open(const char *bind_addr, int port, bool reuseport);

/* One acceptor per thread: holds a spare descriptor so that when the process
 * runs out of descriptors (EMFILE) a pending connection can still be taken
 * off the queue and closed instead of making accept() spin (libuv's trick). */
struct acceptor {
	int fd;
	int spare;
};

void acceptor_init(struct acceptor *a, int listen_fd);
void acceptor_close(struct acceptor *a);
/* accept4() with `flags`; returns an fd, or -errno (-EAGAIN when none is pending). */
int acceptor_accept(struct acceptor *a, struct sockaddr_storage *peer, socklen_t *peerlen, int flags);

#endif
