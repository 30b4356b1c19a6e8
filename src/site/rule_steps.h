/* rule_steps.h - the configured rules as steps: over a request (a redirect,
 * a CORS preflight, each answering it before files) or over the response
 * value the site produced (added and removed fields, CORS fields). Each
 * takes the configuration's rules and the request, and knows no server,
 * connection or file, so it runs the same for any answer. */
#ifndef SPINDLE_SITE_RULE_STEPS_H
#define SPINDLE_SITE_RULE_STEPS_H

#include <stdbool.h>

#include "../http/parse.h"
#include "../http/response_value.h"
#include "rules.h"

/* The first [redirects] rule matching req: its status (301, 302, 307, 308)
 * with the Location written into loc (cap bytes), or 0 when none matches
 * (or the path does not resolve: the file handler answers it then). */
int rule_step_redirect(const struct redirect_rules *rules, const struct http_request *req, char *loc, size_t cap);

/* Whether req is a CORS preflight (OPTIONS with Origin and
 * Access-Control-Request-Method) from an origin in the list. */
bool rule_step_is_preflight(const char *origins, const struct http_request *req);
/* Answers such a preflight: 204 with the Access-Control-Allow-* fields. */
void rule_step_preflight(const char *origins, const struct http_request *req, struct response *out);

/* Over a finished response: [headers] rules matching req's path (and, for a
 * directory, index_name's file in it) or the response's Content-Type, then
 * the CORS fields for a GET or HEAD. Fields are added to the statuses nginx's
 * add_header adds to (2xx and 3xx ones a site sends: 200 201 204 206 301 302
 * 303 304 307 308); a removal applies to every response. */
void rule_step_response(const struct header_rules *headers, const char *origins, const char *index_name,
			const struct http_request *req, struct response *out);

#endif
