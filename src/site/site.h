/* site.h - the site handler: what a request is answered with, as a response
 * value (http/response_value.h). Routing (method policy, redirects, the
 * endpoints), static files, sidecars, listings, the fallback and error pages.
 *
 * It knows files, rules and responses, never a connection: a session (the
 * HTTP/1.1 one in http1/, or any other) hands it a parsed request and the
 * client's address, and gets back a value to serialize. Whether the
 * connection stays open, Date, Server and the framing are the session's. */
#ifndef SPINDLE_SITE_H
#define SPINDLE_SITE_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

#include "../http/parse.h"
#include "../http/response_value.h"

struct config;
struct file_cache;
struct mime_overrides;
struct server;
struct site_config;

struct error_page {
	int status;
	char *body;   /* from <root>/errors/<status>.html, or NULL for the built-in page */
	size_t len;
};

/* One site: what answering a request for it needs. Its own settings (names,
 * root, index, listing, fallback, CORS, rules, certificate) are in conf; the
 * whole server's content settings (symlinks, dotfiles, sidecars, MIME
 * defaults, limits) in cfg. Built by site_open() before serving starts and
 * read-only afterwards, so any thread may use it. */
struct site {
	const struct site_config *conf;
	const struct config *cfg;
	int root_fd;                 /* O_PATH handle all its files are opened beneath */
	struct error_page *pages;    /* from its root's errors/ */
	size_t npages;
	const struct mime_overrides *mime; /* the server's types_file, or NULL */
	struct file_cache *cache;    /* the process's, shared by every site; NULL when off */
	/* The site's keys in the shared cache start with this ("" when the
	 * server has one site), so two sites' "index.html" are two entries. */
	char cache_prefix[12];
	size_t cache_prefix_len;
	int acme_fd;                 /* the server's acme_webroot, or -1 */
	int stats_index;             /* its counter in the statistics, or -1: not counted per site */
	const char *log_name;        /* its name in the access log; NULL for a server of one site */
	const struct server *srv;    /* for the generated endpoints only (endpoints.h) */
};

/* Opens conf's root and loads its error pages; the shared pieces are the
 * caller's. Returns 0, or -1 after logging why. */
int site_open(struct site *site, const struct site_config *conf, const struct config *cfg);
void site_close(struct site *site);

/* The server's sites: [0] is the top level's (the default site), the rest
 * the [site NAME] sections in order. */
struct site_table {
	struct site *site;
	size_t n;
	bool reject_unknown; /* default_site = reject */
};

/* The site a host name (a Host value or an SNI, port and case as sent)
 * names: its index, or 0 (the default site) when no site claims it. */
size_t site_table_find(const struct site_table *t, const char *host, size_t len);

/* Which site answers req. tls: the request came over TLS; sni_site: the
 * site the TLS handshake's SNI chose (site_table_find), or -1 when there was
 * none (plain HTTP, or no SNI sent). Sets *out to the site and returns 0, or
 * returns the status of a refusal (*out then the site whose error page it
 * gets): 421 when the Host names another site than the SNI did (RFC 9110
 * 15.5.20: a connection to one site must not be used for another), or, with
 * default_site = reject, a name no site claims: 421 over TLS, 404 over
 * plain HTTP. A server-wide path (site_is_server_wide) is never refused. */
int site_choose(const struct site_table *t, const struct http_request *req, bool tls, int sni_site,
		const struct site **out);

/* Whether req asks for a path the whole server answers whatever the Host
 * (health_path, status_path and metrics_path when on, an ACME challenge
 * when acme_webroot is set): site_choose() gives it to the default site
 * instead of refusing it, as a load balancer's check sends no Host. */
bool site_is_server_wide(const struct config *cfg, const struct http_request *req);

/* Fills out (empty, response_init) with the answer to req from peer. */
void site_respond(const struct site *site, const struct http_request *req, const struct sockaddr_storage *peer,
		  struct response *out);

/* The status the site gives req whatever its body holds (a method it does
 * not serve: 501, 405 with Allow), filling out; 0 when it would serve it.
 * Lets a session answer a client that waits for "100 Continue" before the
 * body. site_respond() applies the same policy. */
int site_refuse(const struct site *site, const struct http_request *req, struct response *out);

/* An error response for status with the site's page for it (its errors/
 * directory), or the built-in one. Replaces whatever out held. */
void site_error(const struct site *site, int status, struct response *out);

#endif
