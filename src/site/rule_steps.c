/* rule_steps.c - [redirects], [headers] and cors_origins applied: steps over
 * a request that may answer it, and one over the response value the site
 * made for it (rule_steps.h). Matching itself is rules.c's. */
#include "rule_steps.h"

#include <string.h>
#include <strings.h>

#include "../fs/path.h"

#define RULE_PATH_MAX 4096

/* The request's Host without its port, lowercase left to the matcher; NULL
 * when it has none. */
static const char *host_of(const struct http_request *req, size_t *len)
{
	struct span h = req->host;
	if (!h.p || !h.len)
		return NULL;
	if (h.p[0] == '[') {
		const char *end = memchr(h.p, ']', h.len);
		*len = end ? (size_t)(end - h.p) + 1 : h.len;
	} else {
		const char *colon = memchr(h.p, ':', h.len);
		*len = colon ? (size_t)(colon - h.p) : h.len;
	}
	return h.p;
}

/* The decoded canonical path with its leading '/' (and trailing one for a
 * directory) into out; the length, or -1 when it does not resolve. */
static long canonical_path(const struct http_request *req, char *out, size_t cap)
{
	struct path_result pr;
	if (cap < 3 || path_resolve(req->path, out + 1, cap - 2, &pr) < 0)
		return -1;
	out[0] = '/';
	size_t n = pr.len + 1;
	if (pr.trailing_slash && pr.len)
		out[n++] = '/';
	out[n] = '\0';
	return (long)n;
}

int rule_step_redirect(const struct redirect_rules *rules, const struct http_request *req, char *loc, size_t cap)
{
	char path[RULE_PATH_MAX];
	long plen = canonical_path(req, path, sizeof(path));
	if (plen < 0)
		return 0;
	size_t hlen = 0;
	const char *host = host_of(req, &hlen);
	struct rules_capture caps[RULES_CAPTURES];
	size_t ncap = 0;
	const struct redirect_rule *r = redirect_rule_match(rules, host, hlen, path, (size_t)plen, caps, &ncap);
	if (!r)
		return 0;
	long n = redirect_target(r, caps, ncap, host, hlen, path, (size_t)plen, req->query.p, req->query.len, loc,
				 cap);
	return n < 0 ? 0 : r->status;
}

bool rule_step_is_preflight(const char *origins, const struct http_request *req)
{
	return origins[0] && req->method == HTTP_OPTIONS && req->acr_method.p &&
	       cors_origin_allowed(origins, req->origin.p, req->origin.len);
}

/* "*" lets any origin read without credentials; a list answers with the
 * origin itself, and the answer then varies with Origin (Fetch 3.2.5).
 * The origin is copied: the request's buffer is not the value's. */
static void allow_origin(const char *origins, const struct http_request *req, struct response *out, bool line)
{
	if (strcmp(origins, "*") == 0) {
		if (line)
			response_line_add(out, "Access-Control-Allow-Origin", "*");
		else
			response_field_str(out, "Access-Control-Allow-Origin", "*");
		return;
	}
	if (!line) {
		response_field_copy(out, "Access-Control-Allow-Origin", req->origin.p, req->origin.len);
		return;
	}
	char origin[1024];
	if (req->origin.len >= sizeof(origin))
		return; /* longer than any listed origin: cors_origin_allowed said no */
	memcpy(origin, req->origin.p, req->origin.len);
	origin[req->origin.len] = '\0';
	response_line_add(out, "Access-Control-Allow-Origin", origin);
}

/* Vary: Origin, in the file's own Vary field when it has the one a file
 * with sidecars has (static text, no store taken), else a line of its own
 * (a list may be split over field lines, RFC 9110 5.3). */
static void vary_origin(struct response *out)
{
	struct response_field *v = response_field_find(out, "Vary");
	if (!v) {
		response_field_str(out, "Vary", "Origin");
		return;
	}
	static const char both[] = "Accept-Encoding, Origin";
	if (v->len == 15 && strncasecmp(v->value, "Accept-Encoding", 15) == 0) {
		v->value = both;
		v->len = sizeof(both) - 1;
		return;
	}
	response_line_add(out, "Vary", "Origin");
}

void rule_step_preflight(const char *origins, const struct http_request *req, struct response *out)
{
	response_release(out);
	out->status = 204;
	allow_origin(origins, req, out, false);
	if (strcmp(origins, "*") != 0)
		response_field_str(out, "Vary", "Origin");
	response_field_str(out, "Access-Control-Allow-Methods", "GET, HEAD");
	/* the fields it asks for: a static site reads none, and refusing one
	 * would only fail the request the browser then sends */
	if (req->acr_headers.p && req->acr_headers.len)
		response_field_copy(out, "Access-Control-Allow-Headers", req->acr_headers.p, req->acr_headers.len);
	response_field_str(out, "Access-Control-Max-Age", "86400");
}

static bool adds_to(int status)
{
	switch (status) {
	case 200: case 201: case 204: case 206:
	case 301: case 302: case 303: case 304: case 307: case 308:
		return true;
	default:
		return false;
	}
}

static void apply_headers(const struct header_rules *rules, const char *index_name, const struct http_request *req,
			  struct response *out)
{
	char path[RULE_PATH_MAX];
	long plen = canonical_path(req, path, sizeof(path) - RULES_NAME_MAX);
	const char *p = plen < 0 ? NULL : path;
	/* a directory answered by its index file: rules for that file's
	 * path match too, as [cache_control] ones do */
	char index_path[RULE_PATH_MAX + 256];
	const char *ip = NULL;
	if (p && path[plen - 1] == '/' && index_name && strlen(index_name) < 256) {
		memcpy(index_path, path, (size_t)plen);
		strcpy(index_path + plen, index_name);
		ip = index_path;
	}
	struct response_field *ct = response_field_find(out, "Content-Type");
	char mime[CACHE_CONTROL_PATTERN_MAX] = "";
	if (ct && ct->value && ct->len < sizeof(mime)) {
		memcpy(mime, ct->value, ct->len);
		mime[ct->len] = '\0';
	}
	bool add = adds_to(out->status);
	for (size_t i = 0; i < rules->n; i++) {
		const struct header_rule *r = &rules->rule[i];
		if (!cache_control_rule_matches(&r->match, p, ip, mime))
			continue;
		bool server = strcasecmp(r->name, "Server") == 0;
		if (r->remove) {
			response_field_remove(out, r->name);
			if (server)
				out->no_server = true;
		} else if (add) {
			if (server) /* replaces the session's own */
				out->no_server = true;
			response_line_add(out, r->name, r->value);
		}
	}
}

void rule_step_response(const struct header_rules *headers, const char *origins, const char *index_name,
			const struct http_request *req, struct response *out)
{
	if (headers->n)
		apply_headers(headers, index_name, req, out);
	if (!origins[0] || (req->method != HTTP_GET && req->method != HTTP_HEAD))
		return;
	if (cors_origin_allowed(origins, req->origin.p, req->origin.len))
		allow_origin(origins, req, out, true);
	/* with a list, whether the field is there depends on Origin: a cache
	 * must keep the answers apart even for a request without one */
	if (strcmp(origins, "*") != 0)
		vary_origin(out);
}
