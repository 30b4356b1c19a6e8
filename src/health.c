/* health.c - the load balancer's health check at health_path (off by
 * default): 200 while this process serves, 503 once the instance stops, so a
 * balancer takes it out of rotation before its listeners are gone; 200 with
 * Connection: close while a reload retires this generation. Open to
 * every client, unlike the statistics endpoints: balancers probe from
 * wherever they run, and the answer tells nothing but "up" or "draining". */
#include "health.h"

#include <stdlib.h>
#include <string.h>

#include "server.h"

bool health_endpoint(const struct server *srv, const struct sockaddr_storage *peer,
		     const struct http_request *req, struct dyn_response *out)
{
	(void)peer;
	const char *path = srv->cfg->health_path;
	size_t n = strlen(path);
	if (n == 0 || req->path.len != n || memcmp(req->path.p, path, n) != 0)
		return false;

	/* A reload retires this generation, but the instance serves on: the
	 * check stays 200 and only closes the connection, so a balancer that
	 * keeps its checks alive reconnects to the new generation. */
	bool retiring = server_retiring();
	bool draining = server_stopping() && !retiring;
	const char *msg = draining ? "draining\n" : "ok\n";
	*out = (struct dyn_response){
		.status = draining ? 503 : 200,
		.content_type = "text/plain; charset=utf-8",
		/* a draining instance closes this connection too, so a balancer
		 * that keeps its checks alive opens the next one elsewhere */
		.close = draining || retiring,
	};
	out->body = strdup(msg);
	out->len = out->body ? strlen(msg) : 0;
	return true;
}
