/* mime.h - Content-Type from a file name's extension. Pure. */
#ifndef SPINDLE_HTTP_MIME_H
#define SPINDLE_HTTP_MIME_H

#include <stddef.h>

/* Returns a static string; "application/octet-stream" for unknown or no
 * extension. Matching is case-insensitive; text types carry "; charset=utf-8". */
const char *mime_type(const char *name, size_t len);

/* The same lookup, NULL when the table has no type for the name (so a
 * configured default_type can stand in). */
const char *mime_type_find(const char *name, size_t len);

#endif
