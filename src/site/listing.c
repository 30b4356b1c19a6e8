/* listing.c - a directory without its index file, as a listing (autoindex
 * = html or json): an ordinary 200 whose validators come from the directory,
 * so a conditional request is answered before the directory is read.
 *
 * Listings are built whole in memory (up to AUTOINDEX_MAX_BODY each) and
 * held until sent: without a bound, clients that ask for big listings and
 * never read them would hold max_connections x 4 MiB. A listing's body holds
 * bytes of the process's budget (budget.h), which also bounds each client's
 * share; beyond it a listing is answered 503 (Retry-After), as a server out
 * of a resource should. The body holds what it takes, and less as it is
 * sent (response_body_sent). */
#include <stdlib.h>
#include <string.h>

#include "../budget.h"
#include "../fs/dirlist.h"
#include "../http/autoindex.h"
#include "../http/date.h"
#include "../http/filters.h"
#include "internal.h"

void site_listing(struct site_exchange *x, const char *rel, const struct stat *dir_st)
{
	const struct config *cfg = x->cfg;
	const struct site_config *sc = x->sc;
	struct response *r = x->resp;
	struct autoindex_order order = autoindex_parse_query(x->req->query);

	response_release(r);
	r->status = 200;
	char *etag = response_alloc(r, HTTP_ETAG_MAX);
	char *lastmod = response_alloc(r, HTTP_DATE_LEN + 1);
	if (!etag || !lastmod)
		return; /* broken: answered 500 */
	size_t etag_len = autoindex_etag(etag, dir_st->st_mtim, sc->autoindex, order);
	http_date_format(dir_st->st_mtime, lastmod);
	r->validators = (struct http_validators){ etag, etag_len, dir_st->st_mtime };
	r->has_validators = true;
	response_field(r, "Last-Modified", lastmod, HTTP_DATE_LEN);
	response_field(r, "ETag", etag, etag_len);
	response_field_str(r, "Content-Type", sc->autoindex == AUTOINDEX_JSON ? "application/json"
									       : "text/html; charset=utf-8");
	response_content_length(r);
	if (http_filter_conditional(x->req, r) == 412) {
		site_exchange_error(x, 412);
		return;
	}
	if (r->status == 304)
		return;

	struct dirlist dl;
	int err = dirlist_read(x->site->root_fd, rel, cfg->symlinks, cfg->dotfiles, AUTOINDEX_MAX_ENTRIES, &dl);
	if (err < 0) {
		site_open_error(x, rel, -err);
		return;
	}
	autoindex_sort(dl.entries, dl.n, order);
	/* the worst case while it is built, then what the body really takes */
	size_t cap = autoindex_body_bound(rel, &dl);
	uint64_t client = budget_client(x->peer);
	if (!budget_take(client, cap)) {
		dirlist_free(&dl);
		site_exchange_error(x, 503);
		response_field_str(r, "Retry-After", "1");
		return;
	}
	char *body = malloc(cap);
	response_body_listing(r, body, 0, cap, client); /* owns the memory and the bytes taken */
	size_t len = body ? autoindex_render(body, cap, sc->autoindex, rel, &dl, order) : 0;
	dirlist_free(&dl);
	if (len == 0) {
		site_exchange_error(x, body ? 414 : 503); /* a path too long to list, or no memory */
		return;
	}
	char *fit = realloc(body, len);
	if (fit)
		r->body.p = r->body.owned = fit;
	budget_give(client, cap - len);
	r->body.reserved = len;
	r->body.size = r->body.len = len;
}
