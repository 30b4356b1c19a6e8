/* privs.h - least privilege for the serving processes.
 *
 * The master keeps the rights it was started with: it binds (also the
 * addresses a reload adds), opens the logs and the statistics segment, and
 * re-reads the configuration. Every serving process, before it serves,
 * gives up what it does not need: it becomes `user`/`group` with no
 * supplementary groups, and (Landlock, Linux 5.13+) can then only read
 * beneath the root (and the ACME webroot), whatever a request's path resolves to, and write to the
 * logs only through the descriptors the master opened for it. Workers it
 * forks (fork, prefork) inherit both. */
#ifndef SPINDLE_PRIVS_H
#define SPINDLE_PRIVS_H

#include <stdbool.h>
#include <sys/types.h>

#include "config.h"

struct privs {
	bool set_uid, set_gid;
	uid_t uid;
	gid_t gid;
};

/* In the master: looks `user` and `group` up (before any fork, so a serving
 * process needs no NSS). 0, or -1 after logging why. */
int privs_resolve(const struct config *cfg, struct privs *p);
/* In the master, before it opens the logs (start, --check, reload): what
 * start-up would otherwise find too late or never. Refuses a log or pid
 * file when its directory, or any directory above it, lets the serving user
 * (or a group, or every user) replace it with a link, and a root the serving
 * user cannot enter (checked in a child that becomes the user). The serving
 * user can neither write nor chmod a directory that passed, so the rule
 * holds until root changes it: a reopen (SIGUSR1) needs no new check. 0, or
 * -1 after logging why. */
int privs_check(const struct config *cfg, const struct privs *p);
/* At start-up: root without `user` serves as root: say so. */
void privs_warn_root(const struct config *cfg);

/* In a serving process: drops to p (setgroups, setgid, setuid), checks
 * that root cannot be regained, and sets no_new_privs (no gain by exec).
 * 0, or -1 after logging why (then exit). */
int privs_drop(const struct privs *p);
/* In a serving process, before privs_drop: the Landlock ruleset, root_fd
 * being the root the files are opened beneath (each [site NAME]'s root is
 * allowed too, by its path), acme_fd the ACME webroot
 * (or -1). 0 when applied or turned off, 1 when the kernel lacks Landlock
 * (logged once per serving process), -1 on an error (logged). */
int privs_landlock(const struct config *cfg, int root_fd, int acme_fd);

#endif
