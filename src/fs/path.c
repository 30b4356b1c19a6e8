/* path.c - turns a request path into a root-relative path that cannot leave
 * the document root. Pure: no I/O, no allocation, no globals.
 *
 * Decoding and canonicalisation happen in one pass over the raw bytes, and
 * every byte is percent-decoded exactly once before the segment logic sees
 * it. That ordering is the point: Apache CVE-2021-41773 checked for ".."
 * before decoding "%2e", and double decoders turn "%252e" into ".". Here
 * "%2e%2e" is a ".." segment (RFC 3986 6.2.2.2 treats %2E and '.' alike), and
 * "%252e" is the three literal bytes "%2e".
 *
 * -414 is decided while writing: a segment that a later ".." would remove
 * still has to fit, so a path whose final form fits can still get -414 if a
 * prefix of it, before collapsing, did not. Any cap that holds the raw path
 * is always enough.
 *
 * The caller passes the path only: the query has been split off at the first
 * raw '?', so a '?' reaching here (e.g. from "%3F") is part of a file name.
 */
#include "path.h"

#include <stdint.h>

static int path_hex(unsigned char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

int path_resolve(struct span raw, char *out, size_t cap, struct path_result *res)
{
	const unsigned char *p = (const unsigned char *)raw.p;
	const unsigned char *end = p ? p + raw.len : p; /* NULL + 0 is undefined in C */
	size_t o = 0;          /* bytes of out in use */
	size_t seg_sep = 0;    /* o before the current segment's separator */
	size_t seg = 0;        /* where the current segment's bytes start in out */
	size_t depth = 0;      /* segments currently in out */
	size_t dot_segs = 0;   /* of those, how many start with '.' */

	res->len = 0;
	res->trailing_slash = false;
	res->has_dot_segment = false;

	if (cap == 0)
		return -414;
	out[0] = '\0';
	/* Origin-form (RFC 9112 3.2.1) starts with '/'; "*" is the caller's. */
	if (raw.p == NULL || raw.len == 0 || p[0] != '/')
		goto bad;
	p++;

	/* Each iteration consumes one decoded byte; p == end acts as a final
	 * '/' that ends the last segment without marking a directory. */
	for (;;) {
		int c;
		bool at_end = p == end;

		if (at_end) {
			c = '/';
		} else if (*p == '%') {
			int hi, lo;
			/* RFC 3986 2.1: '%' HEXDIG HEXDIG, nothing else. */
			if (end - p < 3 || (hi = path_hex(p[1])) < 0 || (lo = path_hex(p[2])) < 0)
				goto bad;
			c = hi << 4 | lo;
			p += 3;
			/* A NUL would truncate the name the kernel sees. */
			if (c == 0)
				goto bad;
		} else {
			c = *p++;
			if (c == 0)
				goto bad;
		}

		if (c != '/') {
			if (o == seg && o > 0 && seg == seg_sep) {
				/* First byte of a segment that follows another:
				 * emit the separator lazily so that empty and "."
				 * segments never leave a '/' behind. */
				if (o + 1 >= cap)
					goto too_long;
				out[o++] = '/';
				seg = o;
			}
			/* Needs o + 1 < cap: one byte plus the final NUL. A long
			 * segment later removed by ".." still counts, since it
			 * had to be written somewhere to be recognised. */
			if (o + 1 >= cap)
				goto too_long;
			out[o++] = (char)c;
			continue;
		}

		/* End of a segment: out[seg..o). "", "." and ".." leave the path
		 * naming a directory; anything else names whatever it names. */
		size_t n = o - seg;
		bool dir = true;
		if (n == 0) {
			/* Empty ("//", or the root itself): nothing to undo. */
		} else if (n == 1 && out[seg] == '.') {
			o = seg_sep;
		} else if (n == 2 && out[seg] == '.' && out[seg + 1] == '.') {
			/* RFC 3986 5.2.4: ".." removes the previous segment;
			 * above the root it is an attack, not a no-op. */
			if (depth == 0)
				goto bad;
			o = seg_sep;
			while (o > 0 && out[o - 1] != '/')
				o--;
			if (out[o] == '.')
				dot_segs--;
			if (o > 0)
				o--; /* and the separator before the popped segment */
			depth--;
		} else {
			depth++;
			if (out[seg] == '.')
				dot_segs++;
			dir = false;
		}
		if (at_end) {
			res->trailing_slash = dir;
			break;
		}
		seg_sep = o;
		seg = o;
	}

	out[o] = '\0';
	res->len = o;
	res->has_dot_segment = dot_segs > 0;
	return 0;

	/* Leave out as "" so a caller ignoring the status opens nothing odd. */
bad:
	out[0] = '\0';
	res->trailing_slash = false;
	return -400;
too_long:
	out[0] = '\0';
	res->trailing_slash = false;
	return -414;
}
