/* endpoint.h - the statistics endpoints: Prometheus metrics at metrics_path
 * and a human page at status_path, both off unless `metrics = on`, both only
 * for clients inside stats_allow (others get 403). */
#ifndef SPINDLE_STATS_ENDPOINT_H
#define SPINDLE_STATS_ENDPOINT_H

#include <stdbool.h>
#include <sys/socket.h>

#include "../endpoints.h"

bool stats_endpoint(const struct server *srv, const struct sockaddr_storage *peer,
		    const struct http_request *req, struct dyn_response *out);

#endif
