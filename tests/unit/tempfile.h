/* tempfile.h - a file holding given text, for tests of code that reads files
 * by name (server.conf, a types file). The caller unlinks it. */
#ifndef SPINDLE_TEST_TEMPFILE_H
#define SPINDLE_TEST_TEMPFILE_H

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Writes text to a new /tmp/spindle-<what>-XXXXXX; its name goes to path. */
static inline void temp_file_with(const char *what, const char *text, char *path, size_t cap)
{
	snprintf(path, cap, "/tmp/spindle-%s-XXXXXX", what);
	int fd = mkstemp(path);
	cr_assert_geq(fd, 0);
	cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
}

#endif
