/* utf8.c - decoding one well-formed UTF-8 sequence (utf8.h). */
#include "utf8.h"

size_t utf8_decode(const char *s, size_t len, uint32_t *cp)
{
	const unsigned char *u = (const unsigned char *)s;
	unsigned char b = u[0];
	unsigned char lo = 0x80, hi = 0xbf; /* allowed range of the second byte */
	size_t n;

	if (b < 0x80) {
		*cp = b;
		return 1;
	}
	if (b >= 0xc2 && b <= 0xdf)
		n = 2;
	else if (b >= 0xe0 && b <= 0xef)
		n = 3;
	else if (b >= 0xf0 && b <= 0xf4)
		n = 4;
	else
		return 0; /* a continuation byte, or C0/C1/F5..FF: never a first byte */
	if (b == 0xe0)
		lo = 0xa0; /* overlong */
	else if (b == 0xed)
		hi = 0x9f; /* UTF-16 surrogates */
	else if (b == 0xf0)
		lo = 0x90; /* overlong */
	else if (b == 0xf4)
		hi = 0x8f; /* above U+10FFFF */
	if (len < n || u[1] < lo || u[1] > hi)
		return 0;
	uint32_t c = b & (0x7f >> n);
	for (size_t i = 1; i < n; i++) {
		if (u[i] < 0x80 || u[i] > 0xbf)
			return 0;
		c = c << 6 | (u[i] & 0x3f);
	}
	*cp = c;
	return n;
}
