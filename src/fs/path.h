/* path.h - turn a request path into a safe path relative to the document root. Pure. */
#ifndef SPINDLE_FS_PATH_H
#define SPINDLE_FS_PATH_H

#include <stdbool.h>
#include <stddef.h>

#include "../span.h"

struct path_result {
	size_t len;          /* length of out, no leading '/', "" for the root */
	bool trailing_slash; /* the decoded path ended in '/' (directory request) */
	bool has_dot_segment;/* some component starts with '.' (a dotfile or dot-directory) */
};

/* Percent-decodes `raw` exactly once (no '+' translation), then canonicalises:
 * collapses "//", drops ".", resolves "..". Writes a root-relative path (no
 * leading slash, components joined by '/', NUL-terminated) into out[0..cap).
 * Returns 0, or a negative HTTP status:
 *   -400 path not starting with '/', bad %-escape, decoded NUL, ".." above the root
 *   -414 result does not fit in cap
 * Encoded slashes (%2F) decode to '/' before canonicalisation, so they can
 * never smuggle a ".." past it. */
int path_resolve(struct span raw, char *out, size_t cap, struct path_result *res);

#endif
