/* config.c - server.conf and command-line overrides into one validated struct config.
 *
 * Every key is one row of config_keys[], in the order server.conf presents
 * them: its section, its kind (how a value is parsed and printed back), its
 * bounds, its default and, for the few keys that need one, a check of its
 * own. The parser, the defaults, the error messages and --check all walk
 * the same rows, so they cannot disagree. */
#include "config.h"

#include <arpa/inet.h>
#include <ctype.h>
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

struct config_key;

/* How values of one kind are parsed into a field and printed back. base is
 * the struct the key's offset is in: a struct config, or a struct
 * site_config for the keys of a [site NAME] section. */
struct key_kind {
	/* Parses value into the key's field of base; on failure writes why. */
	int (*set)(void *base, const struct config_key *k, const char *value, char *why, size_t whylen);
	/* Prints the key's "name = value" line(s) as server.conf would hold them. */
	void (*print)(const void *base, const struct config_key *k, FILE *out);
	/* Numbers: the parser, what the refusal calls a good value, the bounds' unit. */
	bool (*parse)(const char *s, long long *v);
	const char *what;
	const char *unit;
};

/* One value of a choice (symlinks = inside | all | off) and what it stores. */
struct name_value {
	const char *name;
	int value;
};

struct config_key {
	const char *section;
	const char *name;
	const struct key_kind *kind;
	size_t offset;
	size_t size;                    /* of the field: strings' buffer, how a number or choice is stored */
	long long min, max;             /* numbers */
	const struct name_value *names; /* choices, ended by a NULL name */
	const char *def;                /* the default, as server.conf writes it; NULL: none */
	/* A check of the value beyond its kind's (strings). */
	int (*check)(const char *value, char *why, size_t whylen);
};

static const struct key_kind key_int, key_size, key_duration, key_duration_us, key_bool, key_string,
	key_string_off, key_name, key_choice, key_listen, key_codings;

static int check_model(const char *value, char *why, size_t whylen);
static int check_fallback(const char *value, char *why, size_t whylen);
static int check_real_ip_from(const char *value, char *why, size_t whylen);
static int check_acme_webroot(const char *value, char *why, size_t whylen);
static int check_cors_origins(const char *value, char *why, size_t whylen);

static const struct name_value symlinks_names[] = {
	{ "inside", SYMLINKS_INSIDE }, { "all", SYMLINKS_ALL }, { "off", SYMLINKS_OFF }, { NULL, 0 },
};
static const struct name_value autoindex_names[] = {
	{ "off", AUTOINDEX_OFF }, { "html", AUTOINDEX_HTML }, { "json", AUTOINDEX_JSON }, { NULL, 0 },
};
static const struct name_value delay_kind_names[] = {
	{ "cpu", DELAY_CPU }, { "wall", DELAY_WALL }, { "sleep", DELAY_SLEEP }, { NULL, 0 },
};
/* stored in a bool: global = one lock for all buckets (the baseline) */
static const struct name_value bucket_lock_names[] = {
	{ "bucket", false }, { "global", true }, { NULL, 0 },
};
static const struct name_value access_log_format_names[] = {
	{ "combined", ACCESS_LOG_COMBINED }, { "json", ACCESS_LOG_JSON }, { "vhost_combined", ACCESS_LOG_VHOST_COMBINED },
	{ NULL, 0 },
};
static const struct name_value default_site_names[] = {
	{ "serve", DEFAULT_SITE_SERVE }, { "reject", DEFAULT_SITE_REJECT }, { NULL, 0 },
};
static const struct name_value overload_names[] = {
	{ "queue", OVERLOAD_QUEUE }, { "reject", OVERLOAD_REJECT }, { "shed", OVERLOAD_SHED }, { NULL, 0 },
};
static const struct name_value log_level_names[] = {
	{ "debug", LOG_DEBUG }, { "info", LOG_INFO }, { "warn", LOG_WARN }, { "error", LOG_ERROR }, { NULL, 0 },
};

#define FIELD(field) offsetof(struct config, field), sizeof(((struct config *)0)->field)
/* A key of a kind with no bounds, names or check of its own. */
#define K(sec, key, kind, field, def) { sec, key, &kind, FIELD(field), 0, 0, NULL, def, NULL }
/* A number between lo and hi. */
#define N(sec, key, kind, field, lo, hi, def) { sec, key, &kind, FIELD(field), lo, hi, NULL, def, NULL }
/* One of the names in table. */
#define C(sec, key, field, table, def) { sec, key, &key_choice, FIELD(field), 0, 0, table, def, NULL }
/* A string checked by fn. */
#define S(sec, key, kind, field, def, fn) { sec, key, &kind, FIELD(field), 0, 0, NULL, def, fn }

static const struct config_key config_keys[] = {
	K("server", "bind", key_string, bind, "127.0.0.1"),
	N("server", "port", key_int, port, 0, 65535, "8080"),
	K("server", "root", key_string, root, "www"),
	S("server", "model", key_string, model, "epoll", check_model),
	N("server", "workers", key_int, workers, 0, 1024, "0"),
	N("server", "threads", key_int, threads, 1, 4096, "16"),
	N("server", "max_connections", key_int, max_connections, 1, 1000000, "10240"),
	K("server", "reuseport", key_bool, reuseport, "on"),
	K("server", "listen", key_listen, listen, NULL), /* repeated: each line adds one */
	S("server", "real_ip_from", key_string_off, real_ip_from, "off", check_real_ip_from),
	K("server", "user", key_name, user, "off"),
	K("server", "group", key_name, group, "off"),
	K("server", "landlock", key_bool, landlock, "on"),
	K("server", "pid_file", key_string_off, pid_file, "off"),
	C("server", "default_site", default_site, default_site_names, "serve"),
	C("server", "overload", overload, overload_names, "queue"),
	N("server", "overload_target", key_duration, overload_target_ms, 1, 60000, "20ms"),

	N("http", "keepalive_timeout", key_duration, keepalive_timeout_ms, 1, 3600000, "15s"),
	N("http", "header_timeout", key_duration, header_timeout_ms, 1, 3600000, "10s"),
	N("http", "send_timeout", key_duration, send_timeout_ms, 1, 3600000, "30s"),
	N("http", "drain_timeout", key_duration, drain_timeout_ms, 0, 3600000, "10s"),
	N("http", "max_request_line", key_size, max_request_line, 64, 1 << 20, "8192"),
	N("http", "max_head", key_size, max_head, 256, 1 << 22, "16k"),
	N("http", "max_headers", key_size, max_headers, 1, 10000, "100"),
	N("http", "max_body", key_size, max_body, 0, (long long)1 << 40, "1m"),
	N("http", "max_ranges", key_size, max_ranges, 1, 1000, "16"),
	K("http", "index", key_string, index, "index.html"),
	K("http", "dotfiles", key_bool, dotfiles, "off"),
	C("http", "symlinks", symlinks, symlinks_names, "inside"),
	K("http", "server_tokens", key_bool, server_tokens, "on"),
	N("http", "sendfile_min", key_size, sendfile_min, 0, 1 << 30, "16k"),
	K("http", "http2", key_bool, http2, "on"),
	K("http", "health_path", key_string_off, health_path, "off"),
	C("http", "autoindex", autoindex, autoindex_names, "off"),
	S("http", "fallback", key_string_off, fallback, "off", check_fallback),
	S("http", "cors_origins", key_string_off, cors_origins, "off", check_cors_origins),

	N("cache", "cache_size", key_size, cache_size, 0, (long long)1 << 40, "64m"),
	N("cache", "cache_max_file", key_size, cache_max_file, 0, (long long)1 << 32, "256k"),
	N("cache", "cache_revalidate", key_duration, cache_revalidate_ms, 0, 3600000, "1s"),

	K("stats", "stats", key_bool, stats, "on"),
	K("stats", "stats_name", key_string, stats_name, "auto"),
	K("stats", "metrics", key_bool, metrics, "off"),
	K("stats", "metrics_path", key_string, metrics_path, "/metrics"),
	K("stats", "status_path", key_string, status_path, "/status"),
	K("stats", "stats_allow", key_string, stats_allow, "127.0.0.0/8 ::1/128"),

	K("workload", "workload", key_bool, workload, "off"),
	K("workload", "workload_path", key_string, workload_path, "/work"),
	N("workload", "work_unit", key_duration_us, work_unit_us, 1, 10000000, "1ms"),
	C("workload", "delay_kind", delay_kind, delay_kind_names, "cpu"),
	N("workload", "buckets", key_int, buckets, 1, 65536, "128"),
	C("workload", "bucket_lock", bucket_global_lock, bucket_lock_names, "bucket"),

	K("log", "access_log", key_string_off, access_log, "off"),
	K("log", "error_log", key_string, error_log, "-"),
	C("log", "log_level", log_level, log_level_names, "info"),
	C("log", "access_log_format", access_log_format, access_log_format_names, "combined"),

	K("tls", "tls", key_bool, tls, "off"),
	K("tls", "tls_certificate", key_string_off, tls_certificate, "off"),
	K("tls", "tls_certificate_key", key_string_off, tls_certificate_key, "off"),
	K("tls", "hsts", key_string_off, hsts, "off"),
	K("tls", "redirect_https", key_bool, redirect_https, "off"),
	N("tls", "redirect_https_port", key_int, redirect_https_port, 1, 65535, "443"),
	S("tls", "acme_webroot", key_string_off, acme_webroot, "off", check_acme_webroot),

	K("content", "precompressed", key_codings, precompressed, "off"),
	K("content", "types_file", key_string_off, types_file, "off"),
	K("content", "default_type", key_string, default_type, "application/octet-stream"),
	K("content", "cache_expires", key_bool, cache_expires, "off"),
};
#define NKEYS (sizeof(config_keys) / sizeof(config_keys[0]))

#undef K
#undef N
#undef C
#undef S

static const struct config_key *key_find(const char *name)
{
	for (size_t i = 0; i < NKEYS; i++)
		if (strcmp(config_keys[i].name, name) == 0)
			return &config_keys[i];
	return NULL;
}

/* Whether some key lives in [section]. */
static bool section_known(const char *section)
{
	for (size_t i = 0; i < NKEYS; i++)
		if (strcmp(config_keys[i].section, section) == 0)
			return true;
	return false;
}

/* ---- [site NAME] sections ------------------------------------------------ */

static int check_site_names(const char *value, char *why, size_t whylen)
{
	return site_names_check(value, why, whylen);
}

/* The keys a [site NAME] section may hold: the rest are the whole server's
 * (the listeners, the cache, the content settings) and stay at the top. */
#define SF(field) offsetof(struct site_config, field), sizeof(((struct site_config *)0)->field)
static const struct config_key site_keys[] = {
	{ "site", "names", &key_string, SF(names), 0, 0, NULL, NULL, check_site_names },
	{ "site", "root", &key_string, SF(root), 0, 0, NULL, NULL, NULL },
	{ "site", "index", &key_string, SF(index), 0, 0, NULL, NULL, NULL },
	{ "site", "autoindex", &key_choice, SF(autoindex), 0, 0, autoindex_names, NULL, NULL },
	{ "site", "fallback", &key_string_off, SF(fallback), 0, 0, NULL, NULL, check_fallback },
	{ "site", "cors_origins", &key_string_off, SF(cors_origins), 0, 0, NULL, NULL, check_cors_origins },
	{ "site", "tls_certificate", &key_string_off, SF(tls_certificate), 0, 0, NULL, NULL, NULL },
	{ "site", "tls_certificate_key", &key_string_off, SF(tls_certificate_key), 0, 0, NULL, NULL, NULL },
	{ "site", "redirect_https", &key_bool, SF(redirect_https), 0, 0, NULL, NULL, NULL },
};
#undef SF
#define NSITE_KEYS (sizeof(site_keys) / sizeof(site_keys[0]))
/* site_keys[i] sets bit i of site_config.set (enum site_set follows the rows) */

/* ---- choices ------------------------------------------------------------ */

static bool name_parse(const struct name_value *t, const char *s, int *out)
{
	for (; t->name; t++)
		if (strcmp(t->name, s) == 0) {
			*out = t->value;
			return true;
		}
	return false;
}

static const char *name_of(const struct name_value *t, int v)
{
	for (; t->name; t++)
		if (t->value == v)
			return t->name;
	return "?";
}

/* "inside, all or off": the names a refusal offers. */
static void names_list(const struct name_value *t, char *buf, size_t len)
{
	size_t n = 0;
	buf[0] = '\0';
	for (size_t i = 0; t[i].name && n < len; i++)
		n += (size_t)snprintf(buf + n, len - n, "%s%s", i == 0 ? "" : t[i + 1].name ? ", " : " or ",
				      t[i].name);
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

static bool parse_duration_us(const char *s, long long *us)
{
	return parse_duration_unit(s, us, true);
}

static int check_fallback(const char *value, char *why, size_t whylen)
{
	/* the fallback is a URL path, resolved like a request's; one that
	 * resolves to no file name ("/../x", "/app/") would answer every
	 * route 404, so it is refused here */
	if (!fallback_resolves(value)) {
		snprintf(why, whylen, "fallback: '%s' must be a path starting with '/' (no query) that "
			 "names a file beneath the root, or off", value);
		return -1;
	}
	return 0;
}

/* "*" or origins as a browser sends them ("https://example.com",
 * "http://localhost:3000"): scheme, host, an optional port, no path */
static int check_cors_origins(const char *value, char *why, size_t whylen)
{
	if (strcmp(value, "*") == 0)
		return 0;
	for (const char *p = value + strspn(value, " \t"); *p; p += strspn(p, " \t")) {
		size_t n = strcspn(p, " \t");
		const char *host = strncmp(p, "http://", 7) == 0 ? p + 7 : strncmp(p, "https://", 8) == 0 ? p + 8 : NULL;
		bool ok = host && host < p + n;
		for (const char *q = host; ok && q < p + n; q++)
			ok = isalnum((unsigned char)*q) || strchr(".-:[]", *q);
		if (!ok) {
			snprintf(why, whylen, "cors_origins: '%.*s' is not an origin (like https://example.com, "
				 "no path) or '*'", (int)n, p);
			return -1;
		}
		p += n;
	}
	return 0;
}

/* The balancers a `listen ... proxy_protocol` address takes PROXY headers
 * from: an address list as stats_allow's. */
static int check_real_ip_from(const char *value, char *why, size_t whylen)
{
	struct cidr_list l;
	char inner[256];
	if (cidr_list_parse(value, &l, inner, sizeof(inner)) < 0) {
		snprintf(why, whylen, "real_ip_from: %s", inner);
		return -1;
	}
	return 0;
}

/* The master opens the webroot at start and on reload: a missing one is
 * refused here, with its line, rather than by every challenge later. */
static int check_acme_webroot(const char *value, char *why, size_t whylen)
{
	struct stat st;
	if (stat(value, &st) < 0) {
		snprintf(why, whylen, "acme_webroot: '%s': %s", value, strerror(errno));
		return -1;
	}
	if (!S_ISDIR(st.st_mode)) {
		snprintf(why, whylen, "acme_webroot: '%s' is not a directory", value);
		return -1;
	}
	return 0;
}

static int check_model(const char *value, char *why, size_t whylen)
{
	if (!model_find(value)) {
		snprintf(why, whylen, "model: unknown model '%s' (try --list-models)", value);
		return -1;
	}
	return 0;
}

static const char *duration_str(long long ms, char *buf, size_t len)
{
	if (ms % 1000 == 0)
		snprintf(buf, len, "%llds", ms / 1000);
	else
		snprintf(buf, len, "%lldms", ms);
	return buf;
}

/* ---- kinds of value ------------------------------------------------------ */

/* Numbers are stored as an int, or as a size_t or uint64_t (the same width
 * here), whichever the field is. */
static void number_store(void *field, size_t size, long long v)
{
	if (size == sizeof(uint64_t)) {
		uint64_t u = (uint64_t)v;
		memcpy(field, &u, sizeof(u));
	} else {
		int i = (int)v;
		memcpy(field, &i, sizeof(i));
	}
}

static long long number_load(const void *field, size_t size)
{
	if (size == sizeof(uint64_t)) {
		uint64_t u;
		memcpy(&u, field, sizeof(u));
		return (long long)u;
	}
	int i;
	memcpy(&i, field, sizeof(i));
	return i;
}

static int set_number(void *base, const struct config_key *k, const char *value, char *why, size_t whylen)
{
	long long v;
	if (!k->kind->parse(value, &v)) {
		snprintf(why, whylen, "%s: '%s' is not a %s", k->name, value, k->kind->what);
		return -1;
	}
	if (v < k->min || v > k->max) {
		snprintf(why, whylen, "%s: %s is out of range (%lld..%lld%s)", k->name, value, k->min, k->max,
			 k->kind->unit);
		return -1;
	}
	number_store((char *)base + k->offset, k->size, v);
	return 0;
}

static void print_number(const void *base, const struct config_key *k, FILE *out)
{
	fprintf(out, "%s = %lld\n", k->name, number_load((const char *)base + k->offset, k->size));
}

static void print_duration(const void *base, const struct config_key *k, FILE *out)
{
	char buf[32];
	long long ms = number_load((const char *)base + k->offset, k->size);
	fprintf(out, "%s = %s\n", k->name, duration_str(ms, buf, sizeof(buf)));
}

static void print_duration_us(const void *base, const struct config_key *k, FILE *out)
{
	char buf[32];
	long long us = number_load((const char *)base + k->offset, k->size);
	if (us % 1000)
		fprintf(out, "%s = %lldus\n", k->name, us);
	else
		fprintf(out, "%s = %s\n", k->name, duration_str(us / 1000, buf, sizeof(buf)));
}

static int set_bool(void *base, const struct config_key *k, const char *value, char *why, size_t whylen)
{
	if (!parse_bool(value, (bool *)((char *)base + k->offset))) {
		snprintf(why, whylen, "%s: '%s' is not on or off", k->name, value);
		return -1;
	}
	return 0;
}

static void print_bool(const void *base, const struct config_key *k, FILE *out)
{
	fprintf(out, "%s = %s\n", k->name, *(const bool *)((const char *)base + k->offset) ? "on" : "off");
}

/* A string that --check can write back: not empty, fits, and reads back. */
static int set_string(void *base, const struct config_key *k, const char *value, char *why, size_t whylen)
{
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
	if (k->check && k->check(value, why, whylen) < 0)
		return -1;
	strcpy((char *)base + k->offset, value);
	return 0;
}

static void print_string(const void *base, const struct config_key *k, FILE *out)
{
	fprintf(out, "%s = %s\n", k->name, (const char *)base + k->offset);
}

/* A string, or off: stored empty. */
static int set_string_off(void *base, const struct config_key *k, const char *value, char *why,
			  size_t whylen)
{
	if (strcmp(value, "off") == 0) {
		((char *)base + k->offset)[0] = '\0';
		return 0;
	}
	return set_string(base, k, value, why, whylen);
}

static void print_string_off(const void *base, const struct config_key *k, FILE *out)
{
	const char *field = (const char *)base + k->offset;
	fprintf(out, "%s = %s\n", k->name, field[0] ? field : "off");
}

/* A user or group name; off (or empty): none. */
static int set_name(void *base, const struct config_key *k, const char *value, char *why, size_t whylen)
{
	if (strcmp(value, "off") == 0)
		value = "";
	if (strlen(value) >= k->size || strspn(value, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
						     "0123456789-_.$") != strlen(value)) {
		snprintf(why, whylen, "%s: '%s' is not a user or group name", k->name, value);
		return -1;
	}
	strcpy((char *)base + k->offset, value);
	return 0;
}

/* A choice is stored in an enum (int-sized) or a bool field. */
static int set_choice(void *base, const struct config_key *k, const char *value, char *why, size_t whylen)
{
	void *field = (char *)base + k->offset;
	int v;
	if (!name_parse(k->names, value, &v)) {
		char names[128];
		names_list(k->names, names, sizeof(names));
		snprintf(why, whylen, "%s: '%s' is not %s", k->name, value, names);
		return -1;
	}
	if (k->size == sizeof(bool)) {
		bool b = v != 0;
		memcpy(field, &b, sizeof(b));
	} else {
		memcpy(field, &v, sizeof(v));
	}
	return 0;
}

static void print_choice(const void *base, const struct config_key *k, FILE *out)
{
	const void *field = (const char *)base + k->offset;
	int v;
	if (k->size == sizeof(bool)) {
		bool b;
		memcpy(&b, field, sizeof(b));
		v = b;
	} else {
		memcpy(&v, field, sizeof(v));
	}
	fprintf(out, "%s = %s\n", k->name, name_of(k->names, v));
}

/* Each `listen` line adds one address. */
static int set_listen(void *base, const struct config_key *k, const char *value, char *why,
		      size_t whylen)
{
	struct config *cfg = base;
	(void)k;
	if (cfg->nlisten >= CONFIG_MAX_LISTEN) {
		snprintf(why, whylen, "listen: more than %d addresses", CONFIG_MAX_LISTEN);
		return -1;
	}
	if (listen_addr_parse(value, &cfg->listen[cfg->nlisten], why, whylen) < 0)
		return -1;
	cfg->nlisten++;
	return 0;
}

static void print_listen(const void *base, const struct config_key *k, FILE *out)
{
	const struct config *cfg = base;
	char buf[256];
	for (int j = 0; j < cfg->nlisten; j++) {
		listen_addr_format(&cfg->listen[j], buf, sizeof(buf));
		fprintf(out, "%s = %s\n", k->name, buf);
	}
}

static int set_codings(void *base, const struct config_key *k, const char *value, char *why,
		       size_t whylen)
{
	char inner[256];
	if (encoding_prefs_parse(value, (struct encoding_prefs *)((char *)base + k->offset), inner,
				 sizeof(inner)) < 0) {
		snprintf(why, whylen, "%s: %s", k->name, inner);
		return -1;
	}
	return 0;
}

static void print_codings(const void *base, const struct config_key *k, FILE *out)
{
	char buf[256];
	encoding_prefs_format((const struct encoding_prefs *)((const char *)base + k->offset), buf, sizeof(buf));
	fprintf(out, "%s = %s\n", k->name, buf[0] ? buf : "off");
}

static const struct key_kind key_int = { set_number, print_number, parse_number, "whole number", "" };
static const struct key_kind key_size = { set_number, print_number, parse_size, "size (like 4096, 16k, 1m)", "" };
static const struct key_kind key_duration = { set_number, print_duration, parse_duration,
					      "duration (like 10, 10s, 500ms, 2m)", " ms" };
static const struct key_kind key_duration_us = { set_number, print_duration_us, parse_duration_us,
						 "duration (like 1ms, 250us, 2s)", " us" };
static const struct key_kind key_bool = { set_bool, print_bool, NULL, NULL, NULL };
static const struct key_kind key_string = { set_string, print_string, NULL, NULL, NULL };
static const struct key_kind key_string_off = { set_string_off, print_string_off, NULL, NULL, NULL };
static const struct key_kind key_name = { set_name, print_string_off, NULL, NULL, NULL };
static const struct key_kind key_choice = { set_choice, print_choice, NULL, NULL, NULL };
static const struct key_kind key_listen = { set_listen, print_listen, NULL, NULL, NULL };
static const struct key_kind key_codings = { set_codings, print_codings, NULL, NULL, NULL };

void config_defaults(struct config *cfg)
{
	char why[512];

	memset(cfg, 0, sizeof(*cfg));
	for (size_t i = 0; i < NKEYS; i++) {
		const struct config_key *k = &config_keys[i];
		/* a default the key refuses is a bug in the table above, caught by
		 * the first run of any test */
		if (k->def && k->kind->set(cfg, k, k->def, why, sizeof(why)) < 0) {
			fprintf(stderr, "spindle: config: bad default: %s\n", why);
			abort();
		}
	}
	strcpy(cfg->source, "(defaults and command line)");
}

void config_free(struct config *cfg)
{
	free(cfg->sites);
	cfg->sites = NULL;
	cfg->nsites = 0;
}

int config_copy(struct config *dst, const struct config *src)
{
	*dst = *src;
	dst->sites = NULL;
	dst->nsites = 0;
	if (src->nsites == 0)
		return 0;
	dst->sites = malloc((size_t)src->nsites * sizeof(*dst->sites));
	if (!dst->sites)
		return -ENOMEM;
	memcpy(dst->sites, src->sites, (size_t)src->nsites * sizeof(*dst->sites));
	dst->nsites = src->nsites;
	return 0;
}

void config_top_site(const struct config *cfg, struct site_config *out)
{
	memset(out, 0, sizeof(*out));
	strcpy(out->name, "default");
	strcpy(out->root, cfg->root);
	strcpy(out->index, cfg->index);
	out->autoindex = cfg->autoindex;
	strcpy(out->fallback, cfg->fallback);
	strcpy(out->cors_origins, cfg->cors_origins);
	strcpy(out->tls_certificate, cfg->tls_certificate);
	strcpy(out->tls_certificate_key, cfg->tls_certificate_key);
	out->redirect_https = cfg->redirect_https;
	out->cache_control = cfg->cache_control;
	out->redirects = cfg->redirects;
	out->headers = cfg->headers;
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

/* libinih's reader with the line count kept, so that a check made after
 * the whole file is read can still name the line it is about. */
struct ini_state;
struct line_reader {
	FILE *f;
	int line;      /* of the last chunk read: the pair being handled */
	bool at_start; /* the next chunk starts a line (fgets splits a long one) */
	struct ini_state *st; /* section headers are checked as they are read */
};

/* A site's section headers: its own, and its rule sections. */
enum { SITE_HDR_OWN, SITE_HDR_REDIRECTS, SITE_HDR_HEADERS, SITE_HDR_CACHE_CONTROL, SITE_HDRS };

struct ini_state {
	struct config *cfg;
	char why[512];
	const struct line_reader *reader;
	/* libinih calls back for pairs only, never for a section header, so a
	 * header is checked as the reader passes it (an empty section too);
	 * a refused one stops the read, and this is its line */
	int header_error_line;
	int header_line[CONFIG_MAX_SITES][SITE_HDRS]; /* where each was first seen, 0: not yet */
};

static bool section_header_ok(struct ini_state *st, const char *text);

static char *read_counting(char *str, int num, void *stream)
{
	struct line_reader *r = stream;
	bool starts_line = r->at_start;
	char *s = fgets(str, num, r->f);
	if (s) {
		size_t n = strlen(s);
		if (r->at_start)
			r->line++;
		r->at_start = n > 0 && s[n - 1] == '\n';
		if (starts_line && r->st && !section_header_ok(r->st, s)) {
			r->st->header_error_line = r->line;
			return NULL; /* the end of the file, for libinih */
		}
	}
	return s;
}


/* One "pattern = value" of [cache_control] (or of --set cache_control=...). */
static int cache_control_apply(struct cache_control_rules *rules, const char *pattern, const char *value,
			       char *why, size_t whylen)
{
	char inner[384];
	/* libinih ends a key at '=' or ':', and reads '[', '#' or ';' first on
	 * a line as a section or a comment: such a pattern would not read back */
	if (!value_reads_back(value) || !value_reads_back(pattern) || strpbrk(pattern, "=:") ||
	    strchr("[#;", pattern[0])) {
		snprintf(why, whylen, "cache_control: '%s = %s' cannot be written in server.conf", pattern, value);
		return -1;
	}
	if (cache_control_add(rules, pattern, value, inner, sizeof(inner)) < 0) {
		snprintf(why, whylen, "cache_control: %s", inner);
		return -1;
	}
	return 0;
}

/* One "pattern = value" of [redirects] or [headers]. */
static int rule_apply(struct redirect_rules *redirects, struct header_rules *headers, const char *section,
		      const char *pattern, const char *value, char *why, size_t whylen)
{
	char inner[384];
	bool redirect = strcmp(section, "redirects") == 0;
	/* as for [cache_control]: what --check prints must read back */
	if (!value_reads_back(value) || !value_reads_back(pattern) || strpbrk(pattern, "=:") ||
	    strchr("[#;", pattern[0])) {
		snprintf(why, whylen, "%s: '%s = %s' cannot be written in server.conf", section, pattern, value);
		return -1;
	}
	int rc = redirect ? redirect_rule_add(redirects, pattern, value, inner, sizeof(inner))
			  : header_rule_add(headers, pattern, value, inner, sizeof(inner));
	if (rc < 0) {
		snprintf(why, whylen, "%s: %s", section, inner);
		return -1;
	}
	return 0;
}

/* The site a [site NAME ...] section is about, created at its first
 * mention; *sub is what follows the name ("" for the site's own keys, else
 * "redirects", "headers" or "cache_control"). NULL with the problem in why. */
static struct site_config *site_section(struct ini_state *st, const char *section, const char **sub)
{
	struct config *cfg = st->cfg;
	char name[SITE_NAME_MAX + 1];
	const char *p = section + 4; /* past "site" */
	p += strspn(p, " \t");
	size_t n = strcspn(p, " \t");
	if (n == 0) {
		snprintf(st->why, sizeof(st->why), "[%s]: a site section needs a name, as [site example]", section);
		return NULL;
	}
	snprintf(name, sizeof(name), "%.*s", (int)(n < SITE_NAME_MAX ? n : SITE_NAME_MAX), p);
	if (n >= SITE_NAME_MAX || !site_name_valid(name)) {
		snprintf(st->why, sizeof(st->why), "[%s]: '%.*s' is not a site name (1-%d letters, digits, '.', '_' "
			 "or '-'; not 'default', the top level's)", section, (int)n, p, SITE_NAME_MAX - 1);
		return NULL;
	}
	p += n;
	*sub = p + strspn(p, " \t");
	if (**sub && strcmp(*sub, "redirects") && strcmp(*sub, "headers") && strcmp(*sub, "cache_control")) {
		snprintf(st->why, sizeof(st->why), "unknown section [%s] (a site's sections are [site %s], and "
			 "[site %s redirects], [site %s headers] and [site %s cache_control] for its rules)", section,
			 name, name, name, name);
		return NULL;
	}
	for (int i = 0; i < cfg->nsites; i++)
		if (strcmp(cfg->sites[i].name, name) == 0)
			return &cfg->sites[i];
	if (cfg->nsites >= CONFIG_MAX_SITES) {
		snprintf(st->why, sizeof(st->why), "[%s]: more than %d sites", section, CONFIG_MAX_SITES);
		return NULL;
	}
	struct site_config *grown = realloc(cfg->sites, (size_t)(cfg->nsites + 1) * sizeof(*grown));
	if (!grown) {
		snprintf(st->why, sizeof(st->why), "out of memory");
		return NULL;
	}
	cfg->sites = grown;
	struct site_config *site = &cfg->sites[cfg->nsites++];
	memset(site, 0, sizeof(*site));
	strcpy(site->name, name);
	site->line = st->reader->line;
	return site;
}

/* A line as libinih reads it: when it is a section header, whether the
 * section is one spindle has and, for a site's, not one seen before (a
 * second [site a] would silently merge into the first). False with the
 * problem in st->why. */
static bool section_header_ok(struct ini_state *st, const char *text)
{
	char section[256];
	const char *p = text + strspn(text, " \t");
	const char *end = *p == '[' ? strchr(p, ']') : NULL;
	if (!end)
		return true; /* not a header, or one libinih refuses itself */
	p++;
	p += strspn(p, " \t");
	size_t n = (size_t)(end - p);
	while (n > 0 && (p[n - 1] == ' ' || p[n - 1] == '\t'))
		n--;
	if (n >= sizeof(section)) {
		snprintf(st->why, sizeof(st->why), "unknown section [%.*s...]", 40, p);
		return false;
	}
	memcpy(section, p, n);
	section[n] = '\0';
	if (strcmp(section, "cache_control") == 0 || strcmp(section, "redirects") == 0 ||
	    strcmp(section, "headers") == 0 || section_known(section))
		return true;
	if (strncmp(section, "site", 4) != 0 || (section[4] != '\0' && section[4] != ' ' && section[4] != '\t')) {
		snprintf(st->why, sizeof(st->why), "unknown section [%s]", section);
		return false;
	}
	const char *sub;
	struct site_config *site = site_section(st, section, &sub);
	if (!site)
		return false;
	int kind = !*sub ? SITE_HDR_OWN : strcmp(sub, "redirects") == 0 ? SITE_HDR_REDIRECTS
		 : strcmp(sub, "headers") == 0 ? SITE_HDR_HEADERS : SITE_HDR_CACHE_CONTROL;
	int *first = &st->header_line[site - st->cfg->sites][kind];
	if (*first) {
		snprintf(st->why, sizeof(st->why), "[%s] appears twice (first at line %d)", section, *first);
		return false;
	}
	*first = st->reader->line;
	return true;
}

/* names as they compare: lower case, without a final dot ("A.Test." is
 * a.test), so --check prints them as they match. */
static void site_names_normalise(const char *value, char *out, size_t len)
{
	size_t n = 0;
	for (const char *p = value; *p && n + 1 < len; p++) {
		bool ends_name = *p == '.' && (p[1] == '\0' || p[1] == ' ' || p[1] == '\t');
		if (!ends_name)
			out[n++] = (char)tolower((unsigned char)*p);
	}
	out[n] = '\0';
}

/* One line of a [site NAME ...] section. */
static int site_on_pair(struct ini_state *st, const char *section, const char *name, const char *value)
{
	const char *sub;
	struct site_config *site = site_section(st, section, &sub);
	if (!site)
		return 0;
	char *why = st->why;
	size_t whylen = sizeof(st->why);
	if (strcmp(sub, "cache_control") == 0) {
		site->set |= SITE_SET_CACHE_CONTROL;
		return cache_control_apply(&site->cache_control, name, value, why, whylen) == 0;
	}
	if (*sub) {
		site->set |= strcmp(sub, "redirects") == 0 ? SITE_SET_REDIRECTS : SITE_SET_HEADERS;
		return rule_apply(&site->redirects, &site->headers, sub, name, value, why, whylen) == 0;
	}
	for (size_t i = 0; i < NSITE_KEYS; i++) {
		const struct config_key *k = &site_keys[i];
		if (strcmp(k->name, name) != 0)
			continue;
		if (site->key_line[i]) {
			snprintf(why, whylen, "[site %s]: %s is given twice (first at line %d)", site->name, name,
				 site->key_line[i]);
			return 0;
		}
		char names[SITE_NAMES_LIST_MAX];
		if (i == 0 && strlen(value) < sizeof(names)) { /* a longer one is refused as too long */
			site_names_normalise(value, names, sizeof(names));
			value = names;
		}
		if (k->kind->set(site, k, value, why, whylen) < 0)
			return 0;
		site->set |= 1u << i;
		site->key_line[i] = st->reader->line;
		return 1;
	}
	snprintf(why, whylen, "unknown key '%s' in [%s] (a site takes names, root, index, autoindex, fallback, "
		 "cors_origins, tls_certificate, tls_certificate_key and redirect_https; %s)", name, section,
		 key_find(name) ? "this one is the whole server's, set at the top level" : "and its rule sections");
	return 0;
}

static int ini_on_pair(void *user, const char *section, const char *name, const char *value)
{
	struct ini_state *st = user;
	if (strcmp(section, "cache_control") == 0)
		return cache_control_apply(&st->cfg->cache_control, name, value, st->why, sizeof(st->why)) == 0;
	if (strcmp(section, "redirects") == 0 || strcmp(section, "headers") == 0)
		return rule_apply(&st->cfg->redirects, &st->cfg->headers, section, name, value, st->why,
				  sizeof(st->why)) == 0;
	if (strncmp(section, "site", 4) == 0 && (section[4] == '\0' || section[4] == ' ' || section[4] == '\t'))
		return site_on_pair(st, section, name, value);
	const struct config_key *k = key_find(name);

	if (!k) {
		snprintf(st->why, sizeof(st->why), "unknown key '%s'", name);
		return 0;
	}
	if (section[0] && strcmp(section, k->section) != 0) {
		if (!section_known(section))
			snprintf(st->why, sizeof(st->why), "unknown section [%s]", section);
		else
			snprintf(st->why, sizeof(st->why), "key '%s' belongs in [%s], not [%s]", name,
				 k->section, section);
		return 0;
	}
	if (k->kind->set(st->cfg, k, value, st->why, sizeof(st->why)) < 0)
		return 0;
	if (k->kind == &key_listen)
		st->cfg->listen[st->cfg->nlisten - 1].line = st->reader->line;
	return 1;
}

int config_load_file(struct config *cfg, const char *path)
{
	struct line_reader r = { .at_start = true };
	struct ini_state st = { .cfg = cfg, .reader = &r };
	r.st = &st;

	ini_stop_on_first_error = true;
	ini_allow_multiline = false; /* an indented line is a mistake, not a continuation */
	errno = 0;
	r.f = fopen(path, "re");
	if (!r.f) {
		report("%s: %s", path, strerror(errno ? errno : ENOENT));
		return -1;
	}
	int line = ini_parse_stream(read_counting, &r, ini_on_pair, &st);
	fclose(r.f);
	if (line == -2) {
		report("%s: out of memory", path);
		return -1;
	}
	if (line == 0 && st.header_error_line) {
		report("%s:%d: %s", path, st.header_error_line, st.why);
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

	bool rules = strcmp(key, "redirects") == 0 || strcmp(key, "headers") == 0;
	if (strcmp(key, "cache_control") == 0 || rules) {
		/* --set 'cache_control=PATTERN = VALUE': one line of that section */
		char pattern[CACHE_CONTROL_PATTERN_MAX];
		const char *eq = strchr(value, '=');
		size_t n = eq ? (size_t)(eq - value) : 0;
		while (n > 0 && (value[n - 1] == ' ' || value[n - 1] == '\t'))
			n--;
		if (!eq || n == 0 || n >= sizeof(pattern)) {
			report("%s: %s: expected 'PATTERN = VALUE', got '%s'", origin, key, value);
			return -1;
		}
		memcpy(pattern, value, n);
		pattern[n] = '\0';
		const char *v = eq + 1;
		v += strspn(v, " \t");
		int rc = rules ? rule_apply(&cfg->redirects, &cfg->headers, key, pattern, v, why, sizeof(why))
			       : cache_control_apply(&cfg->cache_control, pattern, v, why, sizeof(why));
		if (rc < 0) {
			report("%s: %s", origin, why);
			return -1;
		}
		return 0;
	}

	if (!k) {
		report("%s: unknown key '%s'", origin, key);
		return -1;
	}
	if (k->kind->set(cfg, k, value, why, sizeof(why)) < 0) {
		report("%s: %s", origin, why);
		return -1;
	}
	return 0;
}

/* ---- listen ------------------------------------------------------------ */

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

/* One option after the address: tls, proxy_protocol, http2_only, ipv6only=on|off, mode=0660, owner=, group=. */
static int listen_parse_option(const char *opt, struct listen_addr *a, char *why, size_t whylen)
{
	const char *eq = strchr(opt, '=');
	const char *val = eq ? eq + 1 : "";
	size_t klen = eq ? (size_t)(eq - opt) : strlen(opt);
	bool v6 = a->kind == LISTEN_TCP && strchr(a->host, ':');

#define OPT_IS(name) (klen == strlen(name) && strncmp(opt, name, klen) == 0)
	if (OPT_IS("tls") && !eq) {
		a->tls = true;
	} else if (OPT_IS("proxy_protocol") && !eq) {
		a->proxy_protocol = true;
	} else if (OPT_IS("http2_only") && !eq) {
		a->http2_only = true;
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
		snprintf(why, whylen, "listen: unknown option '%s' (tls, proxy_protocol, http2_only, ipv6only=, mode=, "
			 "owner=, group=)", opt);
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
	if (a->proxy_protocol)
		APPEND(" proxy_protocol");
	if (a->http2_only)
		APPEND(" http2_only");
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

/* "server.conf:12" for a listen line read from the file, else the source. */
static void listen_where(const struct config *cfg, const struct listen_addr *a, char *buf, size_t len)
{
	if (a->line > 0)
		snprintf(buf, len, "%s:%d", cfg->source, a->line);
	else
		snprintf(buf, len, "%s", cfg->source);
}

/* No address twice: the second bind would fail, or join the first one's
 * reuseport group. A PROXY header is taken only from real_ip_from: without
 * one, such an address would refuse every connection. An HTTP/2-only
 * address with HTTP/2 off would serve nothing at all. */
static int listen_validate(const struct config *cfg)
{
	char buf[256], where[4200];
	for (int i = 0; i < cfg->nlisten; i++) {
		listen_addr_format(&cfg->listen[i], buf, sizeof(buf));
		listen_where(cfg, &cfg->listen[i], where, sizeof(where));
		for (int j = 0; j < i; j++)
			if (listen_addr_same(&cfg->listen[i], &cfg->listen[j])) {
				report("%s: listen: %s is given twice", where, buf);
				return -1;
			}
		if (cfg->listen[i].proxy_protocol && !cfg->real_ip_from[0]) {
			report("%s: listen: %s takes the PROXY protocol, but real_ip_from names no balancer to take it "
			       "from (real_ip_from = ADDRESS/PREFIX ...)", where, buf);
			return -1;
		}
		if (cfg->listen[i].http2_only && !cfg->http2) {
			report("%s: listen: %s serves HTTP/2 alone, but http2 = off turns HTTP/2 off (drop "
			       "http2_only, or set http2 = on)", where, buf);
			return -1;
		}
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

/* The [site NAME] sections: each has names and a root of its own, no name
 * is any other site's, a certificate comes with its key; what a site does
 * not set is then copied from the top level. */
static int sites_validate(struct config *cfg)
{
	struct site_config top;
	struct stat st;
	char dup[SITE_HOSTNAME_MAX];

	config_top_site(cfg, &top);
	for (int i = 0; i < cfg->nsites; i++) {
		struct site_config *s = &cfg->sites[i];
		const char *src = cfg->source;
		if (!(s->set & SITE_SET_NAMES)) {
			report("%s:%d: [site %s] has no names (names = example.com www.example.com ...)", src, s->line,
			       s->name);
			return -1;
		}
		if (!(s->set & SITE_SET_ROOT)) {
			report("%s:%d: [site %s] has no root (root = /srv/%s)", src, s->line, s->name, s->name);
			return -1;
		}
		if (stat(s->root, &st) < 0 || !S_ISDIR(st.st_mode)) {
			report("%s:%d: [site %s]: root: '%s' is not a directory", src, s->key_line[1], s->name, s->root);
			return -1;
		}
		if ((s->set & SITE_SET_INDEX) && strchr(s->index, '/')) {
			report("%s:%d: [site %s]: index: '%s' must be a file name, not a path", src, s->key_line[2], s->name,
			       s->index);
			return -1;
		}
		if (!(s->tls_certificate[0]) != !(s->tls_certificate_key[0])) {
			report("%s:%d: [site %s]: tls_certificate and tls_certificate_key go together (the site's "
			       "certificate and its key)", src, s->key_line[s->tls_certificate[0] ? 6 : 7], s->name);
			return -1;
		}
		for (int j = 0; j < i; j++)
			if (site_names_overlap(s->names, cfg->sites[j].names, dup, sizeof(dup))) {
				report("%s:%d: [site %s]: names: '%s' is also a name of [site %s]", src, s->key_line[0],
				       s->name, dup, cfg->sites[j].name);
				return -1;
			}
		/* the rest is the top level's, as nginx's server blocks inherit
		 * what is set around them; but not [redirects]: nginx carries no
		 * rewrite from one server block to another, and an empty section
		 * (libinih reports none) could not drop a catch-all */
		if (!(s->set & SITE_SET_INDEX))
			strcpy(s->index, top.index);
		if (!(s->set & SITE_SET_AUTOINDEX))
			s->autoindex = top.autoindex;
		if (!(s->set & SITE_SET_FALLBACK))
			strcpy(s->fallback, top.fallback);
		if (!(s->set & SITE_SET_CORS))
			strcpy(s->cors_origins, top.cors_origins);
		if (!(s->set & SITE_SET_REDIRECT_HTTPS))
			s->redirect_https = top.redirect_https;
		if (!(s->set & SITE_SET_CACHE_CONTROL))
			s->cache_control = top.cache_control;
		if (!(s->set & SITE_SET_HEADERS))
			s->headers = top.headers;
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
	if (sites_validate(cfg) < 0)
		return -1;
	return 0;
}

static void print_redirects(const struct redirect_rules *rules, FILE *out)
{
	for (size_t i = 0; i < rules->n; i++) {
		const struct redirect_rule *r = &rules->rule[i];
		fprintf(out, "%s%s%s = %d %s\n", r->host[0] ? "//" : "", r->host, r->path, r->status, r->target);
	}
}

static void print_headers(const struct header_rules *rules, FILE *out)
{
	for (size_t i = 0; i < rules->n; i++) {
		const struct header_rule *r = &rules->rule[i];
		fprintf(out, "%s = %s: %s\n", r->match.pattern, r->name, r->value);
	}
}

/* A site as its sections: every key and rule it ends up with, inherited
 * ones included, so what --check prints reads back the same. */
static void print_site(const struct site_config *s, FILE *out)
{
	fprintf(out, "\n[site %s]\n", s->name);
	for (size_t i = 0; i < NSITE_KEYS; i++)
		site_keys[i].kind->print(s, &site_keys[i], out);
	fprintf(out, "\n[site %s cache_control]\n", s->name);
	for (size_t i = 0; i < s->cache_control.n; i++)
		fprintf(out, "%s = %s\n", s->cache_control.rule[i].pattern, s->cache_control.rule[i].value);
	fprintf(out, "\n[site %s redirects]\n", s->name);
	print_redirects(&s->redirects, out);
	fprintf(out, "\n[site %s headers]\n", s->name);
	print_headers(&s->headers, out);
}

void config_print(const struct config *cfg, FILE *out)
{
	/* the default source comes in parentheses of its own, for messages */
	size_t n = strlen(cfg->source);
	bool paren = n >= 2 && cfg->source[0] == '(' && cfg->source[n - 1] == ')';
	fprintf(out, "# effective configuration (from %.*s)\n", (int)(paren ? n - 2 : n), cfg->source + paren);
	for (size_t i = 0; i < NKEYS; i++) {
		const struct config_key *k = &config_keys[i];
		if (i == 0 || strcmp(k->section, config_keys[i - 1].section) != 0)
			fprintf(out, "%s[%s]\n", i == 0 ? "" : "\n", k->section);
		k->kind->print(cfg, k, out);
	}
	fprintf(out, "\n[cache_control]\n");
	for (size_t i = 0; i < cfg->cache_control.n; i++)
		fprintf(out, "%s = %s\n", cfg->cache_control.rule[i].pattern, cfg->cache_control.rule[i].value);
	fprintf(out, "\n[redirects]\n");
	print_redirects(&cfg->redirects, out);
	fprintf(out, "\n[headers]\n");
	print_headers(&cfg->headers, out);
	for (int i = 0; i < cfg->nsites; i++)
		print_site(&cfg->sites[i], out);
}
