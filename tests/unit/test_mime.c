/* test_mime.c - mime_type. Looks up every table entry, which also proves the
 * table is sorted (a misplaced entry is unreachable by binary search). */
#include <criterion/criterion.h>

#include <string.h>

#include "../../src/http/mime.h"

#define U "; charset=utf-8"
#define OCTET "application/octet-stream"

static const struct {
	const char *name;
	const char *type;
} mime_cases[] = {
	{ "a.html", "text/html" U },
	{ "a.htm", "text/html" U },
	{ "a.css", "text/css" U },
	{ "a.js", "text/javascript" U },
	{ "a.mjs", "text/javascript" U },
	{ "a.json", "application/json" U },
	{ "a.jsonld", "application/ld+json" U },
	{ "a.map", "application/json" U },
	{ "a.xml", "application/xml" U },
	{ "a.xhtml", "application/xhtml+xml" U },
	{ "a.txt", "text/plain" U },
	{ "a.csv", "text/csv" U },
	{ "a.md", "text/markdown" U },
	{ "a.svg", "image/svg+xml" U },
	{ "a.png", "image/png" },
	{ "a.jpg", "image/jpeg" },
	{ "a.jpeg", "image/jpeg" },
	{ "a.gif", "image/gif" },
	{ "a.webp", "image/webp" },
	{ "a.avif", "image/avif" },
	{ "a.ico", "image/vnd.microsoft.icon" },
	{ "a.bmp", "image/bmp" },
	{ "a.tif", "image/tiff" },
	{ "a.tiff", "image/tiff" },
	{ "a.woff", "font/woff" },
	{ "a.woff2", "font/woff2" },
	{ "a.ttf", "font/ttf" },
	{ "a.otf", "font/otf" },
	{ "a.eot", "application/vnd.ms-fontobject" },
	{ "a.wasm", "application/wasm" },
	{ "a.pdf", "application/pdf" },
	{ "a.zip", "application/zip" },
	{ "a.gz", "application/gzip" },
	{ "a.tar", "application/x-tar" },
	{ "a.bz2", "application/x-bzip2" },
	{ "a.xz", "application/x-xz" },
	{ "a.7z", "application/x-7z-compressed" },
	{ "a.mp3", "audio/mpeg" },
	{ "a.ogg", "audio/ogg" },
	{ "a.oga", "audio/ogg" },
	{ "a.wav", "audio/wav" },
	{ "a.flac", "audio/flac" },
	{ "a.m4a", "audio/mp4" },
	{ "a.aac", "audio/aac" },
	{ "a.mp4", "video/mp4" },
	{ "a.m4v", "video/mp4" },
	{ "a.webm", "video/webm" },
	{ "a.ogv", "video/ogg" },
	{ "a.mov", "video/quicktime" },
	{ "a.avi", "video/x-msvideo" },
	{ "a.mkv", "video/x-matroska" },
	{ "a.webmanifest", "application/manifest+json" U },
	{ "a.appcache", "text/cache-manifest" U },
	{ "a.rss", "application/rss+xml" U },
	{ "a.atom", "application/atom+xml" U },
	{ "a.yaml", "application/yaml" },
	{ "a.yml", "application/yaml" },
	{ "a.toml", "application/toml" },
	{ "a.ics", "text/calendar" U },
	{ "a.epub", "application/epub+zip" },
	{ "a.rtf", "application/rtf" },
	{ "a.doc", "application/msword" },
	{ "a.docx", "application/vnd.openxmlformats-officedocument.wordprocessingml.document" },
	{ "a.xls", "application/vnd.ms-excel" },
	{ "a.xlsx", "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet" },
	{ "a.ppt", "application/vnd.ms-powerpoint" },
	{ "a.pptx", "application/vnd.openxmlformats-officedocument.presentationml.presentation" },
	{ "a.jar", "application/java-archive" },
	{ "a.apk", "application/vnd.android.package-archive" },
	{ "a.exe", "application/vnd.microsoft.portable-executable" },
	{ "a.bin", OCTET },
	{ "a.iso", "application/x-iso9660-image" },
	{ "a.dmg", "application/x-apple-diskimage" },
	{ "a.deb", "application/vnd.debian.binary-package" },
	{ "a.rpm", "application/x-rpm" },
	{ "a.sh", "text/x-shellscript" U },
	{ "a.py", "text/x-python" U },
	{ "a.c", "text/x-c" U },
	{ "a.h", "text/x-c" U },
	{ "a.wat", "text/plain" U },
	/* case-insensitive */
	{ "INDEX.HTML", "text/html" U },
	{ "photo.JpG", "image/jpeg" },
	{ "x.WOFF2", "font/woff2" },
	/* last dot of the last component */
	{ "archive.tar.gz", "application/gzip" },
	{ "dir/a.b.c.css", "text/css" U },
	{ "dir.html/readme", OCTET },
	{ "dir.png/", OCTET },
	{ "a/b.d/c.txt", "text/plain" U },
	/* no extension */
	{ "", OCTET },
	{ "Makefile", OCTET },
	{ "file.", OCTET },
	{ ".", OCTET },
	{ "..", OCTET },
	{ ".html", OCTET },
	{ "dir/.css", OCTET },
	{ ".hidden.txt", "text/plain" U },
	/* unknown, near misses, too long */
	{ "a.xyz", OCTET },
	{ "a.htmlx", OCTET },
	{ "a.ht", OCTET },
	{ "a.j", OCTET },
	{ "a.zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz", OCTET },
	{ "a.webmanifestwebmanifest", OCTET },
	{ "a.0", OCTET },
	{ "a.\xc3\xa9", OCTET },
};

Test(mime, table)
{
	for (size_t i = 0; i < sizeof(mime_cases) / sizeof(mime_cases[0]); i++) {
		const char *got = mime_type(mime_cases[i].name, strlen(mime_cases[i].name));
		cr_expect_str_eq(got, mime_cases[i].type, "\"%s\": \"%s\", want \"%s\"",
				 mime_cases[i].name, got, mime_cases[i].type);
	}
}

/* The length bounds the look: bytes past len are not part of the name. */
Test(mime, uses_len_not_nul)
{
	cr_expect_str_eq(mime_type("a.html.png", 6), "text/html" U);
	cr_expect_str_eq(mime_type("a.css", 4), OCTET); /* "a.cs" */
	cr_expect_str_eq(mime_type("a.h\0x", 5), OCTET);
	cr_expect_str_eq(mime_type(NULL, 0), OCTET);
}
