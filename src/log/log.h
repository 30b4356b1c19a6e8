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
/* The access log's line format: Combined Log Format, or one JSON object a line. */
enum access_log_format { ACCESS_LOG_COMBINED, ACCESS_LOG_JSON };

/* Opens both logs; returns -1 after printing why. */
int log_open(const struct config *cfg);
void log_close(void);
/* Async-signal-safe (open, dup2, close only): for SIGUSR1 and logrotate. */
void log_reopen(void);

bool log_access_enabled(void);

struct access_entry {
	const char *peer;         /* textual client address */
	struct span request_line; /* empty when none could be parsed */
	int status;
	uint64_t bytes;           /* body bytes sent */
	struct span referer;
	struct span user_agent;
	uint64_t duration_us;     /* request head arrival to last byte (JSON format) */
};
void log_access(const struct access_entry *e);

void log_msg(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)
#define log_info(...)  log_msg(LOG_INFO, __VA_ARGS__)
#define log_warn(...)  log_msg(LOG_WARN, __VA_ARGS__)
#define log_error(...) log_msg(LOG_ERROR, __VA_ARGS__)

#endif
