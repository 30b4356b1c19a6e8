/* file.c - confinement to the document root with openat2(2), and a
 * component-by-component walk where openat2 is missing (kernels before 5.6,
 * valgrind, seccomp filters that answer ENOSYS). */
#include "file.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define OPEN_FLAGS (O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK)

static atomic_int openat2_missing;

#define OPENAT2_RETRIES 16

/* Path components of at most NAME_MAX bytes; the pending path (what is left
 * of rel, with symlink targets spliced in) fits in WALK_PATH_MAX. */
#define WALK_PATH_MAX (2 * PATH_MAX)
#define WALK_MAX_LINKS 40 /* as the kernel's MAXSYMLINKS: then ELOOP */

/* Opens the directory at resolved[0..len) ("" = the root) by walking it
 * again from the root, following nothing: every entry on it was a real
 * directory when it was pushed, and one swapped for a symlink since fails. */
static int walk_reopen(int root_fd, const char *resolved, size_t len)
{
	char comp[NAME_MAX + 1];
	int dir = openat(root_fd, ".", O_PATH | O_DIRECTORY | O_CLOEXEC);

	for (size_t i = 0; dir >= 0 && i < len;) {
		size_t j = i;
		while (j < len && resolved[j] != '/')
			j++;
		memcpy(comp, resolved + i, j - i);
		comp[j - i] = '\0';
		int next = openat(dir, comp, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		close(dir);
		dir = next;
		i = j + 1;
	}
	return dir < 0 ? -errno : dir;
}

/* Without openat2: walks rel one component at a time from the root with
 * O_PATH | O_NOFOLLOW, so the kernel never follows a symlink for us and
 * nothing outside the root is ever opened, not even to look at it (a device
 * node, an automount point, a FIFO). Symlinks are read and resolved here,
 * with openat2's RESOLVE_BENEATH rules: an absolute target or a ".." above
 * the root is refused (-EXDEV); under SYMLINKS_OFF every symlink is refused
 * (-ELOOP). Only the final file is opened for reading, with O_NOFOLLOW, from
 * the directory already known to be beneath the root. */
static int open_walk(int root_fd, const char *rel, enum symlink_policy symlinks)
{
	char pending[WALK_PATH_MAX], resolved[WALK_PATH_MAX], target[PATH_MAX];
	size_t plen = strlen(rel), rlen = 0;
	int links = 0, err;
	int dir = walk_reopen(root_fd, "", 0);

	if (dir < 0)
		return dir;
	if (plen >= PATH_MAX) { /* as the kernel, before looking at any component */
		err = -ENAMETOOLONG;
		goto fail;
	}
	memcpy(pending, rel, plen + 1);
	size_t pos = 0;
	while (pos < plen) {
		size_t end = pos;
		while (end < plen && pending[end] != '/')
			end++;
		size_t clen = end - pos;
		char comp[NAME_MAX + 1];
		if (clen > NAME_MAX) {
			err = -ENAMETOOLONG;
			goto fail;
		}
		memcpy(comp, pending + pos, clen);
		comp[clen] = '\0';
		/* a component followed by '/' must be a directory, even when only
		 * empty components follow ("file/" is ENOTDIR, as for the kernel) */
		bool need_dir = end < plen;
		pos = need_dir ? end + 1 : end;
		if (clen == 0 || strcmp(comp, ".") == 0)
			continue;
		if (strcmp(comp, "..") == 0) { /* only from a symlink target: rel is canonical */
			if (rlen == 0) {
				err = -EXDEV;
				goto fail;
			}
			while (rlen > 0 && resolved[rlen - 1] != '/')
				rlen--;
			if (rlen > 0)
				rlen--; /* the separator */
			close(dir);
			dir = walk_reopen(root_fd, resolved, rlen);
			if (dir < 0)
				return dir;
			continue;
		}
		int fd = openat(dir, comp, O_PATH | O_NOFOLLOW | O_CLOEXEC);
		struct stat st;
		if (fd < 0 || fstat(fd, &st) < 0) {
			err = -errno;
			if (fd >= 0)
				close(fd);
			goto fail;
		}
		if (S_ISLNK(st.st_mode)) {
			ssize_t n = symlinks == SYMLINKS_OFF ? -1 : readlinkat(fd, "", target, sizeof(target));
			close(fd);
			if (symlinks == SYMLINKS_OFF || ++links > WALK_MAX_LINKS) {
				err = -ELOOP;
				goto fail;
			}
			if (n < 0 || (size_t)n >= sizeof(target)) {
				err = n < 0 ? -errno : -ENAMETOOLONG;
				goto fail;
			}
			if (n == 0 || target[0] == '/') { /* RESOLVE_BENEATH refuses absolute links */
				err = -EXDEV;
				goto fail;
			}
			/* pending becomes target + what followed the link, its
			 * slash included: "link/" asks the target for a directory,
			 * "link" does not */
			size_t rest = plen - end;
			if ((size_t)n + rest >= sizeof(pending)) {
				err = -ENAMETOOLONG;
				goto fail;
			}
			memmove(pending + n, pending + end, rest + 1);
			memcpy(pending, target, (size_t)n);
			plen = (size_t)n + rest;
			pos = 0;
			continue;
		}
		if (S_ISDIR(st.st_mode)) {
			if (rlen + 1 + clen >= sizeof(resolved)) {
				close(fd);
				err = -ENAMETOOLONG;
				goto fail;
			}
			if (rlen > 0)
				resolved[rlen++] = '/';
			memcpy(resolved + rlen, comp, clen);
			rlen += clen;
			close(dir);
			dir = fd;
			continue;
		}
		close(fd);
		if (need_dir) {
			err = -ENOTDIR;
			goto fail;
		}
		/* A FIFO, socket or device node is never opened: only regular
		 * files are served, and opening a device may act on it (a tape
		 * rewinds, a terminal hangs up). */
		if (!S_ISREG(st.st_mode)) {
			err = -EACCES;
			goto fail;
		}
		/* the final file, from a directory beneath the root; O_NOFOLLOW:
		 * swapped for a symlink since the look, it is refused (ELOOP) */
		fd = openat(dir, comp, OPEN_FLAGS | O_NOFOLLOW);
		err = fd < 0 ? -errno : fd;
		close(dir);
		return err;
	}
	/* the path ends in a directory (maybe the root itself) */
	err = openat(dir, ".", OPEN_FLAGS);
	err = err < 0 ? -errno : err;
	close(dir);
	return err;
fail:
	close(dir);
	return err;
}

int file_open_walk(int root_fd, const char *rel, enum symlink_policy symlinks)
{
	if (symlinks != SYMLINKS_ALL)
		return open_walk(root_fd, rel, symlinks);
	/* the path is canonical: only symlinks could lead out, and they may */
	int fd = openat(root_fd, rel[0] ? rel : ".", OPEN_FLAGS);
	return fd < 0 ? -errno : fd;
}

int file_open_beneath(int root_fd, const char *rel, enum symlink_policy symlinks)
{
	struct open_how how = {
		/* O_NONBLOCK: opening a FIFO someone left in the root must not hang a worker. */
		.flags = OPEN_FLAGS,
		.resolve = RESOLVE_NO_MAGICLINKS,
	};

	if (atomic_load_explicit(&openat2_missing, memory_order_relaxed))
		return file_open_walk(root_fd, rel, symlinks);
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
	long fd;
	/* EAGAIN: a rename or mount somewhere on the system raced a ".." (from a
	 * symlink) under RESOLVE_BENEATH, and the kernel could not prove it stayed
	 * beneath; openat2(2) says to retry. Bounded, so a storm cannot hold us. */
	for (int tries = 0;; tries++) {
		fd = syscall(SYS_openat2, root_fd, rel[0] ? rel : ".", &how, sizeof(how));
		if (fd >= 0 || errno != EAGAIN || tries == OPENAT2_RETRIES)
			break;
	}
	if (fd < 0 && errno == ENOSYS) {
		atomic_store(&openat2_missing, 1);
		return file_open_walk(root_fd, rel, symlinks);
	}
	return fd < 0 ? -errno : (int)fd;
}
