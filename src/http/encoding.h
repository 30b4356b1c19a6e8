/* encoding.h - content codings of precompressed sidecars and the
 * choice among them from a request's Accept-Encoding (RFC 9110 12.5.3). Pure. */
#ifndef SPINDLE_HTTP_ENCODING_H
#define SPINDLE_HTTP_ENCODING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../span.h"

/* The codings a sidecar can have; a bitmask of them is (1u << coding). */
enum content_coding { CODING_BR, CODING_ZSTD, CODING_GZIP, CODING_COUNT };

/* encoding_choose() results besides a coding. */
#define ENCODING_IDENTITY (-1)         /* send the file as it is */
#define ENCODING_NOT_ACCEPTABLE (-2)   /* identity refused and no sidecar acceptable: 406 */

/* The server's preference: codings in order, as configured. */
struct encoding_prefs {
	uint8_t order[CODING_COUNT];
	uint8_t n;                     /* 0: precompressed sidecars are off */
};

/* "br", "zstd", "gzip": the Content-Encoding token. */
const char *encoding_name(enum content_coding c);

/* ".br", ".zst", ".gz": the sidecar's suffix on the original's name. */
const char *encoding_suffix(enum content_coding c);

/* Parses a space- or comma-separated list of coding names ("br zstd gzip";
 * "" or "off" for none) into prefs. Returns 0, or -1 with the reason in why. */
int encoding_prefs_parse(const char *s, struct encoding_prefs *prefs, char *why, size_t whylen);

/* Writes prefs back as encoding_prefs_parse reads it ("" for none). */
void encoding_prefs_format(const struct encoding_prefs *prefs, char *out, size_t cap);

/* Picks the representation to send. accept is the Accept-Encoding field as
 * struct http_request records it (lines field lines; p == NULL when absent),
 * available the bitmask of codings with a usable sidecar. Returns the coding
 * with the highest q-value among the available ones (ties: the server's
 * order), ENCODING_IDENTITY, or ENCODING_NOT_ACCEPTABLE when the client
 * refused identity ("identity;q=0", or "*;q=0" without identity) and accepts
 * no available coding. An absent field means identity: any coding would be
 * acceptable (RFC 9110 12.5.3), but a client that says nothing may not decode
 * one, so nginx's gzip_static and h2o do the same. */
int encoding_choose(struct span accept, unsigned lines, const struct encoding_prefs *prefs, unsigned available);

#endif
