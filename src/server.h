/* server.h - what the serving process shares: the immutable configuration,
 * the listening sockets, the model, the stop request, the statistics handle,
 * the file cache and the sites (site/site.h: each its own root, rules, error
 * pages and certificate). Built once before serving starts; read-only
 * afterwards, so any thread may use it. */
#ifndef SPINDLE_SERVER_H
#define SPINDLE_SERVER_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "config.h"
#include "http/parse.h"
#include "site/site.h"
#include "stats/cidr.h"

#define SERVER_MAX_LISTENERS 1024
#define SERVER_MAX_ADDRESSES 32 /* listeners.h's LISTENERS_MAX */

struct server {
	const struct config *cfg;
	const struct model *model;
	int acme_fd;                 /* O_PATH handle of cfg->acme_webroot, or -1 (site/acme_challenge.h) */
	int listen_fds[SERVER_MAX_LISTENERS];
	int nlisten;
	/* listen_fds holds one group of sockets per address, one after
	 * another (acceptor_init_groups); an inherited one (socket activation)
	 * is never shut down by us */
	int listen_group_len[SERVER_MAX_ADDRESSES];
	bool listen_group_inherited[SERVER_MAX_ADDRESSES];
	/* which groups serve TLS (a `listen ... tls` address, or every
	 * one with tls = on), and each group's bound address, to tell an accepted
	 * socket's listener by its local address (server_tls_for) */
	bool listen_group_tls[SERVER_MAX_ADDRESSES];
	struct sockaddr_storage listen_group_addr[SERVER_MAX_ADDRESSES];
	int nlisten_groups;
	/* which groups take a PROXY header first (`listen ... proxy_protocol`),
	 * and from whom (cfg->real_ip_from) */
	bool listen_group_proxy[SERVER_MAX_ADDRESSES];
	struct cidr_list real_ip_from;
	/* which groups speak HTTP/2 alone (`listen ... http2_only`) */
	bool listen_group_h2_only[SERVER_MAX_ADDRESSES];
	int workers;                 /* resolved: cfg->workers, or the number of cores */
	int wake_fd;                 /* eventfd: becomes readable when a stop is requested */
	struct http_limits limits;
	char server_header[320];     /* "Server: spindle/x.y.z\r\n", and Strict-Transport-Security over TLS */
	struct file_cache *cache;    /* shared by the threads of one process; NULL when off */
	struct stats *stats;         /* the statistics segment (stats/stats.h), or NULL */
	struct workload *workload;   /* seed-002 buckets, MAP_SHARED across processes; NULL when off */
	struct tls_context *tls;     /* cfg->tls: shared by every connection (tls/context.h); else NULL */
	struct mime_overrides *mime; /* the types_file, or NULL */
	/* the sites: [0] the top level's, then each [site NAME]; a request
	 * goes to one by Host and SNI (site_choose) */
	struct site_table sites;
	struct site_config *top;     /* the top level's settings as a site (config_top_site) */
};

/* Opens the sites (roots, error pages), creates the cache and shared state.
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
 * drain. The listening sockets stay open for the next generation. A stop
 * (SIGTERM, SIGINT, a fatal error) ends the instance: health checks answer
 * 503. A retirement (a reload's new generation took over) drains the same way,
 * but the instance lives on: health checks still answer 200. */
void server_request_stop(void);
void server_request_retire(void);
bool server_stopping(void);  /* either of the two */
bool server_retiring(void);  /* a retirement, not (yet) a stop */

/* How a parent tells a serving process (or a serving process its children)
 * to stop or to retire: SIGTERM, carrying a value for a retirement. Returns as
 * kill() does. server_stop_from_signal() is the receiving end, for a
 * SA_SIGINFO handler of SIGTERM and SIGINT (async-signal-safe). */
int server_send_stop(pid_t pid, bool retire);
void server_stop_from_signal(int sig, const siginfo_t *info);

/* tls: the TLS context for a connection accepted on fd, or NULL when its
 * listener serves plain HTTP. One getsockname() when the instance has both
 * kinds of listener; none otherwise. */
const struct tls_context *server_tls_for(const struct server *srv, int fd);
/* Whether a connection accepted on fd starts with a PROXY header (its
 * listener has proxy_protocol). Looked up as server_tls_for does. */
bool server_proxy_for(const struct server *srv, int fd);
/* Whether a connection accepted on fd is HTTP/2 and nothing else (its
 * listener has http2_only). Looked up as server_tls_for does. */
bool server_h2_only_for(const struct server *srv, int fd);

/* The site of the top level, which answers names no [site] claims. */
static inline const struct site *server_default_site(const struct server *srv)
{
	return &srv->sites.site[0];
}

#endif
