/* config.h - the server's configuration: server.conf (libinih) + command-line
 * overrides, validated once into an immutable struct. */
#ifndef SPINDLE_CONFIG_H
#define SPINDLE_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

enum symlink_policy {
	SYMLINKS_INSIDE, /* follow only symlinks that resolve inside the root (default) */
	SYMLINKS_ALL,    /* follow any symlink */
	SYMLINKS_OFF,    /* refuse every symlink */
};

enum log_level { LOG_DEBUG, LOG_INFO, LOG_WARN, LOG_ERROR };

/* issue 11: directory listings and the access log's line format */
enum autoindex_mode { AUTOINDEX_OFF, AUTOINDEX_HTML, AUTOINDEX_JSON };
enum access_log_format { ACCESS_LOG_COMBINED, ACCESS_LOG_JSON };

/* What one unit of seed 002's delay is: CPU time burnt by the serving thread
 * (cannot overlap with other work on the same core), wall-clock time spent
 * spinning (the seed's loop: a preempted thread still finishes on time), or
 * an I/O-like sleep. */
enum delay_kind { DELAY_CPU, DELAY_WALL, DELAY_SLEEP };

struct config {
	/* [server] */
	char bind[64];
	int port;
	char root[4096];
	char model[32];
	int workers;          /* 0: one per online core */
	int threads;          /* per pool / prefork worker */
	int max_connections;  /* per serving process */
	bool reuseport;       /* epoll: one listener per loop (else EPOLLEXCLUSIVE on one) */

	/* [http]; durations in milliseconds */
	int keepalive_timeout_ms;
	int header_timeout_ms;
	int send_timeout_ms;
	int drain_timeout_ms;
	size_t max_request_line;
	size_t max_head;
	size_t max_headers;
	uint64_t max_body;
	size_t max_ranges;
	char index[256];
	bool dotfiles;
	enum symlink_policy symlinks;
	bool server_tokens;
	size_t sendfile_min;  /* files at least this big go out with sendfile */

	/* [cache] */
	size_t cache_size;    /* bytes; 0 disables the file cache */
	size_t cache_max_file;/* bigger files are never cached */
	int cache_revalidate_ms; /* how long a cached file may go unchecked */

	/* [stats] */
	bool stats;           /* publish counters in shared memory (off: no segment, no counting) */
	char stats_name[64];  /* shared-memory instance name; "auto" = from the port */
	bool metrics;         /* serve metrics_path and status_path */
	char metrics_path[128];
	char status_path[128];
	char stats_allow[1024]; /* client addresses allowed on the endpoints: CIDRs, space-separated */

	/* [workload] (seed 002: CPU delay + shared buckets) */
	bool workload;
	char workload_path[128];
	int work_unit_us;     /* one unit of work */
	enum delay_kind delay_kind; /* what a unit of work is (issue 8) */
	int buckets;
	bool bucket_global_lock; /* one lock for all buckets (the baseline) */

	/* [log] */
	char access_log[4096]; /* "" when off */
	char error_log[4096];  /* "-" for stderr */
	enum log_level log_level;

	/* [http] health check for load balancers (issue 12) */
	char health_path[128]; /* "" when off */
	/* issue 11 (site-b): listings, SPA fallback, JSON access log */
	enum autoindex_mode autoindex; /* a directory without an index file: 403, or a listing */
	char fallback[4096];  /* "" when off; else a root-relative URL path ("/index.html") */
	enum access_log_format access_log_format;

	/* where it came from, for --check and messages */
	char source[4096];
};

/* Fills cfg with built-in defaults. */
void config_defaults(struct config *cfg);

/* Reads an INI file over cfg. On error prints "FILE:LINE: problem" to stderr
 * and returns -1. */
int config_load_file(struct config *cfg, const char *path);

/* Applies one "key=value" (from --set or a command-line flag); `origin`
 * names it in messages. Returns 0 or -1 after printing the problem. */
int config_set(struct config *cfg, const char *key, const char *value, const char *origin);

/* Cross-field checks after everything is applied (root exists, model known...). */
int config_validate(struct config *cfg);

/* Where problems are reported ("FILE:LINE: what"); default: standard error.
 * The master sends them to the error log while reloading. */
void config_set_reporter(void (*fn)(const char *msg));

/* Prints the effective configuration in server.conf syntax. */
void config_print(const struct config *cfg, FILE *out);

#endif
