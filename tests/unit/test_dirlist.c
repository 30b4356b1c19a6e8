/* test_dirlist.c - reading a directory for a listing: dotfiles, special
 * files and symlinks per policy, and the cap on entries. */
#include <criterion/criterion.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../src/fs/dirlist.h"

static char base[64];
static int root_fd = -1;

static void touch(const char *rel, const char *data)
{
	char p[256];
	snprintf(p, sizeof(p), "%s/%s", base, rel);
	FILE *f = fopen(p, "w");
	cr_assert(f);
	fputs(data, f);
	fclose(f);
}

static void setup(void)
{
	char p[256];
	strcpy(base, "/tmp/spindle-dirlist-XXXXXX");
	cr_assert(mkdtemp(base));
	snprintf(p, sizeof(p), "%s/www", base);
	mkdir(p, 0755);
	snprintf(p, sizeof(p), "%s/www/d", base);
	mkdir(p, 0755);
	touch("www/d/a.txt", "aaa");
	touch("www/d/.dot", "x");
	touch("outside.txt", "secret");
	snprintf(p, sizeof(p), "%s/www/d/sub", base);
	mkdir(p, 0755);
	snprintf(p, sizeof(p), "%s/www/d/fifo", base);
	cr_assert_eq(mkfifo(p, 0644), 0);
	snprintf(p, sizeof(p), "%s/www/d/in.txt", base);
	cr_assert_eq(symlink("a.txt", p), 0);
	snprintf(p, sizeof(p), "%s/www/d/out.txt", base);
	char target[128];
	snprintf(target, sizeof(target), "%s/outside.txt", base);
	cr_assert_eq(symlink(target, p), 0);
	snprintf(p, sizeof(p), "%s/www/d/dangling", base);
	cr_assert_eq(symlink("nowhere", p), 0);
	snprintf(p, sizeof(p), "%s/www", base);
	root_fd = open(p, O_PATH | O_DIRECTORY | O_CLOEXEC);
	cr_assert_geq(root_fd, 0);
}

static void teardown(void)
{
	char cmd[128];
	close(root_fd);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", base);
	cr_expect_eq(system(cmd), 0);
}

TestSuite(dirlist, .init = setup, .fini = teardown);

static const struct dir_entry *find(const struct dirlist *dl, const char *name)
{
	for (size_t i = 0; i < dl->n; i++)
		if (strcmp(dl->entries[i].name, name) == 0)
			return &dl->entries[i];
	return NULL;
}

Test(dirlist, what_is_listed)
{
	struct dirlist dl;
	cr_assert_eq(dirlist_read(root_fd, "d", SYMLINKS_INSIDE, false, 100, &dl), 0);
	cr_expect(!dl.truncated);
	const struct dir_entry *a = find(&dl, "a.txt"), *in = find(&dl, "in.txt"), *sub = find(&dl, "sub");
	cr_assert(a && in && sub);
	cr_expect(a->size == 3 && !a->is_dir);
	cr_expect(in->size == 3 && !in->is_dir, "a symlink inside the root shows its target");
	cr_expect(sub->is_dir && sub->size == 0);
	cr_expect(!find(&dl, ".dot"), "dotfiles hidden");
	cr_expect(!find(&dl, "fifo"), "special files are never listed");
	cr_expect(!find(&dl, "out.txt"), "a symlink out of the root is not listed under 'inside'");
	cr_expect(!find(&dl, "dangling"));
	cr_expect_eq(dl.n, 3);
	dirlist_free(&dl);

	cr_assert_eq(dirlist_read(root_fd, "d", SYMLINKS_OFF, true, 100, &dl), 0);
	cr_expect(find(&dl, ".dot") && !find(&dl, "in.txt") && !find(&dl, "out.txt"));
	dirlist_free(&dl);

	cr_assert_eq(dirlist_read(root_fd, "d", SYMLINKS_ALL, false, 100, &dl), 0);
	cr_expect(find(&dl, "in.txt") && find(&dl, "out.txt"));
	dirlist_free(&dl);
}

Test(dirlist, cap_on_entries)
{
	struct dirlist dl;
	cr_assert_eq(dirlist_read(root_fd, "d", SYMLINKS_INSIDE, false, 2, &dl), 0);
	cr_expect_eq(dl.n, 2);
	cr_expect(dl.truncated);
	dirlist_free(&dl);
	cr_assert_eq(dirlist_read(root_fd, "d", SYMLINKS_INSIDE, false, 3, &dl), 0);
	cr_expect(dl.n == 3 && !dl.truncated, "exactly the cap is not truncated");
	dirlist_free(&dl);
}

Test(dirlist, errors)
{
	struct dirlist dl;
	cr_expect_eq(dirlist_read(root_fd, "nope", SYMLINKS_INSIDE, false, 10, &dl), -ENOENT);
	cr_expect_eq(dirlist_read(root_fd, "d/a.txt", SYMLINKS_INSIDE, false, 10, &dl), -ENOTDIR);
	cr_assert_eq(dirlist_read(root_fd, "", SYMLINKS_INSIDE, false, 10, &dl), 0);
	cr_expect(dl.n == 1 && strcmp(dl.entries[0].name, "d") == 0);
	dirlist_free(&dl);
}
