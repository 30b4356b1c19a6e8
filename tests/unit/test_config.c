/* test_config.c - values of server.conf keys: durations, sizes and numbers at
 * their bounds and past them, overflow refused (never wrapped), and the
 * messages that name the problem. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../src/config.h"
#include "tempfile.h"

static char last_msg[1024];
static int nmsgs;

static void capture(const char *msg)
{
	snprintf(last_msg, sizeof(last_msg), "%s", msg);
	nmsgs++;
}

static void setup(void)
{
	last_msg[0] = '\0';
	nmsgs = 0;
	config_set_reporter(capture);
}

static void teardown(void)
{
	config_set_reporter(NULL);
}

TestSuite(config, .init = setup, .fini = teardown);

struct int_case {
	const char *key, *value;
	long long want; /* -1: refused */
};

/* Applies key=value to defaults; returns the int field's value, or -1. */
static long long set_int(const char *key, const char *value, const int *field, struct config *cfg)
{
	int before = *field;
	if (config_set(cfg, key, value, "--set") < 0) {
		cr_expect_eq(*field, before, "%s=%s: a refused value must leave the field alone", key, value);
		cr_expect(strstr(last_msg, key) != NULL, "%s=%s: the message names the key: %s", key, value, last_msg);
		return -1;
	}
	return *field;
}

Test(config, durations_bounds_and_overflow)
{
	static const struct int_case cases[] = {
		{ "header_timeout", "10", 10000 },           /* bare: seconds */
		{ "header_timeout", "10s", 10000 },
		{ "header_timeout", "500ms", 500 },
		{ "header_timeout", "2m", 120000 },
		{ "header_timeout", "1ms", 1 },              /* the minimum */
		{ "header_timeout", "0", -1 },               /* below it */
		{ "header_timeout", "0ms", -1 },
		{ "header_timeout", "3600000ms", 3600000 },  /* the maximum, three ways */
		{ "header_timeout", "3600s", 3600000 },
		{ "header_timeout", "60m", 3600000 },
		{ "header_timeout", "3600001ms", -1 },
		{ "header_timeout", "3601", -1 },
		{ "header_timeout", "61m", -1 },
		/* would overflow int, then long long, when scaled: refused, not wrapped */
		{ "header_timeout", "2147484", -1 },         /* 2147484000 ms > INT_MAX */
		{ "header_timeout", "4294968ms", -1 },       /* 2^32 + a little: would wrap to ~0 in 32 bits */
		{ "header_timeout", "4294967297ms", -1 },    /* 2^32 + 1: wraps to 1 if truncated */
		{ "header_timeout", "153722867280912m", -1 },/* LLONG_MAX / 60000: the largest that scales */
		{ "header_timeout", "153722867280913m", -1 },/* one more overflows the multiply */
		{ "header_timeout", "307445734561826m", -1 },  /* x 60000 wraps to 8384 ms in 64 bits */
		{ "header_timeout", "18446744073709552", -1 }, /* x 1000 wraps to 384 ms */
		{ "header_timeout", "9223372036854775807", -1 },
		{ "header_timeout", "9223372036854775807ms", -1 },
		{ "header_timeout", "9223372036854775808ms", -1 }, /* overflows strtoll itself */
		{ "header_timeout", "99999999999999999999999999999999s", -1 },
		/* not durations */
		{ "header_timeout", "", -1 },
		{ "header_timeout", "-1", -1 },
		{ "header_timeout", "+5", -1 },
		{ "header_timeout", " 5", -1 },
		{ "header_timeout", "5 s", -1 },
		{ "header_timeout", "1.5s", -1 },
		{ "header_timeout", "1h", -1 },
		{ "header_timeout", "5us", -1 },             /* microseconds only where they are meant */
		{ "header_timeout", "ms", -1 },
		{ "drain_timeout", "0", 0 },                 /* drain may be zero */
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct config cfg;
		config_defaults(&cfg);
		const int *field = strcmp(cases[i].key, "drain_timeout") ? &cfg.header_timeout_ms : &cfg.drain_timeout_ms;
		cr_expect_eq(set_int(cases[i].key, cases[i].value, field, &cfg), cases[i].want, "%s=%s: want %lld",
			     cases[i].key, cases[i].value, cases[i].want);
	}
}

Test(config, microsecond_durations)
{
	static const struct int_case cases[] = {
		{ "work_unit", "250us", 250 },
		{ "work_unit", "1us", 1 },
		{ "work_unit", "0us", -1 },
		{ "work_unit", "1ms", 1000 },
		{ "work_unit", "2", 2000000 },               /* bare: seconds */
		{ "work_unit", "10s", 10000000 },            /* the maximum */
		{ "work_unit", "10000001us", -1 },
		{ "work_unit", "11s", -1 },
		{ "work_unit", "153722867280m", -1 },        /* overflows 60000 * 1000 * v */
		{ "work_unit", "9223372036854775807us", -1 },
		{ "work_unit", "4294967297us", -1 },
		{ "work_unit", "18446744073710s", -1 },      /* x 1000000 wraps to 448384 us */
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct config cfg;
		config_defaults(&cfg);
		cr_expect_eq(set_int(cases[i].key, cases[i].value, &cfg.work_unit_us, &cfg), cases[i].want,
			     "%s=%s: want %lld", cases[i].key, cases[i].value, cases[i].want);
	}
}

struct size_case {
	const char *key, *value;
	bool ok;
	unsigned long long want;
};

Test(config, sizes_bounds_and_overflow)
{
	static const struct size_case cases[] = {
		{ "max_head", "4096", true, 4096 },
		{ "max_head", "16k", true, 16384 },
		{ "max_head", "16K", true, 16384 },
		{ "max_head", "1m", true, 1 << 20 },
		{ "max_head", "4m", true, 1 << 22 },          /* the maximum */
		{ "max_head", "4194305", false, 0 },
		{ "max_head", "256", true, 256 },             /* the minimum */
		{ "max_head", "255", false, 0 },
		{ "max_head", "1t", false, 0 },
		{ "max_head", "1kb", false, 0 },
		{ "max_head", "k", false, 0 },
		{ "max_head", "-1k", false, 0 },
		{ "max_body", "0", true, 0 },
		{ "max_body", "1099511627776", true, 1ULL << 40 }, /* the maximum */
		{ "max_body", "1024g", true, 1ULL << 40 },
		{ "max_body", "1099511627777", false, 0 },
		{ "max_body", "1025g", false, 0 },
		{ "max_body", "8589934591g", false, 0 },      /* fits in 63 bits, over the bound */
		{ "max_body", "8589934592g", false, 0 },      /* 2^63: overflows the multiply */
		{ "max_body", "9007199254740992k", false, 0 },/* 2^53 * 2^10 = 2^63 */
		{ "max_body", "17179869185g", false, 0 },     /* (2^34 + 1) x 2^30 wraps to 1g */
		{ "max_body", "18446744073709551616", false, 0 },
		{ "cache_max_file", "4g", true, 1ULL << 32 }, /* the maximum */
		{ "cache_max_file", "4294967297", false, 0 },
		{ "cache_size", "0", true, 0 },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct config cfg, before;
		config_defaults(&cfg);
		before = cfg;
		int r = config_set(&cfg, cases[i].key, cases[i].value, "--set");
		unsigned long long got = !strcmp(cases[i].key, "max_body") ? cfg.max_body
				       : !strcmp(cases[i].key, "max_head") ? cfg.max_head
				       : !strcmp(cases[i].key, "cache_max_file") ? cfg.cache_max_file
				       : cfg.cache_size;
		if (cases[i].ok) {
			cr_expect_eq(r, 0, "%s=%s: refused: %s", cases[i].key, cases[i].value, last_msg);
			cr_expect_eq(got, cases[i].want, "%s=%s: got %llu", cases[i].key, cases[i].value, got);
		} else {
			cr_expect_eq(r, -1, "%s=%s: accepted as %llu", cases[i].key, cases[i].value, got);
			cr_expect_eq(memcmp(&cfg, &before, sizeof(cfg)), 0, "%s=%s changed the config", cases[i].key,
				     cases[i].value);
		}
	}
}

Test(config, whole_numbers)
{
	static const struct int_case cases[] = {
		{ "port", "0", 0 },
		{ "port", "65535", 65535 },
		{ "port", "65536", -1 },
		{ "port", "4294967376", -1 },               /* 2^32 + 80: 80 if truncated to int first */
		{ "port", "99999999999999999999", -1 },
		{ "port", "80k", -1 },                      /* units only on sizes */
		{ "port", "80s", -1 },
		{ "port", "0x50", -1 },
		{ "port", "", -1 },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct config cfg;
		config_defaults(&cfg);
		cr_expect_eq(set_int(cases[i].key, cases[i].value, &cfg.port, &cfg), cases[i].want, "%s=%s: want %lld",
			     cases[i].key, cases[i].value, cases[i].want);
	}
}

Test(config, messages_name_the_problem)
{
	struct config cfg;
	config_defaults(&cfg);
	cr_assert_eq(config_set(&cfg, "header_timeout", "61m", "--set"), -1);
	cr_assert(strstr(last_msg, "--set") && strstr(last_msg, "header_timeout") && strstr(last_msg, "out of range"),
		  "%s", last_msg);
	cr_assert_eq(config_set(&cfg, "header_timeout", "1h", "--set"), -1);
	cr_assert(strstr(last_msg, "is not a duration"), "%s", last_msg);
	cr_assert_eq(config_set(&cfg, "nosuchkey", "1", "--set"), -1);
	cr_assert(strstr(last_msg, "unknown key 'nosuchkey'"), "%s", last_msg);
	cr_assert_eq(nmsgs, 3);
}

/* Loads text as a config file over defaults; the file's name goes to path. */
static int load_text(const char *text, struct config *cfg, char path[32])
{
	strcpy(path, "/tmp/spindle-conf-XXXXXX");
	int fd = mkstemp(path);
	cr_assert_geq(fd, 0);
	cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
	config_defaults(cfg);
	int r = config_load_file(cfg, path);
	unlink(path);
	return r;
}

/* A file: the line of the first bad value is reported, nothing exits. */
Test(config, file_reports_the_line)
{
	char path[32], want[64];
	struct config cfg;
	int r = load_text("[http]\nheader_timeout = 5s\nmax_body = 1m\nmax_head = 9223372036854775807k\n", &cfg, path);
	cr_assert_eq(r, -1);
	snprintf(want, sizeof(want), "%s:4: max_head", path);
	cr_assert(strstr(last_msg, want), "%s", last_msg);
	cr_assert_eq(cfg.header_timeout_ms, 5000, "lines before the bad one were applied");
}

/* health_path: off by default, "off" turns it off again, a path
 * must be absolute (checked with the other cross-field rules). */
Test(config, health_path_off_or_absolute)
{
	struct config cfg;
	config_defaults(&cfg);
	cr_assert_str_empty(cfg.health_path);
	cr_assert_eq(config_set(&cfg, "health_path", "/healthz", "--set"), 0);
	cr_assert_str_eq(cfg.health_path, "/healthz");
	cr_assert_eq(config_set(&cfg, "health_path", "off", "--set"), 0);
	cr_assert_str_empty(cfg.health_path);
	cr_assert_eq(config_set(&cfg, "health_path", "healthz", "--set"), 0);
	strcpy(cfg.root, ".");
	cr_assert_eq(config_validate(&cfg), -1);
	cr_assert(strstr(last_msg, "health_path") && strstr(last_msg, "start with '/'"), "%s", last_msg);
}

/* autoindex, fallback, access_log_format: values and file lines */
Test(config, site_keys_values_and_file_lines)
{
	struct config cfg;
	config_defaults(&cfg);
	cr_expect_eq(cfg.autoindex, AUTOINDEX_OFF);
	cr_expect_eq(cfg.fallback[0], '\0');
	cr_expect_eq(cfg.access_log_format, ACCESS_LOG_COMBINED);
	cr_expect_eq(config_set(&cfg, "autoindex", "json", "--set"), 0);
	cr_expect_eq(cfg.autoindex, AUTOINDEX_JSON);
	cr_expect_eq(config_set(&cfg, "autoindex", "yes", "--set"), -1);
	cr_expect(strstr(last_msg, "autoindex: 'yes' is not off, html or json"), "%s", last_msg);
	cr_expect_eq(config_set(&cfg, "fallback", "/index.html", "--set"), 0);
	cr_expect_str_eq(cfg.fallback, "/index.html");
	cr_expect_eq(config_set(&cfg, "fallback", "off", "--set"), 0);
	cr_expect_eq(cfg.fallback[0], '\0');
	cr_expect_eq(config_set(&cfg, "fallback", "index.html", "--set"), -1);
	cr_expect(strstr(last_msg, "fallback: 'index.html' must be a path starting with '/'"), "%s", last_msg);
	/* a fallback no request could resolve to a file would answer every
	 * route 404 without a word: refused where it is written */
	const char *never[] = { "/../index.html", "/app/", "/", "/%00x", "/a/%2e%2e/%2e%2e/x" };
	for (size_t i = 0; i < sizeof(never) / sizeof(*never); i++) {
		cr_expect_eq(config_set(&cfg, "fallback", never[i], "--set"), -1, "%s", never[i]);
		cr_expect(strstr(last_msg, "must be a path starting with '/'"), "%s", last_msg);
	}
	cr_expect_eq(config_set(&cfg, "fallback", "/app/./%69ndex.html", "--set"), 0);
	cr_expect_eq(config_set(&cfg, "access_log_format", "json", "--set"), 0);
	cr_expect_eq(cfg.access_log_format, ACCESS_LOG_JSON);
	cr_expect_eq(config_set(&cfg, "access_log_format", "JSON5", "--set"), -1);
	cr_expect(strstr(last_msg, "access_log_format: 'JSON5' is not combined, json or vhost_combined"), "%s",
		  last_msg);

	char path[32], want[64];
	int r = load_text("[http]\nautoindex = html\n\n[log]\naccess_log_format = xml\n", &cfg, path);
	cr_expect_eq(r, -1);
	snprintf(want, sizeof(want), "%s:5: access_log_format", path);
	cr_expect(strstr(last_msg, want), "%s", last_msg);
	cr_expect_eq(cfg.autoindex, AUTOINDEX_HTML);
}

/* [content] and [cache_control]: rules keep their order, a bad
 * rule or coding names its line, a bad types file is refused by
 * config_validate (so a reload with one keeps the old configuration). */
Test(config, content_and_cache_control_sections)
{
	struct config cfg;
	char path[64];
	cr_assert_eq(load_text("[content]\nprecompressed = zstd gzip\ncache_expires = on\n"
				     "[cache_control]\n/assets/* = public, max-age=31536000, immutable\n"
				     "text/html = no-cache\n", &cfg, path), 0, "%s", last_msg);
	cr_assert_eq(cfg.precompressed.n, 2);
	cr_assert_eq(cfg.precompressed.order[0], CODING_ZSTD);
	cr_assert(cfg.cache_expires);
	cr_assert_eq(cfg.cache_control.n, 2);
	cr_assert_str_eq(cfg.cache_control.rule[0].pattern, "/assets/*");
	cr_assert_str_eq(cfg.cache_control.rule[0].value, "public, max-age=31536000, immutable");
	cr_assert_str_eq(cfg.cache_control.rule[1].pattern, "text/html");

	cr_assert_eq(load_text("[content]\nprecompressed = br lzma\n", &cfg, path), -1);
	char want[200];
	snprintf(want, sizeof(want), "%s:2: precompressed: 'lzma'", path);
	cr_assert(strstr(last_msg, want), "%s", last_msg);
	cr_assert_eq(load_text("[cache_control]\n/a = x\nhtml = no-cache\n", &cfg, path), -1);
	snprintf(want, sizeof(want), "%s:3: cache_control: pattern 'html'", path);
	cr_assert(strstr(last_msg, want), "%s", last_msg);

	/* --set form, and the defaults: sidecars off, octet-stream */
	config_defaults(&cfg);
	cr_assert_eq(cfg.precompressed.n, 0);
	cr_assert_str_eq(cfg.default_type, "application/octet-stream");
	cr_assert_eq(config_set(&cfg, "cache_control", "/x/* = max-age=5", "--set"), 0, "%s", last_msg);
	cr_assert_str_eq(cfg.cache_control.rule[0].pattern, "/x/*");
	cr_assert_eq(cfg.cache_control.rule[0].max_age, 5);
	cr_assert_eq(config_set(&cfg, "cache_control", "no-equals-sign", "--set"), -1);
}

Test(config, types_file_and_default_type_validated)
{
	struct config cfg;
	config_defaults(&cfg);
	strcpy(cfg.root, "/tmp");
	cr_assert_eq(config_validate(&cfg), 0, "%s", last_msg);
	cr_assert_eq(config_set(&cfg, "types_file", "/nonexistent/mime.types", "--set"), 0);
	cr_assert_eq(config_validate(&cfg), -1);
	cr_assert(strstr(last_msg, "types_file: /nonexistent/mime.types: No such file"), "%s", last_msg);
	cr_assert_eq(config_set(&cfg, "types_file", "off", "--set"), 0);
	cr_assert_eq(config_set(&cfg, "default_type", "binary", "--set"), 0);
	cr_assert_eq(config_validate(&cfg), -1);
	cr_assert(strstr(last_msg, "default_type: 'binary' is not a MIME type"), "%s", last_msg);
}

/* A rule --check could not print back: libinih would end the key at ':' or
 * '=', or read the line as a section or a comment. */
Test(config, cache_control_pattern_must_read_back)
{
	struct config cfg;
	config_defaults(&cfg);
	static const char *const bad[] = { "/a:b = x", "[x = y", "#x/y = z", ";x/y = z" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		cr_expect_eq(config_set(&cfg, "cache_control", bad[i], "--set"), -1, "%s accepted", bad[i]);
	cr_assert_eq(cfg.cache_control.n, 0);
}

/* What config_print writes for cfg, in a buffer the caller frees. */
static char *printed(const struct config *cfg)
{
	char *buf = NULL;
	size_t n = 0;
	FILE *f = open_memstream(&buf, &n);
	cr_assert(f);
	config_print(cfg, f);
	cr_assert_eq(fclose(f), 0);
	return buf;
}

/* Every value of every named choice is accepted, stored, printed back under
 * its own name, and a value outside the choice is refused with the list. */
Test(config, choices_parse_and_print_by_the_same_names)
{
	static const struct {
		const char *key;
		const char *names[5];
		const char *refusal;
	} choices[] = {
		{ "symlinks", { "inside", "all", "off" }, "symlinks: 'x' is not inside, all or off" },
		{ "autoindex", { "off", "html", "json" }, "autoindex: 'x' is not off, html or json" },
		{ "delay_kind", { "cpu", "wall", "sleep" }, "delay_kind: 'x' is not cpu, wall or sleep" },
		{ "bucket_lock", { "bucket", "global" }, "bucket_lock: 'x' is not bucket or global" },
		{ "log_level", { "debug", "info", "warn", "error" }, "log_level: 'x' is not debug, info, warn or error" },
		{ "access_log_format", { "combined", "json", "vhost_combined" },
		  "access_log_format: 'x' is not combined, json or vhost_combined" },
		{ "default_site", { "serve", "reject" }, "default_site: 'x' is not serve or reject" },
	};
	for (size_t i = 0; i < sizeof(choices) / sizeof(choices[0]); i++) {
		for (size_t j = 0; choices[i].names[j]; j++) {
			struct config cfg;
			char want[64];
			config_defaults(&cfg);
			cr_assert_eq(config_set(&cfg, choices[i].key, choices[i].names[j], "--set"), 0, "%s", last_msg);
			char *out = printed(&cfg);
			snprintf(want, sizeof(want), "\n%s = %s\n", choices[i].key, choices[i].names[j]);
			cr_expect(strstr(out, want), "%s = %s printed back as:\n%s", choices[i].key, choices[i].names[j],
				  out);
			free(out);
		}
		struct config cfg;
		config_defaults(&cfg);
		cr_expect_eq(config_set(&cfg, choices[i].key, "x", "--set"), -1);
		cr_expect(strstr(last_msg, choices[i].refusal), "%s", last_msg);
	}
	struct config cfg;
	config_defaults(&cfg);
	cr_assert_eq(config_set(&cfg, "symlinks", "off", "--set"), 0);
	cr_expect_eq(cfg.symlinks, SYMLINKS_OFF);
	cr_assert_eq(config_set(&cfg, "bucket_lock", "global", "--set"), 0);
	cr_expect(cfg.bucket_global_lock);
	cr_assert_eq(config_set(&cfg, "log_level", "warn", "--set"), 0);
	cr_expect_eq(cfg.log_level, LOG_WARN);
	cr_assert_eq(config_set(&cfg, "delay_kind", "sleep", "--set"), 0);
	cr_expect_eq(cfg.delay_kind, DELAY_SLEEP);
	cr_assert_eq(config_set(&cfg, "autoindex", "json", "--set"), 0);
	cr_expect_eq(cfg.autoindex, AUTOINDEX_JSON);
	cr_assert_eq(config_set(&cfg, "access_log_format", "json", "--set"), 0);
	cr_expect_eq(cfg.access_log_format, ACCESS_LOG_JSON);
}

/* The defaults are the values the key table shows: what config_defaults
 * fills in prints as server.conf's defaults, and reading that output back
 * changes nothing. */
Test(config, defaults_print_and_read_back)
{
	struct config cfg, back;
	char path[64];
	config_defaults(&cfg);
	cr_expect_eq(cfg.port, 8080);
	cr_expect_eq(cfg.max_head, 16384);
	cr_expect_eq(cfg.max_body, 1048576);
	cr_expect_eq(cfg.cache_size, 64u << 20);
	cr_expect_eq(cfg.work_unit_us, 1000);
	cr_expect_eq(cfg.symlinks, SYMLINKS_INSIDE);
	cr_expect_eq(cfg.log_level, LOG_INFO);
	cr_expect(cfg.reuseport && cfg.landlock && cfg.stats && !cfg.metrics);
	cr_expect_str_eq(cfg.stats_allow, "127.0.0.0/8 ::1/128");
	cr_expect_str_empty(cfg.access_log);
	cr_expect_str_empty(cfg.user);
	cr_expect_eq(cfg.precompressed.n, 0);
	cr_expect_eq(cfg.nlisten, 0);
	cr_expect_str_eq(cfg.source, "(defaults and command line)");
	char *out = printed(&cfg);
	temp_file_with("defaults", out, path, sizeof(path));
	config_defaults(&back);
	cr_assert_eq(config_load_file(&back, path), 0, "%s", last_msg);
	unlink(path);
	char *again = printed(&back);
	cr_expect_str_eq(strchr(again, '\n'), strchr(out, '\n'));
	free(out);
	free(again);
}

/* Every section a key lives in is known: a key put in the wrong one of them
 * is named as misplaced, [tls] included. */
Test(config, misplaced_key_names_its_section)
{
	char path[32];
	struct config cfg;
	cr_assert_eq(load_text("[tls]\nport = 8443\n", &cfg, path), -1);
	cr_expect(strstr(last_msg, ":2: key 'port' belongs in [server], not [tls]"), "%s", last_msg);
	cr_assert_eq(load_text("[content]\ntls = on\n", &cfg, path), -1);
	cr_expect(strstr(last_msg, ":2: key 'tls' belongs in [tls], not [content]"), "%s", last_msg);
	cr_assert_eq(load_text("[nope]\nport = 1\n", &cfg, path), -1);
	cr_expect(strstr(last_msg, ":1: unknown section [nope]"), "%s", last_msg); /* its header's line */
}
