/* testserver.c - see testserver.h. */
#include "testserver.h"

#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void test_server_init(struct test_server *ts)
{
	memset(ts, 0, sizeof(*ts));
	strcpy(ts->dir, "/tmp/spindle-unit-XXXXXX");
	cr_assert_not_null(mkdtemp(ts->dir));
	config_defaults(&ts->cfg);
	strcpy(ts->cfg.root, ts->dir);
	ts->cfg.stats = false; /* no shared-memory segment: the counting hooks find no slot */
}

void test_server_file(struct test_server *ts, const char *name, const char *content, size_t len)
{
	char path[256];
	snprintf(path, sizeof(path), "%s/%s", ts->dir, name);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	cr_assert_geq(fd, 0, "%s", path);
	cr_assert_eq(write(fd, content, len), (ssize_t)len);
	close(fd);
}

void test_server_mkdir(struct test_server *ts, const char *name)
{
	char path[256];
	snprintf(path, sizeof(path), "%s/%s", ts->dir, name);
	cr_assert_eq(mkdir(path, 0755), 0, "%s", path);
}

void test_server_open(struct test_server *ts)
{
	cr_assert_eq(server_init(&ts->srv, &ts->cfg, NULL), 0);
	ts->open = true;
}

void test_server_close(struct test_server *ts)
{
	if (ts->open)
		server_close(&ts->srv);
	ts->open = false;
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", ts->dir);
	cr_assert_eq(system(cmd), 0);
}
