/* log.h - the access log (Combined Log Format or JSON lines) and the error log.
 *
 * Every line is formatted into a local buffer and written with one write(2)
 * to an O_APPEND descriptor, so lines from threads and processes never
 * interleave and no lock is needed. */
#ifndef SPINDLE_LOG_LOG_H
#define SPINDLE_LOG_LOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../span.h"

struct config;

enum log_level { LOG_DEBUG, LOG_INFO, LOG_WARN, LOG_ERROR };
/* The access log's line format: Combined Log Format, or one JSON object a
 * line, or Combined with the site's name first (Apache's vhost_combined,
 * whose %v:%p is the site's name here: a listener's port is not the site's). */
enum access_log_format { ACCESS_LOG_COMBINED, ACCESS_LOG_JSON, ACCESS_LOG_VHOST_COMBINED };

/* Opens both logs, or applies cfg's log settings to the files already open
 * when its paths are theirs (a reload); -1 after saying why (to the error
 * log when one is open, else to stderr), the current files kept. */
int log_open(const struct config *cfg);
void log_close(void);
/* Async-signal-safe in a serving process (socketpair, sendmsg, recvmsg,
 * poll, dup3, close only): for SIGUSR1 and logrotate. In the master it opens the paths again (never
 * through a link) and logs the outcome; in a process given log_reopen_via()
 * it takes the master's current descriptors instead. */
void log_reopen(void);
/* In a serving process: from now on reopen through sock (a datagram socket
 * whose other end the master answers with log_answer_reopen). */
void log_reopen_via(int sock);
/* In the master: answers the pending requests on sock (when it is readable),
 * each on the channel it carries, with the open logs. Never blocks. */
void log_answer_reopen(int sock);
/* What an error of open_append (a -errno) means, in words. */
const char *log_open_error(int err);
/* For the next ms milliseconds (-1: until called again, 0: stop), error
 * lines also go to stderr when error_log is a file: start-up failures must
 * reach the terminal or the journal. */
void log_echo_errors(int ms);
bool log_echoing_errors(void);

bool log_access_enabled(void);

struct access_entry {
	const char *peer;         /* textual client address */
	struct span request_line; /* empty when none could be parsed */
	int status;
	uint64_t bytes;           /* body bytes sent */
	struct span referer;
	struct span user_agent;
	uint64_t duration_us;     /* request head arrival to last byte (JSON format) */
	uint64_t queue_us;        /* readable to picked up (conn_readable; JSON format) */
	uint64_t service_us;      /* picked up to last byte (JSON format) */
	bool shed;                /* answered 503 by the overload policy (JSON format) */
	const char *refused;      /* refused at once, no request read: why ("full", "connections"),
				   * else NULL (JSON format) */
	uint64_t first_byte_us;   /* picked up to first byte (JSON format) */
	const char *site;         /* the site that answered ([site NAME], "default"); NULL: the server has
				   * no [site] sections (the JSON line then has no "site") */
};
void log_access(const struct access_entry *e);

/* Whether a line at level would be written (to skip preparing one). */
bool log_wants(enum log_level level);
void log_msg(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)
#define log_info(...)  log_msg(LOG_INFO, __VA_ARGS__)
#define log_warn(...)  log_msg(LOG_WARN, __VA_ARGS__)
#define log_error(...) log_msg(LOG_ERROR, __VA_ARGS__)

#endif
