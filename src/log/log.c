/* log.c - one write(2) per line to O_APPEND files; reopened on SIGUSR1. */
#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
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

static int open_append(const char *path)
{
	return open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
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

int log_open(const struct config *cfg)
{
	static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
	pthread_once(&atfork_once, log_register_atfork);
	min_level = cfg->log_level;
	access_format = cfg->access_log_format;
	snprintf(model_name, sizeof(model_name), "%s", cfg->model);
	access_path[0] = error_path[0] = '\0';
	if (cfg->access_log[0]) {
		snprintf(access_path, sizeof(access_path), "%s", cfg->access_log);
		access_fd = open_append(access_path);
		if (access_fd < 0) {
			fprintf(stderr, "spindle: access_log: cannot open '%s': %s\n", access_path, strerror(errno));
			return -1;
		}
	}
	if (strcmp(cfg->error_log, "-") == 0) {
		error_fd = fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 3);
	} else {
		snprintf(error_path, sizeof(error_path), "%s", cfg->error_log);
		error_fd = open_append(error_path);
		if (error_fd < 0) {
			fprintf(stderr, "spindle: error_log: cannot open '%s': %s\n", error_path, strerror(errno));
			return -1;
		}
	}
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

static void reopen_one(int fd, const char *path)
{
	if (fd < 0 || !path[0])
		return;
	int nfd = open_append(path);
	if (nfd < 0)
		return; /* keep writing to the old file rather than losing lines */
	dup3(nfd, fd, O_CLOEXEC);
	close(nfd);
}

void log_reopen(void)
{
	int saved = errno;
	reopen_one(access_fd, access_path);
	reopen_one(error_fd, error_path);
	errno = saved;
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
		.referer = e->referer,
		.user_agent = e->user_agent,
		.model = model_name,
		.worker = (long)worker_id(),
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
	n = (size_t)snprintf(line, sizeof(line), "%s - - %s \"", e->peer, clf_time());
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
	errno = saved;
}
