/* config.c - server.conf and command-line overrides into one validated struct config.
 *
 * Every key is one row of config_keys[]: its section, its type and its bounds,
 * so the parser, the error messages, --check and the sample file agree. */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <ini.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fs/path.h"
#include "http/mime_file.h"
#include "models/model.h"
#include "stats/cidr.h"

enum key_type {
	KEY_INT, KEY_SIZE, KEY_DURATION, KEY_DURATION_US, KEY_BOOL, KEY_STRING, KEY_LOGPATH, KEY_SYMLINKS,
	KEY_LEVEL, KEY_LOCK, KEY_DELAY_KIND,
	KEY_AUTOINDEX, KEY_LOG_FORMAT, /* issue 11 (site-b) */
	KEY_LISTEN, KEY_NAME, /* issue 12: a repeated `listen` line; a name that may be empty */
	KEY_CODINGS,
};

struct config_key {
	const char *section;
	const char *name;
	enum key_type type;
	size_t offset;
	size_t size;         /* for strings: buffer size */
	long long min, max;  /* for numbers */
};

#define K(sec, key, type, field, lo, hi) \
	{ sec, key, type, offsetof(struct config, field), sizeof(((struct config *)0)->field), lo, hi }

static const struct config_key config_keys[] = {
	K("server", "bind", KEY_STRING, bind, 0, 0),
	K("server", "port", KEY_INT, port, 0, 65535),
	K("server", "root", KEY_STRING, root, 0, 0),
	K("server", "model", KEY_STRING, model, 0, 0),
	K("server", "workers", KEY_INT, workers, 0, 1024),
	K("server", "threads", KEY_INT, threads, 1, 4096),
	K("server", "max_connections", KEY_INT, max_connections, 1, 1000000),
	K("server", "reuseport", KEY_BOOL, reuseport, 0, 0),
	/* issue 12: where to listen, and whom the serving processes run as */
	K("server", "listen", KEY_LISTEN, listen, 0, 0),
	K("server", "user", KEY_NAME, user, 0, 0),
	K("server", "group", KEY_NAME, group, 0, 0),
	K("server", "landlock", KEY_BOOL, landlock, 0, 0),
	K("server", "pid_file", KEY_LOGPATH, pid_file, 0, 0),
	K("http", "keepalive_timeout", KEY_DURATION, keepalive_timeout_ms, 1, 3600000),
	K("http", "header_timeout", KEY_DURATION, header_timeout_ms, 1, 3600000),
	K("http", "send_timeout", KEY_DURATION, send_timeout_ms, 1, 3600000),
	K("http", "drain_timeout", KEY_DURATION, drain_timeout_ms, 0, 3600000),
	K("http", "max_request_line", KEY_SIZE, max_request_line, 64, 1 << 20),
	K("http", "max_head", KEY_SIZE, max_head, 256, 1 << 22),
	K("http", "max_headers", KEY_SIZE, max_headers, 1, 10000),
	K("http", "max_body", KEY_SIZE, max_body, 0, (long long)1 << 40),
	K("http", "max_ranges", KEY_SIZE, max_ranges, 1, 1000),
	K("http", "index", KEY_STRING, index, 0, 0),
	K("http", "dotfiles", KEY_BOOL, dotfiles, 0, 0),
	K("http", "symlinks", KEY_SYMLINKS, symlinks, 0, 0),
	K("http", "server_tokens", KEY_BOOL, server_tokens, 0, 0),
	K("http", "sendfile_min", KEY_SIZE, sendfile_min, 0, 1 << 30),
	K("cache", "cache_size", KEY_SIZE, cache_size, 0, (long long)1 << 40),
	K("cache", "cache_max_file", KEY_SIZE, cache_max_file, 0, (long long)1 << 32),
	K("cache", "cache_revalidate", KEY_DURATION, cache_revalidate_ms, 0, 3600000),
	K("stats", "stats", KEY_BOOL, stats, 0, 0),
	K("stats", "stats_name", KEY_STRING, stats_name, 0, 0),
	K("stats", "metrics", KEY_BOOL, metrics, 0, 0),
	K("stats", "metrics_path", KEY_STRING, metrics_path, 0, 0),
	K("stats", "status_path", KEY_STRING, status_path, 0, 0),
	K("stats", "stats_allow", KEY_STRING, stats_allow, 0, 0),
	K("workload", "workload", KEY_BOOL, workload, 0, 0),
	K("workload", "workload_path", KEY_STRING, workload_path, 0, 0),
	K("workload", "work_unit", KEY_DURATION_US, work_unit_us, 1, 10000000),
	K("workload", "delay_kind", KEY_DELAY_KIND, delay_kind, 0, 0),
	K("workload", "buckets", KEY_INT, buckets, 1, 65536),
	K("workload", "bucket_lock", KEY_LOCK, bucket_global_lock, 0, 0),
	K("log", "access_log", KEY_LOGPATH, access_log, 0, 0),
	K("log", "error_log", KEY_STRING, error_log, 0, 0),
	K("log", "log_level", KEY_LEVEL, log_level, 0, 0),
	/* health check (issue 12): a path, or off like a log path */
	K("http", "health_path", KEY_LOGPATH, health_path, 0, 0),
	/* issue 11 (site-b): listings, SPA fallback, JSON access log */
	K("http", "autoindex", KEY_AUTOINDEX, autoindex, 0, 0),
	K("http", "fallback", KEY_LOGPATH, fallback, 0, 0), /* a path, or off */
	K("log", "access_log_format", KEY_LOG_FORMAT, access_log_format, 0, 0),
	/* [tls] (issue 13); "off" empties the strings, like a log path */
	K("tls", "tls", KEY_BOOL, tls, 0, 0),
	K("tls", "tls_certificate", KEY_LOGPATH, tls_certificate, 0, 0),
	K("tls", "tls_certificate_key", KEY_LOGPATH, tls_certificate_key, 0, 0),
	K("tls", "hsts", KEY_LOGPATH, hsts, 0, 0),
	K("tls", "redirect_https", KEY_BOOL, redirect_https, 0, 0),
	K("tls", "redirect_https_port", KEY_INT, redirect_https_port, 1, 65535),
	/* [content] (issue 11) */
	K("content", "precompressed", KEY_CODINGS, precompressed, 0, 0),
	K("content", "types_file", KEY_LOGPATH, types_file, 0, 0),
	K("content", "default_type", KEY_STRING, default_type, 0, 0),
	K("content", "cache_expires", KEY_BOOL, cache_expires, 0, 0),
};
#define NKEYS (sizeof(config_keys) / sizeof(config_keys[0]))

void config_defaults(struct config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	strcpy(cfg->bind, "127.0.0.1");
	cfg->port = 8080;
	strcpy(cfg->root, "www");
	strcpy(cfg->model, "epoll");
	cfg->workers = 0;
	cfg->threads = 16;
	cfg->max_connections = 10240;
	cfg->reuseport = true;
	cfg->keepalive_timeout_ms = 15000;
	cfg->header_timeout_ms = 10000;
	cfg->send_timeout_ms = 30000;
	cfg->drain_timeout_ms = 10000;
	cfg->max_request_line = 8192;
	cfg->max_head = 16384;
	cfg->max_headers = 100;
	cfg->max_body = 1048576;
	cfg->max_ranges = 16;
	strcpy(cfg->index, "index.html");
	cfg->dotfiles = false;
	cfg->symlinks = SYMLINKS_INSIDE;
	cfg->server_tokens = true;
	cfg->sendfile_min = 16384;
	cfg->cache_size = 64u << 20;
	cfg->cache_max_file = 256u << 10;
	cfg->cache_revalidate_ms = 1000;
	cfg->access_log[0] = '\0';
	strcpy(cfg->error_log, "-");
	cfg->log_level = LOG_INFO;
	cfg->stats = true;
	strcpy(cfg->stats_name, "auto");
	cfg->metrics = false;
	strcpy(cfg->metrics_path, "/metrics");
	strcpy(cfg->status_path, "/status");
	strcpy(cfg->stats_allow, "127.0.0.0/8 ::1/128");
	cfg->workload = false;
	strcpy(cfg->workload_path, "/work");
	cfg->work_unit_us = 1000;
	cfg->delay_kind = DELAY_CPU;
	cfg->buckets = 128;
	cfg->bucket_global_lock = false;
	cfg->health_path[0] = '\0';
	/* issue 11 (site-b) */
	cfg->autoindex = AUTOINDEX_OFF;
	cfg->fallback[0] = '\0';
	cfg->access_log_format = ACCESS_LOG_COMBINED;
	cfg->redirect_https_port = 443; /* tls: the rest of [tls] is off / empty */
	cfg->landlock = true; /* issue 12 */
	cfg->pid_file[0] = '\0';
	/* [content]: sidecars off, as nginx's gzip_static; no rules */
	cfg->precompressed.n = 0;
	cfg->types_file[0] = '\0';
	strcpy(cfg->default_type, "application/octet-stream");
	cfg->cache_expires = false;
	strcpy(cfg->source, "(defaults and command line)");
}

static const struct config_key *key_find(const char *name)
{
	for (size_t i = 0; i < NKEYS; i++)
		if (strcmp(config_keys[i].name, name) == 0)
			return &config_keys[i];
	return NULL;
}

/* Parses a whole decimal number; false on junk, sign or overflow. */
static bool parse_number(const char *s, long long *out)
{
	if (*s < '0' || *s > '9')
		return false;
	errno = 0;
	char *end;
	long long v = strtoll(s, &end, 10);
	if (errno || *end)
		return false;
	*out = v;
	return true;
}

/* A whole number followed by a unit suffix: "500ms" -> 500, "ms". */
static bool parse_with_unit(const char *s, long long *v, const char **unit)
{
	char num[32];
	size_t n = strspn(s, "0123456789");
	if (n == 0 || n >= sizeof(num))
		return false;
	memcpy(num, s, n);
	num[n] = '\0';
	*unit = s + n;
	return parse_number(num, v);
}

/* "30", "30s", "500ms", "2m" (and "250us" when us_ok) -> milliseconds, or
 * microseconds when us_ok. */
static bool parse_duration_unit(const char *s, long long *out, bool us_ok)
{
	long long v, scale = us_ok ? 1000 : 1; /* per millisecond */
	const char *unit;
	if (!parse_with_unit(s, &v, &unit) || v > LLONG_MAX / (60000 * scale))
		return false;
	if (*unit == '\0' || strcmp(unit, "s") == 0)
		v *= 1000 * scale;
	else if (strcmp(unit, "m") == 0)
		v *= 60000 * scale;
	else if (strcmp(unit, "ms") == 0)
		v *= scale;
	else if (!(us_ok && strcmp(unit, "us") == 0))
		return false;
	*out = v;
	return true;
}

static bool parse_duration(const char *s, long long *ms)
{
	return parse_duration_unit(s, ms, false);
}

/* "4096", "16k", "1m", "1g" -> bytes. */
static bool parse_size(const char *s, long long *bytes)
{
	long long v, mult = 1;
	const char *unit;
	if (!parse_with_unit(s, &v, &unit))
		return false;
	if (*unit && unit[1] == '\0') {
		switch (*unit) {
		case 'k': case 'K': mult = 1LL << 10; break;
		case 'm': case 'M': mult = 1LL << 20; break;
		case 'g': case 'G': mult = 1LL << 30; break;
		default: return false;
		}
	} else if (*unit) {
		return false;
	}
	if (v > LLONG_MAX / mult)
		return false;
	*bytes = v * mult;
	return true;
}

/* Whether config_print's "key = value" line gives this value back through
 * libinih: it strips surrounding whitespace, takes a ';' after whitespace as
 * the start of a comment (so one that begins the value, after " = ", too),
 * and reads one line. Such values can come from --set, or from a file as
 * "key =;x"; refusing them keeps --check's output a faithful config. */
static bool value_reads_back(const char *v)
{
	size_t n = strlen(v);
	if (n && (v[0] == ';' || v[0] == ' ' || v[0] == '\t' || v[n - 1] == ' ' || v[n - 1] == '\t'))
		return false;
	for (size_t i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)v[i];
		if ((ch < 0x20 && ch != '\t') || ch == 0x7f)
			return false;
		if (ch == ';' && i > 0 && (v[i - 1] == ' ' || v[i - 1] == '\t'))
			return false;
	}
	return true;
}

static bool parse_bool(const char *s, bool *out)
{
	if (!strcasecmp(s, "on") || !strcasecmp(s, "yes") || !strcasecmp(s, "true") || !strcmp(s, "1"))
		*out = true;
	else if (!strcasecmp(s, "off") || !strcasecmp(s, "no") || !strcasecmp(s, "false") || !strcmp(s, "0"))
		*out = false;
	else
		return false;
	return true;
}

/* Sets one key; on failure writes the reason into why and returns -1. */
/* Whether a request for the fallback path could name a file: it resolves
 * (as a request's path would) to something other than the root or a
 * directory. */
static bool fallback_resolves(const char *value)
{
	char rel[PATH_MAX];
	struct path_result pr;
	if (value[0] != '/' || strchr(value, '?'))
		return false;
	return path_resolve((struct span){ value, strlen(value) }, rel, sizeof(rel), &pr) == 0 && pr.len > 0 &&
	       !pr.trailing_slash;
}

static int key_apply(struct config *cfg, const struct config_key *k, const char *value, char *why,
		     size_t whylen)
{
	char *field = (char *)cfg + k->offset;
	long long v = 0;

	switch (k->type) {
	case KEY_INT:
	case KEY_SIZE:
	case KEY_DURATION:
	case KEY_DURATION_US: {
		bool ok = k->type == KEY_INT ? parse_number(value, &v)
			: k->type == KEY_SIZE ? parse_size(value, &v)
			: k->type == KEY_DURATION ? parse_duration(value, &v)
			: parse_duration_unit(value, &v, true);
		if (!ok) {
			snprintf(why, whylen, "%s: '%s' is not a %s", k->name, value,
				 k->type == KEY_INT ? "whole number"
				 : k->type == KEY_SIZE ? "size (like 4096, 16k, 1m)"
				 : k->type == KEY_DURATION ? "duration (like 10, 10s, 500ms, 2m)"
				 : "duration (like 1ms, 250us, 2s)");
			return -1;
		}
		if (v < k->min || v > k->max) {
			snprintf(why, whylen, "%s: %s is out of range (%lld..%lld%s)", k->name, value, k->min,
				 k->max, k->type == KEY_DURATION ? " ms" : k->type == KEY_DURATION_US ? " us" : "");
			return -1;
		}
		if (k->type == KEY_INT || k->type == KEY_DURATION || k->type == KEY_DURATION_US)
			*(int *)field = (int)v;
		else if (k->size == sizeof(uint64_t) && k->offset == offsetof(struct config, max_body))
			*(uint64_t *)field = (uint64_t)v;
		else
			*(size_t *)field = (size_t)v;
		return 0;
	}
	case KEY_BOOL:
		if (!parse_bool(value, (bool *)field)) {
			snprintf(why, whylen, "%s: '%s' is not on or off", k->name, value);
			return -1;
		}
		return 0;
	case KEY_LOGPATH:
		if (!strcmp(value, "off")) {
			field[0] = '\0';
			return 0;
		}
		/* fall through */
	case KEY_STRING:
		if (value[0] == '\0') {
			snprintf(why, whylen, "%s: empty value", k->name);
			return -1;
		}
		if (!value_reads_back(value)) {
			snprintf(why, whylen, "%s: '%s' cannot be written in server.conf (it starts or ends "
				 "with whitespace or ';', or has a ';' after whitespace, or a control character)",
				 k->name, value);
			return -1;
		}
		if (strlen(value) >= k->size) {
			snprintf(why, whylen, "%s: value longer than %zu bytes", k->name, k->size - 1);
			return -1;
		}
		/* issue 11: the fallback is a URL path, resolved like a request's;
		 * one that resolves to no file name ("/../x", "/app/") would
		 * answer every route 404, so it is refused here */
		if (k->offset == offsetof(struct config, fallback) && !fallback_resolves(value)) {
			snprintf(why, whylen, "fallback: '%s' must be a path starting with '/' (no query) that "
				 "names a file beneath the root, or off", value);
			return -1;
		}
		if (k->offset == offsetof(struct config, model) && !model_find(value)) {
			snprintf(why, whylen, "model: unknown model '%s' (try --list-models)", value);
			return -1;
		}
		strcpy(field, value);
		return 0;
	case KEY_SYMLINKS:
		if (!strcmp(value, "inside"))
			cfg->symlinks = SYMLINKS_INSIDE;
		else if (!strcmp(value, "all"))
			cfg->symlinks = SYMLINKS_ALL;
		else if (!strcmp(value, "off"))
			cfg->symlinks = SYMLINKS_OFF;
		else {
			snprintf(why, whylen, "symlinks: '%s' is not inside, all or off", value);
			return -1;
		}
		return 0;
	case KEY_LOCK:
		if (!strcmp(value, "bucket"))
			cfg->bucket_global_lock = false;
		else if (!strcmp(value, "global"))
			cfg->bucket_global_lock = true;
		else {
			snprintf(why, whylen, "bucket_lock: '%s' is not bucket or global", value);
			return -1;
		}
		return 0;
	case KEY_DELAY_KIND:
		if (!strcmp(value, "cpu"))
			cfg->delay_kind = DELAY_CPU;
		else if (!strcmp(value, "wall"))
			cfg->delay_kind = DELAY_WALL;
		else if (!strcmp(value, "sleep"))
			cfg->delay_kind = DELAY_SLEEP;
		else {
			snprintf(why, whylen, "delay_kind: '%s' is not cpu, wall or sleep", value);
			return -1;
		}
		return 0;
	case KEY_AUTOINDEX:
		if (!strcmp(value, "off"))
			cfg->autoindex = AUTOINDEX_OFF;
		else if (!strcmp(value, "html"))
			cfg->autoindex = AUTOINDEX_HTML;
		else if (!strcmp(value, "json"))
			cfg->autoindex = AUTOINDEX_JSON;
		else {
			snprintf(why, whylen, "autoindex: '%s' is not off, html or json", value);
			return -1;
		}
		return 0;
	case KEY_LOG_FORMAT:
		if (!strcmp(value, "combined"))
			cfg->access_log_format = ACCESS_LOG_COMBINED;
		else if (!strcmp(value, "json"))
			cfg->access_log_format = ACCESS_LOG_JSON;
		else {
			snprintf(why, whylen, "access_log_format: '%s' is not combined or json", value);
			return -1;
		}
		return 0;
	case KEY_LISTEN:
		if (cfg->nlisten >= CONFIG_MAX_LISTEN) {
			snprintf(why, whylen, "listen: more than %d addresses", CONFIG_MAX_LISTEN);
			return -1;
		}
		if (listen_addr_parse(value, &cfg->listen[cfg->nlisten], why, whylen) < 0)
			return -1;
		cfg->nlisten++; /* each line adds one */
		return 0;
	case KEY_NAME:
		/* a user or group name; off (or empty): none */
		if (!strcmp(value, "off"))
			value = "";
		if (strlen(value) >= k->size || strspn(value, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
							     "0123456789-_.$") != strlen(value)) {
			snprintf(why, whylen, "%s: '%s' is not a user or group name", k->name, value);
			return -1;
		}
		strcpy(field, value);
		return 0;
	case KEY_CODINGS: {
		char inner[256];
		if (encoding_prefs_parse(value, &cfg->precompressed, inner, sizeof(inner)) < 0) {
			snprintf(why, whylen, "%s: %s", k->name, inner);
			return -1;
		}
		return 0;
	}
	case KEY_LEVEL:
		if (!strcmp(value, "debug"))
			cfg->log_level = LOG_DEBUG;
		else if (!strcmp(value, "info"))
			cfg->log_level = LOG_INFO;
		else if (!strcmp(value, "warn"))
			cfg->log_level = LOG_WARN;
		else if (!strcmp(value, "error"))
			cfg->log_level = LOG_ERROR;
		else {
			snprintf(why, whylen, "log_level: '%s' is not debug, info, warn or error", value);
			return -1;
		}
		return 0;
	}
	return -1;
}

static void report_stderr(const char *msg)
{
	fprintf(stderr, "spindle: config: %s\n", msg);
}

static void (*reporter)(const char *msg) = report_stderr;

void config_set_reporter(void (*fn)(const char *msg))
{
	reporter = fn ? fn : report_stderr;
}

static void report(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void report(const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	reporter(msg);
}

struct ini_state {
	struct config *cfg;
	char why[512];
};

/* One "pattern = value" of [cache_control] (or of --set cache_control=...). */
static int cache_control_apply(struct config *cfg, const char *pattern, const char *value, char *why,
			       size_t whylen)
{
	char inner[384];
	/* libinih ends a key at '=' or ':', and reads '[', '#' or ';' first on
	 * a line as a section or a comment: such a pattern would not read back */
	if (!value_reads_back(value) || !value_reads_back(pattern) || strpbrk(pattern, "=:") ||
	    strchr("[#;", pattern[0])) {
		snprintf(why, whylen, "cache_control: '%s = %s' cannot be written in server.conf", pattern, value);
		return -1;
	}
	if (cache_control_add(&cfg->cache_control, pattern, value, inner, sizeof(inner)) < 0) {
		snprintf(why, whylen, "cache_control: %s", inner);
		return -1;
	}
	return 0;
}

static int ini_on_pair(void *user, const char *section, const char *name, const char *value)
{
	struct ini_state *st = user;
	if (strcmp(section, "cache_control") == 0)
		return cache_control_apply(st->cfg, name, value, st->why, sizeof(st->why)) == 0;
	const struct config_key *k = key_find(name);

	if (!k) {
		snprintf(st->why, sizeof(st->why), "unknown key '%s'", name);
		return 0;
	}
	if (section[0] && strcmp(section, k->section) != 0) {
		if (strcmp(section, "server") && strcmp(section, "http") && strcmp(section, "cache") &&
		    strcmp(section, "stats") && strcmp(section, "workload") && strcmp(section, "log") &&
		    strcmp(section, "content"))
			snprintf(st->why, sizeof(st->why), "unknown section [%s]", section);
		else
			snprintf(st->why, sizeof(st->why), "key '%s' belongs in [%s], not [%s]", name,
				 k->section, section);
		return 0;
	}
	return key_apply(st->cfg, k, value, st->why, sizeof(st->why)) == 0;
}

int config_load_file(struct config *cfg, const char *path)
{
	struct ini_state st = { .cfg = cfg };

	ini_stop_on_first_error = true;
	ini_allow_multiline = false; /* an indented line is a mistake, not a continuation */
	int line = ini_parse(path, ini_on_pair, &st);
	if (line == -1) {
		report("%s: %s", path, strerror(errno ? errno : ENOENT));
		return -1;
	}
	if (line != 0) {
		report("%s:%d: %s", path, line,
			st.why[0] ? st.why : "syntax error (expected 'key = value' or '[section]')");
		return -1;
	}
	snprintf(cfg->source, sizeof(cfg->source), "%s", path);
	return 0;
}

int config_set(struct config *cfg, const char *key, const char *value, const char *origin)
{
	const struct config_key *k = key_find(key);
	char why[512];

	if (strcmp(key, "cache_control") == 0) {
		/* --set 'cache_control=PATTERN = VALUE': one [cache_control] line */
		char pattern[CACHE_CONTROL_PATTERN_MAX];
		const char *eq = strchr(value, '=');
		size_t n = eq ? (size_t)(eq - value) : 0;
		while (n > 0 && (value[n - 1] == ' ' || value[n - 1] == '\t'))
			n--;
		if (!eq || n == 0 || n >= sizeof(pattern)) {
			report("%s: cache_control: expected 'PATTERN = VALUE', got '%s'", origin, value);
			return -1;
		}
		memcpy(pattern, value, n);
		pattern[n] = '\0';
		const char *v = eq + 1;
		v += strspn(v, " \t");
		if (cache_control_apply(cfg, pattern, v, why, sizeof(why)) < 0) {
			report("%s: %s", origin, why);
			return -1;
		}
		return 0;
	}

	if (!k) {
		report("%s: unknown key '%s'", origin, key);
		return -1;
	}
	if (key_apply(cfg, k, value, why, sizeof(why)) < 0) {
		report("%s: %s", origin, why);
		return -1;
	}
	return 0;
}

/* ---- listen (issue 12) ------------------------------------------------ */

/* "8080" -> 8080; false unless a whole number in 1..65535. */
static bool parse_port(const char *s, int *port)
{
	long long v;
	if (!parse_number(s, &v) || v < 1 || v > 65535)
		return false;
	*port = (int)v;
	return true;
}

/* The address itself: unix:PATH, [V6]:PORT, V4:PORT, *:PORT or PORT. */
static int listen_parse_address(const char *tok, struct listen_addr *a, char *why, size_t whylen)
{
	char host[INET6_ADDRSTRLEN + 2];
	const char *port;
	unsigned char bin[sizeof(struct in6_addr)];

	if (strncmp(tok, "unix:", 5) == 0) {
		const char *path = tok + 5;
		if (path[0] == '\0' || strlen(path) >= sizeof(a->path)) {
			snprintf(why, whylen, "listen: '%s': a UNIX socket path must be 1-%zu bytes", tok,
				 sizeof(a->path) - 1);
			return -1;
		}
		a->kind = LISTEN_UNIX;
		strcpy(a->path, path);
		return 0;
	}
	a->kind = LISTEN_TCP;
	if (tok[0] == '[') {
		const char *close = strchr(tok, ']');
		size_t n = close ? (size_t)(close - tok - 1) : 0;
		if (!close || close[1] != ':' || n == 0 || n >= sizeof(host)) {
			snprintf(why, whylen, "listen: '%s' is not [IPV6]:PORT", tok);
			return -1;
		}
		memcpy(host, tok + 1, n);
		host[n] = '\0';
		port = close + 2;
		if (inet_pton(AF_INET6, host, bin) != 1) {
			snprintf(why, whylen, "listen: '%s' is not an IPv6 address", host);
			return -1;
		}
	} else {
		const char *colon = strrchr(tok, ':');
		size_t n = colon ? (size_t)(colon - tok) : 0;
		if (colon && strchr(tok, ':') != colon) {
			snprintf(why, whylen, "listen: '%s': an IPv6 address goes in brackets, as [::1]:8080", tok);
			return -1;
		}
		if (n >= sizeof(host)) {
			snprintf(why, whylen, "listen: '%s' is not HOST:PORT", tok);
			return -1;
		}
		memcpy(host, tok, n);
		host[n] = '\0';
		port = colon ? colon + 1 : tok; /* a port alone: every address, as nginx */
		if (strcmp(host, "*") == 0)
			host[0] = '\0';
		if (host[0] && inet_pton(AF_INET, host, bin) != 1) {
			snprintf(why, whylen, "listen: '%s' is not an IPv4 address (names are not looked up)", host);
			return -1;
		}
	}
	if (!parse_port(port, &a->port)) {
		snprintf(why, whylen, "listen: '%s': the port must be 1-65535", tok);
		return -1;
	}
	strcpy(a->host, host);
	return 0;
}

/* One option after the address: tls, ipv6only=on|off, mode=0660, owner=, group=. */
static int listen_parse_option(const char *opt, struct listen_addr *a, char *why, size_t whylen)
{
	const char *eq = strchr(opt, '=');
	const char *val = eq ? eq + 1 : "";
	size_t klen = eq ? (size_t)(eq - opt) : strlen(opt);
	bool v6 = a->kind == LISTEN_TCP && strchr(a->host, ':');

#define OPT_IS(name) (klen == strlen(name) && strncmp(opt, name, klen) == 0)
	if (OPT_IS("tls") && !eq) {
		a->tls = true;
	} else if (OPT_IS("ipv6only") && eq) {
		if (!v6) {
			snprintf(why, whylen, "listen: ipv6only applies to an IPv6 address only");
			return -1;
		}
		if (!parse_bool(val, &a->ipv6only)) {
			snprintf(why, whylen, "listen: ipv6only: '%s' is not on or off", val);
			return -1;
		}
	} else if ((OPT_IS("mode") || OPT_IS("owner") || OPT_IS("group")) && eq) {
		if (a->kind != LISTEN_UNIX) {
			snprintf(why, whylen, "listen: %.*s applies to a unix: socket only", (int)klen, opt);
			return -1;
		}
		if (OPT_IS("mode")) {
			char *end;
			errno = 0;
			long m = strtol(val, &end, 8);
			if (!*val || *end || errno || m < 0 || m > 0777) {
				snprintf(why, whylen, "listen: mode: '%s' is not an octal mode (like 0660)", val);
				return -1;
			}
			a->mode = (int)m;
		} else {
			char *dst = OPT_IS("owner") ? a->owner : a->group;
			if (!*val || strlen(val) >= sizeof(a->owner)) {
				snprintf(why, whylen, "listen: %.*s: '%s' is not a name", (int)klen, opt, val);
				return -1;
			}
			strcpy(dst, val);
		}
	} else {
		snprintf(why, whylen, "listen: unknown option '%s' (tls, ipv6only=, mode=, owner=, group=)", opt);
		return -1;
	}
#undef OPT_IS
	return 0;
}

int listen_addr_parse(const char *value, struct listen_addr *out, char *why, size_t whylen)
{
	struct listen_addr a = { .mode = -1, .ipv6only = true };
	char tok[256];
	const char *p = value;
	int i = 0;

	/* a control character (a CR from --set, say) would not survive being
	 * written to server.conf and read back, and names no real socket */
	for (const unsigned char *c = (const unsigned char *)value; *c; c++)
		if ((*c < 0x20 && *c != '\t') || *c == 0x7f) {
			snprintf(why, whylen, "listen: '%s' has a control character", value);
			return -1;
		}
	for (;; i++) {
		p += strspn(p, " \t");
		size_t n = strcspn(p, " \t");
		if (n == 0)
			break;
		if (n >= sizeof(tok)) {
			snprintf(why, whylen, "listen: '%.40s...' is too long", p);
			return -1;
		}
		memcpy(tok, p, n);
		tok[n] = '\0';
		p += n;
		if ((i == 0 ? listen_parse_address(tok, &a, why, whylen)
			    : listen_parse_option(tok, &a, why, whylen)) < 0)
			return -1;
	}
	if (i == 0) {
		snprintf(why, whylen, "listen: empty value");
		return -1;
	}
	*out = a;
	return 0;
}

void listen_addr_format(const struct listen_addr *a, char *buf, size_t len)
{
	int n;
	if (a->kind == LISTEN_UNIX)
		n = snprintf(buf, len, "unix:%s", a->path);
	else if (strchr(a->host, ':'))
		n = snprintf(buf, len, "[%s]:%d", a->host, a->port);
	else
		n = snprintf(buf, len, "%s:%d", a->host[0] ? a->host : "*", a->port);
#define APPEND(...) do { if (n >= 0 && (size_t)n < len) n += snprintf(buf + n, len - (size_t)n, __VA_ARGS__); } while (0)
	if (a->kind == LISTEN_TCP && strchr(a->host, ':') && !a->ipv6only)
		APPEND(" ipv6only=off");
	if (a->mode >= 0)
		APPEND(" mode=%04o", a->mode);
	if (a->owner[0])
		APPEND(" owner=%s", a->owner);
	if (a->group[0])
		APPEND(" group=%s", a->group);
	if (a->tls)
		APPEND(" tls");
#undef APPEND
}

bool listen_addr_same(const struct listen_addr *a, const struct listen_addr *b)
{
	if (a->kind != b->kind)
		return false;
	if (a->kind == LISTEN_UNIX)
		return strcmp(a->path, b->path) == 0;
	/* compared as written: "::1" and "0::1" are rare enough to be told apart by bind() */
	return a->port == b->port && strcmp(a->host, b->host) == 0;
}

/* No address twice: the second bind would fail, or join the first one's
 * reuseport group. */
static int listen_validate(const struct config *cfg)
{
	for (int i = 0; i < cfg->nlisten; i++)
		for (int j = 0; j < i; j++)
			if (listen_addr_same(&cfg->listen[i], &cfg->listen[j])) {
				char buf[256];
				listen_addr_format(&cfg->listen[i], buf, sizeof(buf));
				report("%s: listen: %s is given twice", cfg->source, buf);
				return -1;
			}
	return 0;
}

/* [stats]: the allow list parses, the instance name is usable in /dev/shm,
 * the endpoint paths are absolute. */
static int stats_validate(const struct config *cfg)
{
	struct cidr_list allow;
	char why[256];

	if (cidr_list_parse(cfg->stats_allow, &allow, why, sizeof(why)) < 0) {
		report("%s: stats_allow: %s", cfg->source, why);
		return -1;
	}
	size_t n = strlen(cfg->stats_name);
	if (n == 0 || n > 60 || strspn(cfg->stats_name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
							    "0123456789-_.") != n) {
		report("%s: stats_name: '%s' must be 1-60 letters, digits, '-', '_' or '.'", cfg->source,
		       cfg->stats_name);
		return -1;
	}
	if (cfg->metrics_path[0] != '/' || cfg->status_path[0] != '/') {
		report("%s: metrics_path and status_path must start with '/'", cfg->source);
		return -1;
	}
	return 0;
}

bool config_serves_tls(const struct config *cfg)
{
	bool any = cfg->tls;
	for (int i = 0; i < cfg->nlisten; i++)
		any |= cfg->listen[i].tls;
	return any;
}

/* [content]: the types file parses (read again by server_init; a reload
 * with a broken one is refused here), default_type looks like a type. */
static int content_validate(const struct config *cfg)
{
	char why[512];
	const char *t = cfg->default_type, *slash = strchr(t, '/');
	if (!slash || slash == t || slash[1] == '\0' || strpbrk(t, " \t") != NULL) {
		report("%s: default_type: '%s' is not a MIME type (like application/octet-stream)", cfg->source, t);
		return -1;
	}
	if (cfg->types_file[0]) {
		struct mime_overrides *o;
		if (mime_overrides_load(cfg->types_file, &o, why, sizeof(why)) < 0) {
			report("%s: types_file: %s", cfg->source, why);
			return -1;
		}
		mime_overrides_free(o);
	}
	return 0;
}

int config_validate(struct config *cfg)
{
	struct stat st;

	/* tls: the core cannot tell an HTTPS request from a plain one, so a
	 * redirect to HTTPS is for an instance without TLS listeners */
	if (cfg->redirect_https && config_serves_tls(cfg)) {
		report("%s: redirect_https: only for an instance with no TLS address (it would redirect HTTPS too)",
		       cfg->source);
		return -1;
	}

	if (!model_find(cfg->model)) {
		report("%s: model: unknown model '%s' (try --list-models)",
			cfg->source, cfg->model);
		return -1;
	}
	if (stat(cfg->root, &st) < 0 || !S_ISDIR(st.st_mode)) {
		report("%s: root: '%s' is not a directory", cfg->source, cfg->root);
		return -1;
	}
	if (strchr(cfg->index, '/')) {
		report("%s: index: '%s' must be a file name, not a path",
			cfg->source, cfg->index);
		return -1;
	}
	if (cfg->metrics && !cfg->stats) {
		report("%s: metrics = on needs stats = on (the endpoints read the statistics)", cfg->source);
		return -1;
	}
	if (cfg->max_request_line > cfg->max_head) {
		report("%s: max_request_line (%zu) exceeds max_head (%zu)",
			cfg->source, cfg->max_request_line, cfg->max_head);
		return -1;
	}
	if (stats_validate(cfg) < 0)
		return -1;
	if (cfg->health_path[0] && cfg->health_path[0] != '/') {
		report("%s: health_path: '%s' must start with '/' (or be off)", cfg->source, cfg->health_path);
		return -1;
	}
	if (listen_validate(cfg) < 0)
		return -1;
	if (content_validate(cfg) < 0)
		return -1;
	return 0;
}

static const char *duration_str(int ms, char *buf, size_t len)
{
	if (ms % 1000 == 0)
		snprintf(buf, len, "%ds", ms / 1000);
	else
		snprintf(buf, len, "%dms", ms);
	return buf;
}

static void config_print_section(const struct config *cfg, const char *section, bool first, FILE *out)
{
	static const char *const symlinks[] = { "inside", "all", "off" };
	static const char *const levels[] = { "debug", "info", "warn", "error" };
	static const char *const delay_kinds[] = { "cpu", "wall", "sleep" };
	static const char *const autoindex_modes[] = { "off", "html", "json" };
	static const char *const log_formats[] = { "combined", "json" };
	char buf[256];

	fprintf(out, "%s[%s]\n", first ? "" : "\n", section);
	for (size_t i = 0; i < NKEYS; i++) {
		const struct config_key *k = &config_keys[i];
		const char *field = (const char *)cfg + k->offset;
		if (strcmp(section, k->section))
			continue;
		if (k->type == KEY_LISTEN) {
			for (int j = 0; j < cfg->nlisten; j++) {
				listen_addr_format(&cfg->listen[j], buf, sizeof(buf));
				fprintf(out, "listen = %s\n", buf);
			}
			continue;
		}
		fprintf(out, "%s = ", k->name);
		switch (k->type) {
		case KEY_INT: fprintf(out, "%d\n", *(const int *)field); break;
		case KEY_DURATION: fprintf(out, "%s\n", duration_str(*(const int *)field, buf, sizeof(buf))); break;
		case KEY_SIZE:
			if (k->offset == offsetof(struct config, max_body))
				fprintf(out, "%llu\n", (unsigned long long)cfg->max_body);
			else
				fprintf(out, "%zu\n", *(const size_t *)field);
			break;
		case KEY_BOOL: fprintf(out, "%s\n", *(const bool *)field ? "on" : "off"); break;
		case KEY_LOGPATH: fprintf(out, "%s\n", field[0] ? field : "off"); break;
		case KEY_STRING: fprintf(out, "%s\n", field); break;
		case KEY_NAME: fprintf(out, "%s\n", field[0] ? field : "off"); break;
		case KEY_LISTEN: break; /* above */
		case KEY_SYMLINKS: fprintf(out, "%s\n", symlinks[cfg->symlinks]); break;
		case KEY_LEVEL: fprintf(out, "%s\n", levels[cfg->log_level]); break;
		case KEY_LOCK: fprintf(out, "%s\n", cfg->bucket_global_lock ? "global" : "bucket"); break;
		case KEY_DELAY_KIND: fprintf(out, "%s\n", delay_kinds[cfg->delay_kind]); break;
		case KEY_AUTOINDEX: fprintf(out, "%s\n", autoindex_modes[cfg->autoindex]); break;
		case KEY_LOG_FORMAT: fprintf(out, "%s\n", log_formats[cfg->access_log_format]); break;
		case KEY_CODINGS:
			encoding_prefs_format(&cfg->precompressed, buf, sizeof(buf));
			fprintf(out, "%s\n", buf[0] ? buf : "off");
			break;
		case KEY_DURATION_US: {
			int us = *(const int *)field;
			if (us % 1000)
				fprintf(out, "%dus\n", us);
			else
				fprintf(out, "%s\n", duration_str(us / 1000, buf, sizeof(buf)));
			break;
		}
		}
	}
}

void config_print(const struct config *cfg, FILE *out)
{
	/* the default source comes in parentheses of its own, for messages */
	size_t n = strlen(cfg->source);
	bool paren = n >= 2 && cfg->source[0] == '(' && cfg->source[n - 1] == ')';
	fprintf(out, "# effective configuration (from %.*s)\n", (int)(paren ? n - 2 : n), cfg->source + paren);
	/* Section by section, in the order they first appear: keys added in a
	 * block of their own further down the table still print under their
	 * section's one header. */
	for (size_t s = 0; s < NKEYS; s++) {
		bool seen = false;
		for (size_t j = 0; j < s && !seen; j++)
			seen = strcmp(config_keys[j].section, config_keys[s].section) == 0;
		if (!seen)
			config_print_section(cfg, config_keys[s].section, s == 0, out);
	}
	fprintf(out, "\n[cache_control]\n");
	for (size_t i = 0; i < cfg->cache_control.n; i++)
		fprintf(out, "%s = %s\n", cfg->cache_control.rule[i].pattern, cfg->cache_control.rule[i].value);
}
