/* internal.h - what the site handler's files share: one request being
 * answered, the target it resolved to, and the steps each file offers the
 * others (routing in site.c, files in static.c, listings in listing.c). */
#ifndef SPINDLE_SITE_INTERNAL_H
#define SPINDLE_SITE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>

#include "../config.h"
#include "../http/parse.h"
#include "../http/response_value.h"
#include "site.h"

#define SITE_PATH_MAX 4096

struct site_exchange {
	const struct site *site;
	const struct config *cfg;        /* the whole server's settings */
	const struct site_config *sc;    /* the site's own */
	const struct http_request *req;
	const struct sockaddr_storage *peer;
	struct response *resp;
};

/* What a request resolved to: the file's root-relative path, and the URL
 * paths Cache-Control rules are matched against. */
struct site_target {
	const char *rel;
	size_t len;
	const char *url_path;    /* NULL when there are no rules */
	const char *index_path;  /* a directory's index file ("/docs/index.html"), or NULL */
};

/* Monotonic milliseconds, coarse: the clock the file cache's revalidation
 * window is counted in (the same as conn_now_ms()). */
static inline int64_t site_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* site.c */
void site_exchange_error(struct site_exchange *x, int status);
/* A failed open of rel, answered (403s explained at debug level). */
void site_open_error(struct site_exchange *x, const char *rel, int err);
/* At log_level = debug, why a request got 403. */
void site_log_refusal(const char *rel, const char *why);

/* static.c: the cached file at rel, referenced, or NULL (counted in the stats) */
struct cache_entry *site_cached_file(struct site_exchange *x, const char *rel, size_t len);
void site_serve_cached(struct site_exchange *x, struct cache_entry *e, const struct site_target *t);
/* A file just opened (takes over fd): cached when it fits, else served from fd. */
void site_serve_opened(struct site_exchange *x, int fd, const struct stat *st, const struct site_target *t);
/* A file just opened (takes over fd) as it is: the given type, no cache,
 * sidecar or Cache-Control rule (an ACME challenge). */
void site_serve_plain(struct site_exchange *x, int fd, const struct stat *st, const char *mime);

/* listing.c: the directory rel, whose index file is missing */
void site_listing(struct site_exchange *x, const char *rel, const struct stat *dir_st);

#endif
