/* date.h - HTTP dates (RFC 9110 5.6.7). */
#ifndef SPINDLE_HTTP_DATE_H
#define SPINDLE_HTTP_DATE_H

#include <stdbool.h>
#include <stddef.h>
#include <time.h>

#include "../span.h"

#define HTTP_DATE_LEN 29 /* "Sun, 06 Nov 1994 08:49:37 GMT" */

/* Formats t as IMF-fixdate into out (HTTP_DATE_LEN chars + NUL). Pure. */
void http_date_format(time_t t, char out[HTTP_DATE_LEN + 1]);

/* Parses IMF-fixdate, and the obsolete RFC 850 and asctime forms that
 * recipients must accept. Returns false on anything else. Pure, except that
 * it reads the clock to place an RFC 850 two-digit year. */
bool http_date_parse(struct span s, time_t *out);

/* As http_date_parse, with `now` deciding the century of an RFC 850
 * two-digit year (RFC 9110 5.6.7). Pure; for tests and callers that
 * already know the time. */
bool http_date_parse_at(struct span s, time_t now, time_t *out);

/* The current time as IMF-fixdate, formatted at most once a second per thread. */
const char *http_date_now(void);

#endif
