/* sidecar.h - precompressed sidecars on disk: the "<name>.br",
 * "<name>.zst" or "<name>.gz" that may be sent for <name>. */
#ifndef SPINDLE_FS_SIDECAR_H
#define SPINDLE_FS_SIDECAR_H

#include <stddef.h>
#include <sys/stat.h>
#include <time.h>

#include "file.h"
#include "../http/encoding.h"

#define SIDECAR_SUFFIX_MAX 8

/* Writes rel[0..len) + the coding's suffix into key (NUL-terminated; cap at
 * least len + SIDECAR_SUFFIX_MAX) and opens it beneath the root like any
 * file. Returns the fd (st filled), or -errno; -ESTALE when it is not a
 * regular file or is older than the original (orig_mtime): a sidecar left
 * behind by an edit would serve yesterday's page. */
int sidecar_open(int root_fd, enum symlink_policy symlinks, const char *rel, size_t len, enum content_coding coding,
		 time_t orig_mtime, char *key, struct stat *st);

/* The bitmask (1u << coding) of the configured codings whose sidecar is
 * usable now: one open per configured coding. */
unsigned sidecar_probe(int root_fd, enum symlink_policy symlinks, const char *rel, size_t len, time_t orig_mtime,
		       const struct encoding_prefs *prefs);

#endif
