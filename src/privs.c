/* privs.c - user/group drop and Landlock for serving processes (see privs.h). */
#include "privs.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <grp.h>
#include <linux/landlock.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "log/log.h"
#include "sanitizers.h"

int privs_resolve(const struct config *cfg, struct privs *p)
{
	*p = (struct privs){ 0 };
	if (cfg->user[0]) {
		struct passwd *pw = getpwnam(cfg->user);
		if (!pw) {
			log_error("user: no user '%s'", cfg->user);
			return -1;
		}
		p->set_uid = p->set_gid = true;
		p->uid = pw->pw_uid;
		p->gid = pw->pw_gid; /* the login group, unless `group` says otherwise */
	}
	if (cfg->group[0]) {
		struct group *gr = getgrnam(cfg->group);
		if (!gr) {
			log_error("group: no group '%s'", cfg->group);
			return -1;
		}
		p->set_gid = true;
		p->gid = gr->gr_gid;
	}
	if ((p->set_uid && p->uid != geteuid()) || (p->set_gid && p->gid != getegid())) {
		if (geteuid() != 0) {
			log_error("user/group: changing to %s%s%s needs root (spindle runs as uid %d)", cfg->user,
				  cfg->group[0] ? ":" : "", cfg->group, (int)geteuid());
			return -1;
		}
	}
	return 0;
}

/* The directory part of path ("." for a bare name). */
static void dir_of(const char *path, char *dir, size_t len)
{
	const char *slash = strrchr(path, '/');
	if (!slash)
		snprintf(dir, len, ".");
	else
		snprintf(dir, len, "%.*s", slash == path ? 1 : (int)(slash - path), path);
}

/* Whoever may replace a directory on the way to a file root opens (a log,
 * the pid file) may put a link there that root would follow at the next
 * reopen, start or reload: every user, a group (its members), or the serving
 * user (below). So every directory the path's names are looked up in is
 * checked, from / down to the file's own. A symbolic link on the way
 * (/var/run -> /run) is followed as the open would follow it, and the
 * directories of its target are checked alike: refusing every link would
 * refuse such ordinary set-ups, and a link in a directory that passed can
 * only be replaced by root. A sticky directory lets nobody but its owner
 * replace another's entry, and a link put in place of a missing file is
 * refused at the open (log.c, pidfile.c). */
typedef bool (*dir_rule_fn)(const char *key, const char *path, const char *dir, const char *user);

#define WALK_MAX_LINKS 40 /* the kernel's own limit for one path */

static bool each_dir_on_path(const char *key, const char *path, const char *user, dir_rule_fn refused)
{
	char cur[PATH_MAX] = "/", checked[PATH_MAX] = "", rest[2 * PATH_MAX], next[PATH_MAX + NAME_MAX + 2];
	int links = 0;

	if (path[0] == '/') {
		snprintf(rest, sizeof(rest), "%s", path);
	} else { /* the working directory is already resolved: walk it too */
		char cwd[PATH_MAX];
		if (!getcwd(cwd, sizeof(cwd)))
			return false;
		snprintf(rest, sizeof(rest), "%s/%s", cwd, path);
	}
	const char *p = rest;
	for (;;) {
		p += strspn(p, "/");
		size_t n = strcspn(p, "/");
		if (n == 0 || n > NAME_MAX)
			return false; /* a path ending in '/', or a name too long: the open says why */
		const char *after = p + n;
		if (strcmp(cur, checked) != 0) {
			if (refused(key, path, cur, user))
				return true;
			memcpy(checked, cur, sizeof(checked));
		}
		if (after[strspn(after, "/")] == '\0')
			return false; /* the file itself: the open refuses a link there */
		if (n == 1 && p[0] == '.') {
			p = after;
			continue;
		}
		if (n == 2 && p[0] == '.' && p[1] == '.') {
			char up[PATH_MAX];
			dir_of(cur, up, sizeof(up));
			memcpy(cur, up, sizeof(cur));
			p = after;
			continue;
		}
		snprintf(next, sizeof(next), "%s%s%.*s", cur, strcmp(cur, "/") ? "/" : "", (int)n, p);
		struct stat st;
		if (strlen(next) >= PATH_MAX || lstat(next, &st) < 0)
			return false; /* the open says why */
		if (S_ISLNK(st.st_mode)) {
			char target[PATH_MAX], joined[2 * PATH_MAX];
			ssize_t t = readlink(next, target, sizeof(target) - 1);
			if (++links > WALK_MAX_LINKS || t <= 0)
				return false;
			target[t] = '\0';
			if (target[0] == '/')
				snprintf(cur, sizeof(cur), "/");
			if ((size_t)snprintf(joined, sizeof(joined), "%s%s", target, after) >= sizeof(joined))
				return false;
			memcpy(rest, joined, sizeof(rest));
			p = rest;
			continue;
		}
		if (!S_ISDIR(st.st_mode))
			return false;
		memcpy(cur, next, sizeof(cur));
		p = after;
	}
}

static bool dir_open_to_others(const char *key, const char *path, const char *dir, const char *user)
{
	struct stat st;

	(void)user;
	if (stat(dir, &st) < 0)
		return false; /* the open says why */
	if ((st.st_mode & S_IWOTH) && !(st.st_mode & S_ISVTX)) {
		log_error("%s: %s: the directory %s on its path is writable by every user (and not sticky), who "
			  "could replace the file with a link: refusing it", key, path, dir);
		return true;
	}
	if ((st.st_mode & S_IWGRP) && !(st.st_mode & S_ISVTX)) {
		struct group *gr = getgrgid(st.st_gid);
		char gid[16];
		snprintf(gid, sizeof(gid), "%d", (int)st.st_gid);
		log_error("%s: %s: the directory %s on its path is writable by group '%s' (and not sticky), whose "
			  "members could replace the file with a link: refusing it (make the directory root's, mode "
			  "0755)", key, path, dir, gr ? gr->gr_name : gid);
		return true;
	}
	return false;
}

static bool open_to_others(const char *key, const char *path)
{
	return each_dir_on_path(key, path, NULL, dir_open_to_others);
}

/* In a process that became the serving user: may it replace a directory
 * on the path, or make it writable (it owns it)? */
static bool dir_open_to_user(const char *key, const char *path, const char *dir, const char *user)
{
	struct stat st;

	if (stat(dir, &st) < 0)
		return false;
	bool writable = access(dir, W_OK) == 0;
	if (st.st_uid != geteuid()) { /* its own: it may make it writable */
		if (!writable)
			return false;
		if (st.st_mode & S_ISVTX)
			return false; /* sticky, not its own: it may not touch root's entries */
	}
	log_error("%s: %s: the directory %s on its path is %s the serving user '%s', who could replace the file "
		  "with a link for the master (root) to open: refusing it (make the directory root's, mode 0755)",
		  key, path, dir, writable ? "writable by" : "owned by", user);
	return true;
}

static bool open_to_user(const char *key, const char *path, const char *user)
{
	return each_dir_on_path(key, path, user, dir_open_to_user);
}

/* What the serving user (p) may do: every check that needs its rights, in
 * a child that becomes it. */
static int check_as_user(const struct config *cfg, const struct privs *p, int root_fd, int acme_fd)
{
	int bad = 0;

	if (p->set_uid && geteuid() == 0 && setgroups(0, NULL) < 0)
		return -1;
	if ((p->set_gid && setresgid(p->gid, p->gid, p->gid) < 0) ||
	    (p->set_uid && setresuid(p->uid, p->uid, p->uid) < 0))
		return -1;
	if (p->set_uid) {
		if (cfg->access_log[0])
			bad |= open_to_user("access_log", cfg->access_log, cfg->user);
		if (strcmp(cfg->error_log, "-"))
			bad |= open_to_user("error_log", cfg->error_log, cfg->user);
		if (cfg->pid_file[0])
			bad |= open_to_user("pid_file", cfg->pid_file, cfg->user);
	}
	/* Files are opened beneath the root's descriptor, so only the root
	 * itself must let the user in, not the directories above it. */
	if (faccessat(root_fd, ".", X_OK, 0) < 0) {
		log_error("root: the serving processes' user (uid %d) cannot enter %s (%s): every request would get "
			  "403", (int)geteuid(), cfg->root, strerror(errno));
		bad = 1;
	} else if (faccessat(root_fd, ".", R_OK, 0) < 0) {
		log_warn("root: the serving processes' user (uid %d) cannot list %s (%s): index files are still "
			 "served, listings are not", (int)geteuid(), cfg->root, strerror(errno));
	}
	/* challenge files are opened beneath the webroot's descriptor alike */
	if (acme_fd >= 0 && faccessat(acme_fd, ".", X_OK, 0) < 0) {
		log_error("acme_webroot: the serving processes' user (uid %d) cannot enter %s (%s): every ACME "
			  "challenge would get 404", (int)geteuid(), cfg->acme_webroot, strerror(errno));
		bad = 1;
	}
	return bad ? -1 : 0;
}

int privs_check(const struct config *cfg, const struct privs *p)
{
	int rc = 0;

	if (cfg->access_log[0] && open_to_others("access_log", cfg->access_log))
		rc = -1;
	if (strcmp(cfg->error_log, "-") && open_to_others("error_log", cfg->error_log))
		rc = -1;
	if (cfg->pid_file[0] && open_to_others("pid_file", cfg->pid_file))
		rc = -1;
	if (rc < 0)
		return rc;
	bool other_user = (p->set_uid && p->uid != geteuid()) || (p->set_gid && p->gid != getegid());
	if (!other_user && geteuid() == 0)
		return rc; /* root serves: it may read and write anything */
	int root_fd = open(cfg->root, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (root_fd < 0)
		return rc; /* the server's own open of the root says why */
	/* -1 when off, or when it cannot be opened: server_init says why */
	int acme_fd = cfg->acme_webroot[0] ? open(cfg->acme_webroot, O_PATH | O_DIRECTORY | O_CLOEXEC) : -1;
	pid_t pid;
	int status;
	if (!other_user) {
		if (check_as_user(cfg, p, root_fd, acme_fd) < 0)
			rc = -1;
		goto out;
	}
	/* The master has no thread: forking here is safe. */
	pid = fork();
	if (pid < 0) {
		log_error("fork: %s", strerror(errno));
		rc = -1;
		goto out;
	}
	if (pid == 0)
		_exit(check_as_user(cfg, p, root_fd, acme_fd) < 0 ? 1 : 0);
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		rc = -1;
out:
	close(root_fd);
	if (acme_fd >= 0)
		close(acme_fd);
	return rc;
}

void privs_warn_root(const struct config *cfg)
{
	if (geteuid() == 0 && !cfg->user[0])
		log_warn("running as root without `user`: serving processes keep root's rights "
			 "(set user = www-data, or another unprivileged user)");
}

int privs_drop(const struct privs *p)
{
	/* Supplementary groups first (root's would stay otherwise), then the
	 * group while we may still change it, then the user: all three ids
	 * each, so no saved id lets root back in. */
	if (p->set_uid && geteuid() == 0 && setgroups(0, NULL) < 0) {
		log_error("setgroups: %s", strerror(errno));
		return -1;
	}
	if (p->set_gid && setresgid(p->gid, p->gid, p->gid) < 0) {
		log_error("setgid %d: %s", (int)p->gid, strerror(errno));
		return -1;
	}
	if (p->set_uid && setresuid(p->uid, p->uid, p->uid) < 0) {
		log_error("setuid %d: %s", (int)p->uid, strerror(errno));
		return -1;
	}
	if (p->set_uid && p->uid != 0 && (setuid(0) == 0 || seteuid(0) == 0)) {
		log_error("dropped to uid %d, yet root could be regained: refusing to serve", (int)p->uid);
		return -1;
	}
	/* Nor through exec: the capability bounding set stays full, so a
	 * set-uid program would give root back to a process taken over.
	 * A serving process never execs; Landlock set this too, when on. */
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) {
		log_error("prctl(PR_SET_NO_NEW_PRIVS): %s", strerror(errno));
		return -1;
	}
	return 0;
}

/* ---- Landlock ------------------------------------------------------------
 * Raw system calls: glibc has no wrappers. The ruleset handles every file
 * right the kernel's ABI knows, so anything not granted below is denied. */

#ifndef LANDLOCK_ACCESS_FS_REFER
#define LANDLOCK_ACCESS_FS_REFER (1ULL << 13)
#endif
#ifndef LANDLOCK_ACCESS_FS_TRUNCATE
#define LANDLOCK_ACCESS_FS_TRUNCATE (1ULL << 14)
#endif
#ifndef LANDLOCK_ACCESS_FS_IOCTL_DEV
#define LANDLOCK_ACCESS_FS_IOCTL_DEV (1ULL << 15)
#endif

static uint64_t fs_rights_of_abi(int abi)
{
	uint64_t all = (1ULL << 13) - 1; /* ABI 1: EXECUTE .. MAKE_SYM */
	if (abi >= 2)
		all |= LANDLOCK_ACCESS_FS_REFER;
	if (abi >= 3)
		all |= LANDLOCK_ACCESS_FS_TRUNCATE;
	if (abi >= 5)
		all |= LANDLOCK_ACCESS_FS_IOCTL_DEV;
	return all;
}

static int allow_fd(int ruleset, int fd, const char *name, uint64_t rights)
{
	struct landlock_path_beneath_attr attr = { .allowed_access = rights, .parent_fd = fd };
	if (syscall(SYS_landlock_add_rule, ruleset, LANDLOCK_RULE_PATH_BENEATH, &attr, 0) < 0) {
		log_error("landlock: rule for %s: %s", name, strerror(errno));
		return -1;
	}
	return 0;
}

static int allow_beneath(int ruleset, const char *path, uint64_t rights)
{
	int fd = open(path, O_PATH | O_CLOEXEC);
	if (fd < 0) {
		log_error("landlock: %s: %s", path, strerror(errno));
		return -1;
	}
	int r = allow_fd(ruleset, fd, path, rights);
	close(fd);
	return r;
}

#ifdef SPINDLE_SANITIZED
/* A sanitizer's runtime reads /proc/self/maps (the leak check at exit) and
 * writes its report to log_path: a restricted serving process would die
 * without a report, or hang. Sanitizer builds grant just that. */
static int allow_sanitizer(int ruleset)
{
	static const char *const vars[] = { "ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS", "TSAN_OPTIONS" };
	if (allow_beneath(ruleset, "/proc", LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_READ_DIR) < 0)
		return -1;
	for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
		const char *opts = getenv(vars[i]), *p = opts ? strstr(opts, "log_path=") : NULL;
		if (!p)
			continue;
		char dir[4096];
		p += strlen("log_path=");
		size_t n = strcspn(p, ":");
		snprintf(dir, sizeof(dir), "%.*s", (int)n, p);
		char *slash = strrchr(dir, '/');
		if (!slash)
			continue;
		*slash = '\0';
		if (allow_beneath(ruleset, dir[0] ? dir : "/", LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_MAKE_REG) < 0)
			return -1;
	}
	return 0;
}
#endif

int privs_landlock(const struct config *cfg, int root_fd, int acme_fd)
{
	if (!cfg->landlock)
		return 0;
	int abi = (int)syscall(SYS_landlock_create_ruleset, NULL, 0, LANDLOCK_CREATE_RULESET_VERSION);
	if (abi < 0) {
		log_warn("landlock: not available (%s): serving processes are not restricted to the root",
			 errno == EOPNOTSUPP ? "disabled at boot" : strerror(errno));
		return 1;
	}
	struct landlock_ruleset_attr attr = { .handled_access_fs = fs_rights_of_abi(abi) };
	size_t attr_size = sizeof(attr);
#ifdef LANDLOCK_ACCESS_NET_BIND_TCP
	/* ABI 4: no TCP bind or connect at all; the master binds for us */
	if (abi >= 4)
		attr.handled_access_net = LANDLOCK_ACCESS_NET_BIND_TCP | LANDLOCK_ACCESS_NET_CONNECT_TCP;
#endif
	if (abi < 4)
		attr_size = offsetof(struct landlock_ruleset_attr, handled_access_fs) + sizeof(attr.handled_access_fs);
	int rs = (int)syscall(SYS_landlock_create_ruleset, &attr, attr_size, 0);
	if (rs < 0) {
		log_error("landlock: create_ruleset: %s", strerror(errno));
		return -1;
	}
	int rc = -1;
	if (allow_fd(rs, root_fd, cfg->root, LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_READ_DIR) < 0)
		goto out;
	/* each [site NAME]'s root, as the top level's */
	for (int i = 0; i < cfg->nsites; i++)
		if (allow_beneath(rs, cfg->sites[i].root, LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_READ_DIR) < 0)
			goto out;
	/* ACME challenge files: read, never listed */
	if (acme_fd >= 0 && allow_fd(rs, acme_fd, cfg->acme_webroot, LANDLOCK_ACCESS_FS_READ_FILE) < 0)
		goto out;
	/* the acceptor's spare descriptor (listen.c) */
	if (allow_beneath(rs, "/dev/null", LANDLOCK_ACCESS_FS_READ_FILE) < 0)
		goto out;
	/* Nothing for the logs: this process writes to the descriptors the
	 * master opened and reopens by asking the master (log.c); Landlock
	 * checks a file's access at its open, not at each write. */
#ifdef SPINDLE_SANITIZED
	if (allow_sanitizer(rs) < 0)
		goto out;
#endif
	/* without it an unprivileged process may not restrict itself */
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 || syscall(SYS_landlock_restrict_self, rs, 0) < 0) {
		log_error("landlock: restrict_self: %s", strerror(errno));
		goto out;
	}
	if (cfg->symlinks == SYMLINKS_ALL)
		log_warn("landlock: symlinks = all, but a link leading out of %s is still refused (403) by the "
			 "kernel; turn landlock off to follow such links", cfg->root);
	log_info("landlock (ABI %d): serving process %d may only read beneath %s%s%s%s and write its logs "
		 "(through the descriptors the master opened)", abi,
		 (int)getpid(), cfg->root, cfg->nsites ? " and its sites' roots" : "",
		 acme_fd >= 0 ? " and the ACME webroot " : "", acme_fd >= 0 ? cfg->acme_webroot : "");
	rc = 0;
out:
	close(rs);
	return rc;
}
