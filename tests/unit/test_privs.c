/* test_privs.c - what a process confined by privs_landlock may still do:
 * read beneath the root and the ACME webroot and write to the log
 * descriptors it already holds, and nothing else in the logs' directory (no
 * other file written or made, not even the log reopened by path). */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../src/config.h"
#include "../../src/privs.h"

static void put(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	cr_assert_geq(fd, 0, "%s: %s", path, strerror(errno));
	cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
}

/* Each check's failure is an exit status, so the confined child needs no
 * assertion machinery: 0 all held, else the number of the check broken. */
static int confined_child(const struct config *cfg, const char *dir)
{
	char p[512];
	snprintf(p, sizeof(p), "%s/logs/access.log", dir);
	int log_fd = open(p, O_WRONLY | O_APPEND | O_CLOEXEC); /* as the master hands it over */
	int root_fd = open(cfg->root, O_PATH | O_DIRECTORY | O_CLOEXEC);
	int acme_fd = open(cfg->acme_webroot, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (log_fd < 0 || root_fd < 0 || acme_fd < 0)
		return 10;
	if (privs_landlock(cfg, root_fd, acme_fd) != 0)
		return 11; /* this machine's kernel has Landlock: it must apply */
	if (write(log_fd, "line\n", 5) != 5)
		return 1; /* the log it holds */
	if (openat(root_fd, "page.html", O_RDONLY) < 0)
		return 2; /* the root */
	snprintf(p, sizeof(p), "%s/logs/other.log", dir);
	if (open(p, O_WRONLY | O_APPEND) >= 0 || errno != EACCES)
		return 3; /* another file beside the logs */
	snprintf(p, sizeof(p), "%s/logs/new.txt", dir);
	if (open(p, O_WRONLY | O_CREAT | O_EXCL, 0644) >= 0 || errno != EACCES)
		return 4; /* a new file there */
	snprintf(p, sizeof(p), "%s/logs/access.log", dir);
	if (open(p, O_WRONLY | O_APPEND) >= 0 || errno != EACCES)
		return 5; /* the log by path: only the master reopens */
	snprintf(p, sizeof(p), "%s/www/page.html", dir);
	if (open(p, O_WRONLY | O_APPEND) >= 0 || errno != EACCES)
		return 6; /* the root is read-only */
	if (openat(acme_fd, "token", O_RDONLY) < 0)
		return 7; /* a challenge file in the ACME webroot */
	if (openat(acme_fd, "token", O_WRONLY | O_APPEND) >= 0 || errno != EACCES)
		return 8; /* ... read-only too */
	if (openat(acme_fd, "new", O_WRONLY | O_CREAT | O_EXCL, 0644) >= 0 || errno != EACCES)
		return 9; /* ... where nothing is made */
	return 0;
}

Test(privs, landlock_leaves_nothing_writable_in_the_log_directory)
{
	char dir[] = "/tmp/spindle-landlock-XXXXXX", p[512];
	static struct config cfg;

	cr_assert_not_null(mkdtemp(dir));
	snprintf(p, sizeof(p), "%s/www", dir);
	cr_assert_eq(mkdir(p, 0755), 0);
	snprintf(p, sizeof(p), "%s/logs", dir);
	cr_assert_eq(mkdir(p, 0755), 0);
	snprintf(p, sizeof(p), "%s/www/page.html", dir);
	put(p, "hello\n");
	snprintf(p, sizeof(p), "%s/logs/access.log", dir);
	put(p, "");
	snprintf(p, sizeof(p), "%s/logs/other.log", dir);
	put(p, "untouched\n");
	snprintf(p, sizeof(p), "%s/acme", dir);
	cr_assert_eq(mkdir(p, 0755), 0);
	snprintf(p, sizeof(p), "%s/acme/token", dir);
	put(p, "token.thumbprint");

	config_defaults(&cfg);
	snprintf(cfg.root, sizeof(cfg.root), "%s/www", dir);
	snprintf(cfg.acme_webroot, sizeof(cfg.acme_webroot), "%s/acme", dir);
	snprintf(cfg.access_log, sizeof(cfg.access_log), "%s/logs/access.log", dir);
	snprintf(cfg.error_log, sizeof(cfg.error_log), "%s/logs/error.log", dir);
	snprintf(p, sizeof(p), "%s/logs/error.log", dir);
	put(p, "");
	cfg.landlock = true;

	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0)
		_exit(confined_child(&cfg, dir));
	int status;
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	/* the confined child cannot clean up: this process does */
	char cmd[600];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	cr_assert_eq(system(cmd), 0);
	cr_assert(WIFEXITED(status), "the confined child died: status %d", status);
	cr_assert_eq(WEXITSTATUS(status), 0, "check %d failed in the confined process (see the comments in "
		     "confined_child)", WEXITSTATUS(status));
}
