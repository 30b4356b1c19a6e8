/* workload.h - seed 002's experiment endpoint: GET <workload_path>?delay=N&bucket=B
 * busy-waits N units of CPU work, then adds 1 to shared bucket B under its lock
 * (or one global lock) and answers the new count.
 *
 * The buckets and their locks live in one anonymous MAP_SHARED mapping made
 * by workload_new() before any serving process forks, with process-shared
 * robust mutexes, so the counts are exact under every model: threads, fork
 * (a process per connection) and prefork alike. */
#ifndef SPINDLE_WORKLOAD_H
#define SPINDLE_WORKLOAD_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "../config.h"
#include "../endpoints.h"

struct workload;
struct server;

/* Maps the buckets when cfg->workload is on; *out stays NULL when it is off.
 * Returns 0 or -errno. */
int workload_new(const struct config *cfg, struct workload **out);
void workload_free(struct workload *w);

/* The endpoint (see endpoints.c): claims GET/HEAD of workload_path when on. */
bool workload_endpoint(const struct server *srv, const struct sockaddr_storage *peer,
		       const struct http_request *req, struct dyn_response *out);

/* Pure: parses "delay=N&bucket=B" (either order; other keys ignored; each key
 * at most once; decimal digits only). Returns 0, or -1 with *why set to a
 * short reason. Exposed for unit tests. */
int workload_parse_query(const char *q, size_t len, uint64_t *delay, uint64_t *bucket, const char **why);

/* Adds 1 to bucket b (b < number of buckets) under its lock; returns the new count. */
uint64_t workload_bump(struct workload *w, uint32_t b);

#endif
