/* mime.c - Content-Type from a file name's extension. Pure.
 *
 * Runs on every response, so the lookup is a binary search over a table
 * sorted by lower-case extension: one bounded lower-casing copy, then about
 * seven short string compares. The table must stay sorted in strcmp() order
 * (tests/unit/test_mime.c looks every entry up, so a misplaced one fails).
 *
 * Text-like types carry "; charset=utf-8" so browsers do not guess the
 * encoding (RFC 9110 8.3.2 lets the sender name it; guessing is a known
 * source of content-sniffing bugs). JavaScript is text/javascript per
 * RFC 9239 3; JSON and XML family types take the parameter as well.
 */
#include "mime.h"

#include <string.h>

#define MIME_UTF8 "; charset=utf-8"

struct mime_entry {
	const char *ext;  /* lower case */
	const char *type;
};

/* Sorted by ext (strcmp order: digits before letters). */
static const struct mime_entry mime_table[] = {
	{ "7z", "application/x-7z-compressed" },
	{ "aac", "audio/aac" },
	{ "apk", "application/vnd.android.package-archive" },
	{ "appcache", "text/cache-manifest" MIME_UTF8 },
	{ "atom", "application/atom+xml" MIME_UTF8 },
	{ "avi", "video/x-msvideo" },
	{ "avif", "image/avif" },
	{ "bin", "application/octet-stream" },
	{ "bmp", "image/bmp" },
	{ "bz2", "application/x-bzip2" },
	{ "c", "text/x-c" MIME_UTF8 },
	{ "css", "text/css" MIME_UTF8 },
	{ "csv", "text/csv" MIME_UTF8 },
	{ "deb", "application/vnd.debian.binary-package" },
	{ "dmg", "application/x-apple-diskimage" },
	{ "doc", "application/msword" },
	{ "docx", "application/vnd.openxmlformats-officedocument.wordprocessingml.document" },
	{ "eot", "application/vnd.ms-fontobject" },
	{ "epub", "application/epub+zip" },
	{ "exe", "application/vnd.microsoft.portable-executable" },
	{ "flac", "audio/flac" },
	{ "gif", "image/gif" },
	{ "gz", "application/gzip" },
	{ "h", "text/x-c" MIME_UTF8 },
	{ "htm", "text/html" MIME_UTF8 },
	{ "html", "text/html" MIME_UTF8 },
	{ "ico", "image/vnd.microsoft.icon" },
	{ "ics", "text/calendar" MIME_UTF8 },
	{ "iso", "application/x-iso9660-image" },
	{ "jar", "application/java-archive" },
	{ "jpeg", "image/jpeg" },
	{ "jpg", "image/jpeg" },
	{ "js", "text/javascript" MIME_UTF8 },
	{ "json", "application/json" MIME_UTF8 },
	{ "jsonld", "application/ld+json" MIME_UTF8 },
	{ "m4a", "audio/mp4" },
	{ "m4v", "video/mp4" },
	{ "map", "application/json" MIME_UTF8 }, /* source maps are JSON */
	{ "md", "text/markdown" MIME_UTF8 },
	{ "mjs", "text/javascript" MIME_UTF8 },
	{ "mkv", "video/x-matroska" },
	{ "mov", "video/quicktime" },
	{ "mp3", "audio/mpeg" },
	{ "mp4", "video/mp4" },
	{ "oga", "audio/ogg" },
	{ "ogg", "audio/ogg" },
	{ "ogv", "video/ogg" },
	{ "otf", "font/otf" },
	{ "pdf", "application/pdf" },
	{ "png", "image/png" },
	{ "ppt", "application/vnd.ms-powerpoint" },
	{ "pptx", "application/vnd.openxmlformats-officedocument.presentationml.presentation" },
	{ "py", "text/x-python" MIME_UTF8 },
	{ "rpm", "application/x-rpm" },
	{ "rss", "application/rss+xml" MIME_UTF8 },
	{ "rtf", "application/rtf" },
	{ "sh", "text/x-shellscript" MIME_UTF8 },
	{ "svg", "image/svg+xml" MIME_UTF8 },
	{ "tar", "application/x-tar" },
	{ "tif", "image/tiff" },
	{ "tiff", "image/tiff" },
	{ "toml", "application/toml" },
	{ "ttf", "font/ttf" },
	{ "txt", "text/plain" MIME_UTF8 },
	{ "wasm", "application/wasm" }, /* exact type needed by instantiateStreaming */
	{ "wat", "text/plain" MIME_UTF8 }, /* WebAssembly text: no registered type */
	{ "wav", "audio/wav" },
	{ "webm", "video/webm" },
	{ "webmanifest", "application/manifest+json" MIME_UTF8 },
	{ "webp", "image/webp" },
	{ "woff", "font/woff" },
	{ "woff2", "font/woff2" },
	{ "xhtml", "application/xhtml+xml" MIME_UTF8 },
	{ "xls", "application/vnd.ms-excel" },
	{ "xlsx", "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet" },
	{ "xml", "application/xml" MIME_UTF8 },
	{ "xz", "application/x-xz" },
	{ "yaml", "application/yaml" }, /* RFC 9512: no charset parameter */
	{ "yml", "application/yaml" },
	{ "zip", "application/zip" },
};

#define MIME_DEFAULT "application/octet-stream"
#define MIME_EXT_MAX 16 /* longer than any entry ("webmanifest" is 11) */

const char *mime_type(const char *name, size_t len)
{
	const char *t = mime_type_find(name, len);
	return t ? t : MIME_DEFAULT;
}

const char *mime_type_find(const char *name, size_t len)
{
	char ext[MIME_EXT_MAX];
	size_t dot = len, i, n;

	/* The extension is what follows the last '.' of the last component. */
	for (i = len; i > 0; i--) {
		char c = name[i - 1];
		if (c == '/')
			break;
		if (c == '.') {
			dot = i - 1;
			break;
		}
	}
	/* No dot, a trailing dot ("file."), or a dotfile's own leading dot
	 * (".bashrc" has no extension, like "Makefile"). */
	if (dot == len || dot + 1 == len || dot == 0 || name[dot - 1] == '/')
		return NULL;

	n = len - dot - 1;
	if (n >= MIME_EXT_MAX)
		return NULL;
	for (i = 0; i < n; i++) {
		unsigned char c = (unsigned char)name[dot + 1 + i];
		if (c == '\0')
			return NULL; /* would cut the compare short */
		ext[i] = (char)(c >= 'A' && c <= 'Z' ? c + ('a' - 'A') : c);
	}
	ext[n] = '\0';

	size_t lo = 0, hi = sizeof(mime_table) / sizeof(mime_table[0]);
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int cmp = strcmp(ext, mime_table[mid].ext);
		if (cmp == 0)
			return mime_table[mid].type;
		if (cmp < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	return NULL;
}
