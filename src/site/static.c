/* static.c - a file as a response: from the cache or opened, the sidecar
 * Accept-Encoding picks for it, its Cache-Control and Expires, then the
 * conditional and range steps over the value (http/filters.h). */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../fs/cache.h"
#include "../fs/file.h"
#include "../fs/sidecar.h"
#include "../http/cache_control.h"
#include "../http/date.h"
#include "../http/encoding.h"
#include "../http/filters.h"
#include "../http/mime_file.h"
#include "../log/log.h"
#include "../stats/stats.h"
#include "internal.h"

/* A file to answer with: from the cache (entry set), or open (fd >= 0). */
struct file_view {
	uint64_t size;
	time_t mtime;
	const char *etag;
	size_t etag_len;
	const char *last_modified;
	const char *mime;
	struct cache_entry *entry;
	int fd;
	/* set only when the features are configured */
	const char *content_encoding;          /* a sidecar's coding, or NULL */
	char lm_buf[HTTP_DATE_LEN + 1];        /* last_modified's storage for an opened file */
	bool vary;                             /* the file has sidecars: Vary: Accept-Encoding */
	const struct cache_control_rule *cc;   /* the Cache-Control rule that matched, or NULL */
};

static void view_release(struct file_view *f)
{
	if (f->fd >= 0)
		close(f->fd);
	f->fd = -1;
	cache_release(f->entry);
	f->entry = NULL;
}

/* An error that varies with Accept-Encoding says so. */
static void file_error(struct site_exchange *x, int status, bool vary)
{
	site_exchange_error(x, status);
	if (vary)
		response_field_str(x->resp, "Vary", "Accept-Encoding");
}

/* Expires (for HTTP/1.0 caches, which know no max-age: RFC 9111 5.3) as
 * now + max_age; formatted once a second per thread and rule, as the Date is. */
static void put_expires(struct response *r, long long max_age)
{
	static _Thread_local struct {
		time_t at;
		long long max_age;
		char date[HTTP_DATE_LEN + 1];
	} last;
	time_t now = time(NULL);
	if (now != last.at || max_age != last.max_age) {
		http_date_format(now + (time_t)max_age, last.date);
		last.at = now;
		last.max_age = max_age;
	}
	response_field_copy(r, "Expires", last.date, HTTP_DATE_LEN);
}

/* Reads a small file whole, so head and body leave in one write. */
static int read_whole(int fd, size_t size, char **out, size_t *got)
{
	char *buf = malloc(size ? size : 1);
	if (!buf)
		return -ENOMEM;
	size_t off = 0;
	while (off < size) {
		ssize_t n = pread(fd, buf + off, size - off, (off_t)off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			int err = -errno;
			free(buf);
			return err;
		}
		if (n == 0)
			break; /* truncated since fstat: send what is there */
		off += (size_t)n;
	}
	*out = buf;
	*got = off;
	return 0;
}

/* An open file's body: small ones from memory (one write with the head),
 * big ones from the descriptor (sendfile); a HEAD keeps only the length.
 * False when the response was replaced by an error. */
static bool file_body(struct site_exchange *x)
{
	struct response *r = x->resp;
	if (r->body.kind != RESPONSE_BODY_FILE)
		return true;
	if (x->req->method == HTTP_HEAD) {
		response_body_drop(r);
		return true;
	}
	if (r->body.size >= x->cfg->sendfile_min)
		return true;
	char *buf = NULL;
	size_t got = 0;
	uint64_t size = r->body.size;
	int err = read_whole(r->body.fd, (size_t)size, &buf, &got);
	if (err < 0) {
		log_error("read: %s", strerror(-err));
		site_exchange_error(x, 500);
		return false;
	}
	response_body_memory(r, buf, got, buf);
	if (got != size)
		r->ranges = false; /* the file shrank since fstat: send what is there, whole */
	return true;
}

/* The response for the file f (taking over its fd or entry): a 200 with the
 * fields a 200, 206 and 304 for it carry, then the steps over the value. */
static void serve_file(struct site_exchange *x, struct file_view *f)
{
	struct response *r = x->resp;

	response_release(r);
	r->status = 200;
	if (f->entry)
		response_body_entry(r, f->entry);
	else
		response_body_file(r, f->fd, f->size);
	f->entry = NULL;
	f->fd = -1;
	char *etag = response_alloc(r, f->etag_len);
	if (etag)
		memcpy(etag, f->etag, f->etag_len);
	r->validators = (struct http_validators){ etag, etag ? f->etag_len : 0, f->mtime };
	r->has_validators = etag != NULL;
	r->ranges = true;
	r->vary = f->vary;
	/* validators, Vary, Cache-Control and Expires: what a 200, 206 and 304
	 * all carry (RFC 9110 15.4.5) */
	response_field_copy(r, "Last-Modified", f->last_modified, strlen(f->last_modified));
	response_field(r, "ETag", etag, r->validators.etag_len);
	if (f->vary)
		response_field_str(r, "Vary", "Accept-Encoding");
	if (f->cc) {
		response_field_str(r, "Cache-Control", f->cc->value);
		if (x->cfg->cache_expires && f->cc->max_age >= 0)
			put_expires(r, f->cc->max_age);
	}
	response_field_str(r, "Accept-Ranges", "bytes");
	if (f->content_encoding)
		response_field_str(r, "Content-Encoding", f->content_encoding);
	response_field_str(r, "Content-Type", f->mime);
	response_content_length(r);

	/* RFC 9110 13.2.2: If-Match, If-Unmodified-Since, If-None-Match,
	 * If-Modified-Since in that order, then If-Range with the Range */
	if (http_filter_conditional(x->req, r) == 412) {
		file_error(x, 412, f->vary);
		return;
	}
	if (r->status == 304 || !file_body(x))
		return;
	r->body.follows_head = r->body.kind == RESPONSE_BODY_ENTRY || r->body.kind == RESPONSE_BODY_MEMORY;
	uint64_t size = r->body.size;
	if (http_filter_range(x->req, r, x->cfg->max_ranges, time(NULL)) == 416) {
		char cr[32];
		int n = snprintf(cr, sizeof(cr), "bytes */%llu", (unsigned long long)size);
		site_exchange_error(x, 416);
		response_field_copy(r, "Content-Range", cr, (size_t)n);
		if (f->vary)
			response_field_str(r, "Vary", "Accept-Encoding");
	}
}

/* A cached file checked again: its key less the site's prefix is its path. */
static int cache_reopen(const char *key, void *arg)
{
	const struct site *site = arg;
	return file_open_beneath(site->root_fd, key + site->cache_prefix_len, site->cfg->symlinks);
}

/* rel's key in the shared cache: the site's prefix, then rel (NUL-ended
 * for cache_reopen). A server of one site has no prefix: rel itself. */
static const char *cache_key(const struct site *site, const char *rel, size_t len, char *buf, size_t *keylen)
{
	*keylen = site->cache_prefix_len + len;
	if (!site->cache_prefix_len)
		return rel;
	memcpy(buf, site->cache_prefix, site->cache_prefix_len);
	memcpy(buf + site->cache_prefix_len, rel, len);
	buf[*keylen] = '\0';
	return buf;
}

static void view_of_entry(struct file_view *f, struct cache_entry *e)
{
	*f = (struct file_view){
		.size = e->len, .mtime = e->mtime, .etag = e->etag, .etag_len = e->etag_len,
		.last_modified = e->last_modified, .mime = e->mime, .entry = e, .fd = -1,
	};
}

struct cache_entry *site_cached_file(struct site_exchange *x, const char *rel, size_t len)
{
	const struct site *site = x->site;
	char buf[site->cache_prefix_len ? site->cache_prefix_len + len + 1 : 1];
	size_t keylen;
	const char *key = cache_key(site, rel, len, buf, &keylen);
	struct cache_entry *hit = cache_lookup(site->cache, key, keylen, site_now_ms(), cache_reopen, (void *)site);
	if (site->cache)
		stats_cache_lookup(hit != NULL); /* stats */
	return hit;
}

/* The sidecars of a cached file, worked out at most once per revalidation
 * window (so a sidecar made or deleted later is seen as the file itself would
 * be) and kept with the entry: a hit costs no stat for them. */
#define SIDECARS_KNOWN (1u << 31)

static unsigned cached_sidecars(struct site_exchange *x, struct cache_entry *e, const struct site_target *t)
{
	int64_t now = site_now_ms();
	unsigned mask = atomic_load_explicit(&e->aux, memory_order_relaxed);
	long long checked = atomic_load_explicit(&e->aux_checked_ms, memory_order_relaxed);
	if ((mask & SIDECARS_KNOWN) && now - checked < x->cfg->cache_revalidate_ms)
		return mask;
	/* one thread per window looks; the others use what is known */
	if ((mask & SIDECARS_KNOWN) &&
	    !atomic_compare_exchange_strong(&e->aux_checked_ms, &checked, (long long)now))
		return mask;
	mask = SIDECARS_KNOWN | sidecar_probe(x->site->root_fd, x->cfg->symlinks, t->rel, t->len, e->mtime,
					      &x->cfg->precompressed);
	atomic_store_explicit(&e->aux, mask, memory_order_relaxed);
	atomic_store_explicit(&e->aux_checked_ms, (long long)now, memory_order_relaxed);
	return mask;
}

/* The view of the chosen sidecar, from the cache or opened; false when it is
 * gone or stale since the look (the original is sent instead). Keeps the
 * original's Content-Type; the ETag gets the coding as a suffix, so no cache
 * mistakes one encoding's bytes for another's (RFC 9110 8.8.3). */
static bool sidecar_view(struct site_exchange *x, const struct site_target *t, const struct file_view *orig,
			 int coding, struct file_view *f, char *etag)
{
	char key[t->len + SIDECAR_SUFFIX_MAX];
	size_t keylen = t->len + strlen(encoding_suffix(coding));
	struct stat st;

	memcpy(key, t->rel, t->len);
	strcpy(key + t->len, encoding_suffix(coding));
	struct cache_entry *e = site_cached_file(x, key, keylen); /* a sidecar is looked up like any file */
	if (e && e->mtime < orig->mtime) {
		cache_release(e);
		return false;
	}
	if (!e) {
		int fd = sidecar_open(x->site->root_fd, x->cfg->symlinks, t->rel, t->len, coding, orig->mtime, key, &st);
		if (fd < 0)
			return false;
		char kbuf[x->site->cache_prefix_len + keylen + 1];
		size_t cklen;
		const char *ck = cache_key(x->site, key, keylen, kbuf, &cklen);
		e = cache_insert(x->site->cache, ck, cklen, fd, &st,
				 mime_lookup(x->site->mime, key, keylen, x->cfg->default_type), site_now_ms());
		if (e) {
			close(fd);
		} else {
			*f = (struct file_view){
				.size = (uint64_t)st.st_size, .mtime = st.st_mtime, .fd = fd,
				.etag_len = http_etag(etag, st.st_mtime, (uint64_t)st.st_size),
			};
			http_date_format(st.st_mtime, f->lm_buf);
			f->last_modified = f->lm_buf;
		}
	}
	if (e) {
		view_of_entry(f, e);
		memcpy(etag, e->etag, e->etag_len);
		f->etag_len = e->etag_len;
	}
	/* "mtime-size" becomes "mtime-size-br" */
	f->etag_len += (size_t)snprintf(etag + f->etag_len - 1, HTTP_ETAG_MAX - f->etag_len + 1, "-%s\"",
					 encoding_name(coding)) - 1;
	f->etag = etag;
	f->mime = orig->mime;
	f->content_encoding = encoding_name(coding);
	f->vary = true;
	f->cc = orig->cc;
	return true;
}

/* Serves the file f, or the sidecar Accept-Encoding picks for it; applies
 * the Cache-Control rules. Takes over f's fd or entry. */
static void serve_target(struct site_exchange *x, struct file_view *f, const struct site_target *t)
{
	const struct config *cfg = x->cfg;
	if (t->url_path)
		f->cc = cache_control_match(&x->sc->cache_control, t->url_path, t->index_path, f->mime);
	if (cfg->precompressed.n == 0) {
		serve_file(x, f);
		return;
	}
	unsigned avail = f->entry ? cached_sidecars(x, f->entry, t) & ~SIDECARS_KNOWN
				  : sidecar_probe(x->site->root_fd, cfg->symlinks, t->rel, t->len, f->mtime,
						  &cfg->precompressed);
	f->vary = avail != 0;
	int coding = encoding_choose(x->req->accept_encoding, x->req->accept_encoding_lines, &cfg->precompressed,
				     avail);
	if (coding == ENCODING_NOT_ACCEPTABLE) {
		/* RFC 9110 12.5.3: identity refused and no coding on offer */
		view_release(f);
		file_error(x, 406, f->vary);
		return;
	}
	struct file_view side;
	char etag[HTTP_ETAG_MAX];
	if (coding >= 0 && sidecar_view(x, t, f, coding, &side, etag)) {
		view_release(f);
		serve_file(x, &side);
		return;
	}
	serve_file(x, f);
}

void site_serve_cached(struct site_exchange *x, struct cache_entry *e, const struct site_target *t)
{
	struct file_view f;
	view_of_entry(&f, e);
	serve_target(x, &f, t);
}

/* A view of an opened, uncached file (f takes over fd; etag is its buffer). */
static void view_of_fd(struct file_view *f, int fd, const struct stat *st, const char *mime, char *etag)
{
	*f = (struct file_view){
		.size = (uint64_t)st->st_size, .mtime = st->st_mtime, .etag = etag,
		.etag_len = http_etag(etag, st->st_mtime, (uint64_t)st->st_size),
		.mime = mime, .entry = NULL, .fd = fd,
	};
	http_date_format(st->st_mtime, f->lm_buf);
	f->last_modified = f->lm_buf;
}

void site_serve_opened(struct site_exchange *x, int fd, const struct stat *st, const struct site_target *t)
{
	const char *mime = mime_lookup(x->site->mime, t->rel, t->len, x->cfg->default_type);
	char kbuf[x->site->cache_prefix_len ? x->site->cache_prefix_len + t->len + 1 : 1];
	size_t keylen;
	const char *key = cache_key(x->site, t->rel, t->len, kbuf, &keylen);
	struct cache_entry *e = cache_insert(x->site->cache, key, keylen, fd, st, mime, site_now_ms());
	if (e) {
		close(fd);
		site_serve_cached(x, e, t);
		return;
	}
	char etag[HTTP_ETAG_MAX];
	struct file_view f;
	view_of_fd(&f, fd, st, mime, etag);
	serve_target(x, &f, t);
}

void site_serve_plain(struct site_exchange *x, int fd, const struct stat *st, const char *mime)
{
	char etag[HTTP_ETAG_MAX];
	struct file_view f;
	view_of_fd(&f, fd, st, mime, etag);
	serve_file(x, &f);
}
