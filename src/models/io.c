/* io.c - recv / sendmsg / sendfile / shutdown for the connection core. */
#include "io.h"

#include <errno.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../stats/stats.h"

static enum io_result do_read(struct wire *c, int fd)
{
	struct iovec space = wire_input_space(c);
	ssize_t n;

	do
		n = recv(fd, space.iov_base, space.iov_len, 0);
	while (n < 0 && errno == EINTR);
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
		wire_readable(c, 0); /* not readable after all: the bytes that come later carry their own stamp */
		return IO_AGAIN;
	}
	wire_input_done(c, n < 0 ? -errno : n);
	/* A stream socket returns everything queued, up to the space: a short
	 * read means the socket is empty now. */
	return n > 0 && (size_t)n == space.iov_len ? IO_PROGRESS : IO_DRAINED;
}

static enum io_result do_write(struct wire *c, int fd)
{
	struct conn_output out;
	ssize_t n;

	wire_output(c, &out);
	if (out.total == 0) { /* nothing left (cannot happen while WRITE is wanted) */
		wire_output_done(c, 0);
		return IO_PROGRESS;
	}
	/* stats: the bytes are out no earlier than this, whenever this thread
	 * gets to run again after the call (see conn_writing) */
	wire_writing(c, stats_clock_ns());
	do {
		if (out.iovcnt == 1) { /* send() skips sendmsg's copy of the msghdr and iovec */
			n = send(fd, out.iov[0].iov_base, out.iov[0].iov_len, MSG_NOSIGNAL | (out.more ? MSG_MORE : 0));
		} else if (out.iovcnt > 0) {
			struct msghdr msg = { .msg_iov = out.iov, .msg_iovlen = (size_t)out.iovcnt };
			n = sendmsg(fd, &msg, MSG_NOSIGNAL | (out.more ? MSG_MORE : 0));
		} else {
			off_t off = out.file_off;
			size_t len = out.file_len < IO_SENDFILE_CHUNK ? out.file_len : IO_SENDFILE_CHUNK;
			n = sendfile(fd, out.file_fd, &off, len);
			if (n == 0) { /* the file shrank under us: the promised length can't be kept */
				wire_output_failed(c);
				return IO_PROGRESS;
			}
		}
	} while (n < 0 && errno == EINTR);
	if (n <= 0)
		wire_writing(c, 0); /* nothing went out: no stamp for a later write */
	if (n < 0) {
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			return IO_AGAIN;
		wire_output_failed(c);
		return IO_PROGRESS;
	}
	wire_output_done(c, (size_t)n);
	return (size_t)n < out.total && out.iovcnt > 0 ? IO_DRAINED : IO_PROGRESS;
}

enum io_result io_step(struct wire *c, int fd, enum conn_want want)
{
	switch (want) {
	case CONN_WANT_READ:
		return do_read(c, fd);
	case CONN_WANT_WRITE:
		return do_write(c, fd);
	case CONN_WANT_SHUTDOWN:
		shutdown(fd, SHUT_WR);
		wire_shutdown_done(c);
		return IO_PROGRESS;
	case CONN_WANT_CLOSE:
		break;
	}
	return IO_PROGRESS;
}
