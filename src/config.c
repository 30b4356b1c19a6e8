/* config.c - server.conf and command-line overrides into one validated struct config.
 *
 * Every key is one row of config_keys[]: its section, its type and its bounds,
 * so the parser, the error messages, --check and the sample file agree. */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <ini.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "models/model.h"
#include "stats/cidr.h"

enum key_type {
	KEY_INT, KEY_SIZE, KEY_DURATION, KEY_DURATION_US, KEY_BOOL, KEY_STRING, KEY_LOGPATH, KEY_SYMLINKS,
	KEY_LEVEL, KEY_LOCK, KEY_DELAY_KIND,
	KEY_AUTOINDEX, KEY_LOG_FORMAT, /* issue 11 (site-b) */
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
		/* issue 11: the fallback is a URL path, resolved like a request's */
		if (k->offset == offsetof(struct config, fallback) && (value[0] != '/' || strchr(value, '?'))) {
			snprintf(why, whylen, "fallback: '%s' must be a path starting with '/' (no query), or off",
				 value);
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

static int ini_on_pair(void *user, const char *section, const char *name, const char *value)
{
	struct ini_state *st = user;
	const struct config_key *k = key_find(name);

	if (!k) {
		snprintf(st->why, sizeof(st->why), "unknown key '%s'", name);
		return 0;
	}
	if (section[0] && strcmp(section, k->section) != 0) {
		if (strcmp(section, "server") && strcmp(section, "http") && strcmp(section, "cache") &&
		    strcmp(section, "stats") && strcmp(section, "workload") && strcmp(section, "log"))
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

int config_validate(struct config *cfg)
{
	struct stat st;

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
	char buf[64];

	fprintf(out, "%s[%s]\n", first ? "" : "\n", section);
	for (size_t i = 0; i < NKEYS; i++) {
		const struct config_key *k = &config_keys[i];
		const char *field = (const char *)cfg + k->offset;
		if (strcmp(section, k->section))
			continue;
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
		case KEY_SYMLINKS: fprintf(out, "%s\n", symlinks[cfg->symlinks]); break;
		case KEY_LEVEL: fprintf(out, "%s\n", levels[cfg->log_level]); break;
		case KEY_LOCK: fprintf(out, "%s\n", cfg->bucket_global_lock ? "global" : "bucket"); break;
		case KEY_DELAY_KIND: fprintf(out, "%s\n", delay_kinds[cfg->delay_kind]); break;
		case KEY_AUTOINDEX: fprintf(out, "%s\n", autoindex_modes[cfg->autoindex]); break;
		case KEY_LOG_FORMAT: fprintf(out, "%s\n", log_formats[cfg->access_log_format]); break;
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
	fprintf(out, "# effective configuration (from %s)\n", cfg->source);
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
}
