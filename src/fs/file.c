/* file.c - confinement to the document root with openat2(2). */
#include "file.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/syscall.h>
#include <unistd.h>

int file_open_beneath(int root_fd, const char *rel, enum symlink_policy symlinks)
{
	struct open_how how = {
		/* O_NONBLOCK: opening a FIFO someone left in the root must not hang a worker. */
		.flags = O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK,
		.resolve = RESOLVE_NO_MAGICLINKS,
	};

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
	return fd < 0 ? -errno : (int)fd;
}
