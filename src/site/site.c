/* site.c - routing: which answer a request gets. Method policy, the HTTPS
 * redirect, the generated endpoints, path resolution beneath the root,
 * directory redirects and index files, the SPA fallback, and error pages.
 * Files themselves are static.c's, listings listing.c's. */
#include "site.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../endpoints.h"
#include "../fs/cache.h"
#include "../fs/file.h"
#include "../fs/path.h"
#include "../log/log.h"
#include "acme_challenge.h"
#include "internal.h"
#include "rules.h"
#include "rule_steps.h"

/* The custom page for a status, or NULL. */
static const struct error_page *error_page(const struct site *site, int status)
{
	for (size_t i = 0; i < site->npages; i++)
		if (site->pages[i].status == status)
			return &site->pages[i];
	return NULL;
}

void site_error(const struct site *site, int status, struct response *out)
{
	const struct error_page *page = error_page(site, status);
	response_error(out, status, page ? page->body : NULL, page ? page->len : 0);
}

void site_exchange_error(struct site_exchange *x, int status)
{
	site_error(x->site, status, x->resp);
}

int site_refuse(const struct site *site, const struct http_request *req, struct response *out)
{
	int status = 0;
	if (rule_step_is_preflight(site->conf->cors_origins, req))
		return 0; /* answered by site_respond */
	if (req->method == HTTP_METHOD_UNKNOWN)
		status = 501;
	else if (req->method != HTTP_GET && req->method != HTTP_HEAD)
		status = 405;
	if (!status)
		return 0;
	site_error(site, status, out);
	if (status == 405)
		response_field_str(out, "Allow", "GET, HEAD");
	return status;
}

/* 301 to the same directory with a slash, the query kept (RFC 9110 15.4.2).
 * Built from the canonical path, never the raw one: "//host" as a Location
 * would send the client to another site. */
static void redirect_slash(struct site_exchange *x, const char *rel, size_t rel_len)
{
	const struct http_request *r = x->req;
	char *loc = malloc(3 * rel_len + r->query.len + 8);
	size_t n = 0;

	if (!loc) {
		site_exchange_error(x, 500);
		return;
	}
	loc[n++] = '/';
	n += rules_encode_path(rel, rel_len, loc + n);
	loc[n++] = '/';
	if (r->query.p) {
		loc[n++] = '?';
		memcpy(loc + n, r->query.p, r->query.len);
		n += r->query.len;
	}
	site_exchange_error(x, 301);
	response_field_copy(x->resp, "Location", loc, n);
	free(loc);
}

/* redirect_https: 301 to the same target on the HTTPS port, for the host
 * the client asked for (its port replaced). A Host with anything but name,
 * address or port characters gets a 400: it would go into a header. */
static void redirect_https(struct site_exchange *x)
{
	const struct http_request *r = x->req;
	struct span host = r->host;

	if (host.p && host.len && host.p[0] == '[') { /* an IPv6 literal keeps its brackets */
		const char *end = memchr(host.p, ']', host.len);
		host.len = end ? (size_t)(end - host.p) + 1 : 0;
	} else if (host.p) {
		const char *colon = memchr(host.p, ':', host.len);
		if (colon)
			host.len = (size_t)(colon - host.p);
	}
	bool ok = host.p && host.len > 0 && host.len <= 255;
	for (size_t i = 0; ok && i < host.len; i++)
		ok = isalnum((unsigned char)host.p[i]) || strchr(".-_[]:", host.p[i]);
	if (!ok) {
		site_exchange_error(x, 400);
		x->resp->linger = true;
		return;
	}
	size_t need = host.len + r->path.len + r->query.len + 40;
	char *loc = malloc(need);
	if (!loc) {
		site_exchange_error(x, 500);
		return;
	}
	int n = snprintf(loc, need, "https://%.*s", (int)host.len, host.p);
	if (x->cfg->redirect_https_port != 443)
		n += snprintf(loc + n, need - (size_t)n, ":%d", x->cfg->redirect_https_port);
	n += snprintf(loc + n, need - (size_t)n, "%.*s%s%.*s", (int)r->path.len, r->path.p, r->query.p ? "?" : "",
		      (int)r->query.len, r->query.p ? r->query.p : "");
	site_exchange_error(x, 301);
	response_field_copy(x->resp, "Location", loc, (size_t)n);
	free(loc);
}

/* A response an endpoint generated; takes over its body. */
static void respond_dynamic(struct site_exchange *x, struct dyn_response *d)
{
	struct response *r = x->resp;
	response_release(r);
	r->status = d->status;
	r->close = d->close;
	response_field_str(r, "Content-Type", d->content_type);
	response_content_length(r);
	response_field_str(r, "Cache-Control", "no-store");
	if (d->extra)
		response_field_lines(r, d->extra);
	response_body_memory(r, d->body, d->len, d->body);
}

void site_log_refusal(const char *rel, const char *why)
{
	char safe[256];
	size_t n = 0;

	/* nothing else tells an operator whether a file's mode, Landlock or a
	 * setting refused it. The path comes from the client: bytes outside
	 * printable ASCII are written as '?' so they cannot forge log lines. */
	if (!log_wants(LOG_DEBUG))
		return;
	for (; rel[n] && n < sizeof(safe) - 1; n++)
		safe[n] = rel[n] >= 0x20 && rel[n] < 0x7f ? rel[n] : '?';
	safe[n] = '\0';
	log_debug("403 for '/%s%s': %s", safe, rel[n] ? "..." : "", why);
}

static const char *open_refusal_reason(int err)
{
	switch (err) {
	case EACCES: return "permission denied (the file's mode or owner, or Landlock: outside the root)";
	case EPERM: return "operation not permitted";
	case EXDEV: return "a symbolic link leads out of the root";
	case ELOOP: return "a symbolic link, refused by the symlinks setting";
	default: return strerror(err);
	}
}

static int status_for_open_error(int err)
{
	switch (err) {
	case ENOENT:
	case ENOTDIR:
		return 404;
	case EACCES:
	case EPERM:
	case EXDEV:   /* a symlink leading out of the root */
	case ELOOP:   /* a symlink refused by policy */
		return 403;
	case ENAMETOOLONG:
		return 414;
	case EMFILE:  /* out of descriptors (the kernel says so before it */
	case ENFILE:  /* looks the path up): an overload, not a fault, */
	case ENOMEM:  /* RFC 9110 15.6.4 */
		return 503;
	default:
		return 500;
	}
}

void site_open_error(struct site_exchange *x, const char *rel, int err)
{
	int status = status_for_open_error(err);
	if (status == 403)
		site_log_refusal(rel, open_refusal_reason(err));
	site_exchange_error(x, status);
}

/* "app.js" has one, "settings" and "v1/" none: only a path without one
 * takes the SPA fallback, so a missing asset stays a 404. */
static bool last_segment_has_extension(const char *rel, size_t len)
{
	size_t start = len;
	while (start > 0 && rel[start - 1] != '/')
		start--;
	const char *dot = memchr(rel + start, '.', len - start);
	return dot && dot > rel + start; /* a leading dot names a dotfile, not a type */
}

/* The SPA fallback file, for a GET/HEAD whose path does not exist: as
 * nginx's `try_files $uri /index.html`. Tried once: when it is missing too,
 * the answer is 404, never another fallback. */
static void respond_fallback(struct site_exchange *x)
{
	const struct config *cfg = x->cfg;
	const struct site_config *sc = x->sc;
	char rel[SITE_PATH_MAX];
	struct path_result pr;
	struct stat st;

	int err = path_resolve((struct span){ sc->fallback, strlen(sc->fallback) }, rel, sizeof(rel), &pr);
	if (err < 0 || pr.len == 0 || pr.trailing_slash) {
		site_exchange_error(x, 404);
		return;
	}
	/* Cache-Control rules see the fallback's own path: its content is served */
	struct site_target t = { rel, pr.len, sc->cache_control.n ? sc->fallback : NULL, NULL };
	struct cache_entry *hit = site_cached_file(x, rel, pr.len);
	if (hit) {
		site_serve_cached(x, hit, &t);
		return;
	}
	int fd = file_open_beneath(x->site->root_fd, rel, cfg->symlinks);
	if (fd < 0) {
		if (fd == -ENOENT || fd == -ENOTDIR)
			site_exchange_error(x, 404);
		else
			site_open_error(x, rel, -fd);
		return;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		site_exchange_error(x, 404);
		return;
	}
	site_serve_opened(x, fd, &st, &t);
}

/* A directory: its index file, else a listing, else 403. rel holds the
 * directory's path (dir_len bytes) and room for the index's name. */
static void respond_directory(struct site_exchange *x, char *rel, size_t dir_len, const struct stat *dir_st,
			      struct site_target *t)
{
	const struct config *cfg = x->cfg;
	const struct site_config *sc = x->sc;
	struct stat st;

	/* Open the index by its full path, so a symlinked index is confined too. */
	size_t n = dir_len;
	if (n)
		rel[n++] = '/';
	strcpy(rel + n, sc->index);
	size_t len = n + strlen(sc->index);
	int fd = file_open_beneath(x->site->root_fd, rel, cfg->symlinks);
	if (fd == -ENOENT && sc->autoindex != AUTOINDEX_OFF) {
		rel[dir_len] = '\0';
		site_listing(x, rel, dir_st);
		return;
	}
	if (fd == -ENOENT) {
		/* no index, and listings are off */
		char why[300];
		snprintf(why, sizeof(why), "a directory without %s, and autoindex is off", sc->index);
		rel[dir_len] = '\0';
		site_log_refusal(rel, why);
		site_exchange_error(x, 403);
		return;
	}
	if (fd < 0) {
		site_open_error(x, rel, -fd);
		return;
	}
	if (fstat(fd, &st) < 0) {
		close(fd);
		site_exchange_error(x, 500);
		return;
	}
	if (!S_ISREG(st.st_mode)) {
		close(fd);
		site_log_refusal(rel, "not a regular file (a device, FIFO or socket)");
		site_exchange_error(x, 403);
		return;
	}
	t->len = len;
	site_serve_opened(x, fd, &st, t);
}

/* Static files: resolve, confine, open, then answer. */
static void respond_path(struct site_exchange *x)
{
	const struct http_request *r = x->req;
	const struct config *cfg = x->cfg;
	const struct site_config *sc = x->sc;
	char rel[SITE_PATH_MAX];
	struct path_result pr;

	int err = path_resolve(r->path, rel, sizeof(rel) - sizeof(sc->index) - 1, &pr);
	if (err < 0) {
		site_exchange_error(x, -err);
		return;
	}
	if (pr.has_dot_segment && !cfg->dotfiles) {
		site_exchange_error(x, 404);
		return;
	}
	/* Cache-Control rules see the URL path as decoded and, for a directory,
	 * the path of the index file that answers it (cache_control.h) */
	bool rules = sc->cache_control.n > 0;
	char url_path[rules ? pr.len + 3 : 1];
	char index_path[rules && pr.trailing_slash ? pr.len + 3 + strlen(sc->index) : 1];
	if (rules) {
		url_path[0] = '/';
		memcpy(url_path + 1, rel, pr.len);
		size_t n = pr.len + 1;
		if (pr.trailing_slash && pr.len)
			url_path[n++] = '/';
		url_path[n] = '\0';
		if (pr.trailing_slash) {
			memcpy(index_path, url_path, n);
			strcpy(index_path + n, sc->index);
		}
	}
	struct site_target t = { rel, 0, rules ? url_path : NULL, rules && pr.trailing_slash ? index_path : NULL };
	/* A directory request is looked up as its index file. */
	size_t keylen = pr.len;
	if (pr.trailing_slash) {
		if (keylen)
			rel[keylen++] = '/';
		strcpy(rel + keylen, sc->index);
		keylen += strlen(sc->index);
	}
	struct cache_entry *hit = site_cached_file(x, rel, keylen);
	if (hit) {
		t.len = keylen;
		site_serve_cached(x, hit, &t);
		return;
	}
	rel[pr.len] = '\0';
	int fd = file_open_beneath(x->site->root_fd, rel, cfg->symlinks);
	if (fd < 0) {
		if ((fd == -ENOENT || fd == -ENOTDIR) && sc->fallback[0] && !last_segment_has_extension(rel, pr.len))
			respond_fallback(x);
		else
			site_open_error(x, rel, -fd);
		return;
	}
	struct stat st;
	if (fstat(fd, &st) < 0) {
		close(fd);
		site_exchange_error(x, 500);
		return;
	}
	if (S_ISDIR(st.st_mode)) {
		close(fd);
		if (pr.trailing_slash)
			respond_directory(x, rel, pr.len, &st, &t);
		else
			redirect_slash(x, rel, pr.len);
		return;
	}
	if (pr.trailing_slash) {
		close(fd); /* "/file.txt/" names no directory */
		site_exchange_error(x, 404);
		return;
	}
	if (!S_ISREG(st.st_mode)) {
		close(fd);
		site_log_refusal(rel, "not a regular file (a device, FIFO or socket)");
		site_exchange_error(x, 403);
		return;
	}
	t.len = pr.len;
	site_serve_opened(x, fd, &st, &t);
}

/* An ACME HTTP-01 challenge file from acme_webroot (acme_challenge.h), or
 * false when the path is not one. Anything but a token's regular file is
 * 404: no listing, no sidecar, no fallback. */
static bool respond_acme(struct site_exchange *x)
{
	char rel[ACME_REL_MAX];
	enum acme_match m = acme_challenge_match(x->req->path, rel, sizeof(rel));
	if (m == ACME_NOT_CHALLENGE)
		return false;
	struct stat st;
	int fd = m == ACME_TOKEN ? acme_challenge_open(x->site->acme_fd, rel, &st) : -ENOENT;
	if (fd < 0)
		site_exchange_error(x, 404);
	else
		site_serve_plain(x, fd, &st, "text/plain");
	return true;
}

/* A [redirects] rule's answer, or false when none matches. */
static bool respond_redirect_rule(struct site_exchange *x)
{
	char loc[RULES_TARGET_MAX + 2 * SITE_PATH_MAX];
	int status = rule_step_redirect(&x->sc->redirects, x->req, loc, sizeof(loc));
	if (!status)
		return false;
	site_exchange_error(x, status);
	response_field_copy(x->resp, "Location", loc, strlen(loc));
	return true;
}

/* The answer before the steps over it: the first step that answers wins. */
static bool path_equals(const struct http_request *req, const char *path)
{
	size_t n = strlen(path);
	return n && req->path.len == n && memcmp(req->path.p, path, n) == 0;
}

bool site_is_server_wide(const struct config *cfg, const struct http_request *req)
{
	char rel[ACME_REL_MAX];
	return path_equals(req, cfg->health_path) ||
	       (cfg->metrics && (path_equals(req, cfg->metrics_path) || path_equals(req, cfg->status_path))) ||
	       (cfg->acme_webroot[0] && acme_challenge_match(req->path, rel, sizeof(rel)) != ACME_NOT_CHALLENGE);
}

/* The load balancer's check and the operator's statistics are answered even
 * while requests are shed: an overloaded instance must still say how it is. */
static bool never_shed(const struct config *cfg, const struct http_request *req)
{
	return path_equals(req, cfg->health_path) ||
	       (cfg->metrics && (path_equals(req, cfg->metrics_path) || path_equals(req, cfg->status_path)));
}

/* A shed request: 503 at once, no file looked at, and when to come back. */
static void respond_shed(struct site_exchange *x)
{
	site_error(x->site, 503, x->resp);
	response_field_str(x->resp, "Retry-After", "1");
	x->resp->shed = true;
}

static void route(struct site_exchange *x)
{
	const struct config *cfg = x->cfg;
	const struct site_config *sc = x->sc;

	if (rule_step_is_preflight(sc->cors_origins, x->req)) {
		rule_step_preflight(sc->cors_origins, x->req, x->resp);
		return;
	}
	if (site_refuse(x->site, x->req, x->resp))
		return;
	if (x->req->shed && !never_shed(cfg, x->req)) {
		respond_shed(x);
		return;
	}
	/* before any redirect: the ACME server asks over plain HTTP */
	if (cfg->acme_webroot[0] && respond_acme(x))
		return;
	if (sc->redirect_https && !x->req->tls) {
		redirect_https(x);
		return;
	}
	/* the generated endpoints (health, stats) before redirect rules:
	 * a catch-all rule must not move a load balancer's health check */
	struct dyn_response dyn;
	if (endpoints_dispatch(x->site->srv, x->peer, x->req, &dyn)) {
		respond_dynamic(x, &dyn);
		return;
	}
	if (sc->redirects.n && respond_redirect_rule(x))
		return;
	respond_path(x);
}

void site_respond(const struct site *site, const struct http_request *req, const struct sockaddr_storage *peer,
		  struct response *out)
{
	const struct site_config *sc = site->conf;
	struct site_exchange x = { site, site->cfg, sc, req, peer, out };

	route(&x);
	if (sc->headers.n || sc->cors_origins[0])
		rule_step_response(&sc->headers, sc->cors_origins, sc->index, req, out);
}
