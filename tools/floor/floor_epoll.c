/* floor_epoll.c - the epoll floor server (see floor.h): the system calls
 * spindle's epoll model makes on a kept-alive connection (epoll_wait, recv,
 * send), with none of its HTTP work. One thread, level-triggered epoll,
 * non-blocking sockets.
 *
 *     floor_epoll PORT      (listens on 127.0.0.1; stop it with SIGTERM) */
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "floor.h"

struct conn {
	int state;   /* partial "\r\n\r\n" seen */
	size_t owed; /* response bytes not yet sent */
	size_t sent; /* response bytes sent so far */
	bool eof;    /* the peer sent its FIN: answer what it asked, then close */
};

static struct conn conns[FLOOR_MAX_FDS];
static int epfd;

static void drop(int fd)
{
	close(fd); /* also leaves the epoll set */
	conns[fd] = (struct conn){ 0 };
}

/* send what is owed; wait for EPOLLOUT only when the socket buffer is full */
static void send_owed(int fd)
{
	struct conn *c = &conns[fd];
	while (c->owed) {
		const char *at;
		size_t len = floor_chunk(c->sent, c->owed, &at);
		ssize_t n = send(fd, at, len, MSG_NOSIGNAL);
		if (n < 0) {
			if (errno == EAGAIN) {
				struct epoll_event ev = { .events = EPOLLIN | EPOLLOUT, .data.fd = fd };
				epoll_ctl(epfd, EPOLL_CTL_MOD, fd, &ev);
			} else {
				drop(fd);
			}
			return;
		}
		c->owed -= (size_t)n;
		c->sent += (size_t)n;
	}
}

static void on_readable(int fd)
{
	char buf[4096];
	ssize_t n = recv(fd, buf, sizeof(buf), 0);
	if (n == 0 && conns[fd].owed) { /* wait for room to send the rest, no longer to read */
		conns[fd].eof = true;
		struct epoll_event ev = { .events = EPOLLOUT, .data.fd = fd };
		epoll_ctl(epfd, EPOLL_CTL_MOD, fd, &ev);
		return;
	}
	if (n == 0 || (n < 0 && errno != EAGAIN)) {
		drop(fd);
		return;
	}
	if (n < 0)
		return;
	bool was_owing = conns[fd].owed != 0;
	conns[fd].owed += floor_count_requests(buf, (size_t)n, &conns[fd].state) * FLOOR_RESPONSE_LEN;
	if (!was_owing) /* else EPOLLOUT is already armed and sends the rest */
		send_owed(fd);
}

static void on_writable(int fd)
{
	send_owed(fd);
	if (conns[fd].owed == 0 && conns[fd].eof) {
		drop(fd);
	} else if (conns[fd].owed == 0) {
		struct epoll_event ev = { .events = EPOLLIN, .data.fd = fd };
		epoll_ctl(epfd, EPOLL_CTL_MOD, fd, &ev); /* fails harmlessly if send_owed dropped it */
	}
}

static void on_listener(int listen_fd)
{
	int fd, one = 1;
	while ((fd = accept4(listen_fd, NULL, NULL, SOCK_NONBLOCK)) >= 0) {
		if (fd >= FLOOR_MAX_FDS) {
			close(fd);
			continue;
		}
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)); /* as spindle */
		struct epoll_event ev = { .events = EPOLLIN, .data.fd = fd };
		epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev);
	}
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: floor_epoll PORT\n");
		return 2;
	}
	floor_init();
	int one = 1, listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	setsockopt(listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	struct sockaddr_in addr = { .sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[1])),
				    .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	if (bind(listen_fd, (struct sockaddr *)&addr, sizeof(addr)) < 0 || listen(listen_fd, 4096) < 0) {
		perror("floor_epoll: bind/listen");
		return 1;
	}
	epfd = epoll_create1(0);
	struct epoll_event ev = { .events = EPOLLIN, .data.fd = listen_fd }, events[512];
	epoll_ctl(epfd, EPOLL_CTL_ADD, listen_fd, &ev);
	for (;;) {
		int n = epoll_wait(epfd, events, 512, -1);
		for (int i = 0; i < n; i++) {
			int fd = events[i].data.fd;
			if (fd == listen_fd)
				on_listener(listen_fd);
			else if (events[i].events & EPOLLOUT)
				on_writable(fd);
			else
				on_readable(fd);
		}
	}
}
