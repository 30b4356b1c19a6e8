/* site.h - the site handler: what a request is answered with, as a response
 * value (http/response_value.h). Routing (method policy, redirects, the
 * endpoints), static files, sidecars, listings, the fallback and error pages.
 *
 * It knows files, rules and responses, never a connection: a session (the
 * HTTP/1.1 one in http1/, or any other) hands it a parsed request and the
 * client's address, and gets back a value to serialize. Whether the
 * connection stays open, Date, Server and the framing are the session's. */
#ifndef SPINDLE_SITE_H
#define SPINDLE_SITE_H

#include <sys/socket.h>

#include "../http/parse.h"
#include "../http/response_value.h"

struct server;

/* Fills out (empty, response_init) with the answer to req from peer. */
void site_respond(const struct server *srv, const struct http_request *req, const struct sockaddr_storage *peer,
		  struct response *out);

/* The status the site gives req whatever its body holds (a method it does
 * not serve: 501, 405 with Allow), filling out; 0 when it would serve it.
 * Lets a session answer a client that waits for "100 Continue" before the
 * body. site_respond() applies the same policy. */
int site_refuse(const struct server *srv, const struct http_request *req, struct response *out);

/* An error response for status with the site's page for it (its errors/
 * directory), or the built-in one. Replaces whatever out held. */
void site_error(const struct server *srv, int status, struct response *out);

#endif
