/* endpoints.c - the list of generated endpoints, tried in order. */
#include "endpoints.h"
#include "health.h"
#include "stats/endpoint.h"
#include "workload/workload.h"

typedef bool (*endpoint_fn)(const struct server *srv, const struct sockaddr_storage *peer,
			    const struct http_request *req, struct dyn_response *out);

/* Each entry returns false quickly when the path is not its own or it is off. */
static const endpoint_fn endpoints[] = {
	health_endpoint,
	workload_endpoint,
	stats_endpoint,
	NULL,
};

bool endpoints_dispatch(const struct server *srv, const struct sockaddr_storage *peer,
			const struct http_request *req, struct dyn_response *out)
{
	for (const endpoint_fn *fn = endpoints; *fn; fn++)
		if ((*fn)(srv, peer, req, out))
			return true;
	return false;
}
