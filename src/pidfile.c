/* pidfile.c - the master's pid file, locked for its life (see pidfile.h). */
#include "pidfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log/log.h"

#define PID_TEXT_MAX 24 /* "4194304\n" and then some */

/* The pid text holds: digits, then one newline or nothing; false for
 * anything else, including an empty file. */
static bool pid_text_parses(const char *buf, size_t n)
{
	size_t i = 0;
	while (i < n && buf[i] >= '0' && buf[i] <= '9')
		i++;
	return i > 0 && (i == n || (i + 1 == n && buf[i] == '\n'));
}

/* Reads the file's first bytes into buf (NUL-terminated); their count. */
static size_t read_head(int fd, char *buf, size_t len)
{
	ssize_t n = pread(fd, buf, len - 1, 0);
	buf[n > 0 ? n : 0] = '\0';
	return n > 0 ? (size_t)n : 0;
}

/* Whether fd (open on path) may become the pid file: root writes it and a
 * `kill $(cat FILE)` trusts it, so not another name of some file (a hard
 * link), not another user's file, nothing but a regular file, and never a
 * file that holds something else than a pid (a config file, a key, named by
 * mistake), which would be truncated, then deleted at exit. 0 or -1 after
 * logging why; the content is never quoted. */
static int pidfile_vet(const char *path, int fd)
{
	struct stat st;
	char buf[PID_TEXT_MAX + 1];

	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		log_error("pid_file: '%s' is not a regular file", path);
		return -1;
	}
	if (st.st_nlink > 1) {
		log_error("pid_file: '%s' has another name (a hard link): refusing it", path);
		return -1;
	}
	if (st.st_uid != geteuid()) {
		log_error("pid_file: '%s' belongs to another user (uid %d), who could put another process's id in "
			  "it: refusing it (remove it)", path, (int)st.st_uid);
		return -1;
	}
	if (st.st_size == 0)
		return 0;
	size_t n = st.st_size <= PID_TEXT_MAX ? read_head(fd, buf, sizeof(buf)) : 0;
	if (!pid_text_parses(buf, st.st_size <= PID_TEXT_MAX ? n : 0)) {
		log_error("pid_file: '%s' exists and does not hold a process id: refusing to overwrite it (is it the "
			  "right path? remove the file if it is a stale pid file)", path);
		return -1;
	}
	return 0;
}

int pidfile_check(const char *path)
{
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);

	if (fd < 0) {
		if (errno == ENOENT)
			return 0; /* created at start */
		log_error("pid_file: cannot open '%s': %s", path,
			  errno == ELOOP ? "it is a symbolic link, which is never followed" : strerror(errno));
		return -1;
	}
	int rc = pidfile_vet(path, fd);
	close(fd);
	return rc;
}

int pidfile_claim(const char *path)
{
	char buf[PID_TEXT_MAX + 1];
	/* root writes it: never through a link someone put there, and a FIFO
	 * must not block the master */
	int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);

	if (fd < 0) {
		log_error("pid_file: cannot open '%s': %s", path,
			  errno == ELOOP ? "it is a symbolic link, which is never followed"
			  : errno == ENXIO ? "it is not a regular file" : strerror(errno));
		return -1;
	}
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		size_t n = read_head(fd, buf, sizeof(buf));
		bool pid = pid_text_parses(buf, n);
		buf[strcspn(buf, "\n")] = '\0';
		log_error("pid_file: '%s' is held by another running spindle (master %s): not starting a second one "
			  "on it", path, pid ? buf : "?");
		goto fail;
	}
	if (pidfile_vet(path, fd) < 0)
		goto fail;
	int len = snprintf(buf, sizeof(buf), "%d\n", (int)getpid());
	if (ftruncate(fd, 0) < 0 || pwrite(fd, buf, (size_t)len, 0) != len) {
		log_error("pid_file: cannot write '%s': %s", path, strerror(errno));
		goto fail;
	}
	return fd;
fail:
	close(fd);
	return -1;
}

void pidfile_release(const char *path, int fd)
{
	if (fd < 0)
		return;
	/* unlinked while still locked: a new instance cannot claim it in between */
	unlink(path);
	close(fd);
}
