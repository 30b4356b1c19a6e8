/* file.h - open a canonical root-relative path beneath the document root. */
#ifndef SPINDLE_FS_FILE_H
#define SPINDLE_FS_FILE_H

/* Which symlinks a path may follow beneath the root (server.conf's symlinks). */
enum symlink_policy {
	SYMLINKS_INSIDE, /* follow only symlinks that resolve inside the root (default) */
	SYMLINKS_ALL,    /* follow any symlink */
	SYMLINKS_OFF,    /* refuse every symlink */
};

/* Opens rel ("" = the root itself) read-only beneath root_fd, never leaving
 * it: openat2(RESOLVE_BENEATH) refuses ".." and absolute or escaping
 * symlinks per the policy. Returns an fd or -errno (-EXDEV or -ELOOP for a
 * refused symlink). */
int file_open_beneath(int root_fd, const char *rel, enum symlink_policy symlinks);

/* The fallback where openat2 is missing, exposed so that tests can run it
 * on any kernel: same contract as file_open_beneath. */
int file_open_walk(int root_fd, const char *rel, enum symlink_policy symlinks);

#endif
