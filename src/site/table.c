/* table.c - the server's sites: opening one (its root and error pages), and
 * which one answers a request, by Host and by the TLS handshake's SNI. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../config.h"
#include "../log/log.h"
#include "names.h"
#include "site.h"

/* Codes that may have a page in <root>/errors/. */
static const int page_codes[] = { 301, 400, 403, 404, 405, 408, 413, 414, 416, 421, 431, 500, 501, 503, 505 };
#define NPAGES (sizeof(page_codes) / sizeof(page_codes[0]))
#define ERROR_PAGE_MAX (64 * 1024)

static void load_error_pages(struct site *site)
{
	site->pages = calloc(NPAGES, sizeof(*site->pages));
	site->npages = 0;
	if (!site->pages)
		return;
	for (size_t i = 0; i < NPAGES; i++) {
		char rel[32];
		struct stat st;
		snprintf(rel, sizeof(rel), "errors/%d.html", page_codes[i]);
		int fd = openat(site->root_fd, rel, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
		if (fd < 0)
			continue;
		if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size <= ERROR_PAGE_MAX) {
			char *body = malloc((size_t)st.st_size + 1);
			ssize_t n = body ? read(fd, body, (size_t)st.st_size) : -1;
			if (n == st.st_size) {
				site->pages[site->npages++] = (struct error_page){ page_codes[i], body, (size_t)n };
				body = NULL;
			}
			free(body);
		}
		close(fd);
	}
}

int site_open(struct site *site, const struct site_config *conf, const struct config *cfg)
{
	site->conf = conf;
	site->cfg = cfg;
	site->pages = NULL;
	site->npages = 0;
	site->root_fd = open(conf->root, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (site->root_fd < 0) {
		if (strcmp(conf->name, "default") == 0)
			log_error("root '%s': %s", conf->root, strerror(errno));
		else
			log_error("[site %s]: root '%s': %s", conf->name, conf->root, strerror(errno));
		return -1;
	}
	load_error_pages(site);
	return 0;
}

void site_close(struct site *site)
{
	for (size_t i = 0; i < site->npages; i++)
		free(site->pages[i].body);
	free(site->pages);
	site->pages = NULL;
	site->npages = 0;
	if (site->root_fd >= 0)
		close(site->root_fd);
	site->root_fd = -1;
}

size_t site_table_find(const struct site_table *t, const char *host, size_t len)
{
	size_t hl, best = 0, best_score = 0;
	const char *h = site_host_part(host, len, &hl);
	for (size_t i = 1; i < t->n; i++) {
		size_t score = site_names_match(t->site[i].conf->names, h, hl);
		if (score > best_score) {
			best = i;
			best_score = score;
		}
	}
	return best;
}

int site_choose(const struct site_table *t, const struct http_request *req, bool tls, int sni_site,
		const struct site **out)
{
	size_t by_host = t->n > 1 ? site_table_find(t, req->host.p, req->host.len) : 0;
	*out = &t->site[by_host];
	bool refusable = (sni_site >= 0 && (size_t)sni_site != by_host) || (by_host == 0 && t->reject_unknown);
	if (refusable && t->n > 0 && t->site[0].cfg && site_is_server_wide(t->site[0].cfg, req)) {
		*out = &t->site[0];
		return 0;
	}
	/* RFC 9110 15.5.20: the connection was set up for the SNI's site (its
	 * certificate); a request for another one must go over a connection of
	 * its own. Without SNI (a client that dialled an address) the Host
	 * alone decides, as over plain HTTP. */
	if (sni_site >= 0 && (size_t)sni_site != by_host) {
		if ((size_t)sni_site < t->n)
			*out = &t->site[sni_site]; /* the connection's site: its error page */
		return 421;
	}
	if (by_host == 0 && t->reject_unknown && t->n > 0)
		return tls ? 421 : 404;
	return 0;
}
