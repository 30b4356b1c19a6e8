/* acme_challenge.h - the ACME HTTP-01 challenge files (RFC 8555 8.3) that a
 * client such as `certbot certonly --webroot -w DIR` or uacme leaves in
 * DIR/.well-known/acme-challenge/, served from `acme_webroot` for every
 * request whatever its Host, before redirects and the site's own files.
 *
 * Only a bare token names a file: [A-Za-z0-9_-] (the base64url alphabet
 * RFC 8555 8.1 gives tokens), never a directory, a dotfile or a sidecar. */
#ifndef SPINDLE_ACME_CHALLENGE_H
#define SPINDLE_ACME_CHALLENGE_H

#include <stddef.h>
#include <sys/stat.h>

#include "../span.h"

#define ACME_CHALLENGE_DIR ".well-known/acme-challenge"
/* Tokens are 43 characters in practice (32 random bytes, base64url). */
#define ACME_TOKEN_MAX 128
/* The longest webroot-relative path acme_challenge_match() writes, with NUL. */
#define ACME_REL_MAX (sizeof(ACME_CHALLENGE_DIR "/") + ACME_TOKEN_MAX)

enum acme_match {
	ACME_NOT_CHALLENGE, /* another path: the site answers it */
	ACME_NO_TOKEN,      /* the challenge directory, but no safe token: 404 */
	ACME_TOKEN,         /* a token: rel holds its path beneath the webroot */
};

/* Pure. Whether a request's raw path names the challenge directory once
 * decoded and canonicalised as any path is ("/a/../.well-known//acme-
 * challenge/x" does; a prefix match on the raw bytes would let such a
 * spelling reach the site instead). For ACME_TOKEN, writes
 * ".well-known/acme-challenge/TOKEN" into rel (cap >= ACME_REL_MAX). */
enum acme_match acme_challenge_match(struct span path, char *rel, size_t cap);

/* Opens rel (from acme_challenge_match) beneath the webroot's descriptor,
 * read-only, never leaving it. Returns the descriptor with *st filled, or
 * -errno: -ENOENT also for anything but a regular file. */
int acme_challenge_open(int webroot_fd, const char *rel, struct stat *st);

#endif
