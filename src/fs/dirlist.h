/* dirlist.h - read a directory beneath the document root into a list of
 * entries (name, type, size, mtime) for a listing. Does I/O; what is done
 * with the list (sorting, HTML, JSON) lives in http/autoindex.c. */
#ifndef SPINDLE_FS_DIRLIST_H
#define SPINDLE_FS_DIRLIST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "file.h"

struct dir_entry {
	const char *name;     /* NUL-terminated, in the list's name arena */
	size_t name_len;
	bool is_dir;
	uint64_t size;
	time_t mtime;
};

struct dirlist {
	struct dir_entry *entries;
	size_t n;
	bool truncated;       /* the directory had more than max_entries to show */
	char *names;          /* arena the entries' names point into */
};

/* Reads the directory rel ("" = the root) beneath root_fd. Dotfiles are left
 * out unless dotfiles; symlinks are shown as what they point to, and only
 * when the policy would let a request follow them (a refused or dangling one
 * is left out, as it could not be fetched). At most max_entries are kept (in
 * the order the file system returns them), so memory stays bounded whatever
 * the directory holds. Returns 0 or -errno; on success free with
 * dirlist_free. */
int dirlist_read(int root_fd, const char *rel, enum symlink_policy symlinks, bool dotfiles,
		 size_t max_entries, struct dirlist *out);
void dirlist_free(struct dirlist *dl);

#endif
