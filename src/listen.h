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
	int fd;        /* poll this: the listener, or an epoll set of all listeners */
	int spare;
	int nfds;
	int fds[256];
	int next;      /* round-robin start, so no listener starves */
};

void acceptor_init(struct acceptor *a, int listen_fd);
/* One acceptor over several listeners (a SO_REUSEPORT group kept by the
 * master): a->fd is then an epoll set that polls readable when any has a
 * pending connection. Returns -1 if it cannot be made. */
int acceptor_init_set(struct acceptor *a, const int *fds, int n);
void acceptor_close(struct acceptor *a);
/* accept4() with `flags`; returns an fd, or -errno (-EAGAIN when none is pending).
 * The socket comes tuned by listen_tune_accepted(). */
int acceptor_accept(struct acceptor *a, struct sockaddr_storage *peer, socklen_t *peerlen, int flags);

/* Socket options every accepted connection gets (for accepts made elsewhere,
 * e.g. by io_uring): TCP_NODELAY, so a response is never held back waiting
 * for the peer's delayed ACK (issue 10). */
void listen_tune_accepted(int fd);

#endif
