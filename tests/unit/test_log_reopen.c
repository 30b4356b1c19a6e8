/* test_log_reopen.c - the master's side of a log reopen: a request is
 * answered on the channel it carries, and only on a Unix SEQPACKET socket
 * (the root master writes its log descriptors to nothing else); nothing a
 * serving process passes can make it wait. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../../src/config.h"
#include "../../src/log/log.h"

/* A request carrying n descriptors (a serving process sends one). */
static void ask_with(int sock, const int *fds, int n)
{
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(4 * sizeof(int))];
	} ctl;
	memset(&ctl, 0, sizeof(ctl));
	char req = 'r';
	struct iovec iov = { &req, 1 };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
			      .msg_controllen = CMSG_SPACE((size_t)n * sizeof(int)) };
	struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN((size_t)n * sizeof(int));
	memcpy(CMSG_DATA(c), fds, (size_t)n * sizeof(int));
	cr_assert_eq(sendmsg(sock, &msg, 0), 1, "sendmsg: %s", strerror(errno));
}

/* A request as a serving process sends it: one byte, one descriptor. */
static void ask(int sock, int channel)
{
	ask_with(sock, &channel, 1);
}

/* The descriptors a reply carries (-1 when none); the count is returned. */
static int reply(int channel, int fds[2])
{
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(2 * sizeof(int))];
	} ctl;
	unsigned char what;
	struct iovec iov = { &what, 1 };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
			      .msg_controllen = sizeof(ctl.buf) };
	fds[0] = fds[1] = -1;
	if (recvmsg(channel, &msg, MSG_DONTWAIT) != 1)
		return -1;
	struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
	if (!c)
		return 0;
	int n = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
	memcpy(fds, CMSG_DATA(c), (size_t)n * sizeof(int));
	return n;
}

static void same_file(int a, int b)
{
	struct stat sa, sb;
	cr_assert(fstat(a, &sa) == 0 && fstat(b, &sb) == 0);
	cr_assert(sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino, "another file than the master's");
}

Test(log_reopen, the_reply_comes_on_the_channel_of_its_request)
{
	char dir[] = "/tmp/spindle-reopen-XXXXXX", access[64], error[64];
	cr_assert_not_null(mkdtemp(dir));
	struct config cfg;
	config_defaults(&cfg);
	snprintf(access, sizeof(access), "%s/access.log", dir);
	snprintf(error, sizeof(error), "%s/error.log", dir);
	snprintf(cfg.access_log, sizeof(cfg.access_log), "%s", access);
	snprintf(cfg.error_log, sizeof(cfg.error_log), "%s", error);
	cr_assert_eq(log_open(&cfg), 0);

	int shared[2], first[2], second[2], fds[2];
	cr_assert_eq(socketpair(AF_UNIX, SOCK_DGRAM, 0, shared), 0);
	cr_assert_eq(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, first), 0);
	cr_assert_eq(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, second), 0);
	ask(shared[1], first[1]);
	ask(shared[1], second[1]);
	close(first[1]);
	close(second[1]);
	log_answer_reopen(shared[0]);
	/* nothing comes back on the shared socket, where any asker could take it */
	char b;
	cr_assert_eq(recv(shared[1], &b, 1, MSG_DONTWAIT), -1);
	const int asked[2] = { first[0], second[0] };
	for (int i = 0; i < 2; i++) {
		cr_assert_eq(reply(asked[i], fds), 2, "no reply with both logs on request %d's channel", i);
		int a = open(access, O_RDONLY), e = open(error, O_RDONLY);
		same_file(fds[0], a);
		same_file(fds[1], e);
		close(a);
		close(e);
		close(fds[0]);
		close(fds[1]);
	}
	log_close();
	unlink(access);
	unlink(error);
	rmdir(dir);
}

Test(log_reopen, no_reply_on_anything_but_a_unix_seqpacket_socket)
{
	int shared[2], dgram[2], pipefd[2];
	cr_assert_eq(socketpair(AF_UNIX, SOCK_DGRAM, 0, shared), 0);
	cr_assert_eq(socketpair(AF_UNIX, SOCK_DGRAM, 0, dgram), 0);
	cr_assert_eq(pipe2(pipefd, O_NONBLOCK), 0);
	ask(shared[1], dgram[1]);
	ask(shared[1], pipefd[1]);
	close(dgram[1]);
	close(pipefd[1]);
	log_answer_reopen(shared[0]);
	char b;
	cr_assert_eq(recv(dgram[0], &b, 1, MSG_DONTWAIT), -1, "a reply on a datagram socket");
	cr_assert_eq(read(pipefd[0], &b, 1), 0, "a reply into a pipe"); /* 0: closed, nothing written */
	cr_assert_eq(recv(shared[1], &b, 1, MSG_DONTWAIT), -1);
}

/* A TCP socket whose last close would wait LINGER_S seconds: SO_LINGER is
 * set and unsent bytes sit behind a peer that never reads. */
#define LINGER_S 5
static int lingering_socket(int *listener, int *peer)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t alen = sizeof(a);
	*listener = socket(AF_INET, SOCK_STREAM, 0);
	cr_assert(*listener >= 0);
	cr_assert_eq(bind(*listener, (struct sockaddr *)&a, sizeof(a)), 0);
	cr_assert_eq(listen(*listener, 1), 0);
	cr_assert_eq(getsockname(*listener, (struct sockaddr *)&a, &alen), 0);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	cr_assert(fd >= 0);
	cr_assert(connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0 || errno == EINPROGRESS);
	*peer = accept(*listener, NULL, NULL);
	cr_assert(*peer >= 0);
	static char junk[65536];
	while (send(fd, junk, sizeof(junk), MSG_NOSIGNAL) > 0) {
	}
	cr_assert_eq(errno, EAGAIN, "filling the send buffer: %s", strerror(errno));
	struct linger l = { .l_onoff = 1, .l_linger = LINGER_S };
	cr_assert_eq(setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l)), 0);
	int flags = fcntl(fd, F_GETFL);
	cr_assert_eq(fcntl(fd, F_SETFL, flags & ~O_NONBLOCK), 0); /* a blocking close lingers */
	return fd;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A confined serving process passes a lingering TCP socket, as its request's
 * channel and as an extra descriptor beside a proper channel: the master
 * answers at once all the same, instead of waiting out the linger time in
 * close(). */
Test(log_reopen, a_lingering_socket_passed_does_not_hold_up_the_master, .timeout = 60)
{
	int shared[2], channel[2], listener[2], peer[2], fds[2];
	cr_assert_eq(socketpair(AF_UNIX, SOCK_DGRAM, 0, shared), 0);
	cr_assert_eq(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, channel), 0);
	int alone = lingering_socket(&listener[0], &peer[0]);
	int beside = lingering_socket(&listener[1], &peer[1]);
	ask(shared[1], alone);
	const int two[2] = { channel[1], beside };
	ask_with(shared[1], two, 2);
	close(alone); /* the master's copies are the last: theirs is the close that lingers */
	close(beside);
	close(channel[1]);

	double start = now_s();
	log_answer_reopen(shared[0]);
	double took = now_s() - start;
	cr_assert_lt(took, 1.0, "the master waited %.1f s closing what a serving process passed", took);
	cr_assert_eq(reply(channel[0], fds), 0, "the proper channel got no reply");
	for (int i = 0; i < 2; i++) {
		close(peer[i]);
		close(listener[i]);
	}
}
