/* dirlist.c - a directory's entries for a listing, confined to the root. */
#include "dirlist.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "file.h"

/* A symlink is shown only when a request for it would be served: opened
 * beneath the root under the same policy, then described by what it opened. */
static bool symlink_target_stat(int root_fd, const char *rel, const char *name,
				enum symlink_policy symlinks, struct stat *st)
{
	char path[PATH_MAX];
	if (symlinks == SYMLINKS_OFF)
		return false;
	int n = snprintf(path, sizeof(path), "%s%s%s", rel, rel[0] ? "/" : "", name);
	if (n < 0 || (size_t)n >= sizeof(path))
		return false;
	int fd = file_open_beneath(root_fd, path, symlinks);
	if (fd < 0)
		return false;
	bool ok = fstat(fd, st) == 0;
	close(fd);
	return ok;
}

/* Grows *p (of *cap elements of size sz) to hold need elements. */
static int grow(void **p, size_t *cap, size_t need, size_t sz)
{
	if (need <= *cap)
		return 0;
	size_t ncap = *cap ? *cap * 2 : 64;
	while (ncap < need)
		ncap *= 2;
	void *q = realloc(*p, ncap * sz);
	if (!q)
		return -ENOMEM;
	*p = q;
	*cap = ncap;
	return 0;
}

int dirlist_read(int root_fd, const char *rel, enum symlink_policy symlinks, bool dotfiles,
		 size_t max_entries, struct dirlist *out)
{
	size_t ecap = 0, ncap = 0, nlen = 0;
	int err = 0;
	DIR *d = NULL;

	memset(out, 0, sizeof(*out));
	int fd = file_open_beneath(root_fd, rel, symlinks);
	if (fd < 0)
		return fd;
	d = fdopendir(fd);
	if (!d) {
		err = -errno;
		close(fd);
		return err;
	}
	size_t *name_off = NULL; /* offsets while the arena may still move */
	size_t ocap = 0;
	for (;;) {
		errno = 0;
		struct dirent *de = readdir(d);
		if (!de) {
			err = errno ? -errno : 0;
			break;
		}
		const char *name = de->d_name;
		if (name[0] == '.' && (!dotfiles || name[1] == '\0' || (name[1] == '.' && name[2] == '\0')))
			continue;
		struct stat st;
		if (fstatat(dirfd(d), name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue; /* gone since readdir */
		if (S_ISLNK(st.st_mode) && !symlink_target_stat(root_fd, rel, name, symlinks, &st))
			continue;
		if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode))
			continue; /* sockets, FIFOs, devices: never served, so not listed */
		if (out->n == max_entries) {
			out->truncated = true;
			break;
		}
		size_t len = strlen(name);
		if ((err = grow((void **)&out->entries, &ecap, out->n + 1, sizeof(*out->entries))) < 0 ||
		    (err = grow((void **)&name_off, &ocap, out->n + 1, sizeof(*name_off))) < 0 ||
		    (err = grow((void **)&out->names, &ncap, nlen + len + 1, 1)) < 0)
			break;
		memcpy(out->names + nlen, name, len + 1);
		name_off[out->n] = nlen;
		nlen += len + 1;
		out->entries[out->n++] = (struct dir_entry){
			.name_len = len,
			.is_dir = S_ISDIR(st.st_mode),
			.size = S_ISDIR(st.st_mode) ? 0 : (uint64_t)st.st_size,
			.mtime = st.st_mtime,
		};
	}
	closedir(d);
	if (err < 0)
		goto fail;
	for (size_t i = 0; i < out->n; i++)
		out->entries[i].name = out->names + name_off[i];
	free(name_off);
	return 0;
fail:
	free(name_off);
	dirlist_free(out);
	return err;
}

void dirlist_free(struct dirlist *dl)
{
	free(dl->entries);
	free(dl->names);
	memset(dl, 0, sizeof(*dl));
}
