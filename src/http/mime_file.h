/* mime_file.h - a types file in /etc/mime.types format that
 * extends or overrides the built-in MIME table, and the lookup through both. */
#ifndef SPINDLE_HTTP_MIME_FILE_H
#define SPINDLE_HTTP_MIME_FILE_H

#include <stddef.h>

struct mime_overrides;

/* Parses text in mime.types format: "type ext ext ..." per line, '#'
 * comments, blank lines; a later line wins an extension given twice.
 * origin names the file in messages. Returns 0 and *out (never NULL), or -1
 * with "LINE: problem" in why. */
int mime_overrides_parse(const char *text, size_t len, struct mime_overrides **out, char *why, size_t whylen);

/* Reads and parses path; on failure why holds "PATH:LINE: problem" or
 * "PATH: errno text". */
int mime_overrides_load(const char *path, struct mime_overrides **out, char *why, size_t whylen);

void mime_overrides_free(struct mime_overrides *o);

/* The type for a file name: the overrides (may be NULL) first, then the
 * built-in table, else default_type. Case-insensitive on the extension. */
const char *mime_lookup(const struct mime_overrides *o, const char *name, size_t len, const char *default_type);

#endif
