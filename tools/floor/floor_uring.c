/* floor_uring.c - the io_uring floor server (see floor.h): the kernel paths
 * spindle's uring model takes on a kept-alive connection, with none of its HTTP
 * work. One thread; a multishot accept; per connection a multishot receive
 * into a provided-buffer ring and one IORING_OP_SEND at a time; the ring set up
 * as spindle's is (single issuer, deferred task work); as spindle does for a
 * kept-alive connection, each socket sits in a registered file table, so its
 * operations skip fget/fput.
 *
 *     floor_uring PORT      (listens on 127.0.0.1; stop it with SIGTERM) */
#include <errno.h>
#include <liburing.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "floor.h"

#define RING_BUFS 512
#define RING_BUF_SIZE 2048
#define BUF_GROUP 1
#define FIXED_FILES 4096 /* registered slot = descriptor number; sockets past it go unregistered */

enum op { OP_ACCEPT = 1, OP_RECV, OP_SEND };

struct conn {
	int state;      /* partial "\r\n\r\n" seen */
	size_t owed;    /* response bytes not yet sent */
	size_t sent;    /* response bytes sent so far: where the next send starts */
	bool sending;   /* one send in flight: sends on one socket must not overlap */
	bool receiving; /* the multishot receive is armed */
	bool eof;       /* the peer sent its FIN: answer what it asked, then close */
	bool done;      /* the peer left or a send failed: close when nothing is in flight */
};

static struct io_uring ring;
static struct io_uring_buf_ring *bufring;
static char *bufs;
static struct conn conns[FLOOR_MAX_FDS];
static int listen_fd;

static uint64_t tag(enum op op, int fd) { return (uint64_t)op << 32 | (uint32_t)fd; }

static struct io_uring_sqe *get_sqe(void)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
	if (!sqe) { /* the submission queue is full: hand it to the kernel */
		io_uring_submit(&ring);
		sqe = io_uring_get_sqe(&ring);
	}
	return sqe;
}

static void arm_accept(void)
{
	struct io_uring_sqe *sqe = get_sqe();
	io_uring_prep_multishot_accept(sqe, listen_fd, NULL, NULL, 0);
	io_uring_sqe_set_data64(sqe, tag(OP_ACCEPT, listen_fd));
}

/* the socket's registered slot where it has one */
static void prep_target(struct io_uring_sqe *sqe, int fd)
{
	if (fd < FIXED_FILES) {
		sqe->fd = fd;
		sqe->flags |= IOSQE_FIXED_FILE;
	}
}

static void arm_recv(int fd)
{
	struct io_uring_sqe *sqe = get_sqe();
	io_uring_prep_recv_multishot(sqe, fd, NULL, 0, 0);
	prep_target(sqe, fd);
	sqe->flags |= IOSQE_BUFFER_SELECT;
	sqe->buf_group = BUF_GROUP;
	io_uring_sqe_set_data64(sqe, tag(OP_RECV, fd));
	conns[fd].receiving = true;
}

static void send_owed(int fd)
{
	struct conn *c = &conns[fd];
	const char *at;
	size_t len = floor_chunk(c->sent, c->owed, &at);
	struct io_uring_sqe *sqe = get_sqe();
	io_uring_prep_send(sqe, fd, at, len, MSG_NOSIGNAL);
	prep_target(sqe, fd);
	io_uring_sqe_set_data64(sqe, tag(OP_SEND, fd));
	c->sending = true;
}

/* a connection closes once neither its receive nor its send is in flight,
 * so no completion arrives for a descriptor number already reused */
static void maybe_close(int fd)
{
	if (!conns[fd].receiving && !conns[fd].sending) {
		if (fd < FIXED_FILES) { /* the table holds the socket open until its slot is cleared */
			int none = -1;
			io_uring_register_files_update(&ring, (unsigned)fd, &none, 1);
		}
		close(fd);
		conns[fd] = (struct conn){ 0 };
	}
}

static void on_recv(int fd, const struct io_uring_cqe *cqe)
{
	struct conn *c = &conns[fd];
	if (!(cqe->flags & IORING_CQE_F_MORE))
		c->receiving = false;
	if (cqe->res == -ENOBUFS) { /* every buffer in use: try again */
		if (!c->receiving)
			arm_recv(fd);
		return;
	}
	if (cqe->res > 0) {
		unsigned bid = cqe->flags >> IORING_CQE_BUFFER_SHIFT;
		char *buf = bufs + (size_t)bid * RING_BUF_SIZE;
		if (!c->done)
			c->owed += floor_count_requests(buf, (size_t)cqe->res, &c->state) * FLOOR_RESPONSE_LEN;
		io_uring_buf_ring_add(bufring, buf, RING_BUF_SIZE, (unsigned short)bid,
				      io_uring_buf_ring_mask(RING_BUFS), 0);
		io_uring_buf_ring_advance(bufring, 1);
	} else if (cqe->res == 0) {
		c->eof = true; /* the multishot receive has ended with it */
	} else {
		c->done = true; /* the receive failed */
	}
	if (c->done) {
		if (c->receiving) /* bytes after a failed send: let the receive end */
			shutdown(fd, SHUT_RDWR);
		maybe_close(fd);
		return;
	}
	if (c->owed && !c->sending)
		send_owed(fd);
	if (c->eof)
		maybe_close(fd); /* once the last response is out, if one is going */
	else if (!c->receiving)
		arm_recv(fd);
}

static void on_send(int fd, const struct io_uring_cqe *cqe)
{
	struct conn *c = &conns[fd];
	c->sending = false;
	if (cqe->res <= 0 || c->done) {
		c->done = true;
		shutdown(fd, SHUT_RDWR); /* ends the receive too */
		maybe_close(fd);
		return;
	}
	c->owed -= (size_t)cqe->res;
	c->sent += (size_t)cqe->res;
	if (c->owed)
		send_owed(fd);
	else
		maybe_close(fd); /* closes only if the receive has ended */
}

static void on_accept(const struct io_uring_cqe *cqe)
{
	int one = 1, fd = cqe->res;
	if (fd >= FLOOR_MAX_FDS) {
		close(fd);
	} else if (fd >= 0) {
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)); /* as spindle */
		if (fd < FIXED_FILES && io_uring_register_files_update(&ring, (unsigned)fd, &fd, 1) != 1)
			close(fd);
		else
			arm_recv(fd);
	}
	if (!(cqe->flags & IORING_CQE_F_MORE))
		arm_accept();
}

static int setup(int port)
{
	int one = 1;
	listen_fd = socket(AF_INET, SOCK_STREAM, 0);
	setsockopt(listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	struct sockaddr_in addr = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				    .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	if (bind(listen_fd, (struct sockaddr *)&addr, sizeof(addr)) < 0 || listen(listen_fd, 4096) < 0) {
		perror("floor_uring: bind/listen");
		return -1;
	}
	struct io_uring_params p = {
		.flags = IORING_SETUP_CQSIZE | IORING_SETUP_SUBMIT_ALL | IORING_SETUP_COOP_TASKRUN |
			 IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN,
		.cq_entries = 4096,
	};
	int err = io_uring_queue_init_params(256, &ring, &p);
	if (err < 0) {
		fprintf(stderr, "floor_uring: io_uring_queue_init: %s\n", strerror(-err));
		return -1;
	}
	err = io_uring_register_files_sparse(&ring, FIXED_FILES);
	if (err < 0) {
		fprintf(stderr, "floor_uring: io_uring_register_files_sparse: %s\n", strerror(-err));
		return -1;
	}
	bufs = malloc((size_t)RING_BUFS * RING_BUF_SIZE);
	if (!bufs || posix_memalign((void **)&bufring, 4096, RING_BUFS * sizeof(struct io_uring_buf)) != 0)
		return -1;
	io_uring_buf_ring_init(bufring);
	struct io_uring_buf_reg reg = { .ring_addr = (uint64_t)(uintptr_t)bufring, .ring_entries = RING_BUFS,
					.bgid = BUF_GROUP };
	err = io_uring_register_buf_ring(&ring, &reg, 0);
	if (err < 0) {
		fprintf(stderr, "floor_uring: io_uring_register_buf_ring: %s\n", strerror(-err));
		return -1;
	}
	for (unsigned i = 0; i < RING_BUFS; i++)
		io_uring_buf_ring_add(bufring, bufs + (size_t)i * RING_BUF_SIZE, RING_BUF_SIZE, (unsigned short)i,
				      io_uring_buf_ring_mask(RING_BUFS), (int)i);
	io_uring_buf_ring_advance(bufring, RING_BUFS);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: floor_uring PORT\n");
		return 2;
	}
	floor_init();
	if (setup(atoi(argv[1])) < 0)
		return 1;
	arm_accept();
	for (;;) {
		int err = io_uring_submit_and_wait(&ring, 1);
		if (err < 0 && err != -EINTR) {
			fprintf(stderr, "floor_uring: io_uring_enter: %s\n", strerror(-err));
			return 1;
		}
		struct io_uring_cqe *cqe;
		unsigned head, seen = 0;
		io_uring_for_each_cqe(&ring, head, cqe) {
			int fd = (int)(uint32_t)cqe->user_data;
			switch ((enum op)(cqe->user_data >> 32)) {
			case OP_ACCEPT: on_accept(cqe); break;
			case OP_RECV: on_recv(fd, cqe); break;
			case OP_SEND: on_send(fd, cqe); break;
			}
			seen++;
		}
		io_uring_cq_advance(&ring, seen);
	}
}
