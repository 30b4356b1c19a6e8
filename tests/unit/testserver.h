/* testserver.h - a real struct server over a temporary document root, for
 * unit tests that drive the connection core (conn.h) or the site handler
 * (site/site.h) without sockets. */
#ifndef SPINDLE_TEST_TESTSERVER_H
#define SPINDLE_TEST_TESTSERVER_H

#include <stddef.h>

#include "../../src/config.h"
#include "../../src/server.h"

struct test_server {
	char dir[64];       /* the document root, removed by test_server_close() */
	struct config cfg;  /* defaults, stats off; adjust before test_server_open() */
	struct server srv;
	bool open;
};

/* Makes the root and fills cfg with defaults pointing at it. */
void test_server_init(struct test_server *ts);
/* Writes root/name (relative, parent directories must exist). */
void test_server_file(struct test_server *ts, const char *name, const char *content, size_t len);
void test_server_mkdir(struct test_server *ts, const char *name);
/* server_init() over ts->cfg. */
void test_server_open(struct test_server *ts);
void test_server_close(struct test_server *ts);

#endif
