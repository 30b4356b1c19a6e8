/* log.c - one write(2) per line to O_APPEND files; reopened on SIGUSR1.
 *
 * Only the master opens a log by path. A serving process (and every worker
 * it forks) reopens by asking the master for the descriptors it holds, on
 * a datagram socket inherited at the fork, and takes them from the reply on
 * a channel the request carries: it needs no right on the files or their
 * directory, so neither a symlink planted there nor Landlock's rules come
 * into it. */
#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../config.h"
#include "json.h"

/* Descriptor numbers stay fixed for the process's life: a reopen dup2()s the
 * new file over them, which is atomic for every thread writing meanwhile. */
static int access_fd = -1;
static int error_fd = -1;
static enum log_level min_level = LOG_INFO;
static char access_path[4096]; /* copies: the configuration may be replaced on reload */
static char error_path[4096];
static enum access_log_format access_format = ACCESS_LOG_COMBINED;
static char model_name[32]; /* for the JSON format's "model" */

static int reopen_sock = -1; /* a serving process's end of the master's channel */
static int64_t echo_until_ms; /* also write error lines to stderr until then (0: not; start-up) */

/* Root opens the logs: a link planted at the path (a symlink, or a hard link
 * to a file elsewhere) must not hand root's descriptor to its target, a
 * FIFO must not block the master, and a file another user put there first
 * (in a sticky directory such as /tmp) must not receive root's lines: its
 * owner reads them, and may truncate or swap its content at will. Returns
 * the descriptor or -errno; -ELOOP for a symlink, -EMLINK for a hard link,
 * -EINVAL for anything but a file, -EPERM for another user's file. */
static int open_append(const char *path)
{
	struct stat st;
	int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);

	if (fd < 0)
		return errno == ENXIO ? -EINVAL : -errno; /* ENXIO: a FIFO nobody reads */
	int err = fstat(fd, &st) < 0 ? -errno : !S_ISREG(st.st_mode) ? -EINVAL : st.st_nlink > 1 ? -EMLINK
		: st.st_uid != geteuid() ? -EPERM : 0;
	if (err == 0 && fcntl(fd, F_SETFL, O_APPEND) < 0)
		err = -errno;
	if (err < 0) {
		close(fd);
		return err;
	}
	return fd;
}

const char *log_open_error(int err)
{
	switch (err) {
	case -ELOOP: return "it is a symbolic link, which is never followed";
	case -EMLINK: return "the file has another name (a hard link): refusing it";
	case -EINVAL: return "it is not a regular file";
	case -EPERM: return "the file belongs to another user (remove it, or give it to the user spindle starts as)";
	default: return strerror(-err);
	}
}

/* The calling thread's id, cached: gettid() is a system call (~160 ns of CPU
 * here, as much as building the JSON line). A forked child's only thread inherits its
 * parent's cache, so the cache is tagged with a fork generation that a child
 * bumps (pthread_atfork in log_open). */
static atomic_uint fork_generation = 1;
static _Thread_local unsigned tid_generation;
static _Thread_local pid_t cached_tid;

static void log_after_fork(void)
{
	atomic_fetch_add_explicit(&fork_generation, 1, memory_order_relaxed);
}

static void log_register_atfork(void)
{
	pthread_atfork(NULL, NULL, log_after_fork);
}

static pid_t worker_id(void)
{
	unsigned gen = atomic_load_explicit(&fork_generation, memory_order_relaxed);
	if (tid_generation != gen) {
		cached_tid = gettid();
		tid_generation = gen;
	}
	return cached_tid;
}

/* Why a log cannot be opened: to the error log while one is open (a
 * reload), else to stderr (start-up, --check). */
static void report_open_failure(const char *key, const char *path, int err)
{
	if (error_fd >= 0)
		log_error("%s: cannot open '%s': %s", key, path, log_open_error(err));
	else
		fprintf(stderr, "spindle: %s: cannot open '%s': %s\n", key, path, log_open_error(err));
}

/* Opens cfg's files, then puts them in place of the current ones: a reload
 * whose logs cannot be opened keeps the old ones, and says so in them. */
static int log_swap_files(const struct config *cfg)
{
	int afd = -1, efd = -1;

	if (cfg->access_log[0] && (afd = open_append(cfg->access_log)) < 0) {
		report_open_failure("access_log", cfg->access_log, afd);
		return -1;
	}
	if (strcmp(cfg->error_log, "-") == 0 && (efd = fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 3)) < 0)
		efd = -errno;
	else if (strcmp(cfg->error_log, "-"))
		efd = open_append(cfg->error_log);
	if (efd < 0) {
		report_open_failure("error_log", cfg->error_log, efd);
		if (afd >= 0)
			close(afd);
		return -1;
	}
	log_close();
	access_fd = afd;
	error_fd = efd;
	snprintf(access_path, sizeof(access_path), "%s", cfg->access_log);
	snprintf(error_path, sizeof(error_path), "%s", strcmp(cfg->error_log, "-") ? cfg->error_log : "");
	return 0;
}

int log_open(const struct config *cfg)
{
	static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

	pthread_once(&atfork_once, log_register_atfork);
	/* A reload that leaves both paths alone keeps the open files (rotation
	 * is log_reopen's business), and needs no descriptor to spare. */
	bool same_access = access_fd >= 0 ? strcmp(cfg->access_log, access_path) == 0 : !cfg->access_log[0];
	bool same_error = error_fd >= 0 && strcmp(cfg->error_log, error_path[0] ? error_path : "-") == 0;
	if (!(same_access && same_error) && log_swap_files(cfg) < 0)
		return -1;
	min_level = cfg->log_level;
	access_format = cfg->access_log_format;
	snprintf(model_name, sizeof(model_name), "%s", cfg->model);
	return 0;
}

void log_close(void)
{
	if (access_fd >= 0)
		close(access_fd);
	if (error_fd >= 0)
		close(error_fd);
	access_fd = error_fd = -1;
}

/* 0, or -errno with the old file kept (better than losing lines). */
static int reopen_one(int fd, const char *path)
{
	if (fd < 0 || !path[0])
		return 0;
	int nfd = open_append(path);
	if (nfd < 0)
		return nfd;
	dup3(nfd, fd, O_CLOEXEC);
	close(nfd);
	return 0;
}

/* The master's reopen, by path; each failure is logged (to the old file). */
static void reopen_by_path(void)
{
	int a = reopen_one(access_fd, access_path);
	int e = reopen_one(error_fd, error_path);

	if (a < 0)
		log_error("access_log: cannot reopen '%s': %s; still writing to the old file", access_path,
			  log_open_error(a));
	if (e < 0)
		log_error("error_log: cannot reopen '%s': %s; still writing to the old file", error_path,
			  log_open_error(e));
	if (a == 0 && e == 0 && !access_path[0] && !error_path[0])
		log_info("logs reopened: none to reopen (access_log is off, the error log is standard error)");
	else if (a == 0 && e == 0)
		log_info("logs reopened (%s%s%s)", access_path[0] ? access_path : "",
			 access_path[0] && error_path[0] ? ", " : "", error_path);
}

/* Which descriptors a reply carries, in this order. */
enum { CARRIES_ACCESS = 1, CARRIES_ERROR = 2 };

#define REOPEN_WAIT_MS 2000 /* a master that does not answer: keep the old files */
#define REOPEN_RETRY_MS 10  /* too many descriptors in flight (ETOOMANYREFS): ask again after */
#define ANSWERS_PER_CALL 256 /* the master's loop has other work too */

static int64_t monotonic_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Waits for events on the socket until deadline; false when it passed. A
 * signal is not an answer: the fork model's serving process asks from its
 * SIGUSR1 handler, and a child exiting meanwhile (SIGCHLD) must not end
 * the wait. */
static bool wait_sock(int sock, short events, int64_t deadline)
{
	for (;;) {
		int64_t left = deadline - monotonic_ms();
		struct pollfd pfd = { .fd = sock, .events = events };
		if (left <= 0)
			return false;
		int n = poll(&pfd, 1, (int)left);
		if (n > 0)
			return true;
		if (n < 0 && errno != EINTR)
			return false;
	}
}

/* Puts the descriptors a reply carries in place of ours. */
static void take_reply(struct msghdr *msg, unsigned char what)
{
	struct cmsghdr *c = CMSG_FIRSTHDR(msg);
	if (!c || c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
		return;
	int fds[2] = { -1, -1 }, n = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
	memcpy(fds, CMSG_DATA(c), (size_t)(n > 2 ? 2 : n) * sizeof(int));
	int i = 0;
	if ((what & CARRIES_ACCESS) && i < n) {
		if (access_fd >= 0)
			dup3(fds[i], access_fd, O_CLOEXEC);
		close(fds[i++]);
	}
	if ((what & CARRIES_ERROR) && i < n) {
		if (error_fd >= 0)
			dup3(fds[i], error_fd, O_CLOEXEC);
		close(fds[i++]);
	}
	while (i < n && i < 2)
		close(fds[i++]); /* not ours to keep */
}

/* Sends the request: one byte and the channel the reply is to come back
 * on. A full socket (hundreds asking at once) is waited out. 0 or -1. */
static int send_request(int channel, int64_t deadline)
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

	for (;;) {
		if (sendmsg(reopen_sock, &msg, MSG_DONTWAIT | MSG_NOSIGNAL) == 1)
			return 0;
		if (errno == EINTR)
			continue;
		if (errno == ETOOMANYREFS) { /* this user's descriptors in flight: the master is reading them */
			if (deadline - monotonic_ms() < REOPEN_RETRY_MS)
				return -1;
			poll(NULL, 0, REOPEN_RETRY_MS);
			continue;
		}
		if (errno != EAGAIN || !wait_sock(reopen_sock, POLLOUT, deadline))
			return -1;
	}
}

/* A serving process's reopen: a request carrying a channel of its own, and
 * the reply with the master's descriptors on that channel. Every process of
 * the instance (fork children and prefork workers too) asks on one shared
 * socket, so a reply on it could go to any of them: one whose asker gave up
 * (a 2 s wait ran out, a signal cut it short) or died would wait there, and
 * the next rotation's first asker would take it and with it the files of
 * the rotation before. A reply on the asker's own channel reaches that ask
 * or nobody: a channel given up is closed, and the master's late reply
 * goes nowhere. */
static void reopen_from_master(void)
{
	int64_t deadline = monotonic_ms() + REOPEN_WAIT_MS;
	int ch[2];

	/* SEQPACKET: a master that drops the request (or dies) ends the wait at once */
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ch) < 0)
		return; /* out of descriptors: keep the old files */
	int sent = send_request(ch[1], deadline);
	close(ch[1]); /* the master holds the one in flight */
	while (sent == 0) {
		union {
			struct cmsghdr h;
			char buf[CMSG_SPACE(2 * sizeof(int))];
		} ctl;
		unsigned char what;
		struct iovec iov = { &what, 1 };
		struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
				      .msg_controllen = sizeof(ctl.buf) };
		ssize_t n = recvmsg(ch[0], &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
		if (n == 1) {
			take_reply(&msg, what);
			break;
		}
		if (n == 0 || (errno != EAGAIN && errno != EINTR) || !wait_sock(ch[0], POLLIN, deadline))
			break;
	}
	close(ch[0]);
}

void log_reopen(void)
{
	int saved = errno;
	if (reopen_sock >= 0)
		reopen_from_master();
	else
		reopen_by_path();
	errno = saved;
}

void log_reopen_via(int sock)
{
	reopen_sock = sock;
}

/* The reply: which logs, and their descriptors, on the asker's channel. */
static void send_reply(int channel)
{
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(2 * sizeof(int))];
	} ctl;
	unsigned char what = 0;
	int fds[2], n = 0;

	if (access_fd >= 0) {
		what |= CARRIES_ACCESS;
		fds[n++] = access_fd;
	}
	if (error_fd >= 0) {
		what |= CARRIES_ERROR;
		fds[n++] = error_fd;
	}
	struct iovec iov = { &what, 1 };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };
	if (n > 0) {
		memset(&ctl, 0, sizeof(ctl));
		msg.msg_control = ctl.buf;
		msg.msg_controllen = CMSG_SPACE((size_t)n * sizeof(int));
		struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN((size_t)n * sizeof(int));
		memcpy(CMSG_DATA(c), fds, (size_t)n * sizeof(int));
	}
	/* an asker that gave up closed its end: nothing to do about that */
	ssize_t sent = sendmsg(channel, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
	(void)sent;
}

/* Closes a descriptor a serving process passed. The last close of a TCP
 * socket with SO_LINGER set and unsent data waits out the linger time in
 * the closing process: a confined process could so hold up the root master
 * for minutes. Lingering is switched off first (nothing to a non-socket). */
static void close_passed(int fd)
{
	struct linger off = { 0 };
	(void)setsockopt(fd, SOL_SOCKET, SO_LINGER, &off, sizeof(off));
	close(fd);
}

/* The channel a request carries, or -1. Only a Unix SEQPACKET socket is
 * answered: the root master writes the log descriptors to nothing else
 * (not a TCP socket, not a pipe a confined process chose). Any other
 * descriptor the request carried is closed. */
#define PASSED_FDS_MAX 253 /* the kernel's SCM_MAX_FD */

static int request_channel(struct msghdr *msg)
{
	int fd = -1;

	for (struct cmsghdr *c = CMSG_FIRSTHDR(msg); c; c = CMSG_NXTHDR(msg, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < n; i++) {
			int got;
			memcpy(&got, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
			if (fd < 0)
				fd = got;
			else
				close_passed(got);
		}
	}
	int type = 0, domain = 0;
	socklen_t len = sizeof(int), dlen = sizeof(int);
	if (fd >= 0 && (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) < 0 ||
			getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &dlen) < 0 ||
			type != SOCK_SEQPACKET || domain != AF_UNIX)) {
		close_passed(fd);
		fd = -1;
	}
	return fd;
}

void log_answer_reopen(int sock)
{
	for (int i = 0; i < ANSWERS_PER_CALL; i++) {
		/* room for all a message can carry: the kernel itself closes
		 * those that do not fit, lingering in this process */
		union {
			struct cmsghdr h;
			char buf[CMSG_SPACE(PASSED_FDS_MAX * sizeof(int))];
		} ctl;
		char req[16];
		struct iovec iov = { req, sizeof(req) };
		struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
				      .msg_controllen = sizeof(ctl.buf) };
		if (recvmsg(sock, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC) < 0) {
			if (errno == EINTR)
				continue;
			return;
		}
		int channel = request_channel(&msg);
		if (channel >= 0) {
			send_reply(channel);
			close(channel);
		}
	}
}

void log_echo_errors(int ms)
{
	echo_until_ms = ms < 0 ? INT64_MAX : ms == 0 ? 0 : monotonic_ms() + ms;
}

bool log_echoing_errors(void)
{
	return echo_until_ms && monotonic_ms() < echo_until_ms;
}

bool log_access_enabled(void)
{
	return access_fd >= 0;
}

static void write_line(int fd, const char *buf, size_t len)
{
	/* A short write to a regular file only happens on a full disk; nothing
	 * sensible to retry then. */
	ssize_t n = write(fd, buf, len);
	(void)n;
}

/* "[21/Nov/2026:06:00:47 +0000]", cached per thread for the current second. */
static const char *clf_time(void)
{
	static const char months[12][4] = { "Jan", "Feb", "Mar", "Apr", "May", "Jun",
					    "Jul", "Aug", "Sep", "Oct", "Nov", "Dec" };
	static _Thread_local time_t cached;
	static _Thread_local char buf[48];
	time_t now = time(NULL);

	if (now != cached) {
		struct tm tm;
		gmtime_r(&now, &tm);
		snprintf(buf, sizeof(buf), "[%02d/%s/%04d:%02d:%02d:%02d +0000]", tm.tm_mday,
			 months[tm.tm_mon], tm.tm_year + 1900, tm.tm_hour, tm.tm_min, tm.tm_sec);
		cached = now;
	}
	return buf;
}

/* Copies a header value for a quoted log field, escaping '"', '\' and bytes
 * outside printable ASCII so a client cannot forge log lines. */
static size_t put_escaped(char *out, size_t cap, struct span s)
{
	static const char hex[] = "0123456789abcdef";
	size_t o = 0;

	if (!s.p || s.len == 0) {
		if (cap > 0)
			out[o++] = '-';
		return o;
	}
	for (size_t i = 0; i < s.len && o + 4 < cap; i++) {
		unsigned char ch = (unsigned char)s.p[i];
		if (ch == '"' || ch == '\\' || ch < 0x20 || ch >= 0x7f) {
			out[o++] = '\\';
			out[o++] = 'x';
			out[o++] = hex[ch >> 4];
			out[o++] = hex[ch & 15];
		} else {
			out[o++] = (char)ch;
		}
	}
	return o;
}

/* "2026-11-22T19:22:38.123Z" (RFC 3339, UTC, milliseconds); the part up to
 * the seconds is cached per thread for the current second. */
static void rfc3339_ms_now(char out[32])
{
	static _Thread_local time_t cached = -1;
	static _Thread_local char secs[24];
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	if (ts.tv_sec != cached) {
		struct tm tm;
		gmtime_r(&ts.tv_sec, &tm);
		strftime(secs, sizeof(secs), "%Y-%m-%dT%H:%M:%S", &tm);
		cached = ts.tv_sec;
	}
	int ms = (int)(ts.tv_nsec / 1000000);
	size_t n = strlen(secs);
	memcpy(out, secs, n);
	out[n++] = '.';
	out[n++] = (char)('0' + ms / 100);
	out[n++] = (char)('0' + ms / 10 % 10);
	out[n++] = (char)('0' + ms % 10);
	out[n++] = 'Z';
	out[n] = '\0';
}

static void log_access_json(const struct access_entry *e)
{
	char line[4096], now[32];
	struct json_access a = {
		.time = now,
		.client = e->peer,
		.status = e->status,
		.bytes = e->bytes,
		.duration_us = e->duration_us,
		.queue_us = e->queue_us,
		.shed = e->shed,
		.refused = e->refused,
		.service_us = e->service_us,
		.first_byte_us = e->first_byte_us,
		.referer = e->referer,
		.user_agent = e->user_agent,
		.model = model_name,
		.worker = (long)worker_id(),
		.site = e->site,
	};
	rfc3339_ms_now(now);
	json_split_request_line(e->request_line, &a.method, &a.target, &a.protocol);
	write_line(access_fd, line, json_access_line(line, sizeof(line), &a));
}

void log_access(const struct access_entry *e)
{
	char line[4096];
	size_t n;

	if (access_fd < 0)
		return;
	if (access_format == ACCESS_LOG_JSON) {
		log_access_json(e);
		return;
	}
	n = 0;
	if (access_format == ACCESS_LOG_VHOST_COMBINED)
		n = (size_t)snprintf(line, sizeof(line), "%s ", e->site ? e->site : "default");
	n += (size_t)snprintf(line + n, sizeof(line) - n, "%s - - %s \"", e->peer, clf_time());
	n += put_escaped(line + n, sizeof(line) - n - 256, e->request_line);
	if (e->bytes)
		n += (size_t)snprintf(line + n, sizeof(line) - n, "\" %d %llu \"", e->status,
				      (unsigned long long)e->bytes);
	else
		n += (size_t)snprintf(line + n, sizeof(line) - n, "\" %d - \"", e->status);
	n += put_escaped(line + n, (sizeof(line) - n) / 2, e->referer);
	line[n++] = '"';
	line[n++] = ' ';
	line[n++] = '"';
	n += put_escaped(line + n, sizeof(line) - n - 3, e->user_agent);
	line[n++] = '"';
	line[n++] = '\n';
	write_line(access_fd, line, n);
}

bool log_wants(enum log_level level)
{
	return level >= min_level && error_fd >= 0;
}

void log_msg(enum log_level level, const char *fmt, ...)
{
	static const char *const names[] = { "debug", "info", "warn", "error" };
	char line[2048];
	struct timespec ts;
	struct tm tm;
	va_list ap;
	int saved = errno;

	if (level < min_level || error_fd < 0)
		return;
	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	int n = snprintf(line, sizeof(line), "%04d-%02d-%02dT%02d:%02d:%02dZ [%s] [%d] ", tm.tm_year + 1900,
			 tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, names[level], (int)getpid());
	va_start(ap, fmt);
	errno = saved; /* so %m works */
	int m = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	size_t len = (size_t)n + (m < 0 ? 0 : ((size_t)m < sizeof(line) - (size_t)n - 1 ? (size_t)m : sizeof(line) - (size_t)n - 2));
	line[len++] = '\n';
	write_line(error_fd, line, len);
	/* a fatal start-up error must reach the terminal (or the journal) even
	 * when error_log names a file */
	if (level >= LOG_ERROR && error_path[0] && log_echoing_errors()) {
		char out[2100];
		int k = snprintf(out, sizeof(out), "spindle: %.*s", (int)(len - (size_t)n), line + n);
		write_line(STDERR_FILENO, out, (size_t)k < sizeof(out) ? (size_t)k : sizeof(out) - 1);
	}
	errno = saved;
}
