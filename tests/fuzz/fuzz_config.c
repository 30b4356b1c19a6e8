/* fuzz_config.c - libFuzzer target for the configuration parser, through
 * the code --check runs: config_defaults, config_load_file, config_validate,
 * config_print. The input is the file's text; every line holding '=' is
 * also applied as --set key=value would be (config_set).
 *
 * Checked, beyond no crash, no leak and no sanitizer report: problems are
 * reported as one non-empty line, never exit the process; and what
 * --check prints for an accepted file (or for what --set accepted) is itself
 * a configuration that loads (and validates) and prints the same again, a
 * fixed point: `spindle --check > new.conf` always gives the same server
 * (as long as each line fits libinih's INI_MAX_LINE: see fz_lines_fit). */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <ini.h>

#include "../../src/config.h"

#define FZ_CHECK(cond) do { if (!(cond)) __builtin_trap(); } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int reports;

static void fz_report(const char *msg)
{
	FZ_CHECK(msg[0] != '\0');
	reports++;
}

/* A file holding `len` bytes, named by path (a memfd seen through /proc). */
static int fz_file(const void *p, size_t len, char *path, size_t cap)
{
	int fd = memfd_create("fuzz-config", MFD_CLOEXEC);
	FZ_CHECK(fd >= 0);
	FZ_CHECK(write(fd, p, len) == (ssize_t)len);
	snprintf(path, cap, "/proc/self/fd/%d", fd);
	return fd;
}

/* config_print into memory, without its first line (it names the source). */
static char *fz_print(const struct config *cfg, size_t *len)
{
	char *buf = NULL;
	size_t n = 0;
	FILE *f = open_memstream(&buf, &n);
	FZ_CHECK(f);
	config_print(cfg, f);
	FZ_CHECK(fclose(f) == 0);
	char *nl = memchr(buf, '\n', n);
	FZ_CHECK(nl);
	size_t skip = (size_t)(nl + 1 - buf);
	memmove(buf, buf + skip, n - skip);
	*len = n - skip;
	return buf;
}

/* Loads text as a file; 0 when --check would accept it (validate) or when
 * it reads without error (!validate). */
static int fz_load(const void *text, size_t len, struct config *cfg, bool validate)
{
	char path[64];
	int fd = fz_file(text, len, path, sizeof(path));
	config_free(cfg); /* the sites of the input before */
	config_defaults(cfg);
	int before = reports;
	int rc = config_load_file(cfg, path);
	if (rc == 0 && validate)
		rc = config_validate(cfg);
	close(fd);
	FZ_CHECK(rc == 0 || rc == -1);
	FZ_CHECK(rc == 0 ? reports == before : reports == before + 1);
	return rc;
}

/* Whether every line fits libinih's line buffer (INI_MAX_LINE, newline and
 * NUL included). A longer value (a deep --root on the command line) is
 * legitimate but cannot load from a file: a known limit, not checked. */
static bool fz_lines_fit(const char *text, size_t len)
{
	size_t start = 0;
	for (size_t i = 0; i < len; i++) {
		if (text[i] != '\n')
			continue;
		if (i - start + 2 > INI_MAX_LINE)
			return false;
		start = i + 1;
	}
	return true;
}

/* What config_print writes, read back, prints the same. */
static void fz_round_trip(const struct config *cfg, bool validate)
{
	static struct config again;
	size_t len1, len2;
	char *out1 = fz_print(cfg, &len1);
	if (!fz_lines_fit(out1, len1)) {
		free(out1);
		return;
	}
	FZ_CHECK(fz_load(out1, len1, &again, validate) == 0);
	char *out2 = fz_print(&again, &len2);
	FZ_CHECK(len1 == len2 && memcmp(out1, out2, len1) == 0);
	free(out1);
	free(out2);
}

static void fz_set_lines(const uint8_t *data, size_t size)
{
	static struct config cfg;
	config_defaults(&cfg);
	char line[512];
	size_t start = 0;
	for (size_t i = 0; i <= size; i++) {
		if (i < size && data[i] != '\n')
			continue;
		size_t n = i - start;
		if (n < sizeof(line)) {
			memcpy(line, data + start, n);
			line[n] = '\0';
			char *eq = strchr(line, '=');
			if (eq) {
				*eq = '\0';
				int before = reports;
				int rc = config_set(&cfg, line, eq + 1, "--set");
				FZ_CHECK(rc == 0 ? reports == before : rc == -1 && reports == before + 1);
			}
		}
		start = i + 1;
	}
	/* whatever --set accepted, --check prints as a file that reads back */
	fz_round_trip(&cfg, false);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct config cfg;

	config_set_reporter(fz_report);
	fz_set_lines(data, size);
	if (fz_load(data, size, &cfg, true) == 0)
		fz_round_trip(&cfg, true);
	return 0;
}
