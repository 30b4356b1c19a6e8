/* test_file.c - the openat2-less fallback of file_open_beneath:
 * it must refuse what the policy refuses and never open anything that is not
 * beneath the root, not even to look where it leads. An inotify watch on the
 * outside directory sees every open there. */
#include <criterion/criterion.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../src/fs/file.h"

static char base[64]; /* /tmp/spindle-test-file-XXXXXX */
static int root_fd = -1, watch_fd = -1;

static void put(const char *rel, const char *data)
{
	char p[PATH_MAX];
	snprintf(p, sizeof(p), "%s/%s", base, rel);
	FILE *f = fopen(p, "w");
	cr_assert(f, "%s: %s", p, strerror(errno));
	fputs(data, f);
	fclose(f);
}

static void mkdir_in(const char *rel)
{
	char p[PATH_MAX];
	snprintf(p, sizeof(p), "%s/%s", base, rel);
	cr_assert_eq(mkdir(p, 0755), 0);
}

static void link_in(const char *target, const char *rel)
{
	char p[PATH_MAX];
	snprintf(p, sizeof(p), "%s/%s", base, rel);
	cr_assert_eq(symlink(target, p), 0);
}

/* base/root is the document root; base/out lies outside it. */
static void setup(void)
{
	snprintf(base, sizeof(base), "/tmp/spindle-test-file-XXXXXX");
	cr_assert(mkdtemp(base));
	mkdir_in("root");
	mkdir_in("root/sub");
	mkdir_in("out");
	put("root/a.txt", "A");
	put("root/sub/b.txt", "B");
	put("out/secret.txt", "SECRET");
	char fifo[PATH_MAX];
	snprintf(fifo, sizeof(fifo), "%s/out/fifo", base);
	cr_assert_eq(mkfifo(fifo, 0600), 0);
	char abs_secret[PATH_MAX];
	snprintf(abs_secret, sizeof(abs_secret), "%s/out/secret.txt", base);
	link_in("a.txt", "root/in.txt");                /* inside */
	link_in("../a.txt", "root/sub/up.txt");         /* inside, via .. */
	link_in("sub", "root/subdir");                  /* directory, inside */
	link_in("in.txt", "root/chain.txt");            /* link to a link, inside */
	link_in("../out/secret.txt", "root/escape.txt");/* relative, outside */
	link_in(abs_secret, "root/abs.txt");            /* absolute, outside */
	link_in("../out", "root/outdir");               /* directory, outside */
	link_in("../out/fifo", "root/fifo");            /* a FIFO outside */
	link_in("loop", "root/loop");                   /* itself */
	link_in("..", "root/sub/parent");               /* the root, from sub */
	link_in("../..", "root/sub/above");             /* above the root */

	char p[PATH_MAX];
	snprintf(p, sizeof(p), "%s/root", base);
	root_fd = open(p, O_PATH | O_DIRECTORY | O_CLOEXEC);
	cr_assert_geq(root_fd, 0);
	watch_fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	cr_assert_geq(watch_fd, 0);
	snprintf(p, sizeof(p), "%s/out", base);
	cr_assert_geq(inotify_add_watch(watch_fd, p, IN_OPEN), 0);
}

static void teardown(void)
{
	char cmd[PATH_MAX + 16];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", base);
	cr_assert_eq(system(cmd), 0);
}

/* How many opens the watch saw in the outside directory. */
static int outside_opens(void)
{
	char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
	int n = 0;
	ssize_t len;
	while ((len = read(watch_fd, buf, sizeof(buf))) > 0)
		for (char *p = buf; p < buf + len; p += sizeof(struct inotify_event) + ((struct inotify_event *)p)->len)
			n++;
	return n;
}

static void expect_body(const char *rel, enum symlink_policy pol, const char *want)
{
	int fd = file_open_walk(root_fd, rel, pol);
	cr_assert_geq(fd, 0, "%s: %s", rel, strerror(-fd));
	char got[64] = { 0 };
	cr_assert_eq(read(fd, got, sizeof(got) - 1), (ssize_t)strlen(want), "%s", rel);
	cr_assert_str_eq(got, want, "%s", rel);
	close(fd);
}

static void expect_dir(const char *rel, enum symlink_policy pol)
{
	int fd = file_open_walk(root_fd, rel, pol);
	cr_assert_geq(fd, 0, "%s: %s", rel, strerror(-fd));
	struct stat st;
	cr_assert_eq(fstat(fd, &st), 0);
	cr_assert(S_ISDIR(st.st_mode), "%s", rel);
	close(fd);
}

static void expect_refused(const char *rel, enum symlink_policy pol)
{
	int fd = file_open_walk(root_fd, rel, pol);
	if (fd >= 0)
		close(fd);
	cr_assert(fd == -EXDEV || fd == -ELOOP, "%s: got %d, want -EXDEV or -ELOOP", rel, fd);
	cr_assert_eq(outside_opens(), 0, "%s: something outside the root was opened", rel);
}

TestSuite(file_walk, .init = setup, .fini = teardown);

Test(file_walk, plain_files_and_directories)
{
	expect_body("a.txt", SYMLINKS_INSIDE, "A");
	expect_body("sub/b.txt", SYMLINKS_OFF, "B");
	expect_dir("", SYMLINKS_INSIDE);
	expect_dir("sub", SYMLINKS_OFF);
	cr_assert_eq(file_open_walk(root_fd, "nope.txt", SYMLINKS_INSIDE), -ENOENT);
	cr_assert_eq(file_open_walk(root_fd, "a.txt/x", SYMLINKS_INSIDE), -ENOTDIR);
	cr_assert_eq(outside_opens(), 0);
}

Test(file_walk, inside_policy_follows_links_that_stay_inside)
{
	expect_body("in.txt", SYMLINKS_INSIDE, "A");
	expect_body("sub/up.txt", SYMLINKS_INSIDE, "A");
	expect_body("subdir/b.txt", SYMLINKS_INSIDE, "B");
	expect_body("chain.txt", SYMLINKS_INSIDE, "A");
	expect_body("sub/parent/a.txt", SYMLINKS_INSIDE, "A");
	expect_dir("sub/parent", SYMLINKS_INSIDE);
	cr_assert_eq(outside_opens(), 0);
}

Test(file_walk, inside_policy_refuses_links_out_without_opening_them)
{
	expect_refused("escape.txt", SYMLINKS_INSIDE);
	expect_refused("abs.txt", SYMLINKS_INSIDE);
	expect_refused("outdir/secret.txt", SYMLINKS_INSIDE);
	expect_refused("outdir", SYMLINKS_INSIDE);
	expect_refused("fifo", SYMLINKS_INSIDE);
	expect_refused("sub/above/out/secret.txt", SYMLINKS_INSIDE);
	expect_refused("loop", SYMLINKS_INSIDE);
}

Test(file_walk, off_policy_refuses_every_link)
{
	expect_refused("in.txt", SYMLINKS_OFF);
	expect_refused("subdir/b.txt", SYMLINKS_OFF);
	expect_refused("escape.txt", SYMLINKS_OFF);
	expect_refused("fifo", SYMLINKS_OFF);
	expect_refused("outdir/secret.txt", SYMLINKS_OFF);
}

Test(file_walk, all_policy_follows_anywhere)
{
	expect_body("escape.txt", SYMLINKS_ALL, "SECRET");
	expect_body("in.txt", SYMLINKS_ALL, "A");
}
