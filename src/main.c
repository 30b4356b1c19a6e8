/* main.c - command line, configuration, signals, and running the chosen model. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "log/log.h"
#include "models/model.h"
#include "listeners.h"
#include "master.h"
#include "pidfile.h"
#include "privs.h"
#include "tls/context.h"

/* Exit statuses (spindle(8)): 0 done, 1 a failure while starting or
 * running (a port taken, a serving process that could not start), 2 the
 * configuration or command line is wrong, found with or without --check. */
enum { EXIT_CONFIG = 2 };

static void usage(FILE *out)
{
	fprintf(out,
		"usage: spindle [options]\n"
		"\n"
		"Serves static files over HTTP/1.1 with a concurrency model chosen at run time.\n"
		"\n"
		"  -c, --config FILE     read settings from FILE (INI, as server.conf; without\n"
		"                        --config no file is read: the built-in defaults apply)\n"
		"  -p, --port N          TCP port (default 8080)\n"
		"  -b, --bind ADDR       address to listen on (default 127.0.0.1; '*' for all)\n"
		"  -r, --root DIR        document root (default www)\n"
		"  -m, --model NAME      concurrency model (default epoll; see --list-models)\n"
		"  -w, --workers N       event loops / worker processes (0 = one per core)\n"
		"  -t, --threads N       threads per pool\n"
		"  -s, --set KEY=VALUE   set any server.conf key (repeatable)\n"
		"      --check           validate the configuration, print what would run, exit\n"
		"      --list-models     list the concurrency models\n"
		"  -V, --version         print the version\n"
		"  -h, --help            this help\n"
		"\n"
		"Signals (to the master, whose pid pid_file holds): TERM/INT drain and exit,\n"
		"HUP reloads the configuration, USR1 reopens the logs.\n");
}

static void list_models(void)
{
	for (const struct model *const *m = model_registry; *m; m++)
		printf("%-10s %s\n", (*m)->name, (*m)->summary);
}

enum { OPT_CHECK = 256, OPT_LIST_MODELS };

static const struct option long_options[] = {
	{ "config", required_argument, NULL, 'c' },
	{ "port", required_argument, NULL, 'p' },
	{ "bind", required_argument, NULL, 'b' },
	{ "root", required_argument, NULL, 'r' },
	{ "model", required_argument, NULL, 'm' },
	{ "workers", required_argument, NULL, 'w' },
	{ "threads", required_argument, NULL, 't' },
	{ "set", required_argument, NULL, 's' },
	{ "check", no_argument, NULL, OPT_CHECK },
	{ "list-models", no_argument, NULL, OPT_LIST_MODELS },
	{ "version", no_argument, NULL, 'V' },
	{ "help", no_argument, NULL, 'h' },
	{ NULL, 0, NULL, 0 },
};
static const char short_options[] = "c:p:b:r:m:w:t:s:Vh";

/* Applies one command-line setting; flags override the file, in order. */
static int apply_flag(struct config *cfg, int opt, char *arg)
{
	static const struct { int opt; const char *key; } flag_keys[] = {
		{ 'p', "port" }, { 'b', "bind" }, { 'r', "root" }, { 'm', "model" },
		{ 'w', "workers" }, { 't', "threads" },
	};
	char origin[64];

	for (size_t i = 0; i < sizeof(flag_keys) / sizeof(flag_keys[0]); i++) {
		if (flag_keys[i].opt == opt) {
			snprintf(origin, sizeof(origin), "--%s", flag_keys[i].key);
			return config_set(cfg, flag_keys[i].key, arg, origin);
		}
	}
	if (opt == 's') {
		char *eq = strchr(arg, '=');
		if (!eq) {
			fprintf(stderr, "spindle: --set %s: expected KEY=VALUE\n", arg);
			return -1;
		}
		*eq = '\0';
		int rc = config_set(cfg, arg, eq + 1, "--set");
		*eq = '=';
		return rc;
	}
	return 0;
}

struct cmdline {
	int argc;
	char **argv;
};

/* Defaults, then the --config file, then the other flags in order: the same
 * recipe at start and on every reload. */
static int build_config(struct config *cfg, void *arg)
{
	const struct cmdline *cl = arg;
	int opt;

	config_defaults(cfg);
	optind = 1;
	while ((opt = getopt_long(cl->argc, cl->argv, short_options, long_options, NULL)) != -1)
		if (opt == 'c' && config_load_file(cfg, optarg) < 0)
			return -1;
	optind = 1;
	while ((opt = getopt_long(cl->argc, cl->argv, short_options, long_options, NULL)) != -1)
		if (apply_flag(cfg, opt, optarg) < 0)
			return -1;
	return config_validate(cfg);
}

/* Whether the master could not create its pid file there (logged). Another
 * instance holding it is no configuration error: --check, run before a
 * reload, finds the running one there. */
static bool pid_file_dir_unwritable(const char *path)
{
	char dir[4096];
	const char *slash = strrchr(path, '/');

	snprintf(dir, sizeof(dir), "%.*s", slash ? (slash == path ? 1 : (int)(slash - path)) : 1, slash ? path : ".");
	if (access(dir, W_OK) == 0)
		return false;
	log_error("pid_file: cannot create '%s': directory %s: %s", path, dir, strerror(errno));
	return true;
}

/* Everything start-up would refuse the configuration for, checked the same
 * way under --check and before a start (as nginx -t loads certificates and
 * opens logs): unknown user or group, a log path refused, a root the user
 * cannot enter, a certificate or key that does not load. What is wrong goes
 * to standard error, whatever error_log says. 0, or -1 (a configuration
 * error: exit status 2). */
static int preflight(const struct config *cfg)
{
	static struct config on_stderr;
	struct privs p;
	int rc = 0;

	on_stderr = *cfg;
	snprintf(on_stderr.error_log, sizeof(on_stderr.error_log), "-");
	on_stderr.access_log[0] = '\0';
	on_stderr.log_level = LOG_WARN; /* not the kernel-TLS line a start logs */
	if (log_open(&on_stderr) < 0)
		return -1;
	if (privs_resolve(cfg, &p) < 0 || privs_check(cfg, &p) < 0)
		rc = -1;
	if (cfg->pid_file[0] && (pid_file_dir_unwritable(cfg->pid_file) || pidfile_check(cfg->pid_file) < 0))
		rc = -1;
	if (rc == 0 && config_serves_tls(cfg)) {
		struct tls_context *t = tls_context_new(&on_stderr);
		if (!t)
			rc = -1;
		tls_context_free(t);
	}
	log_close();
	/* the logs themselves: a link or an unwritable path (printed by log_open) */
	if (rc == 0) {
		if (log_open(cfg) < 0)
			rc = -1;
		log_close();
	}
	return rc;
}

static void report_to_log(const char *msg)
{
	log_error("config: %s", msg);
}

int main(int argc, char **argv)
{
	static struct config cfg;
	struct cmdline cl = { argc, argv };
	bool check = false;
	int opt;

	/* Actions first; unknown options and stray arguments are refused here. */
	while ((opt = getopt_long(argc, argv, short_options, long_options, NULL)) != -1) {
		switch (opt) {
		case 'h': usage(stdout); return 0;
		case 'V': printf("spindle %s\n", SPINDLE_VERSION); return 0;
		case OPT_LIST_MODELS: list_models(); return 0;
		case OPT_CHECK: check = true; break;
		case '?': usage(stderr); return EXIT_CONFIG;
		default: break;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "spindle: unexpected argument '%s'\n", argv[optind]);
		return EXIT_CONFIG;
	}
	if (build_config(&cfg, &cl) < 0 || preflight(&cfg) < 0)
		return EXIT_CONFIG;
	if (check) {
		config_print(&cfg, stdout);
		if (cfg.nlisten > 0) { /* listen lines replace bind and port */
			char where[1024];
			listeners_describe(cfg.listen, cfg.nlisten, where, sizeof(where));
			printf("\n# would serve %s on %s with the %s model\n", cfg.root, where, cfg.model);
		} else {
			printf("\n# would serve %s on %s://%s:%d/ with the %s model\n", cfg.root, cfg.tls ? "https" : "http",
			       cfg.bind, cfg.port, cfg.model);
		}
		return 0;
	}
	if (log_open(&cfg) < 0)
		return EXIT_CONFIG;
	log_echo_errors(-1); /* until the first serving process is up (master.c) */
	config_set_reporter(report_to_log); /* from now on problems go to the error log */
	int rc = master_run(&cfg, build_config, &cl);
	log_close();
	return rc;
}
