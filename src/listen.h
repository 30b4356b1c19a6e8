/* listen.h - listening sockets and accept with an fd budget. */
#ifndef SPINDLE_LISTEN_H
#define SPINDLE_LISTEN_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "config.h" /* struct listen_addr */

#define LISTEN_MAX 256

/* A bound, listening TCP socket (non-blocking, close-on-exec); -errno on failure. */
int listen_open(const char *bind_addr, int port, bool reuseport);
/* 0 when nobody listens on bind_addr:port, else -errno (-EADDRINUSE). A new
 * SO_REUSEPORT socket would silently join another process's group there. */
int listen_port_free(const char *bind_addr, int port);

/* `bind` and `port` as a listen address (when no `listen` line is given):
 * "*" is every IPv4 address, else a numeric IPv4 or IPv6 address (dual-stack,
 * as the system default had it before `listen` existed). -EINVAL otherwise. */
int listen_addr_from_bind(const char *bind_addr, int port, struct listen_addr *a);
/* A bound, listening socket on a (TCP, or UNIX with its mode and owner),
 * non-blocking, close-on-exec; -errno on failure, with the reason logged
 * when it is not the bind itself. A UNIX socket file left by an instance
 * that is gone (nobody accepts on it) is replaced; a live one never is. */
int listen_open_addr(const struct listen_addr *a, bool reuseport);
/* listen_port_free() for any address: 0 when a may be bound, else -errno.
 * A UNIX path is free when nothing is there or a stale socket is. */
int listen_addr_free(const struct listen_addr *a);

/* The master's listening sockets, kept for its whole life. With reuseport
 * they form one SO_REUSEPORT group whose order is fds[]: sockets are only
 * ever added at the end and closed only at exit, because closing one resets
 * the connections queued on it and reorders the kernel's group. A reload to
 * fewer workers therefore keeps the surplus sockets open, still accepted
 * from, and steers new connections away from them (listen_set_steer). */
struct listen_set {
	int fds[LISTEN_MAX];
	int n;
	bool reuseport;
	int steered;   /* new connections go to fds[0..steered) (0: kernel's hash over all) */
	/* the address, and for a UNIX socket the file we made (it is
	 * unlinked at close only if it is still that file) */
	struct listen_addr addr;
	dev_t unix_dev;
	ino_t unix_ino;
};

/* Opens sockets until the set holds `want` (at most LISTEN_MAX; one without
 * reuseport). 0, or -errno; the sockets opened so far stay in the set. */
int listen_set_grow(struct listen_set *ls, const char *bind_addr, int port, int want);
/* The same on ls->addr (set by the caller); a UNIX address holds one socket. */
int listen_set_grow_addr(struct listen_set *ls, int want);
/* New connections (SYNs) go to the first n sockets only, evenly: a reuseport
 * BPF program picks one at random, so a socket past n gets nothing new. 0, or
 * -errno (the kernel's hash over all sockets then applies, which loses
 * nothing as long as every socket is accepted from). */
int listen_set_steer(struct listen_set *ls, int n);
/* At final shutdown: new connections are refused, queued ones reset. */
void listen_set_refuse(const struct listen_set *ls);
void listen_set_close(struct listen_set *ls);

/* One acceptor per thread: holds a spare descriptor so that when the process
 * runs out of descriptors (EMFILE) a pending connection can still be taken
 * off the queue and closed instead of making accept() spin (libuv's trick). */
struct acceptor {
	int fd;        /* poll this: the listener, or an epoll set of all listeners */
	int spare;
	int nfds;
	int fds[LISTEN_MAX];
	int next;      /* round-robin start, so no listener starves */
	int64_t paused_until; /* CLOCK_MONOTONIC ms; 0: not paused (see acceptor_pause_ms) */
	uint64_t dropped;     /* connections dropped for want of a descriptor, not yet logged */
	int64_t drop_logged;  /* CLOCK_MONOTONIC ms of the last such log line; 0: none yet */
};

void acceptor_init(struct acceptor *a, int listen_fd);
/* One acceptor over several listeners (a SO_REUSEPORT group kept by the
 * master): a->fd is then an epoll set that polls readable when any has a
 * pending connection. Returns -1 if it cannot be made. */
int acceptor_init_set(struct acceptor *a, const int *fds, int n);
/* The acceptor of event loop `id` of `nloops`: with at least as many
 * listeners as loops, loop id takes fds[id], fds[id + nloops], ... (its own
 * socket, plus a share of the surplus left by a reload to fewer workers);
 * with fewer, every loop takes all. Returns 1 when the listeners are shared
 * by all loops, 0 when they are this loop's alone, -1 on error. */
int acceptor_init_share(struct acceptor *a, const int *fds, int n, int id, int nloops);
/* The same over several addresses (`listen` lines): fds holds ngroups groups one
 * after another, group g being lens[g] sockets of one address; each group is
 * shared out as above, so every loop serves every address. Returns 1 when
 * some group is shared by all loops, 0 when none is, -1 on error. */
int acceptor_init_groups(struct acceptor *a, const int *fds, const int *lens, int ngroups, int id, int nloops);
void acceptor_close(struct acceptor *a);
/* accept4() with `flags`; returns an fd, or -errno: -EAGAIN when none is
 * pending (or during a pause), -EMFILE when out of descriptors a pending
 * connection was taken off the queue and dropped (call again). The acceptor
 * logs the drops itself, a line a second at most: a client connecting in a
 * loop must not write a line per connection. The socket comes tuned by
 * listen_tune_listener(), which the acceptor applied to its listeners. */
int acceptor_accept(struct acceptor *a, struct sockaddr_storage *peer, socklen_t *peerlen, int flags);

/* Out of descriptors with no spare left to drop a connection with (another
 * thread took the number: the spare trick is not atomic), the listener stays
 * readable and nothing can be done about it: polling it would spin. The
 * acceptor then pauses (nginx disables its accept events for a while):
 * acceptor_pause_ms() is -1 when not paused, else the milliseconds left (0:
 * over, call acceptor_accept again). A caller must not wait for the listener
 * while it is >= 0, but for that long instead. */
int acceptor_pause_ms(const struct acceptor *a);
/* True once when a pause has run out, which it then clears: for an event
 * loop, whose edge-triggered or unwatched listener will not tell it so, and
 * which may not call acceptor_accept() at once (at its connection cap). */
bool acceptor_pause_over(struct acceptor *a);

/* For a thread that only accepts: sleeps until the listener is readable (or,
 * during a pause, the pause ends) or wake_fd is readable. */
void acceptor_wait(const struct acceptor *a, int wake_fd);
/* Socket options set on a listener for every connection accepted from it to
 * inherit: TCP_NODELAY, so a response is never held back waiting for the
 * peer's delayed ACK; and TCP_DEFER_ACCEPT for the listener
 * itself. listen_open() and listen_open_addr() apply it as they open a TCP
 * listener, the acceptor_init functions again (inherited listeners). */
void listen_tune_listener(int fd);

#endif
