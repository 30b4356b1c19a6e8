/* test_listen.c - the master's listener set (listen_set_*) and how event
 * loops share it (acceptor_init_share). The steering tests run against the
 * kernel on 127.0.0.1: they check the assumption the reuseport BPF program
 * rests on, that the group's order is the order sockets started listening. */
#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "../../src/listen.h"

static int port_of(int fd)
{
	struct sockaddr_in sa;
	socklen_t len = sizeof(sa);
	cr_assert_eq(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
	return ntohs(sa.sin_port);
}

/* A reuseport set of n sockets on one free port. */
static void open_set(struct listen_set *ls, int n)
{
	*ls = (struct listen_set){ .reuseport = true };
	cr_assert_eq(listen_set_grow(ls, "127.0.0.1", 0, 1), 0); /* port 0: the kernel picks one */
	cr_assert_eq(listen_set_grow(ls, "127.0.0.1", port_of(ls->fds[0]), n), 0);
	cr_assert_eq(ls->n, n);
}

/* Opens `count` connections and returns, per listener, how many each took. */
static void connect_and_count(struct listen_set *ls, int port, int count, int *taken)
{
	for (int i = 0; i < ls->n; i++)
		taken[i] = 0;
	for (int c = 0; c < count; c++) {
		int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
		sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		cr_assert_eq(connect(s, (struct sockaddr *)&sa, sizeof(sa)), 0, "connect: %s", strerror(errno));
		close(s);
	}
	/* a handshake completes in the kernel before connect() returns on loopback */
	for (int i = 0; i < ls->n; i++) {
		int fd;
		while ((fd = accept4(ls->fds[i], NULL, NULL, SOCK_CLOEXEC)) >= 0) {
			taken[i]++;
			close(fd);
		}
		cr_assert(errno == EAGAIN || errno == EWOULDBLOCK);
	}
}

Test(listen_set, steering_sends_new_connections_to_the_first_n_only)
{
	struct listen_set ls;
	int taken[8], port;

	open_set(&ls, 4);
	port = port_of(ls.fds[0]);
	cr_assert_eq(listen_set_steer(&ls, 2), 0);
	connect_and_count(&ls, port, 200, taken);
	cr_expect_eq(taken[2] + taken[3], 0, "surplus sockets got %d and %d connections", taken[2], taken[3]);
	cr_expect_eq(taken[0] + taken[1], 200);
	cr_expect(taken[0] > 20 && taken[1] > 20, "uneven: %d / %d", taken[0], taken[1]);

	/* grown while steered to 2: the new sockets get nothing until steered to */
	cr_assert_eq(listen_set_grow(&ls, "127.0.0.1", port, 6), 0);
	connect_and_count(&ls, port, 100, taken);
	for (int i = 2; i < 6; i++)
		cr_expect_eq(taken[i], 0, "socket %d got %d", i, taken[i]);
	cr_assert_eq(listen_set_steer(&ls, 6), 0);
	connect_and_count(&ls, port, 300, taken);
	for (int i = 0; i < 6; i++)
		cr_expect(taken[i] > 10, "socket %d got only %d of 300", i, taken[i]);
	listen_set_close(&ls);
}

Test(listen_set, without_reuseport_holds_one_socket)
{
	struct listen_set ls = { .reuseport = false };

	cr_assert_eq(listen_set_grow(&ls, "127.0.0.1", 0, 4), 0);
	cr_expect_eq(ls.n, 1);
	cr_expect_eq(listen_set_steer(&ls, 4), 0); /* nothing to steer */
	cr_expect_eq(ls.steered, 0);
	listen_set_close(&ls);
}

/* Stand-ins for listeners: acceptor_init_set only needs pollable descriptors. */
static void make_fds(int *fds, int n)
{
	for (int i = 0; i < n; i++)
		cr_assert((fds[i] = eventfd(0, EFD_CLOEXEC)) >= 0);
}

Test(acceptor_init_share, every_listener_has_exactly_one_loop)
{
	int fds[5];
	make_fds(fds, 5);
	int owner[5] = { 0 };

	for (int id = 0; id < 2; id++) {
		struct acceptor a;
		cr_assert_eq(acceptor_init_share(&a, fds, 5, id, 2), 0);
		cr_expect_eq(a.fds[0], fds[id], "loop %d's own socket first", id);
		for (int k = 0; k < a.nfds; k++)
			for (int j = 0; j < 5; j++)
				owner[j] += a.fds[k] == fds[j];
		cr_expect_eq(a.nfds, id == 0 ? 3 : 2);
		acceptor_close(&a);
	}
	for (int j = 0; j < 5; j++)
		cr_expect_eq(owner[j], 1, "listener %d is accepted by %d loops", j, owner[j]);
	for (int j = 0; j < 5; j++)
		close(fds[j]);
}

Test(acceptor_init_share, fewer_listeners_than_loops_are_shared_by_all)
{
	int fds[2];
	make_fds(fds, 2);
	struct acceptor a;

	cr_assert_eq(acceptor_init_share(&a, fds, 2, 2, 3), 1);
	cr_expect_eq(a.nfds, 2);
	acceptor_close(&a);
	cr_assert_eq(acceptor_init_share(&a, fds, 1, 1, 3), 1);
	cr_expect_eq(a.nfds, 1);
	cr_expect_eq(a.fd, fds[0], "one listener is polled directly (EPOLLEXCLUSIVE allowed)");
	acceptor_close(&a);
	close(fds[0]);
	close(fds[1]);
}

/* Several addresses: each loop takes its share of every
 * reuseport group, and all of a group smaller than the loops (a UNIX
 * socket); every socket is accepted from by exactly its loop(s). */
Test(acceptor_init_groups, every_loop_serves_every_address)
{
	int fds[7]; /* TCP v4: 3 sockets, a UNIX one, TCP v6: 3 sockets */
	int lens[3] = { 3, 1, 3 };
	make_fds(fds, 7);
	int owner[7] = { 0 };

	for (int id = 0; id < 3; id++) {
		struct acceptor a;
		cr_assert_eq(acceptor_init_groups(&a, fds, lens, 3, id, 3), 1, "the UNIX socket is shared");
		cr_expect_eq(a.nfds, 3, "loop %d: one of each address", id);
		cr_expect_eq(a.fds[0], fds[id]);
		cr_expect_eq(a.fds[1], fds[3]);
		cr_expect_eq(a.fds[2], fds[4 + id]);
		for (int k = 0; k < a.nfds; k++)
			for (int j = 0; j < 7; j++)
				owner[j] += a.fds[k] == fds[j];
		acceptor_close(&a);
	}
	for (int j = 0; j < 7; j++)
		cr_expect_eq(owner[j], j == 3 ? 3 : 1, "socket %d is accepted by %d loops", j, owner[j]);
	/* one address per loop count: nothing shared */
	struct acceptor a;
	int two[2] = { 3, 3 };
	cr_assert_eq(acceptor_init_groups(&a, fds, two, 2, 1, 3), 0);
	cr_expect_eq(a.nfds, 2);
	acceptor_close(&a);
	for (int j = 0; j < 7; j++)
		close(fds[j]);
}

/* A UNIX address: one socket, its file made with the mode asked for; a
 * stale file is replaced, ours is unlinked at close, a live one never. */
Test(listen_set, unix_socket_file_lifecycle)
{
	char dir[] = "/tmp/spindle-unix-XXXXXX";
	cr_assert(mkdtemp(dir));
	struct listen_set ls = { .reuseport = true };
	char why[256];
	char line[256];
	snprintf(line, sizeof(line), "unix:%s/s.sock mode=0600", dir);
	cr_assert_eq(listen_addr_parse(line, &ls.addr, why, sizeof(why)), 0, "%s", why);
	cr_assert_eq(listen_set_grow_addr(&ls, 4), 0);
	cr_expect_eq(ls.n, 1, "a UNIX address has no reuseport group");
	struct stat st;
	cr_assert_eq(stat(ls.addr.path, &st), 0);
	cr_expect(S_ISSOCK(st.st_mode) && (st.st_mode & 0777) == 0600, "mode %o", st.st_mode);
	/* live: a second open must refuse, and leave the file */
	cr_expect_eq(listen_open_addr(&ls.addr, false), -EADDRINUSE);
	cr_expect_eq(listen_addr_free(&ls.addr), -EADDRINUSE);
	listen_set_close(&ls);
	cr_expect_neq(stat(ls.addr.path, &st), 0, "our socket file is removed at close");
	/* stale: a file left by a socket that was closed without unlinking */
	int s = socket(AF_UNIX, SOCK_STREAM, 0);
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	strcpy(sun.sun_path, ls.addr.path);
	cr_assert_eq(bind(s, (struct sockaddr *)&sun, sizeof(sun)), 0);
	close(s);
	cr_expect_eq(listen_addr_free(&ls.addr), 0, "a stale socket does not count as in use");
	int fd = listen_open_addr(&ls.addr, false);
	cr_expect_geq(fd, 0, "a stale socket file is replaced: %s", strerror(-fd));
	close(fd);
	unlink(ls.addr.path);
	rmdir(dir);
}
