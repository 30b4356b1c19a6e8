/* sidecar.c - finding precompressed sidecars beneath the root.
 * Confined exactly like the file they stand in for (file_open_beneath): a
 * sidecar that is a symlink out of the root is refused as the file would be. */
#include "sidecar.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "file.h"

int sidecar_open(int root_fd, enum symlink_policy symlinks, const char *rel, size_t len, enum content_coding coding,
		 time_t orig_mtime, char *key, struct stat *st)
{
	const char *suffix = encoding_suffix(coding);
	memcpy(key, rel, len);
	strcpy(key + len, suffix);
	int fd = file_open_beneath(root_fd, key, symlinks);
	if (fd < 0)
		return fd;
	if (fstat(fd, st) < 0) {
		int err = -errno;
		close(fd);
		return err;
	}
	/* gzip -k, brotli and zstd keep the original's mtime: equal is fresh */
	if (!S_ISREG(st->st_mode) || st->st_mtime < orig_mtime) {
		close(fd);
		return -ESTALE;
	}
	return fd;
}

unsigned sidecar_probe(int root_fd, enum symlink_policy symlinks, const char *rel, size_t len, time_t orig_mtime,
		       const struct encoding_prefs *prefs)
{
	char key[len + SIDECAR_SUFFIX_MAX];
	unsigned mask = 0;
	for (size_t i = 0; i < prefs->n; i++) {
		struct stat st;
		int fd = sidecar_open(root_fd, symlinks, rel, len, prefs->order[i], orig_mtime, key, &st);
		if (fd >= 0) {
			close(fd);
			mask |= 1u << prefs->order[i];
		}
	}
	return mask;
}
