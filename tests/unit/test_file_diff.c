/* test_file_diff.c - the openat2-less walk (file_open_walk) against the
 * kernel's own openat2(RESOLVE_BENEATH) on the same tree: for every path and
 * policy both must open the same inode or fail with the same errno. The tree
 * holds what a hostile document root could: symlink chains at the kernel's
 * limit, ".." after a symlink, links to files with a trailing slash, FIFOs,
 * sockets and device nodes, and paths past PATH_MAX. */
#include <criterion/criterion.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/fs.h>
#include <linux/openat2.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "../../src/fs/file.h"

static char base[64]; /* /tmp/spindle-test-diff-XXXXXX; base/root is the root */
static int root_fd = -1;

static void at(char *p, size_t cap, const char *rel)
{
	snprintf(p, cap, "%s/root/%s", base, rel);
}

static void mk(const char *kind, const char *rel, const char *arg)
{
	char p[PATH_MAX];
	at(p, sizeof(p), rel);
	int rc = 0;
	if (strcmp(kind, "file") == 0) {
		FILE *f = fopen(p, "w");
		cr_assert(f, "%s: %s", p, strerror(errno));
		fputs(arg, f);
		fclose(f);
	} else if (strcmp(kind, "dir") == 0) {
		rc = mkdir(p, 0755);
	} else if (strcmp(kind, "link") == 0) {
		rc = symlink(arg, p);
	} else if (strcmp(kind, "fifo") == 0) {
		rc = mkfifo(p, 0600);
	}
	cr_assert_eq(rc, 0, "%s %s: %s", kind, p, strerror(errno));
}

static void setup(void)
{
	char p[PATH_MAX];
	snprintf(base, sizeof(base), "/tmp/spindle-test-diff-XXXXXX");
	cr_assert(mkdtemp(base));
	snprintf(p, sizeof(p), "%s/root", base);
	cr_assert_eq(mkdir(p, 0755), 0);
	snprintf(p, sizeof(p), "%s/outside", base);
	cr_assert_eq(mkdir(p, 0755), 0);
	mk("file", "f", "F");
	mk("dir", "d", NULL);
	mk("file", "d/g", "G");
	mk("dir", "d/e", NULL);
	mk("file", "d/e/h", "H");
	mk("link", "l_f", "f");
	mk("link", "l_d", "d");
	mk("link", "l_de", "d/e");
	mk("link", "l_de_up", "l_de/..");        /* a symlink to a directory, then .. */
	mk("link", "l_de_up_g", "l_de/../g");
	mk("link", "d/l_root", "..");
	mk("link", "d/e/l_root2", "../..");
	mk("link", "d/l_above", "../..");
	mk("link", "d/l_sib", "../f");
	mk("link", "l_abs", "/etc");
	mk("link", "l_dot", ".");
	mk("link", "l_dtrail", "d/");
	mk("link", "l_ftrail", "f/");            /* a file named as a directory: ENOTDIR */
	mk("link", "l_fsub", "f/x");
	mk("link", "l_dslash", "d//g");
	mk("link", "l_loop", "l_loop");
	mk("link", "l_missing", "nothing");
	mk("link", "l_up_in", "d/../f");
	mk("link", "l_out", "../outside");
	mk("fifo", "p", NULL);
	mk("link", "l_p", "p");
	/* c0 -> c1 -> ... -> c40 -> f: opening c1 follows 40 links, c0 41 */
	for (int i = 0; i <= 40; i++) {
		char name[16], target[16];
		snprintf(name, sizeof(name), "c%d", i);
		snprintf(target, sizeof(target), i == 40 ? "f" : "c%d", i + 1);
		mk("link", name, target);
	}
	/* a socket and (as root) a device node: never to be opened for reading */
	at(p, sizeof(p), "s");
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	cr_assert_lt(strlen(p), sizeof(sun.sun_path));
	strcpy(sun.sun_path, p);
	int s = socket(AF_UNIX, SOCK_STREAM, 0);
	cr_assert_eq(bind(s, (struct sockaddr *)&sun, sizeof(sun)), 0, "%s", strerror(errno));
	close(s);
	at(p, sizeof(p), "null");
	if (mknod(p, S_IFCHR | 0644, makedev(1, 3)) < 0)
		mk("fifo", "null", NULL); /* not root: a FIFO stands in */

	snprintf(p, sizeof(p), "%s/root", base);
	root_fd = open(p, O_PATH | O_DIRECTORY | O_CLOEXEC);
	cr_assert_geq(root_fd, 0);
}

static void teardown(void)
{
	char cmd[PATH_MAX + 16];
	close(root_fd);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", base);
	cr_assert_eq(system(cmd), 0);
}

TestSuite(file_diff, .init = setup, .fini = teardown);

static int kernel_open(const char *rel, enum symlink_policy pol)
{
	struct open_how how = {
		.flags = O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK,
		.resolve = RESOLVE_NO_MAGICLINKS | RESOLVE_BENEATH | (pol == SYMLINKS_OFF ? RESOLVE_NO_SYMLINKS : 0),
	};
	long fd;
	/* EAGAIN: a rename elsewhere on the machine raced a ".."; retry, as the server does */
	for (int tries = 0; tries < 100; tries++) {
		fd = syscall(SYS_openat2, root_fd, rel[0] ? rel : ".", &how, sizeof(how));
		if (fd >= 0 || errno != EAGAIN)
			break;
	}
	return fd < 0 ? -errno : (int)fd;
}

static bool special(int fd)
{
	struct stat st;
	return fstat(fd, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode);
}

/* Same inode, or the same errno. A FIFO, socket or device the kernel would
 * open (or fail to open, a socket: ENXIO) the walk refuses without opening it
 * (-EACCES): the server serves regular files only, and opening a device may
 * act on it. */
static void same(const char *rel, enum symlink_policy pol)
{
	int want = kernel_open(rel, pol);
	if (want == -ENOSYS)
		cr_skip_test("no openat2 on this kernel");
	int got = file_open_walk(root_fd, rel, pol);
	const char *shown = strlen(rel) > 60 ? "(a long path)" : rel;
	if ((want >= 0 && special(want)) || want == -ENXIO /* a socket */) {
		cr_expect_eq(got, -EACCES, "%s (policy %d): walk gave %d, want -EACCES for a special file", shown,
			     pol, got);
	} else if (want >= 0) {
		struct stat a, b;
		cr_expect_geq(got, 0, "%s (policy %d): kernel opened it, walk gave %s", shown, pol, strerror(-got));
		if (got >= 0) {
			cr_assert_eq(fstat(want, &a), 0);
			cr_assert_eq(fstat(got, &b), 0);
			cr_expect(a.st_ino == b.st_ino && a.st_dev == b.st_dev, "%s (policy %d): another file", shown,
				  pol);
		}
	} else {
		cr_expect_eq(got, want, "%s (policy %d): walk gave %s, kernel %s", shown, pol,
			     got >= 0 ? "an fd" : strerror(-got), strerror(-want));
	}
	if (want >= 0)
		close(want);
	if (got >= 0)
		close(got);
}

static const char *const paths[] = {
	"", "f", "d", "d/g", "d/e", "d/e/h", "d//g", "d/./g", "f/", "d/", "d/g/", "f/x", "nothing", "d/nothing/x",
	"l_f", "l_f/", "l_d", "l_d/", "l_d/g", "l_de", "l_de/h", "l_de_up", "l_de_up/g", "l_de_up_g", "d/l_root",
	"d/l_root/f", "d/e/l_root2/f", "d/l_above", "d/l_above/root/f", "d/l_sib", "l_abs", "l_dot", "l_dot/f",
	"l_dot/l_dot/d/g", "l_dtrail", "l_dtrail/g", "l_ftrail", "l_ftrail/", "l_fsub", "l_dslash", "l_loop",
	"l_missing", "l_up_in", "l_out", "l_out/x", "c0", "c1", "c2", "c40", "p", "p/", "p/x", "l_p", "s", "s/",
	"null", "null/x",
};

Test(file_diff, walk_matches_openat2_beneath)
{
	for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
		same(paths[i], SYMLINKS_INSIDE);
		same(paths[i], SYMLINKS_OFF);
	}
}

/* A path of PATH_MAX bytes or more: the kernel says ENAMETOOLONG before it
 * looks at any component; so must the walk, even when the components exist. */
Test(file_diff, paths_past_path_max)
{
	char rel[PATH_MAX + 64];
	size_t n = 0;
	n += (size_t)snprintf(rel + n, sizeof(rel) - n, "d");
	while (n < PATH_MAX + 8)
		n += (size_t)snprintf(rel + n, sizeof(rel) - n, "/.");
	snprintf(rel + n, sizeof(rel) - n, "/g");
	same(rel, SYMLINKS_INSIDE);
	same(rel, SYMLINKS_OFF);
	/* just under the limit it opens */
	n = (size_t)snprintf(rel, sizeof(rel), "d");
	while (n < PATH_MAX - 16)
		n += (size_t)snprintf(rel + n, sizeof(rel) - n, "/.");
	snprintf(rel + n, sizeof(rel) - n, "/g");
	same(rel, SYMLINKS_INSIDE);
}

/* A directory on the path swapped, again and again, with a symlink leading
 * out of the root (rename(2) with RENAME_EXCHANGE, as a local attacker who
 * can write the root would): the walk may fail, never open what lies outside. */
static atomic_bool swapping;

static void *swap_loop(void *arg)
{
	(void)arg;
	for (int i = 0; i < 200000 && atomic_load(&swapping); i++)
		syscall(SYS_renameat2, root_fd, "d", root_fd, "swap", RENAME_EXCHANGE);
	return NULL;
}

Test(file_diff, directory_swapped_for_a_symlink_during_the_walk)
{
	char p[PATH_MAX];
	snprintf(p, sizeof(p), "%s/outside/e", base);
	cr_assert_eq(mkdir(p, 0755), 0);
	const char *secrets[] = { "outside/g", "outside/e/h" };
	for (int i = 0; i < 2; i++) {
		snprintf(p, sizeof(p), "%s/%s", base, secrets[i]);
		FILE *f = fopen(p, "w");
		cr_assert(f);
		fputs("SECRET", f);
		fclose(f);
	}
	mk("link", "swap", "../outside");
	static const char *const rels[] = { "d/g", "d/e/h", "l_de_up_g", "d/e/l_root2/f" };
	pthread_t t;
	atomic_store(&swapping, true);
	cr_assert_eq(pthread_create(&t, NULL, swap_loop, NULL), 0);
	int opened = 0;
	int64_t until = (int64_t)time(NULL) + 3;
	for (int i = 0; i < 20000 && time(NULL) < until; i++) {
		for (size_t k = 0; k < sizeof(rels) / sizeof(rels[0]); k++) {
			for (int j = 0; j < 2; j++) {
				enum symlink_policy pol = j ? SYMLINKS_OFF : SYMLINKS_INSIDE;
				int fd = file_open_walk(root_fd, rels[k], pol);
				if (fd < 0)
					continue;
				char got[16] = { 0 };
				ssize_t n = read(fd, got, sizeof(got) - 1);
				close(fd);
				opened++;
				if (n > 0 && strcmp(got, "SECRET") == 0) {
					atomic_store(&swapping, false);
					pthread_join(t, NULL);
					cr_assert_fail("%s (policy %d) opened a file outside the root", rels[k], (int)pol);
				}
			}
		}
	}
	atomic_store(&swapping, false);
	pthread_join(t, NULL);
	cr_log_info("%d opens beneath the root while swapping", opened);
}
