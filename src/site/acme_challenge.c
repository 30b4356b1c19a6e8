/* acme_challenge.c - which requests are ACME HTTP-01 challenges, and the
 * opening of their files beneath acme_webroot (see acme_challenge.h). */
#include "acme_challenge.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../fs/file.h"
#include "../fs/path.h"

#define PREFIX ACME_CHALLENGE_DIR "/"
#define PREFIX_LEN (sizeof(PREFIX) - 1)
#define CANON_MAX 4096 /* as the site handler resolves paths */

static int token_char(unsigned char ch)
{
	return (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '_' ||
	       ch == '-';
}

enum acme_match acme_challenge_match(struct span path, char *rel, size_t cap)
{
	char canon[CANON_MAX];
	struct path_result pr;

	/* A path that does not resolve (bad escape, ".." above the root, too
	 * long) is the site's to refuse, with the status it gives. */
	if (path_resolve(path, canon, sizeof(canon), &pr) < 0)
		return ACME_NOT_CHALLENGE;
	if (pr.len == PREFIX_LEN - 1 && memcmp(canon, PREFIX, PREFIX_LEN - 1) == 0)
		return ACME_NO_TOKEN; /* the directory itself: no listing */
	if (pr.len < PREFIX_LEN || memcmp(canon, PREFIX, PREFIX_LEN) != 0)
		return ACME_NOT_CHALLENGE;
	const char *token = canon + PREFIX_LEN;
	size_t n = pr.len - PREFIX_LEN;
	if (pr.trailing_slash || n == 0 || n > ACME_TOKEN_MAX || cap < PREFIX_LEN + n + 1)
		return ACME_NO_TOKEN;
	for (size_t i = 0; i < n; i++)
		if (!token_char((unsigned char)token[i]))
			return ACME_NO_TOKEN; /* a '/', a dot (sidecars, ".."), anything else */
	memcpy(rel, canon, PREFIX_LEN + n);
	rel[PREFIX_LEN + n] = '\0';
	return ACME_TOKEN;
}

int acme_challenge_open(int webroot_fd, const char *rel, struct stat *st)
{
	/* symlinks may not lead out of the webroot: only the ACME client
	 * writes there, and it writes plain files */
	int fd = file_open_beneath(webroot_fd, rel, SYMLINKS_INSIDE);
	if (fd < 0)
		return fd;
	if (fstat(fd, st) < 0 || !S_ISREG(st->st_mode)) {
		close(fd);
		return -ENOENT; /* a directory or FIFO named like a token: nothing to serve */
	}
	return fd;
}
