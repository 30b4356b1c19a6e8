/* workload.h - seed 002's experiment endpoint: GET <workload_path>?delay=N&bucket=B[&hold=H]
 * does N units of work (delay_kind: CPU time, wall-clock spinning or a sleep),
 * then takes bucket B's lock (or the one global lock), does H more units while
 * holding it (so lock contention can be measured), adds 1 and answers the new
 * count. GET <workload_path>?totals answers "total T buckets N delay_units D
 * hold_units H": the sum over every bucket (the lab checks it against the
 * requests it saw served) and the units of work completed so far.
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

#include "../endpoints.h"

/* What one unit of delay is: CPU time burnt by the serving thread (cannot
 * overlap with other work on the same core), wall-clock time spent spinning
 * (the seed's loop: a preempted thread still finishes on time), or an
 * I/O-like sleep. */
enum delay_kind { DELAY_CPU, DELAY_WALL, DELAY_SLEEP };

struct config;
struct workload;
struct server;

/* Maps the buckets when cfg->workload is on; *out stays NULL when it is off.
 * Returns 0 or -errno. */
int workload_new(const struct config *cfg, struct workload **out);
void workload_free(struct workload *w);

/* The endpoint (see endpoints.c): claims GET/HEAD of workload_path when on. */
bool workload_endpoint(const struct server *srv, const struct sockaddr_storage *peer,
		       const struct http_request *req, struct dyn_response *out);

struct work_query {
	uint64_t delay;   /* units of work before taking the lock */
	uint64_t bucket;
	uint64_t hold;    /* units of work inside the lock (0 when absent) */
};

/* Pure: parses "delay=N&bucket=B[&hold=H]" (any order; other keys ignored;
 * each key at most once; decimal digits only). Returns 0, or -1 with *why set
 * to a short reason. Exposed for unit tests. */
int workload_parse_query(const char *q, size_t len, struct work_query *out, const char **why);

/* Takes bucket b's lock (b < number of buckets), does hold_us of work inside
 * it, adds 1; returns the new count. */
uint64_t workload_bump(struct workload *w, uint32_t b, uint64_t hold_us);

/* The sum over every bucket, each read under its lock. */
uint64_t workload_total(struct workload *w);

#endif
