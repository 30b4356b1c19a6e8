/* pidfile.c - the master's pid file, locked for its life (see pidfile.h). */
#include "pidfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log/log.h"

int pidfile_claim(const char *path)
{
	char buf[32];
	struct stat st;
	/* root writes it: never through a link someone put there */
	int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);

	if (fd < 0) {
		log_error("pid_file: cannot open '%s': %s", path,
			  errno == ELOOP ? "it is a symbolic link, which is never followed" : strerror(errno));
		return -1;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		log_error("pid_file: '%s' is not a regular file", path);
		goto fail;
	}
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
		buf[n > 0 ? n : 0] = '\0';
		buf[strcspn(buf, "\n")] = '\0';
		log_error("pid_file: '%s' is held by another running spindle (master %s): not starting a second one "
			  "on it", path, buf[0] ? buf : "?");
		goto fail;
	}
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
