/* file.c - confinement to the document root with openat2(2), and a checked
 * fallback where openat2 is missing (kernels before 5.6, valgrind). */
#include "file.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define OPEN_FLAGS (O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK)

static atomic_int openat2_missing;

/* Where an open descriptor really points, via /proc. */
static ssize_t fd_path(int fd, char *out, size_t cap)
{
	char link[32];
	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	ssize_t n = readlink(link, out, cap - 1);
	if (n >= 0)
		out[n] = '\0';
	return n;
}

/* Opens normally (the path is canonical, so only symlinks can lead astray),
 * then checks where the descriptor landed. */
static int open_checked(int root_fd, const char *rel, enum symlink_policy symlinks)
{
	char root[PATH_MAX], got[PATH_MAX];
	int fd = openat(root_fd, rel[0] ? rel : ".", OPEN_FLAGS);
	if (fd < 0)
		return -errno;
	if (symlinks == SYMLINKS_ALL)
		return fd;
	ssize_t rn = fd_path(root_fd, root, sizeof(root));
	ssize_t gn = fd_path(fd, got, sizeof(got));
	bool ok = rn > 0 && gn > 0;
	if (ok && symlinks == SYMLINKS_INSIDE) /* beneath the root, or the root itself */
		ok = strncmp(got, root, (size_t)rn) == 0 && (got[rn] == '/' || got[rn] == '\0' || rn == 1);
	if (ok && symlinks == SYMLINKS_OFF) /* no symlink anywhere: the path is what we asked for */
		ok = strncmp(got, root, (size_t)rn) == 0 &&
		     (rel[0] ? got[rn] == '/' && strcmp(got + rn + 1, rel) == 0 : got[rn] == '\0');
	if (!ok) {
		close(fd);
		return -EXDEV;
	}
	return fd;
}

int file_open_beneath(int root_fd, const char *rel, enum symlink_policy symlinks)
{
	struct open_how how = {
		/* O_NONBLOCK: opening a FIFO someone left in the root must not hang a worker. */
		.flags = OPEN_FLAGS,
		.resolve = RESOLVE_NO_MAGICLINKS,
	};

	if (atomic_load_explicit(&openat2_missing, memory_order_relaxed))
		return open_checked(root_fd, rel, symlinks);
	switch (symlinks) {
	case SYMLINKS_INSIDE:
		how.resolve |= RESOLVE_BENEATH;
		break;
	case SYMLINKS_OFF:
		how.resolve |= RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS;
		break;
	case SYMLINKS_ALL:
		/* the path itself is canonical, so only symlinks can lead out */
		break;
	}
	long fd = syscall(SYS_openat2, root_fd, rel[0] ? rel : ".", &how, sizeof(how));
	if (fd < 0 && errno == ENOSYS) {
		atomic_store(&openat2_missing, 1);
		return open_checked(root_fd, rel, symlinks);
	}
	return fd < 0 ? -errno : (int)fd;
}
