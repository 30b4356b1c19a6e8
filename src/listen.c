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
#include <grp.h>
#include <pwd.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/stat.h>
#include <sys/un.h>
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
	if (fd >= 0)
		listen_tune_listener(fd);
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

/* ---- addresses of `listen` lines ------------------------------------------ */

int listen_addr_from_bind(const char *bind_addr, int port, struct listen_addr *a)
{
	unsigned char bin[sizeof(struct in6_addr)];

	*a = (struct listen_addr){ .kind = LISTEN_TCP, .port = port, .mode = -1 };
	if (bind_addr[0] == '\0' || strcmp(bind_addr, "*") == 0)
		return 0;
	if (strlen(bind_addr) >= sizeof(a->host) ||
	    (inet_pton(AF_INET, bind_addr, bin) != 1 && inet_pton(AF_INET6, bind_addr, bin) != 1))
		return -EINVAL;
	strcpy(a->host, bind_addr);
	return 0;
}

static int tcp_sockaddr(const struct listen_addr *a, struct sockaddr_storage *ss, socklen_t *len)
{
	memset(ss, 0, sizeof(*ss));
	if (strchr(a->host, ':')) {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;
		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons((uint16_t)a->port);
		if (inet_pton(AF_INET6, a->host, &s6->sin6_addr) != 1)
			return -EINVAL;
		*len = sizeof(*s6);
	} else {
		struct sockaddr_in *s4 = (struct sockaddr_in *)ss;
		s4->sin_family = AF_INET;
		s4->sin_port = htons((uint16_t)a->port);
		if (a->host[0] && inet_pton(AF_INET, a->host, &s4->sin_addr) != 1)
			return -EINVAL;
		*len = sizeof(*s4);
	}
	return 0;
}

static int tcp_open_bound(const struct listen_addr *a, bool reuseport)
{
	struct sockaddr_storage ss;
	socklen_t len;
	int one = 1, fd = -1, err = tcp_sockaddr(a, &ss, &len);

	if (err < 0)
		return err;
	fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		goto fail;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (reuseport && setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) < 0)
		goto fail;
	/* Set either way: the system default (net.ipv6.bindv6only) must not
	 * decide whether [::] also takes IPv4 and collides with 0.0.0.0. */
	int v6only = a->ipv6only;
	if (ss.ss_family == AF_INET6 && setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, sizeof(v6only)) < 0)
		goto fail;
	if (bind(fd, (struct sockaddr *)&ss, len) < 0)
		goto fail;
	return fd;
fail:
	err = -errno;
	if (fd >= 0)
		close(fd);
	return err;
}

/* Whether a UNIX socket file has a live listener behind it: a connect that
 * is refused means its owner is gone (the file outlived a crash). */
static bool unix_path_live(const struct sockaddr_un *sun)
{
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return true; /* cannot tell: assume live, never unlink it */
	int r = connect(fd, (const struct sockaddr *)sun, sizeof(*sun));
	int err = errno;
	close(fd);
	/* a full backlog answers EAGAIN: live too */
	return r == 0 || (err != ECONNREFUSED && err != ENOENT);
}

/* Removes a stale socket file at the path; 0 when the path is (now) free,
 * -EADDRINUSE when something live or not a socket is there. */
static int unix_clear_stale(const struct sockaddr_un *sun)
{
	struct stat st;
	if (lstat(sun->sun_path, &st) < 0)
		return errno == ENOENT ? 0 : -errno;
	if (!S_ISSOCK(st.st_mode) || unix_path_live(sun))
		return -EADDRINUSE;
	if (unlink(sun->sun_path) < 0 && errno != ENOENT)
		return -errno;
	log_info("listen: removed the stale socket %s (nobody accepted on it)", sun->sun_path);
	return 0;
}

/* The uid and gid a UNIX socket file is to get (-1: unchanged). */
static int unix_owner_ids(const struct listen_addr *a, uid_t *uid, gid_t *gid)
{
	*uid = (uid_t)-1;
	*gid = (gid_t)-1;
	if (a->owner[0]) {
		struct passwd *pw = getpwnam(a->owner);
		if (!pw) {
			log_error("listen on unix:%s: owner: no user '%s'", a->path, a->owner);
			return -EINVAL;
		}
		*uid = pw->pw_uid;
	}
	if (a->group[0]) {
		struct group *gr = getgrnam(a->group);
		if (!gr) {
			log_error("listen on unix:%s: group: no group '%s'", a->path, a->group);
			return -EINVAL;
		}
		*gid = gr->gr_gid;
	}
	return 0;
}

/* chown of the socket file just bound, before listen() so nobody connects
 * first. Never by path: in a directory another user may write to (a run
 * directory of the serving user), the file can be swapped for a symlink
 * after bind(), and root would chown the link's target. The file is opened
 * without following a link and must be a socket. */
static int unix_set_owner(const struct listen_addr *a, uid_t uid, gid_t gid)
{
	if (uid == (uid_t)-1 && gid == (gid_t)-1)
		return 0;
	struct stat st;
	int err = 0, fd = open(a->path, O_PATH | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st) < 0) {
		err = -errno;
	} else if (!S_ISSOCK(st.st_mode)) {
		err = -EEXIST;
		log_error("listen on unix:%s: replaced by something else right after bind; not touching it", a->path);
	} else if (fchownat(fd, "", uid, gid, AT_EMPTY_PATH) < 0) {
		err = -errno;
	}
	if (err < 0 && err != -EEXIST)
		log_error("listen on unix:%s: chown: %s", a->path, strerror(-err));
	if (fd >= 0)
		close(fd);
	return err;
}

static int unix_open_bound(const struct listen_addr *a)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	uid_t uid;
	gid_t gid;
	int fd, err;

	if (strlen(a->path) >= sizeof(sun.sun_path))
		return -ENAMETOOLONG;
	strcpy(sun.sun_path, a->path);
	err = unix_owner_ids(a, &uid, &gid);
	if (err < 0)
		return err;
	err = unix_clear_stale(&sun);
	if (err < 0)
		return err;
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	/* The mode through the umask: bind() creates the file with it, so no
	 * chmod by path follows (see unix_set_owner), and no client connects
	 * in a window with the wrong mode. The master has no other thread. */
	mode_t umask_was = 0;
	if (a->mode >= 0)
		umask_was = umask((mode_t)(~a->mode & 0777));
	int r = bind(fd, (struct sockaddr *)&sun, sizeof(sun));
	err = r < 0 ? -errno : 0;
	if (a->mode >= 0)
		umask(umask_was);
	if (r < 0) {
		close(fd);
		return err;
	}
	err = unix_set_owner(a, uid, gid);
	if (err < 0) {
		close(fd);
		if (err != -EEXIST)
			unlink(a->path); /* ours: just made */
		return err;
	}
	return fd;
}

int listen_open_addr(const struct listen_addr *a, bool reuseport)
{
	int fd = a->kind == LISTEN_UNIX ? unix_open_bound(a) : tcp_open_bound(a, reuseport);

	if (fd >= 0 && listen(fd, 4096) < 0) {
		int err = -errno;
		close(fd);
		if (a->kind == LISTEN_UNIX)
			unlink(a->path);
		return err;
	}
	/* now, not only when a worker's acceptor starts: a connection queued
	 * before that (a client quick after a start or reload) would miss it */
	if (fd >= 0 && a->kind == LISTEN_TCP)
		listen_tune_listener(fd);
	return fd;
}

int listen_addr_free(const struct listen_addr *a)
{
	if (a->kind == LISTEN_UNIX) {
		struct sockaddr_un sun = { .sun_family = AF_UNIX };
		if (strlen(a->path) >= sizeof(sun.sun_path))
			return -ENAMETOOLONG;
		strcpy(sun.sun_path, a->path);
		struct stat st;
		if (lstat(sun.sun_path, &st) < 0)
			return 0;
		return S_ISSOCK(st.st_mode) && !unix_path_live(&sun) ? 0 : -EADDRINUSE;
	}
	/* as listen_port_free: without SO_REUSEPORT, bind() fails while anyone listens */
	int fd = tcp_open_bound(a, false);
	if (fd < 0)
		return fd;
	close(fd);
	return 0;
}

int listen_set_grow_addr(struct listen_set *ls, int want)
{
	if (!ls->reuseport || ls->addr.kind == LISTEN_UNIX)
		want = 1; /* a second socket without SO_REUSEPORT could not bind */
	if (want > LISTEN_MAX)
		want = LISTEN_MAX;
	while (ls->n < want) {
		int fd = listen_open_addr(&ls->addr, ls->reuseport && ls->addr.kind == LISTEN_TCP);
		if (fd < 0)
			return fd;
		if (ls->addr.kind == LISTEN_UNIX) {
			struct stat st;
			if (lstat(ls->addr.path, &st) == 0) {
				ls->unix_dev = st.st_dev;
				ls->unix_ino = st.st_ino;
			}
		}
		/* appended: the kernel adds it at the end of the group too */
		ls->fds[ls->n++] = fd;
	}
	return 0;
}

int listen_set_grow(struct listen_set *ls, const char *bind_addr, int port, int want)
{
	if (ls->n == 0 && listen_addr_from_bind(bind_addr, port, &ls->addr) < 0)
		return -EINVAL;
	ls->addr.port = port; /* a test opens on port 0 first, then on the one the kernel chose */
	return listen_set_grow_addr(ls, want);
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
	/* Our socket file only: another instance may have replaced it after
	 * finding it stale (this one already shut down), and that one is live. */
	struct stat st;
	if (ls->n && ls->addr.kind == LISTEN_UNIX && lstat(ls->addr.path, &st) == 0 && S_ISSOCK(st.st_mode) &&
	    st.st_dev == ls->unix_dev && st.st_ino == ls->unix_ino)
		unlink(ls->addr.path);
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
	/* TCP_DEFER_ACCEPT (h2o's default, nginx's `deferred`): the listener
	 * wakes us when a connection's first bytes arrive, not at its
	 * handshake, so accept, the first read and the answer take one wake-up
	 * and no read comes back empty (measured: about a third less server
	 * CPU per new connection). A client that connects and stays silent is
	 * accepted anyway once the kernel's SYN-ACK retransmission after 1 s
	 * is answered; header_timeout then runs as before. TLS clients speak
	 * first too (ClientHello). */
	setsockopt(fd, IPPROTO_TCP, TCP_DEFER_ACCEPT, &one, sizeof(one));
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
	return acceptor_init_groups(a, fds, &n, 1, id, nloops);
}

int acceptor_init_groups(struct acceptor *a, const int *fds, const int *lens, int ngroups, int id, int nloops)
{
	int mine[LISTEN_MAX], k = 0, shared = 0;

	for (int g = 0; g < ngroups; fds += lens[g], g++) {
		int n = lens[g];
		if (n < nloops) {
			shared = 1; /* every loop takes all of this address's sockets */
			for (int j = 0; j < n && k < LISTEN_MAX; j++)
				mine[k++] = fds[j];
			continue;
		}
		for (int j = id; j < n && k < LISTEN_MAX; j += nloops)
			mine[k++] = fds[j];
	}
	if (k == 0)
		return -1;
	return acceptor_init_set(a, mine, k) < 0 ? -1 : shared;
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
