/* autoindex.h - directory listings: the query that orders them,
 * the sort, and the HTML and JSON bodies. Pure: entries in, bytes out; the
 * directory is read by fs/dirlist.c and the response built by site/listing.c. */
#ifndef SPINDLE_HTTP_AUTOINDEX_H
#define SPINDLE_HTTP_AUTOINDEX_H

#include <stdbool.h>
#include <stddef.h>
#include <time.h>

#include "../fs/dirlist.h"
#include "../span.h"
#include "response.h"

/* Bounds on one listing: at most this many entries are read, and the body
 * is cut (at an entry, with a note saying so) before it passes this size. */
#define AUTOINDEX_MAX_ENTRIES 50000
#define AUTOINDEX_MAX_BODY (4u << 20)

/* What a directory without its index file answers: 403, or a listing as HTML or JSON. */
enum autoindex_mode { AUTOINDEX_OFF, AUTOINDEX_HTML, AUTOINDEX_JSON };

enum autoindex_key { AUTOINDEX_BY_NAME, AUTOINDEX_BY_MTIME, AUTOINDEX_BY_SIZE };

struct autoindex_order {
	enum autoindex_key key;
	bool desc;
};

/* "sort=name|mtime|size" and "order=asc|desc" from a query string (without
 * the '?'); anything else is ignored: name, ascending. */
struct autoindex_order autoindex_parse_query(struct span query);

/* Sorts by the key (bytewise name order breaks ties), then reverses for desc. */
void autoindex_sort(struct dir_entry *e, size_t n, struct autoindex_order order);

/* A weak validator for a listing of a directory last modified at mtime: it
 * changes with the directory's contents (mtime, to the nanosecond), and
 * differs per format and order, which make different bodies. Weak, because
 * a file changing size inside the directory does not touch the directory's
 * mtime (RFC 9110 8.8.1). */
size_t autoindex_etag(char out[HTTP_ETAG_MAX], struct timespec mtime, enum autoindex_mode mode,
		      struct autoindex_order order);

/* Enough bytes for autoindex_render of these entries (capped at
 * AUTOINDEX_MAX_BODY). dir is the directory's decoded root-relative path
 * ("" for the root, no slashes around it). */
size_t autoindex_body_bound(const char *dir, const struct dirlist *dl);

/* Writes the listing into out[0..cap): HTML (names HTML-escaped as text and
 * percent-encoded in links, a parent link below the root, sortable column
 * headers) or JSON ({"path", "entries": [{name, url, type, size, mtime}],
 * "truncated"}; url is the percent-encoded relative link). Entries that do not fit in cap are left out and the listing
 * says it is truncated. Returns the length. */
size_t autoindex_render(char *out, size_t cap, enum autoindex_mode mode, const char *dir,
			const struct dirlist *dl, struct autoindex_order order);

#endif
