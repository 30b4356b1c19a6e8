/* test_log_reopen.c - the master's side of a log reopen: a request is
 * answered on the channel it carries, and only on a Unix SEQPACKET socket
 * (the root master writes its log descriptors to nothing else). */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../src/config.h"
#include "../../src/log/log.h"

/* A request as a serving process sends it: one byte, one descriptor. */
static void ask(int sock, int channel)
{
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int))];
	} ctl;
	memset(&ctl, 0, sizeof(ctl));
	char req = 'r';
	struct iovec iov = { &req, 1 };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
			      .msg_controllen = sizeof(ctl.buf) };
	struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &channel, sizeof(int));
	cr_assert_eq(sendmsg(sock, &msg, 0), 1, "sendmsg: %s", strerror(errno));
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
	int n = c ? (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int)) : 0;
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
