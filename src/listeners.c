/* listeners.c - the master's listening addresses: one listen_set each, who
 * serves on which, socket activation (see listeners.h). */
#include "listeners.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "log/log.h"

#define SD_LISTEN_FDS_START 3 /* sd_listen_fds(3) */
#define FREE_WAIT_STEP_MS 50

/* The address an inherited socket is bound to, as a `listen` line would say it. */
static int addr_of_socket(int fd, struct listen_addr *a)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);

	*a = (struct listen_addr){ .mode = -1, .ipv6only = true };
	if (getsockname(fd, (struct sockaddr *)&ss, &len) < 0)
		return -1;
	switch (ss.ss_family) {
	case AF_INET:
		a->kind = LISTEN_TCP;
		a->port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
		inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, a->host, sizeof(a->host));
		if (strcmp(a->host, "0.0.0.0") == 0)
			a->host[0] = '\0'; /* as "*:PORT" */
		return 0;
	case AF_INET6: {
		int v6only = 1;
		socklen_t olen = sizeof(v6only);
		a->kind = LISTEN_TCP;
		a->port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
		inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&ss)->sin6_addr, a->host, sizeof(a->host));
		getsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, &olen);
		a->ipv6only = v6only != 0;
		return 0;
	}
	case AF_UNIX: {
		const struct sockaddr_un *sun = (const struct sockaddr_un *)&ss;
		a->kind = LISTEN_UNIX;
		/* an abstract socket (leading NUL) is shown with '@', as ss(8) does */
		size_t n = strnlen(sun->sun_path + 1, sizeof(a->path) - 2) + 1;
		memcpy(a->path, sun->sun_path, n);
		a->path[n] = '\0';
		if (a->path[0] == '\0')
			a->path[0] = '@';
		return 0;
	}
	}
	return -1;
}

static struct listener *slot_free(struct listeners *ls)
{
	for (int i = 0; i < LISTENERS_MAX; i++)
		if (ls->l[i].set.n == 0)
			return &ls->l[i];
	return NULL;
}

int listeners_inherit(struct listeners *ls)
{
	const char *pid = getenv("LISTEN_PID"), *fds = getenv("LISTEN_FDS");
	char *end;
	long n;

	if (!pid || !fds || atol(pid) != (long)getpid())
		return 0; /* meant for another process (or none) */
	errno = 0;
	n = strtol(fds, &end, 10);
	if (!*fds || *end || errno || n < 0 || n > LISTENERS_MAX) {
		/* sd_listen_fds(3) refuses it too: which descriptors are ours is unknown */
		log_error("socket activation: LISTEN_FDS '%s' is not a count of descriptors (0-%d)", fds, LISTENERS_MAX);
		return -1;
	}
	unsetenv("LISTEN_PID");
	unsetenv("LISTEN_FDS");
	unsetenv("LISTEN_FDNAMES");
	for (int i = 0; i < (int)n; i++) {
		int fd = SD_LISTEN_FDS_START + i, listening = 0, type = 0;
		socklen_t len = sizeof(int);
		struct listener *l = slot_free(ls);
		if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) < 0 || !listening ||
		    getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) < 0 || type != SOCK_STREAM) {
			log_error("socket activation: descriptor %d is not a listening stream socket", fd);
			return -1;
		}
		if (!l) {
			log_error("socket activation: more than %d sockets", LISTENERS_MAX);
			return -1;
		}
		/* the models expect non-blocking listeners, and no exec may inherit them */
		fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
		fcntl(fd, F_SETFD, FD_CLOEXEC);
		*l = (struct listener){ .inherited = true };
		addr_of_socket(fd, &l->set.addr);
		l->set.fds[0] = fd;
		l->set.n = 1; /* it cannot grow: we do not bind, the service manager did */
		ls->ninherited++;
	}
	return (int)n;
}

int listeners_wanted(const struct listeners *ls, const struct config *cfg, struct listen_addr *out)
{
	if (cfg->nlisten > 0) {
		memcpy(out, cfg->listen, (size_t)cfg->nlisten * sizeof(*out));
		return cfg->nlisten;
	}
	if (ls->ninherited > 0)
		return 0;
	if (listen_addr_from_bind(cfg->bind, cfg->port, &out[0]) < 0)
		return -1;
	out[0].ipv6only = false; /* `bind = ::` always was dual-stack */
	return 1;
}

static struct listener *find(struct listeners *ls, const struct listen_addr *a)
{
	for (int i = 0; i < LISTENERS_MAX; i++) {
		struct listener *l = &ls->l[i];
		if (l->set.n && !l->refused && listen_addr_same(&l->set.addr, a))
			return l;
	}
	return NULL;
}

/* A new TCP address must be free; a reuseport bind would otherwise join
 * whoever listens there. Waits: the serving processes of a master just
 * killed shut their listeners down a moment after a supervisor sees it gone. */
static int wait_free(const struct listen_addr *a, int wait_ms)
{
	int err;
	for (int waited = 0;; waited += FREE_WAIT_STEP_MS) {
		err = listen_addr_free(a);
		if (err != -EADDRINUSE || waited >= wait_ms)
			return err;
		usleep(FREE_WAIT_STEP_MS * 1000);
	}
}

int listeners_open(struct listeners *ls, const struct listen_addr *addrs, int n, int want, int user, int wait_ms,
		   char *failed, size_t failedlen)
{
	unsigned bit = 1u << user;
	int err = 0;

	for (int i = 0; i < LISTENERS_MAX; i++)
		if (ls->l[i].inherited)
			ls->l[i].users |= bit;
	for (int i = 0; i < n; i++) {
		const struct listen_addr *a = &addrs[i];
		struct listener *l = find(ls, a);
		if (!l) {
			l = slot_free(ls);
			err = l ? 0 : -ENOSPC;
			/* (a UNIX path is looked at once, when it is bound: each look
			 * at a live one costs its owner a connection) */
			if (!err && a->kind == LISTEN_TCP && ls->reuseport)
				err = wait_free(a, wait_ms);
			if (err)
				goto fail;
			*l = (struct listener){ .set = { .reuseport = ls->reuseport && a->kind == LISTEN_TCP, .addr = *a } };
		}
		else if (l->set.addr.ipv6only != a->ipv6only || l->set.addr.mode != a->mode ||
			 strcmp(l->set.addr.owner, a->owner) || strcmp(l->set.addr.group, a->group)) {
			char name[256];
			listen_addr_format(&l->set.addr, name, sizeof(name));
			log_warn("listen: the options of %s stay as they were (changing them needs a restart)", name);
		}
		l->users |= bit; /* before growing: a failure releases what it opened */
		if (!l->inherited && (err = listen_set_grow_addr(&l->set, want)) < 0)
			goto fail;
		continue;
fail:
		listen_addr_format(a, failed, failedlen);
		log_error("cannot listen on %s: %s", failed, strerror(-err));
		return err;
	}
	return 0;
}

int listeners_fill(const struct listeners *ls, int user, int *fds, int *lens, int *ngroups, int max_fds)
{
	int nfds = 0;

	*ngroups = 0;
	for (int i = 0; i < LISTENERS_MAX; i++) {
		const struct listener *l = &ls->l[i];
		if (!l->set.n || !(l->users & (1u << user)))
			continue;
		if (nfds + l->set.n > max_fds)
			return -1;
		memcpy(fds + nfds, l->set.fds, (size_t)l->set.n * sizeof(int));
		nfds += l->set.n;
		lens[(*ngroups)++] = l->set.n;
	}
	return nfds;
}

void listeners_release(struct listeners *ls, int user)
{
	for (int i = 0; i < LISTENERS_MAX; i++) {
		struct listener *l = &ls->l[i];
		l->users &= ~(1u << user);
		if (l->set.n && !l->users && !l->inherited) {
			char name[256];
			listen_addr_format(&l->set.addr, name, sizeof(name));
			log_info("no longer listening on %s", name);
			listen_set_close(&l->set);
			l->refused = false;
		}
	}
}

int listeners_steer(struct listeners *ls, int n)
{
	int err = 0;
	for (int i = 0; i < LISTENERS_MAX; i++)
		if (ls->l[i].set.n && !ls->l[i].refused) {
			int e = listen_set_steer(&ls->l[i].set, n);
			if (e < 0)
				err = e;
		}
	return err;
}

void listeners_refuse_unused(struct listeners *ls, int user)
{
	for (int i = 0; i < LISTENERS_MAX; i++) {
		struct listener *l = &ls->l[i];
		if (l->set.n && !l->inherited && !l->refused && !(l->users & (1u << user))) {
			listen_set_refuse(&l->set);
			l->refused = true;
		}
	}
}

void listeners_forget_unused(struct listeners *ls, int user)
{
	for (int i = 0; i < LISTENERS_MAX; i++) {
		struct listener *l = &ls->l[i];
		if (!l->set.n || (l->users & (1u << user)))
			continue;
		for (int j = 0; j < l->set.n; j++)
			close(l->set.fds[j]); /* not listen_set_close: the master's file stays */
		l->set.n = 0;
	}
}

void listeners_refuse(struct listeners *ls)
{
	/* Not an inherited socket: the service manager holds it too, and a
	 * shutdown would unlisten it for good, where it should queue
	 * connections for our next start. */
	for (int i = 0; i < LISTENERS_MAX; i++)
		if (ls->l[i].set.n && !ls->l[i].inherited)
			listen_set_refuse(&ls->l[i].set);
}

void listeners_close(struct listeners *ls)
{
	for (int i = 0; i < LISTENERS_MAX; i++)
		if (ls->l[i].set.n)
			listen_set_close(&ls->l[i].set);
}

void listeners_describe(const struct listen_addr *addrs, int n, char *buf, size_t len)
{
	size_t used = 0;
	buf[0] = '\0';
	for (int i = 0; i < n && used + 1 < len; i++) {
		char one[256];
		listen_addr_format(&addrs[i], one, sizeof(one));
		int w = snprintf(buf + used, len - used, "%s%s", i ? ", " : "", one);
		if (w < 0)
			break;
		used += (size_t)w;
	}
}
