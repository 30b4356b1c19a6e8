/* names.h - the host names a site answers to (`names = HOST...` in a
 * [site NAME] section), and which of several sites a Host or an SNI names.
 * Pure: no I/O, no allocation, no globals.
 *
 * A name is exact ("example.com") or a wildcard ("*.example.com", which
 * matches any name that ends in ".example.com" and has at least one label
 * before it, as nginx's and Caddy's do; not "example.com" itself). Names
 * compare case-insensitively (RFC 9110 4.2.3); a Host's port and a final
 * dot are dropped before matching. An exact name wins over a wildcard, and
 * a longer wildcard over a shorter one, whatever the order of the sites. */
#ifndef SPINDLE_SITE_NAMES_H
#define SPINDLE_SITE_NAMES_H

#include <stdbool.h>
#include <stddef.h>

#define SITE_NAME_MAX 64       /* a [site NAME]'s NAME, with NUL */
#define SITE_HOSTNAME_MAX 254  /* one host name, with NUL (RFC 1035 2.3.4) */
#define SITE_NAMES_LIST_MAX 1024 /* a `names` value, with NUL */

/* Whether a [site NAME] section's NAME is usable: 1-63 of [A-Za-z0-9._-],
 * not "default" (the name the top level's site goes by). */
bool site_name_valid(const char *name);

/* Checks a `names` value: one or more host names or "*.domain" wildcards,
 * separated by spaces, each letters, digits, '-' and '.' (an IDN in its
 * xn-- form). 0, or -1 with the problem in why. */
int site_names_check(const char *list, char *why, size_t whylen);

/* The host part of a Host value or an SNI (p, len): the port dropped, a
 * final dot dropped, an IPv6 literal's brackets kept. Writes its length to
 * *out_len and returns where it starts. */
const char *site_host_part(const char *p, size_t len, size_t *out_len);

/* How well the `names` list matches host (host_len bytes, already through
 * site_host_part): 0 for no match, else a score to compare between sites:
 * an exact name beats every wildcard, a longer wildcard a shorter one. */
size_t site_names_match(const char *list, const char *host, size_t host_len);

/* Whether two `names` lists share a name (compared as written, without
 * case): the first such name is written into dup. */
bool site_names_overlap(const char *a, const char *b, char *dup, size_t duplen);

#endif
