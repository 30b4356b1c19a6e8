/* config.h - the server's configuration: server.conf (libinih) + command-line
 * overrides, validated once into an immutable struct. */
#ifndef SPINDLE_CONFIG_H
#define SPINDLE_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* The enums of the keys that name a choice live with the module that acts on them. */
#include "fs/file.h"
#include "http/autoindex.h"
#include "http/cache_control.h"
#include "site/names.h"
#include "site/rules.h"
#include "http/encoding.h"
#include "log/log.h"
#include "overload.h"
#include "workload/workload.h"

/* One `listen` line: an address to serve on, with its options,
 * like nginx's `listen` directive:
 *   listen = 127.0.0.1:8080 | [::]:8080 ipv6only=on | *:8080 | 8080
 *   listen = unix:/run/spindle.sock mode=0660 owner=www-data group=www-data
 *   listen = 0.0.0.0:8443 tls
 *   listen = 10.0.0.11:8080 proxy_protocol   (behind a balancer: see real_ip_from) */
#define CONFIG_MAX_LISTEN 16
enum listen_kind { LISTEN_TCP, LISTEN_UNIX };

struct listen_addr {
	enum listen_kind kind;
	char host[64];        /* TCP: a numeric IPv4/IPv6 address, "" for every address */
	int port;             /* TCP */
	char path[108];       /* UNIX: the socket's path (sun_path's size) */
	bool ipv6only;        /* TCP on an IPv6 address: IPv6 only (default, as nginx), or
			       * dual-stack (IPv4 as ::ffff:a.b.c.d: [::] then takes 0.0.0.0's port too) */
	int mode;             /* UNIX: permissions of the socket file, -1: as the umask leaves them */
	char owner[64];       /* UNIX: chown the socket file to this user/group ("": leave it) */
	char group[64];
	bool tls;             /* serve HTTPS here */
	bool proxy_protocol;  /* every connection starts with a PROXY header (net/proxy_protocol.h) */
	bool http2_only;      /* HTTP/2 and nothing else: by prior knowledge on a plain address
			       * (an invalid preface is a connection error), ALPN h2 alone over TLS */
	int line;             /* where the line is in cfg->source, for messages; 0: not from a file */
};

/* Parses one `listen` value into *out; on error writes why and returns -1.
 * Pure: no lookups of users, no sockets. */
int listen_addr_parse(const char *value, struct listen_addr *out, char *why, size_t whylen);
/* Formats an address back in `listen` syntax (what --check prints and the
 * log names it by): "[::1]:8080 ipv6only=on tls". */
void listen_addr_format(const struct listen_addr *a, char *buf, size_t len);
/* Whether two addresses name the same socket (options aside). */
bool listen_addr_same(const struct listen_addr *a, const struct listen_addr *b);

/* A [site NAME] section: a site of its own, chosen by Host or SNI (names),
 * with its own root, certificate and rule sections ([site NAME redirects],
 * [site NAME headers], [site NAME cache_control]). What it does not set is
 * the top level's (config_validate copies it in), as nginx's server blocks
 * inherit the http level's settings. */
#define CONFIG_MAX_SITES 31 /* named sites, besides the top level's */
enum site_set {
	SITE_SET_NAMES = 1u << 0, SITE_SET_ROOT = 1u << 1, SITE_SET_INDEX = 1u << 2, SITE_SET_AUTOINDEX = 1u << 3,
	SITE_SET_FALLBACK = 1u << 4, SITE_SET_CORS = 1u << 5, SITE_SET_CERT = 1u << 6, SITE_SET_KEY = 1u << 7,
	SITE_SET_REDIRECT_HTTPS = 1u << 8,
	SITE_SET_CACHE_CONTROL = 1u << 9, SITE_SET_REDIRECTS = 1u << 10, SITE_SET_HEADERS = 1u << 11,
};

struct site_config {
	char name[SITE_NAME_MAX];
	char names[SITE_NAMES_LIST_MAX]; /* host names and *.wildcards, space-separated (site/names.h) */
	char root[4096];
	char index[256];
	enum autoindex_mode autoindex;
	char fallback[4096];
	char cors_origins[1024];
	char tls_certificate[4096];      /* "": the top level's certificate */
	char tls_certificate_key[4096];
	bool redirect_https;             /* its plain HTTP requests get 301 to https:// */
	struct cache_control_rules cache_control;
	struct redirect_rules redirects;
	struct header_rules headers;
	unsigned set;                    /* enum site_set: what its own sections gave */
	int line;                        /* of its first line in cfg->source, for messages */
	int key_line[9];                 /* of each of its keys (by enum site_set bit) */
};

/* What a Host or SNI that names no site gets: the top level's site, or a
 * refusal (404 over plain HTTP, 421 over TLS). */
enum default_site_policy { DEFAULT_SITE_SERVE, DEFAULT_SITE_REJECT };

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
	enum overload_policy overload; /* what to do with requests that cannot be served in time */
	int overload_target_ms;        /* shed: the queue wait to keep requests near */
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
	bool http2;           /* HTTP/2: ALPN "h2" over TLS, the preface on plain TCP */

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
	enum delay_kind delay_kind; /* what a unit of work is */
	int buckets;
	bool bucket_global_lock; /* one lock for all buckets (the baseline) */

	/* [log] */
	char access_log[4096]; /* "" when off */
	char error_log[4096];  /* "-" for stderr */
	enum log_level log_level;

	/* [http] health check for load balancers */
	char health_path[128]; /* "" when off */
	/* [http] listings and SPA fallback; [log] the access log's format */
	enum autoindex_mode autoindex; /* a directory without an index file: 403, or a listing */
	char fallback[4096];  /* "" when off; else a root-relative URL path ("/index.html") */
	enum access_log_format access_log_format;
	/* [server] listen, user, group, landlock */
	struct listen_addr listen[CONFIG_MAX_LISTEN]; /* none: bind and port apply */
	int nlisten;
	char user[64];        /* serving processes run as this user ("": as started) */
	char group[64];       /* ... and group ("": the user's login group) */
	bool landlock;        /* restrict serving processes' file access where the kernel can */
	char pid_file[4096];  /* "" when off; the master's pid, written once it listens */
	char real_ip_from[1024]; /* who may send a PROXY header: CIDRs, space-separated; "" when off */
	enum default_site_policy default_site;

	/* [tls]: tls = on makes `port` an HTTPS port */
	bool tls;
	char tls_certificate[4096];     /* PEM: the certificate, then its chain */
	char tls_certificate_key[4096]; /* PEM private key */
	char hsts[256];                 /* Strict-Transport-Security value on HTTPS responses; "" = none */
	bool redirect_https;            /* plain HTTP requests get 301 to https:// (the sites inherit it) */
	int redirect_https_port;        /* ... on this port */
	char acme_webroot[4096];        /* ACME HTTP-01 files (site/acme_challenge.h); "" = off */
	char cors_origins[1024];        /* origins CORS lets read GET/HEAD answers, space-separated, or "*"; "" = off */
	/* [content]: precompressed sidecars, MIME types, Expires */
	struct encoding_prefs precompressed; /* sidecar codings by preference; n == 0: off */
	char types_file[4096];   /* mime.types-format file over the built-in table; "" = none */
	char default_type[128];  /* Content-Type when no table knows the extension */
	bool cache_expires;      /* add Expires (now + max-age) where a rule has max-age */

	/* [cache_control]: "pattern = value" lines, first match wins */
	struct cache_control_rules cache_control;
	/* [redirects] and [headers]: "pattern = ..." lines (site/rules.h) */
	struct redirect_rules redirects;
	struct header_rules headers;

	/* [site NAME] sections, in the order they first appear: heap memory
	 * (tens of KiB each), owned by this struct (config_free) */
	struct site_config *sites;
	int nsites;

	/* where it came from, for --check and messages */
	char source[4096];
};

/* Fills cfg with built-in defaults. */
void config_defaults(struct config *cfg);
/* Frees what cfg owns (its sites); cfg may be filled again afterwards. A
 * struct config copied whole hands its sites over with it: free one copy. */
void config_free(struct config *cfg);
/* *dst = *src with sites of its own (0 or -ENOMEM). */
int config_copy(struct config *dst, const struct config *src);
/* The top level's site-wide settings as a site_config (named "default"):
 * what the server serves for names no [site] claims. */
void config_top_site(const struct config *cfg, struct site_config *out);

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

/* tls = on, or some listen address has the tls flag. */
bool config_serves_tls(const struct config *cfg);

/* Prints the effective configuration in server.conf syntax. */
void config_print(const struct config *cfg, FILE *out);

#endif
