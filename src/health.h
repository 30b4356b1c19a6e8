/* health.h - the health check endpoint for load balancers (health.c). */
#ifndef SPINDLE_HEALTH_H
#define SPINDLE_HEALTH_H

#include "endpoints.h"

bool health_endpoint(const struct server *srv, const struct sockaddr_storage *peer,
		     const struct http_request *req, struct dyn_response *out);

#endif
