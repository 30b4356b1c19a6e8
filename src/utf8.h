/* utf8.h - well-formed UTF-8 (RFC 3629 4), for the escapers that turn bytes
 * from file names and requests into text (the JSON log and listing, the HTML
 * listing). Pure. */
#ifndef SPINDLE_UTF8_H
#define SPINDLE_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* Length (1-4) of the well-formed UTF-8 sequence at s[0..len), with its code
 * point in *cp; 0 when the bytes there do not start one: a stray
 * continuation byte, C0/C1/F5..FF as a first byte, an overlong form, a
 * surrogate, a code point above U+10FFFF, or a sequence cut short. len > 0. */
size_t utf8_decode(const char *s, size_t len, uint32_t *cp);

#endif
