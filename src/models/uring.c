/* uring.c - N completion-driven loops over io_uring (liburing), one thread
 * and one ring each, with its own SO_REUSEPORT listener (or all sharing one;
 * a loop that also owns surplus listeners left by a reload polls their set).
 *
 * Each connection has at most two operations in flight: the one the core
 * wants (a send of wire_output()'s memory, IORING_OP_SEND for one iovec and
 * SENDMSG for more; a poll for room to send a file range; a shutdown; or a
 * single-shot recv into wire_input_space()), and a multishot receive. A read
 * that follows our answer asks for IORING_RECVSEND_POLL_FIRST: the client
 * has rarely sent its next request yet. Completions feed the core, which then says what to
 * submit next. All SQEs prepared in an iteration go to the kernel in one
 * io_uring_enter, which also waits.
 *
 * Receiving: one multishot recv per connection, armed when the core wants
 * to read after its first response and left armed across the next ones (a
 * first request is read single-shot: a connection that closes after one
 * response would pay a cancel to end the multishot), takes the client's
 * bytes into buffers from the loop's provided-buffer ring: no SQE per
 * request, no failed first attempt, no poll re-armed per request. Its bytes
 * go to a per-connection stash, are copied into wire_input_space() while the
 * core wants READ, and each buffer goes back to the ring as soon as it is
 * copied. Flow control: when bytes wait in the stash while the core is busy
 * with something else (a client pipelining, or flooding while we send a large
 * file), the multishot receive is cancelled; what we hold is what had
 * arrived by then, at most the ring's worth for the whole loop, and the rest
 * waits in the kernel. The core's next read takes the stash, then arms a new
 * one. A ring that runs dry (-ENOBUFS ends a multishot receive) is not
 * retried at once: that connection's next read is a single-shot recv into
 * its own input buffer, the one after tries the ring again; and while half
 * the ring sits in stashes (a few hostile clients can hold that much until
 * their send timeout), reads are single-shot for everyone. Without a ring
 * (a kernel before 5.19) every read is single-shot. TLS connections use the
 * same path: the ciphertext is copied into the TLS wire's input space, as a
 * recv would put it there.
 *
 * A kept-alive connection's socket is also put in the ring's sparse file
 * table (an IORING_OP_FILES_UPDATE submitted before its multishot receive),
 * so its operations skip the file lookup and reference count each time
 * (fget/fput: 1.4% of the keep-alive profile). The table holds a reference
 * of its own: the socket closes when the entry's removal, submitted by
 * uconn_close() beside its close(), runs. A connection that closes after one
 * response never gets an entry.
 *
 * Fairness: the core takes input only when it wants READ, and a connection
 * gets one core operation per turn of the loop; a multishot receive posts a
 * bounded number of completions per wake-up, and a busy core stops it. So a
 * client flooding bytes or pipelining requests as fast as it reads cannot
 * keep the loop to itself (epoll.c needs an explicit budget for that).
 *
 * File ranges go out with sendfile() called by the loop itself, on the
 * socket made non-blocking, one chunk per turn; a poll for POLLOUT through the
 * ring waits for room and gives the other connections their turn. io_uring
 * has no sendfile: a read into a buffer + send copies every byte twice more
 * (measured: half epoll's throughput), and IORING_OP_SPLICE runs in an
 * io-wq worker thread (it cannot be issued non-blocking), so each slow client
 * would pin a kernel thread, and its pipe costs two descriptors. Non-blocking
 * sockets change nothing for the ring's own recv/sendmsg: io_uring tries them
 * without waiting and, on EAGAIN, waits by poll as it does for blocking ones.
 * The price, as in epoll: a file not in the page cache is read from disk by
 * sendfile() while the loop waits (a static server's files mostly are cached).
 *
 * The kernel holds pointers into a connection (its input buffer, iovecs, file
 * buffer) while an operation is in flight, so a connection is freed, timed
 * out or force-closed only once none of its operations is in flight: a
 * deadline that expires, or a drain that ends, cancels them all and acts when
 * the last one's final CQE arrives. */
#include <errno.h>
#include <liburing.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "../tls/wire.h"
#include "../listen.h"
#include "../log/log.h"
#include "../overload.h"
#include "../pagebuf.h"
#include "../server.h"
#include "../stats/stats.h"
#include "io.h"
#include "loops.h"
#include "model.h"
#include "slots.h"
#include "sweep.h"

#define URING_SCAN_MS 200            /* how often deadlines are checked */
#define URING_SQ_ENTRIES 1024
#define URING_CANCEL_GRACE_MS 2000   /* after the drain deadline, for cancels to land */

/* The provided-buffer ring of a loop's multishot receives (see the top):
 * URING_BUFS buffers of URING_BUF_SIZE bytes, 1 MiB per loop. A request head
 * fits one buffer; a bigger one spans several, copied out in order.
 * SPINDLE_URING_BUFS (a power of two) makes it smaller, for tests only. */
#define URING_BUF_SIZE 2048
#define URING_BUFS 512
#define URING_BUF_GROUP 0
#define URING_NO_BUF UINT16_MAX /* an empty stash */

/* max_connections is shared by the loops (slots.h). An accept in flight
 * cannot hold a slot while it waits (an idle loop would starve a busy one),
 * so a connection takes its slot when accepted; one that finds none is parked
 * unserved, and no accept is armed again until a freed slot lets it in: at
 * the cap clients wait, as in epoll, with at most one parked descriptor per
 * loop beyond the cap. One wake-up of a multishot accept takes the whole
 * backlog (listen.c asks for 4096, the default somaxconn) before the loop can
 * count it, so it is used only while that many more connections fit. */
#define URING_BACKLOG 4096 /* listen.c's listen() backlog */
#define URING_MULTISHOT_ROOM URING_BACKLOG
#define URING_PARKED_MAX 64

/* user_data of the non-connection operations; connections use their address. */
enum {
	UD_ACCEPT = 1,
	UD_WAKE = 2,
	UD_IGNORE = 3, /* cancel requests: their own result does not matter */
	UD_SLOT = 4,   /* poll on this loop's slots eventfd: a slot freed at the cap */
	UD_LISTEN = 5, /* poll on the listener while out of descriptors */
};

enum uop { OP_NONE, OP_RECV, OP_SENDMSG, OP_POLLOUT, OP_SHUTDOWN };

/* What to do when the cancelled (or racing) operation completes. */
enum upending { PEND_NONE, PEND_TIMEOUT, PEND_CLOSE };

/* What a send in flight points the kernel at (600 bytes): a connection
 * holds it only while it sends, not while it waits for a request. */
struct usend {
	struct conn_output out;
	struct msghdr msg;
};

struct uconn {
	struct wire *c;
	int fd;
	int fixed;             /* its index in the ring's file table, or -1 */
	enum uop op;           /* in flight, or OP_NONE */
	enum upending pending;
	bool cancel_sent;
	bool answered;         /* the last operation sent bytes: the client has yet to send more */
	bool kept_alive;       /* answered once and reading again: worth a multishot receive */
	bool busy;             /* an operation completed since the last deadline scan */
	/* The multishot receive (user_data: our address | 1), beside `op`. */
	bool mrecv;            /* in flight */
	bool mrecv_cancel_sent;
	bool mrecv_dry;        /* it ended on an empty buffer ring: read the next bytes single-shot */
	bool mrecv_end_due;    /* it ended on EOF or an error, still to tell the core after the stash */
	int mrecv_end;         /* ... that result (0 or -errno) */
	/* Received bytes the core has not taken yet: a FIFO of ring buffers,
	 * linked through loop.stash_next; the head's first stash_off bytes are
	 * taken. Bounded by the ring, which the loop shares. */
	uint16_t stash_head, stash_tail;
	uint32_t stash_off;
	struct usend *send;    /* while it sends: a page from pagebuf.h, given back when idle */
	int64_t send_ns;       /* stats: when it was queued (see conn_writing) */
	struct uconn *prev, *next;
};

struct loop {
	const struct server *srv;
	int id;
	struct io_uring ring;
	bool ring_ok;
	bool enable;           /* created disabled: the loop thread enables it (single issuer) */
	struct acceptor acc;
	bool multishot;        /* multishot accept works on this kernel, and is wanted */
	struct conn_slots *slots; /* max_connections, shared by all loops */
	bool accept_armed;     /* an accept (or, out of descriptors, a listener poll) is in flight */
	bool accept_multi;     /* ... and it is multishot */
	uint64_t accept_ud;    /* ... its user_data: UD_ACCEPT or UD_LISTEN */
	bool accept_cancel_sent;
	bool slot_armed;       /* the poll on our slots eventfd is in flight */
	bool emfile;           /* out of descriptors: poll the listener, accept by hand */
	int parked[URING_PARKED_MAX]; /* accepted at the cap, waiting for a slot */
	int nparked;
	bool wake_armed;       /* the poll on srv->wake_fd is in flight */
	int64_t accept_retry_at; /* after an accept error: not before then (0: now) */
	struct uconn *conns;   /* every open connection, for deadline scans */
	int nconns;
	struct sweep sweep;    /* deadline sweeps; a stop's drain time */
	int64_t turn_ns;       /* stats: when this batch of completions came (one clock read a batch) */
	int rc;
	/* the provided-buffer ring (NULL: this kernel has none; single-shot recv only) */
	struct io_uring_buf_ring *br;
	char *bufs;            /* nbufs * URING_BUF_SIZE bytes, buffer id i at i * URING_BUF_SIZE */
	uint16_t *stash_next;  /* per buffer id: the next in its connection's stash */
	uint16_t *stash_len;   /* per buffer id: bytes received into it */
	unsigned stashed;      /* buffers held in connections' stashes, not in the ring */
	unsigned nbufs;
	int *fixed_free;       /* free indexes of the ring's file table (none registered: NULL) */
	int nfixed_free;
	int *fixed_fds;        /* per index: the descriptor its update installs (read when submitted) */
};

static void uconn_step(struct loop *lp, struct uconn *u);

/* A free SQE; when the submission queue is full, hand it to the kernel first. */
static struct io_uring_sqe *loop_sqe(struct loop *lp)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&lp->ring);
	if (!sqe) {
		io_uring_submit(&lp->ring);
		sqe = io_uring_get_sqe(&lp->ring);
	}
	return sqe;
}

/* user_data of a connection's operations: its address, | 1 for its multishot receive */
#define UD_MRECV_TAG 1u

static uint64_t uconn_ud(const struct uconn *u)
{
	return (uint64_t)(uintptr_t)u;
}

static char *loop_buf(const struct loop *lp, uint16_t bid)
{
	return lp->bufs + (size_t)bid * URING_BUF_SIZE;
}

/* Gives a provided buffer back to the kernel as soon as its bytes are copied out. */
static void loop_buf_give(struct loop *lp, uint16_t bid)
{
	io_uring_buf_ring_add(lp->br, loop_buf(lp, bid), URING_BUF_SIZE, bid, io_uring_buf_ring_mask(lp->nbufs), 0);
	io_uring_buf_ring_advance(lp->br, 1);
}

static void uconn_stash_push(struct loop *lp, struct uconn *u, uint16_t bid, uint32_t len)
{
	lp->stash_len[bid] = (uint16_t)len;
	lp->stash_next[bid] = URING_NO_BUF;
	lp->stashed++;
	if (u->stash_head == URING_NO_BUF) {
		u->stash_head = bid;
		u->stash_off = 0;
	} else {
		lp->stash_next[u->stash_tail] = bid;
	}
	u->stash_tail = bid;
}

static void uconn_stash_pop(struct loop *lp, struct uconn *u)
{
	uint16_t bid = u->stash_head;
	u->stash_head = lp->stash_next[bid];
	u->stash_off = 0;
	lp->stashed--;
	loop_buf_give(lp, bid);
}

/* Kept-alive connections use a registered file: their operations skip the
 * file lookup and reference count (fget/fput) each time. The update runs
 * when submitted, before the operations prepared after it. */
static void uconn_fix_file(struct loop *lp, struct uconn *u)
{
	if (u->fixed >= 0 || lp->nfixed_free == 0)
		return;
	struct io_uring_sqe *sqe = loop_sqe(lp);
	if (!sqe)
		return;
	int index = lp->fixed_free[--lp->nfixed_free];
	/* not &u->fd: the kernel reads it at submission, and u may be gone by then */
	lp->fixed_fds[index] = u->fd;
	io_uring_prep_files_update(sqe, &lp->fixed_fds[index], 1, index);
	sqe->flags |= IOSQE_CQE_SKIP_SUCCESS;
	io_uring_sqe_set_data64(sqe, UD_IGNORE);
	u->fixed = index;
}

/* The table holds a reference to the socket: it closes when this runs. */
static void uconn_unfix_file(struct loop *lp, struct uconn *u)
{
	static int none = -1;
	if (u->fixed < 0)
		return;
	struct io_uring_sqe *sqe = loop_sqe(lp);
	if (sqe) {
		io_uring_prep_files_update(sqe, &none, 1, u->fixed);
		sqe->flags |= IOSQE_CQE_SKIP_SUCCESS;
		io_uring_sqe_set_data64(sqe, UD_IGNORE);
	} else {
		io_uring_register_files_update(&lp->ring, (unsigned)u->fixed, &none, 1);
	}
	lp->fixed_free[lp->nfixed_free++] = u->fixed;
	u->fixed = -1;
}

/* Points a prepared operation at u's registered file, when it has one. */
static void uconn_use_file(const struct uconn *u, struct io_uring_sqe *sqe)
{
	if (u->fixed >= 0) {
		sqe->fd = u->fixed;
		sqe->flags |= IOSQE_FIXED_FILE;
	}
}

static void uconn_close(struct loop *lp, struct uconn *u)
{
	/* nothing is in flight: a plain close() cannot race the kernel */
	while (u->stash_head != URING_NO_BUF)
		uconn_stash_pop(lp, u);
	uconn_unfix_file(lp, u);
	pagebuf_put(u->send);
	close(u->fd);
	/* given back before wire_free counts the close: once the statistics
	 * show a connection closed, its slot is free to a newcomer */
	slots_give(lp->slots);
	wire_free(u->c);
	if (u->prev)
		u->prev->next = u->next;
	else
		lp->conns = u->next;
	if (u->next)
		u->next->prev = u->prev;
	free(u);
	lp->nconns--;
	sweep_closed(&lp->sweep);
}

static void loop_cancel_ud(struct loop *lp, uint64_t ud, bool *sent)
{
	if (*sent)
		return;
	struct io_uring_sqe *sqe = loop_sqe(lp);
	if (!sqe)
		return; /* retried by the next scan */
	io_uring_prep_cancel64(sqe, ud, 0);
	io_uring_sqe_set_data64(sqe, UD_IGNORE);
	*sent = true;
}

/* Asks the kernel to end u's operations early; once none is left in
 * flight, uconn_next acts on `why`. */
static void uconn_cancel(struct loop *lp, struct uconn *u, enum upending why)
{
	if (why > u->pending)
		u->pending = why;
	if (u->op != OP_NONE)
		loop_cancel_ud(lp, uconn_ud(u), &u->cancel_sent);
	if (u->mrecv)
		loop_cancel_ud(lp, uconn_ud(u) | UD_MRECV_TAG, &u->mrecv_cancel_sent);
}

/* Ends a connection: at once if nothing of it is in flight, else cancels what
 * is and closes when the last of it has ended (a plain close() would race the
 * kernel over the descriptor). */
static void uconn_end(struct loop *lp, struct uconn *u)
{
	if (u->op == OP_NONE && !u->mrecv)
		uconn_close(lp, u);
	else
		uconn_cancel(lp, u, PEND_CLOSE);
}

/* Flow control: bytes wait in the stash while the core is busy with other
 * work (a client pipelining, or flooding while we send): stop the multishot
 * receive, so that what we hold stays what had arrived by now; the core's
 * next read takes the stash and then arms a new one. */
static void uconn_hold_input(struct loop *lp, struct uconn *u)
{
	if (u->mrecv && u->stash_head != URING_NO_BUF)
		loop_cancel_ud(lp, uconn_ud(u) | UD_MRECV_TAG, &u->mrecv_cancel_sent);
}

/* Hands the core what the multishot receive left: its bytes in order, then
 * how it ended. False: nothing is left. Only while the core wants READ. */
static bool uconn_feed(struct loop *lp, struct uconn *u)
{
	if (u->stash_head == URING_NO_BUF) {
		if (!u->mrecv_end_due)
			return false;
		u->mrecv_end_due = false;
		wire_input_done(u->c, u->mrecv_end);
		return true;
	}
	struct iovec space = wire_input_space(u->c);
	uint16_t bid = u->stash_head;
	size_t n = lp->stash_len[bid] - u->stash_off;
	if (n > space.iov_len)
		n = space.iov_len;
	if (n == 0) { /* no input buffer (out of memory): end it, as a recv into nothing would */
		wire_input_done(u->c, -ENOMEM);
		return true;
	}
	memcpy(space.iov_base, loop_buf(lp, bid) + u->stash_off, n);
	u->stash_off += (uint32_t)n;
	if (u->stash_off == lp->stash_len[bid])
		uconn_stash_pop(lp, u);
	wire_input_done(u->c, (ssize_t)n);
	return true;
}

/* Prepares the read the core wants: on a kept-alive connection, a multishot
 * receive into the loop's buffer ring, which stays armed across the
 * responses; else one recv into the core's own input space: for a first
 * request (a connection that closes after one response would pay a cancel
 * to end the multishot), without a ring, or right after it ran dry. */
static void uconn_prep_read(struct loop *lp, struct uconn *u, struct io_uring_sqe *sqe)
{
	/* Half the ring held in stashes (clients that pipeline or flood while
	 * we send them something big, until their send timeout): the others
	 * read single-shot rather than arm receives that would find it empty. */
	bool ring_has_room = lp->stashed < lp->nbufs / 2;
	if (lp->br && u->kept_alive && !u->mrecv_dry && ring_has_room) {
		io_uring_prep_recv_multishot(sqe, u->fd, NULL, 0, 0);
		sqe->flags |= IOSQE_BUFFER_SELECT;
		sqe->buf_group = URING_BUF_GROUP;
		io_uring_sqe_set_data64(sqe, uconn_ud(u) | UD_MRECV_TAG);
		u->mrecv = true;
		uconn_use_file(u, sqe);
	} else {
		u->mrecv_dry = false; /* the read after this one tries the ring again */
		struct iovec space = wire_input_space(u->c);
		io_uring_prep_recv(sqe, u->fd, space.iov_base, space.iov_len, 0);
		uconn_use_file(u, sqe);
		io_uring_sqe_set_data(sqe, u);
		u->op = OP_RECV;
	}
	/* Right after our answer the client has rarely sent its next request
	 * yet: wait for it by poll at once, rather than try a recv that fails
	 * with EAGAIN and then arm the poll anyway. */
	if (u->answered)
		sqe->ioprio |= IORING_RECVSEND_POLL_FIRST;
}

/* Sends one chunk of a file range from here (the socket is non-blocking).
 * False: the socket is full, or this turn's chunk went out; wait for room. */
static bool uconn_sendfile(struct uconn *u, const struct conn_output *out, bool *sent_this_turn)
{
	if (*sent_this_turn)
		return false;
	off_t off = out->file_off;
	size_t len = out->file_len < IO_SENDFILE_CHUNK ? out->file_len : IO_SENDFILE_CHUNK;
	ssize_t n;
	wire_writing(u->c, stats_clock_ns()); /* stats (see conn_writing) */
	do
		n = sendfile(u->fd, out->file_fd, &off, len);
	while (n < 0 && errno == EINTR);
	if (n <= 0)
		wire_writing(u->c, 0);
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
		return false;
	if (n <= 0) /* 0: the file shrank under us, the promised length can't be kept */
		wire_output_failed(u->c);
	else
		wire_output_done(u->c, (size_t)n);
	*sent_this_turn = true;
	return true;
}

/* Submits what the core wants next, or closes; nothing may be in flight. */
static void uconn_step(struct loop *lp, struct uconn *u)
{
	bool sent_file = false;
	for (;;) {
		int64_t deadline;
		enum conn_want want = wire_wants(u->c, &deadline);
		if (want == CONN_WANT_CLOSE) {
			uconn_end(lp, u);
			return;
		}
		if (want == CONN_WANT_READ) {
			if (uconn_feed(lp, u))
				continue;
			if (u->mrecv)
				return; /* its next completion brings bytes */
		} else {
			uconn_hold_input(lp, u);
		}
		if (want == CONN_WANT_WRITE) {
			if (!u->send && !(u->send = pagebuf_get())) {
				log_error("io_uring: out of memory for a send: closing a connection");
				uconn_end(lp, u);
				return;
			}
			wire_output(u->c, &u->send->out);
			if (u->send->out.total == 0) { /* nothing left (cannot happen while WRITE is wanted) */
				wire_output_done(u->c, 0);
				continue;
			}
			if (u->send->out.iovcnt == 0 && uconn_sendfile(u, &u->send->out, &sent_file))
				continue;
		}
		if (want == CONN_WANT_READ && u->answered)
			u->kept_alive = true;
		if (want == CONN_WANT_READ && u->kept_alive)
			uconn_fix_file(lp, u);
		struct io_uring_sqe *sqe = loop_sqe(lp);
		if (!sqe) {
			log_error("io_uring: no submission entry: closing a connection");
			uconn_end(lp, u);
			return;
		}
		switch (want) {
		case CONN_WANT_READ:
			uconn_prep_read(lp, u, sqe);
			return;
		case CONN_WANT_WRITE:
			if (u->send->out.iovcnt > 0) {
				/* MSG_MORE: the head waits for the file bytes that follow */
				int flags = MSG_NOSIGNAL | (u->send->out.more ? MSG_MORE : 0);
				if (u->send->out.iovcnt == 1) {
					/* a plain send skips sendmsg's copy of the msghdr and iovec */
					io_uring_prep_send(sqe, u->fd, u->send->out.iov[0].iov_base, u->send->out.iov[0].iov_len, flags);
				} else {
					u->send->msg = (struct msghdr){ .msg_iov = u->send->out.iov, .msg_iovlen = (size_t)u->send->out.iovcnt };
					io_uring_prep_sendmsg(sqe, u->fd, &u->send->msg, flags);
				}
				u->op = OP_SENDMSG;
				/* stats: the bytes leave when the ring is next
				 * submitted, at the turn's end; their completion is
				 * read a turn later, maybe behind others' work. A
				 * stamp from either would count time after the
				 * client had them as service; this one leaves out
				 * the rest of the turn instead. */
				u->send_ns = stats_clock_ns();
			} else {
				io_uring_prep_poll_add(sqe, u->fd, POLLOUT);
				u->op = OP_POLLOUT;
			}
			break;
		case CONN_WANT_SHUTDOWN:
			io_uring_prep_shutdown(sqe, u->fd, SHUT_WR);
			u->op = OP_SHUTDOWN;
			break;
		case CONN_WANT_CLOSE:
			break;
		}
		uconn_use_file(u, sqe);
		io_uring_sqe_set_data(sqe, u);
		return;
	}
}

/* After a completion. While the core's operation is in flight it waits for
 * that; once nothing is in flight, a pending close or timeout acts; then the
 * core says what comes next. */
static void uconn_next(struct loop *lp, struct uconn *u)
{
	if (u->op != OP_NONE) {
		uconn_hold_input(lp, u);
		return;
	}
	if (u->pending != PEND_NONE && u->mrecv)
		return; /* the receive's cancel is on its way */
	enum upending pending = u->pending;
	u->pending = PEND_NONE;
	if (pending == PEND_CLOSE) { /* drain time is up, or drained while idle */
		uconn_close(lp, u);
		return;
	}
	if (pending == PEND_TIMEOUT) {
		/* time out only if the deadline still stands after what the
		 * operations did before their cancel reached them */
		int64_t deadline;
		while (wire_wants(u->c, &deadline) == CONN_WANT_READ && uconn_feed(lp, u))
			;
		wire_wants(u->c, &deadline);
		if (deadline >= 0 && conn_now_ms() >= deadline)
			wire_timeout(u->c);
	}
	uconn_step(lp, u);
}

/* Reports the core's finished operation to it, then goes on. */
static void uconn_complete(struct loop *lp, struct uconn *u, int res)
{
	enum uop op = u->op;

	u->busy = true;
	u->op = OP_NONE;
	u->cancel_sent = false;
	u->answered = op == OP_SENDMSG;
	/* closing: no result matters; cancelled: there is none */
	if (u->pending == PEND_CLOSE || (u->pending != PEND_NONE && res == -ECANCELED))
		op = OP_NONE;
	switch (op) {
	case OP_RECV:
		/* readable since the batch came: waiting behind the others in it
		 * is its queue wait (see conn_readable) */
		if (res > 0)
			wire_readable(u->c, lp->turn_ns);
		wire_input_done(u->c, res);
		break;
	case OP_SENDMSG:
		if (res <= 0) { /* 0 cannot happen for a non-empty send: do not spin on it */
			wire_output_failed(u->c);
			break;
		}
		wire_writing(u->c, u->send_ns);
		wire_output_done(u->c, (size_t)res);
		break;
	case OP_POLLOUT:
		/* room to send (or an error, which the next sendfile reports) */
		if (res < 0)
			wire_output_failed(u->c);
		break;
	case OP_SHUTDOWN:
		wire_shutdown_done(u->c);
		break;
	case OP_NONE:
		break;
	}
	uconn_next(lp, u);
}

/* A completion of the multishot receive: its bytes go to the stash (the core
 * takes them when it wants READ); without IORING_CQE_F_MORE it has ended. */
static void uconn_mrecv_complete(struct loop *lp, struct uconn *u, int res, unsigned flags)
{
	u->busy = true;
	if (flags & IORING_CQE_F_BUFFER) {
		uint16_t bid = (uint16_t)(flags >> IORING_CQE_BUFFER_SHIFT);
		if (res > 0 && u->pending != PEND_CLOSE) {
			/* the oldest bytes held set the stamp: they may wait in the
			 * stash behind this connection's own response (pipelining) */
			if (u->stash_head == URING_NO_BUF)
				wire_readable(u->c, lp->turn_ns);
			uconn_stash_push(lp, u, bid, (uint32_t)res);
		}
		else
			loop_buf_give(lp, bid);
	}
	if (!(flags & IORING_CQE_F_MORE)) {
		u->mrecv = false;
		u->mrecv_cancel_sent = false;
		if (res == -ENOBUFS) {
			/* the ring is empty: re-arming now would fail at once */
			u->mrecv_dry = true;
		} else if (res <= 0 && res != -ECANCELED) {
			u->mrecv_end_due = true; /* EOF or an error, told after the stash */
			u->mrecv_end = res;
		}
	}
	uconn_next(lp, u);
}

static void loop_arm_wake(struct loop *lp)
{
	struct io_uring_sqe *sqe = loop_sqe(lp);
	if (!sqe)
		return;
	io_uring_prep_poll_add(sqe, lp->srv->wake_fd, POLLIN);
	io_uring_sqe_set_data64(sqe, UD_WAKE);
	lp->wake_armed = true;
}

static bool loop_multishot_room(const struct loop *lp)
{
	int used = atomic_load_explicit(&lp->slots->used, memory_order_relaxed);
	return lp->slots->max - used > URING_MULTISHOT_ROOM;
}

/* Keeps one accept in flight while there is room; at the cap, none: the
 * clients wait in the backlog and a freed slot wakes us (slots.h). */
static void loop_arm_accept(struct loop *lp)
{
	if (lp->accept_armed || lp->sweep.stopping)
		return;
	if (lp->accept_retry_at) {
		if (conn_now_ms() < lp->accept_retry_at)
			return;
		lp->accept_retry_at = 0;
	}
	if (lp->nparked > 0) {
		if (!lp->slot_armed) {
			struct io_uring_sqe *sqe = loop_sqe(lp);
			if (!sqe)
				return;
			io_uring_prep_poll_add(sqe, lp->slots->wake_fds[lp->id], POLLIN);
			io_uring_sqe_set_data64(sqe, UD_SLOT);
			lp->slot_armed = true;
		}
		return;
	}
	bool multi = lp->multishot && !lp->emfile && lp->acc.nfds == 1 && loop_multishot_room(lp);
	struct io_uring_sqe *sqe = loop_sqe(lp);
	if (!sqe)
		return;
	if (lp->emfile || lp->acc.nfds > 1) {
		/* io_uring's accept takes a descriptor before it looks at the
		 * queue, so it would fail at once, forever: wait for a client.
		 * Several listeners (surplus ones after a reload to fewer
		 * workers): wait on their epoll set, accept from any by hand. */
		io_uring_prep_poll_add(sqe, lp->acc.fd, POLLIN);
		lp->accept_ud = UD_LISTEN;
	} else {
		/* The peer address comes from getpeername(): a multishot accept
		 * would overwrite one shared sockaddr before we read it. Sockets
		 * are non-blocking for our own sendfile() (see the top). */
		int flags = SOCK_CLOEXEC | SOCK_NONBLOCK;
		if (multi)
			io_uring_prep_multishot_accept(sqe, lp->acc.fd, NULL, NULL, flags);
		else
			io_uring_prep_accept(sqe, lp->acc.fd, NULL, NULL, flags);
		lp->accept_ud = UD_ACCEPT;
	}
	io_uring_sqe_set_data64(sqe, lp->accept_ud);
	lp->accept_armed = true;
	lp->accept_multi = multi;
	lp->accept_cancel_sent = false;
}

static void loop_cancel_accept(struct loop *lp)
{
	if (!lp->accept_armed || lp->accept_cancel_sent)
		return;
	struct io_uring_sqe *sqe = loop_sqe(lp);
	if (!sqe)
		return;
	io_uring_prep_cancel64(sqe, lp->accept_ud, 0);
	io_uring_sqe_set_data64(sqe, UD_IGNORE);
	lp->accept_cancel_sent = true;
}

static void loop_new_conn(struct loop *lp, int fd)
{
	struct sockaddr_storage peer;
	socklen_t len = sizeof(peer);

	if (getpeername(fd, (struct sockaddr *)&peer, &len) < 0)
		len = 0;
	struct uconn *u = calloc(1, sizeof(*u));
	if (u)
		u->c = wire_new(lp->srv, server_tls_for(lp->srv, fd), fd, len ? (struct sockaddr *)&peer : NULL, len);
	if (!u || !u->c) {
		log_error("out of memory for a connection");
		free(u);
		close(fd);
		slots_give(lp->slots);
		return;
	}
	/* accepted as the stop came in, or left to us by the accept we
	 * cancelled (loop_take_leftovers): answered once, then closed */
	if (lp->sweep.stopping)
		wire_drain(u->c);
	u->fd = fd;
	u->stash_head = u->stash_tail = URING_NO_BUF;
	u->fixed = -1;
	u->next = lp->conns;
	if (lp->conns)
		lp->conns->prev = u;
	lp->conns = u;
	lp->nconns++;
	uconn_step(lp, u);
}

/* A new connection: served with a slot, else refused (overload = reject or
 * shed) or parked until one frees. */
static void loop_take_conn(struct loop *lp, int fd)
{
	if (lp->nparked == 0 && slots_take(lp->slots)) {
		loop_new_conn(lp, fd);
	} else if (overload_refuses(lp->srv, OVERLOAD_AT_CAP) && !lp->sweep.stopping) {
		/* nothing parked: the accept stays armed and the next comer
		 * is refused at once too, until a slot frees */
		struct sockaddr_storage peer;
		socklen_t len = sizeof(peer);
		if (getpeername(fd, (struct sockaddr *)&peer, &len) < 0)
			len = 0;
		overload_refuse(lp->srv, fd, len ? (struct sockaddr *)&peer : NULL, len);
	} else if (lp->nparked < URING_PARKED_MAX && !lp->sweep.stopping) {
		lp->parked[lp->nparked++] = fd;
	} else {
		close(fd); /* a multishot burst far past its margin, or stopping */
		log_warn("max_connections reached: a connection was refused");
	}
}

/* A slot was freed: let parked connections in, oldest first. */
static void loop_unpark(struct loop *lp)
{
	int i = 0;
	while (i < lp->nparked && !lp->sweep.stopping && slots_take(lp->slots))
		loop_new_conn(lp, lp->parked[i++]);
	memmove(lp->parked, lp->parked + i, (size_t)(lp->nparked - i) * sizeof(lp->parked[0]));
	lp->nparked -= i;
}

/* Our accept has left the listener's wait queue for good (a stop cancelled
 * it): take what is queued there. io_uring waits for an accept with an
 * exclusive wake-up (EPOLLEXCLUSIVE), and a wake-up that reaches an accept
 * being cancelled is spent on it and lost: the next generation's accept on
 * the same listener is not woken, and the connection sits in the queue until
 * another one arrives there, forever on a quiet server. Every connection
 * whose wake-up we spent was queued before our entry left the queue, which
 * the final completion proves, so accepting until EAGAIN here (at most a
 * backlog's worth: the queue holds no more) leaves none of them behind. */
static void loop_take_leftovers(struct loop *lp)
{
	for (int i = 0; i < URING_BACKLOG; i++) {
		struct sockaddr_storage peer;
		socklen_t len;
		int fd = acceptor_accept(&lp->acc, &peer, &len, 0);
		if (fd == -EMFILE) /* one was dropped, and the acceptor logged it */
			continue;
		if (fd < 0)
			return; /* EAGAIN: nothing left; or the listener was shut down */
		loop_take_conn(lp, fd);
	}
}

static void loop_on_accept(struct loop *lp, int res, unsigned flags)
{
	if (!(flags & IORING_CQE_F_MORE)) {
		lp->accept_armed = false; /* single-shot done, or multishot ended */
		if (lp->sweep.stopping) {
			if (res >= 0)
				loop_take_conn(lp, res);
			loop_take_leftovers(lp);
			return;
		}
	}
	if (res >= 0) {
		loop_take_conn(lp, res);
	} else {
		if (res == -EMFILE || res == -ENFILE) {
			lp->emfile = true;
		} else if (res == -EINVAL && lp->accept_multi && !lp->sweep.stopping && !server_stopping()) {
			lp->multishot = false; /* a kernel before 5.19 knows no multishot accept */
		} else if (res != -ECANCELED && res != -EAGAIN && res != -EINTR && res != -ECONNABORTED) {
			/* Not re-armed at once, or a failing accept would spin the
			 * loop. EINVAL: the listener was shut down, as a stop (ours,
			 * or the master's before it signals us) does first. */
			lp->accept_retry_at = conn_now_ms() + URING_SCAN_MS;
			if (res != -EINVAL && !lp->sweep.stopping && !server_stopping())
				log_warn("accept: %s", strerror(-res));
		}
		if (lp->accept_armed) /* an error that did not end a multishot accept */
			loop_cancel_accept(lp);
	}
	/* Near the cap, a multishot accept gives way to single ones. */
	if (lp->accept_armed && lp->accept_multi && !loop_multishot_room(lp))
		loop_cancel_accept(lp);
}

/* Out of descriptors, a client is waiting: accept it by hand, or (still out)
 * drop it with the spare descriptor rather than leave it to spin on. */
static void loop_on_listener_ready(struct loop *lp, int res)
{
	lp->accept_armed = false;
	if (res < 0 || lp->sweep.stopping)
		return;
	struct sockaddr_storage peer;
	socklen_t len;
	int fd = acceptor_accept(&lp->acc, &peer, &len, SOCK_NONBLOCK);
	if (fd >= 0) {
		lp->emfile = false;
		loop_take_conn(lp, fd);
		return;
	}
	int pause = acceptor_pause_ms(&lp->acc);
	/* -EMFILE: one was dropped, and the acceptor logged it */
	if (fd != -EMFILE && fd != -EAGAIN)
		lp->accept_retry_at = conn_now_ms() + URING_SCAN_MS;
	else if (pause > 0) /* nothing to drop it with: polling again would spin */
		lp->accept_retry_at = conn_now_ms() + pause;
}

/* Expires deadlines, and ends connections still open when the drain time is up. */
static void loop_scan(struct loop *lp, int64_t now)
{
	struct uconn *u = lp->conns, *next;
	unsigned released = 0;
	for (; u; u = next) {
		next = u->next;
		int64_t deadline;
		wire_wants(u->c, &deadline);
		switch (sweep_check(&lp->sweep, deadline, now)) {
		case SWEEP_DRAINED:
			uconn_end(lp, u);
			break;
		case SWEEP_WAITING:
			/* As in epoll: idle buffers go back once a connection has
			 * waited a whole scan interval. Only with no single-shot
			 * recv in flight (it points into the input space) and an
			 * empty stash; the multishot receive uses the ring's
			 * buffers, so an idle kept-alive connection qualifies. */
			if (!u->busy && u->op == OP_NONE && u->pending == PEND_NONE &&
			    u->stash_head == URING_NO_BUF && !u->mrecv_end_due) {
				released += wire_release_idle(u->c);
				pagebuf_put(u->send);
				u->send = NULL;
			}
			u->busy = false;
			break;
		case SWEEP_EXPIRED:
			if (u->op != OP_NONE || u->mrecv) {
				uconn_cancel(lp, u, PEND_TIMEOUT);
			} else {
				wire_timeout(u->c);
				uconn_step(lp, u);
			}
			break;
		}
	}
	sweep_settle(&lp->sweep, released);
}

static void loop_begin_stop(struct loop *lp)
{
	struct uconn *u = lp->conns, *next;

	sweep_begin_stop(&lp->sweep, lp->srv->cfg->drain_timeout_ms);
	loop_cancel_accept(lp);
	while (lp->nparked > 0) /* never served: closing is all a drain can do */
		close(lp->parked[--lp->nparked]);
	if (lp->slot_armed) {
		struct io_uring_sqe *sqe = loop_sqe(lp);
		if (sqe) {
			io_uring_prep_cancel64(sqe, UD_SLOT, 0);
			io_uring_sqe_set_data64(sqe, UD_IGNORE);
		}
	}
	for (; u; u = next) {
		next = u->next;
		wire_drain(u->c);
		int64_t deadline;
		/* conn_drain only changes the core's state, never the buffers an
		 * in-flight operation points into */
		if (u->op == OP_NONE && u->pending == PEND_NONE)
			uconn_step(lp, u); /* with only the multishot receive in flight, too */
		else if (wire_wants(u->c, &deadline) == CONN_WANT_CLOSE)
			uconn_cancel(lp, u, PEND_CLOSE); /* an idle keep-alive read */
	}
}

static void loop_dispatch(struct loop *lp, const struct io_uring_cqe *cqe, bool *stop_seen)
{
	uint64_t ud = io_uring_cqe_get_data64(cqe);

	switch (ud) {
	case UD_IGNORE:
		break;
	case UD_ACCEPT:
		loop_on_accept(lp, cqe->res, cqe->flags);
		break;
	case UD_LISTEN:
		loop_on_listener_ready(lp, cqe->res);
		break;
	case UD_SLOT:
		lp->slot_armed = false;
		slots_woken(lp->slots, lp->id);
		loop_unpark(lp);
		break;
	case UD_WAKE:
		lp->wake_armed = false;
		if (server_stopping())
			*stop_seen = true;
		else if (!lp->sweep.stopping)
			loop_arm_wake(lp);
		break;
	default:
		if (ud & UD_MRECV_TAG)
			uconn_mrecv_complete(lp, (struct uconn *)(uintptr_t)(ud & ~(uint64_t)UD_MRECV_TAG), cqe->res,
					     cqe->flags);
		else
			uconn_complete(lp, (struct uconn *)(uintptr_t)ud, cqe->res);
		break;
	}
}

static bool loop_done(const struct loop *lp)
{
	return lp->sweep.stopping && lp->nconns == 0 && !lp->accept_armed && !lp->wake_armed && !lp->slot_armed;
}

/* The multishot receives' buffer ring, registered by the loop's own thread
 * (the ring's single issuer). Without one (a kernel before 5.19, or no
 * memory) every receive is single-shot, as before. */
static void loop_setup_bufs(struct loop *lp)
{
	unsigned n = URING_BUFS;
	const char *knob = getenv("SPINDLE_URING_BUFS"); /* tests: a small ring runs dry */
	if (knob) {
		unsigned long v = strtoul(knob, NULL, 10);
		if (v >= 1 && v <= 32768 && (v & (v - 1)) == 0)
			n = (unsigned)v;
	}
	long page = sysconf(_SC_PAGESIZE);
	void *ring = NULL;
	if (posix_memalign(&ring, page > 0 ? (size_t)page : 4096, n * sizeof(struct io_uring_buf)) != 0)
		return;
	lp->bufs = malloc((size_t)n * URING_BUF_SIZE);
	lp->stash_next = calloc(n, sizeof(*lp->stash_next));
	lp->stash_len = calloc(n, sizeof(*lp->stash_len));
	if (!lp->bufs || !lp->stash_next || !lp->stash_len)
		goto fail;
	io_uring_buf_ring_init(ring);
	struct io_uring_buf_reg reg = { .ring_addr = (uint64_t)(uintptr_t)ring, .ring_entries = n,
					.bgid = URING_BUF_GROUP };
	if (io_uring_register_buf_ring(&lp->ring, &reg, 0) < 0)
		goto fail;
	lp->br = ring;
	lp->nbufs = n;
	for (unsigned i = 0; i < n; i++)
		io_uring_buf_ring_add(ring, loop_buf(lp, (uint16_t)i), URING_BUF_SIZE, (uint16_t)i,
				      io_uring_buf_ring_mask(n), (int)i);
	io_uring_buf_ring_advance(ring, (int)n);
	return;
fail:
	free(ring);
	free(lp->bufs);
	free(lp->stash_next);
	free(lp->stash_len);
	lp->bufs = NULL;
	lp->stash_next = lp->stash_len = NULL;
}

/* A sparse file table, one entry per connection this loop may hold (the
 * cap is shared, so up to max_connections), within RLIMIT_NOFILE, which the
 * kernel applies to it. Without one, operations name plain descriptors. */
static void loop_setup_files(struct loop *lp)
{
	struct rlimit rl;
	unsigned n = (unsigned)lp->srv->cfg->max_connections;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < n)
		n = (unsigned)rl.rlim_cur;
	if (n > 32768)
		n = 32768;
	lp->fixed_free = malloc(n * sizeof(*lp->fixed_free));
	lp->fixed_fds = malloc(n * sizeof(*lp->fixed_fds));
	if (!lp->fixed_free || !lp->fixed_fds || n == 0 || io_uring_register_files_sparse(&lp->ring, n) < 0) {
		free(lp->fixed_free);
		free(lp->fixed_fds);
		lp->fixed_free = lp->fixed_fds = NULL;
		return;
	}
	for (unsigned i = 0; i < n; i++)
		lp->fixed_free[i] = (int)(n - 1 - i);
	lp->nfixed_free = (int)n;
}

/* io_uring_enable_rings() is declared by liburing 2.3 but missing from its
 * shared library (fixed in 2.4): register directly. */
static int loop_enable_ring(struct loop *lp)
{
	if (syscall(__NR_io_uring_register, lp->ring.ring_fd, IORING_REGISTER_ENABLE_RINGS, NULL, 0) < 0)
		return -errno;
	return 0;
}

static void *loop_main(void *arg)
{
	struct loop *lp = arg;

	sweep_init(&lp->sweep, URING_SCAN_MS);
	if (lp->enable) {
		int err = loop_enable_ring(lp);
		if (err < 0) {
			log_error("io_uring loop %d: enabling the ring: %s", lp->id, strerror(-err));
			lp->rc = 1;
			server_request_stop();
			return NULL;
		}
	}
	stats_bind_slot(lp->id); /* stats */
	loop_setup_bufs(lp);
	loop_setup_files(lp);
	loop_arm_wake(lp);
	loop_arm_accept(lp);
	while (!loop_done(lp)) {
		struct io_uring_cqe *cqe;
		struct __kernel_timespec ts, *tsp = NULL;
		int wait = sweep_wait_ms(&lp->sweep, lp->nconns > 0 || lp->sweep.stopping || lp->accept_retry_at, -1);
		if (wait >= 0) {
			ts.tv_sec = wait / 1000;
			ts.tv_nsec = (wait % 1000) * 1000000L;
			tsp = &ts;
		}
		int ret = io_uring_submit_and_wait_timeout(&lp->ring, &cqe, 1, tsp, NULL);
		if (ret < 0 && ret != -ETIME && ret != -EINTR && ret != -EAGAIN && ret != -EBUSY) {
			log_error("io_uring loop %d: io_uring_enter: %s", lp->id, strerror(-ret));
			lp->rc = 1;
			server_request_stop();
			break;
		}

		lp->turn_ns = stats_clock_ns();
		bool stop_seen = false;
		unsigned head, seen = 0;
		io_uring_for_each_cqe(&lp->ring, head, cqe) {
			loop_dispatch(lp, cqe, &stop_seen);
			seen++;
		}
		io_uring_cq_advance(&lp->ring, seen);

		if ((stop_seen || server_stopping()) && !lp->sweep.stopping)
			loop_begin_stop(lp);
		loop_arm_accept(lp);
		int64_t now = conn_now_ms();
		if (sweep_due(&lp->sweep, now)) {
			loop_scan(lp, now);
			if (sweep_drain_over(&lp->sweep, now, URING_CANCEL_GRACE_MS)) {
				log_error("io_uring loop %d: %d connection(s) did not finish cancelling",
					  lp->id, lp->nconns);
				break;
			}
		}
	}
	io_uring_submit(&lp->ring); /* cancels prepared in the last pass */
	return NULL;
}

static int loop_init(void *arg, const struct server *srv, int id, int nloops, struct conn_slots *slots)
{
	struct loop *lp = arg;
	/* two operations per connection and a cancel; the cap is shared,
	 * so one loop may hold every connection (overflow is kept, not lost) */
	unsigned cq = 3u * (unsigned)srv->cfg->max_connections + 64;
	/* Single issuer + deferred task work: completions are processed only
	 * when this loop asks for them, with no interrupting task work (6.1+).
	 * Created disabled so the loop's own thread becomes the issuer. */
	struct io_uring_params p = {
		.flags = IORING_SETUP_CQSIZE | IORING_SETUP_SUBMIT_ALL | IORING_SETUP_COOP_TASKRUN |
			 IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_R_DISABLED,
		.cq_entries = cq < URING_SQ_ENTRIES * 2 ? URING_SQ_ENTRIES * 2 : cq > 65536 ? 65536 : cq,
	};
	int shared, err;

	lp->srv = srv;
	lp->id = id;
	lp->slots = slots;
	lp->multishot = true;
	/* the master may hold more listeners than we have loops (a reload to
	 * fewer workers): every one of them is accepted from by some loop */
	shared = acceptor_init_groups(&lp->acc, srv->listen_fds, srv->listen_group_len, srv->nlisten_groups, id,
				      nloops);
	if (shared < 0) {
		err = -errno;
		goto fail;
	}
	/* One listener for several loops (reuseport off): one wake-up of a
	 * multishot accept takes the whole backlog, so the first loop to arm
	 * one took every connection and the others idled. A single accept per
	 * loop takes one connection and leaves the next to another loop. */
	if (shared && nloops > 1)
		lp->multishot = false;
	err = io_uring_queue_init_params(URING_SQ_ENTRIES, &lp->ring, &p);
	if (err == -EINVAL) { /* an older kernel: the plain ring */
		p = (struct io_uring_params){ .flags = IORING_SETUP_CQSIZE, .cq_entries = p.cq_entries };
		err = io_uring_queue_init_params(URING_SQ_ENTRIES, &lp->ring, &p);
	} else if (err == 0) {
		lp->enable = true;
	}
	if (err < 0)
		goto fail;
	lp->ring_ok = true;
	return 0;
fail:
	/* no silent fallback: the operator chose this model */
	log_error("io_uring unavailable: %s; choose another model", strerror(-err));
	return -1;
}

static int loop_fini(void *arg)
{
	struct loop *lp = arg;

	/* Normally nothing is in flight here. After a fatal error, exiting the
	 * ring cancels what is left before the connections' memory goes. */
	if (lp->ring_ok)
		io_uring_queue_exit(&lp->ring);
	lp->ring_ok = false;
	while (lp->conns) {
		lp->conns->op = OP_NONE;
		lp->conns->mrecv = false;
		lp->conns->fixed = -1; /* the table went with the ring */
		uconn_close(lp, lp->conns);
	}
	free(lp->br); /* the ring that held them is gone */
	free(lp->bufs);
	free(lp->stash_next);
	free(lp->stash_len);
	free(lp->fixed_free);
	free(lp->fixed_fds);
	lp->br = NULL;
	while (lp->nparked > 0)
		close(lp->parked[--lp->nparked]);
	acceptor_close(&lp->acc);
	return lp->rc;
}

static const struct loop_ops uring_loops = {
	.name = "io_uring",
	.size = sizeof(struct loop),
	.init = loop_init,
	.main = loop_main,
	.fini = loop_fini,
};

static int uring_run(struct server *srv)
{
	return loops_run(srv, &uring_loops);
}

const struct model model_uring = {
	.name = "uring",
	.summary = "N completion-driven io_uring loops, one per core (liburing)",
	.flags = MODEL_LISTENER_PER_WORKER,
	.run = uring_run,
};
