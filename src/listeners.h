/* listeners.h - the master's listening addresses: one listen_set
 * per address, which generation serves on which, and the sockets a service
 * manager passes in (socket activation, sd_listen_fds(3)'s protocol).
 *
 * An address stays open for the master's life unless a reload removes it.
 * Then it keeps serving the generations that still use it until they are
 * gone: it is shut down (new connections refused) when the generation that
 * dropped it takes over, and closed (a UNIX socket file unlinked) once no
 * generation holds it. Inherited sockets are never closed before exit: the
 * service manager keeps them across our restarts, and so do we across reloads. */
#ifndef SPINDLE_LISTENERS_H
#define SPINDLE_LISTENERS_H

#include <stdbool.h>

#include "config.h"
#include "listen.h"

#define LISTENERS_MAX 32 /* addresses, counting removed ones still draining */

struct listener {
	struct listen_set set; /* set.n == 0: a free slot */
	bool inherited;        /* from LISTEN_FDS */
	bool refused;          /* a reload removed it: shut down, closed when unused */
	unsigned users;        /* bit i: generation slot i serves on it */
};

struct listeners {
	struct listener l[LISTENERS_MAX];
	bool reuseport;
	int ninherited;
};

/* Takes the sockets passed by a service manager (LISTEN_PID is us,
 * LISTEN_FDS of them from descriptor 3) and clears those variables.
 * Returns how many, or -1 (logged) when one is not a listening stream socket. */
int listeners_inherit(struct listeners *ls);

/* The addresses a configuration asks for: its `listen` lines; without any,
 * bind:port, unless sockets were inherited (then those alone). */
int listeners_wanted(const struct listeners *ls, const struct config *cfg, struct listen_addr *out);

/* Makes every address of addrs[] available to generation slot `user`, with
 * up to `want` reuseport sockets each (one for UNIX and inherited ones),
 * and every inherited socket too. A new TCP address must be free first
 * (a SO_REUSEPORT bind would join another instance's group): it is retried
 * for up to wait_ms. 0, or -errno with the address named in the error log
 * (and in *failed); sockets opened for this call stay until
 * listeners_release() of the same user. */
int listeners_open(struct listeners *ls, const struct listen_addr *addrs, int n, int want, int user, int wait_ms,
		   char *failed, size_t failedlen);
/* What generation `user` accepts from, group after group (acceptor_init_groups).
 * -1 when more than max_fds. */
int listeners_fill(const struct listeners *ls, int user, int *fds, int *lens, int *ngroups, int max_fds);
/* Generation `user` is gone: unused addresses a reload removed are closed. */
void listeners_release(struct listeners *ls, int user);
/* New connections on each reuseport address go to its first n sockets. */
int listeners_steer(struct listeners *ls, int n);
/* `user` now serves alone: addresses it does not use stop taking connections. */
void listeners_refuse_unused(struct listeners *ls, int user);
/* In a serving process: closes its copies of the addresses generation
 * `user` does not serve (a removed one it kept alive would stay bound). */
void listeners_forget_unused(struct listeners *ls, int user);
/* Final stop: every address refuses new connections. */
void listeners_refuse(struct listeners *ls);
void listeners_close(struct listeners *ls);
/* "127.0.0.1:8080, unix:/run/s.sock" for log lines. */
void listeners_describe(const struct listen_addr *addrs, int n, char *buf, size_t len);

#endif
