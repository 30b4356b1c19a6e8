/* server.h - what every connection shares: the immutable configuration, the
 * document root, the error pages and the listening sockets. Built once before
 * serving starts; read-only afterwards, so any thread may use it. */
#ifndef SPINDLE_SERVER_H
#define SPINDLE_SERVER_H

#include <stdbool.h>
#include <stddef.h>

#include "config.h"
#include "http/parse.h"

#define SERVER_MAX_LISTENERS 256

struct error_page {
	int status;
	char *body;   /* from <root>/errors/<status>.html, or NULL for the built-in page */
	size_t len;
};

struct server {
	const struct config *cfg;
	const struct model *model;
	int root_fd;                 /* O_PATH handle all files are opened beneath */
	int listen_fds[SERVER_MAX_LISTENERS];
	int nlisten;
	int workers;                 /* resolved: cfg->workers, or the number of cores */
	int wake_fd;                 /* eventfd: becomes readable when a stop is requested */
	struct http_limits limits;
	char server_header[64];      /* "Server: spindle/x.y.z\r\n" */
	struct file_cache *cache;    /* shared by the threads of one process; NULL when off */
	struct stats *stats;         /* the statistics segment (stats/stats.h), or NULL */
	struct workload *workload;   /* seed-002 buckets, MAP_SHARED across processes; NULL when off */
	struct mime_overrides *mime; /* the types_file, or NULL (issue 11.6) */
	struct error_page *pages;
	size_t npages;
};

/* Opens the root, loads error pages, creates the cache and shared state.
 * Listeners are separate: the master keeps them across reloads. */
int server_init(struct server *srv, const struct config *cfg, const struct model *model);
void server_close(struct server *srv);

/* Closes this process's copies of the master's listening sockets (the
 * master owns them: listen.h's listen_set). */
void server_close_listeners(struct server *srv);

/* In a serving process before its model runs, or in a child it forks: a stop
 * eventfd of its own (an inherited one is closed). */
int server_enter_serving(struct server *srv);

/* Async-signal-safe: asks this process's drivers to stop accepting and
 * drain. The listening sockets stay open for the next generation. */
void server_request_stop(void);
bool server_stopping(void);

/* The custom page for a status, or NULL. */
const struct error_page *server_error_page(const struct server *srv, int status);

#endif
