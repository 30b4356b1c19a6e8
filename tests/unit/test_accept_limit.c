/* test_accept_limit.c - the acceptor at the descriptor limit.
 *
 * Criterion runs each test in its own process, so a test may lower its own
 * RLIMIT_NOFILE and use up every descriptor. */
#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "../../src/listen.h"

static int listen_port(int fd)
{
	struct sockaddr_in sin;
	socklen_t len = sizeof(sin);
	cr_assert_eq(getsockname(fd, (struct sockaddr *)&sin, &len), 0);
	return ntohs(sin.sin_port);
}

static int connect_to(int port)
{
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	cr_assert_geq(fd, 0);
	inet_pton(AF_INET, "127.0.0.1", &sin.sin_addr);
	cr_assert_eq(connect(fd, (struct sockaddr *)&sin, sizeof(sin)), 0, "connect: %s", strerror(errno));
	/* the listener defers accepting until a client's first bytes come
	 * (TCP_DEFER_ACCEPT); on loopback they are queued when send() returns */
	cr_assert_eq(send(fd, "G", 1, MSG_NOSIGNAL), 1);
	return fd;
}

/* Lowers the limit a little above what is open, then opens /dev/null until
 * no descriptor is left. */
static void use_up_descriptors(void)
{
	struct rlimit rl = { .rlim_cur = 64, .rlim_max = 64 };
	cr_assert_eq(setrlimit(RLIMIT_NOFILE, &rl), 0);
	for (int i = 0; i < 64; i++)
		if (open("/dev/null", O_RDONLY | O_CLOEXEC) < 0)
			break;
	cr_assert_eq(open("/dev/null", O_RDONLY | O_CLOEXEC), -1);
	cr_assert_eq(errno, EMFILE);
}

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The caller's loop of a thread that only accepts (thread, iterative):
 * accept, and on EAGAIN wait as the acceptor says. Returns how many times it
 * went round in `ms` milliseconds. */
static int accept_loop_rounds(struct acceptor *a, int wake_fd, int ms)
{
	int64_t end = now_ms() + ms;
	int rounds = 0;
	while (now_ms() < end && rounds < 1000000) {
		struct sockaddr_storage peer;
		socklen_t len;
		int fd = acceptor_accept(a, &peer, &len, SOCK_NONBLOCK);
		cr_assert(fd < 0, "accepted at the limit");
		if (fd == -EAGAIN)
			acceptor_wait(a, wake_fd);
		rounds++;
	}
	return rounds;
}

Test(listen, at_the_limit_a_waiting_client_is_dropped_with_the_spare)
{
	int lfd = listen_open("127.0.0.1", 0, false);
	cr_assert_geq(lfd, 0);
	struct acceptor a;
	acceptor_init(&a, lfd);
	int client = connect_to(listen_port(lfd));
	use_up_descriptors();

	struct sockaddr_storage peer;
	socklen_t len;
	cr_assert_eq(acceptor_accept(&a, &peer, &len, SOCK_NONBLOCK), -EMFILE);
	char c;
	/* closed with its byte unread: a reset, not a FIN */
	ssize_t n = read(client, &c, 1);
	cr_assert(n == 0 || (n < 0 && errno == ECONNRESET), "the dropped client sees the connection end");
	cr_assert_eq(acceptor_accept(&a, &peer, &len, SOCK_NONBLOCK), -EAGAIN);
	cr_assert_eq(acceptor_pause_ms(&a), -1, "nothing waits: no pause");
}

/* Another thread's open() took the spare's number between close() and
 * accept(): the acceptor can neither accept nor drop, and the listener stays
 * readable. Its caller must then sleep, not spin on poll(). */
Test(listen, a_stolen_spare_pauses_instead_of_spinning)
{
	int lfd = listen_open("127.0.0.1", 0, false);
	cr_assert_geq(lfd, 0);
	struct acceptor a;
	acceptor_init(&a, lfd);
	int pipefd[2];
	cr_assert_eq(pipe2(pipefd, O_CLOEXEC), 0); /* a wake fd that never becomes readable */
	connect_to(listen_port(lfd));
	use_up_descriptors();
	close(a.spare); /* the race, played out: the number goes to someone else */
	cr_assert_geq(open("/dev/null", O_RDONLY | O_CLOEXEC), 0);
	a.spare = -1;

	int rounds = accept_loop_rounds(&a, pipefd[0], 500);
	cr_assert_leq(rounds, 20, "%d accept rounds in 500 ms out of descriptors: a busy loop", rounds);

	/* an event loop learns once that the pause is over, then it is cleared */
	poll(NULL, 0, acceptor_pause_ms(&a) + 1);
	struct sockaddr_storage peer;
	socklen_t len;
	cr_assert_eq(acceptor_accept(&a, &peer, &len, SOCK_NONBLOCK), -EAGAIN);
	cr_assert_gt(acceptor_pause_ms(&a), 0, "still out of descriptors: a fresh pause");
	cr_assert_not(acceptor_pause_over(&a));
	poll(NULL, 0, acceptor_pause_ms(&a) + 1);
	cr_assert(acceptor_pause_over(&a));
	cr_assert_not(acceptor_pause_over(&a));
	cr_assert_eq(acceptor_pause_ms(&a), -1);

	/* a descriptor comes back: the client is then accepted or dropped, not kept waiting */
	close(63); /* the limit is 64: the highest number, some /dev/null */
	int64_t end = now_ms() + 2000;
	int fd = -EAGAIN;
	while (fd == -EAGAIN && now_ms() < end) {
		fd = acceptor_accept(&a, &peer, &len, SOCK_NONBLOCK);
		if (fd == -EAGAIN)
			acceptor_wait(&a, pipefd[0]);
	}
	cr_assert(fd >= 0 || fd == -EMFILE, "after the pause: %d", fd);
}
