/* server.c - the shared, read-only serving context and the stop request. */
#include "server.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>

#include "fs/cache.h"
#include "http/mime_file.h"
#include "workload/workload.h"
#include "log/log.h"
#include "models/model.h"
#include "stats/stats.h"
#include "tls/context.h"
#include "tls/wire.h"

/* Lock-free atomic: safe to set in a signal handler and to read from any
 * thread. A stop outranks a retirement: once stopping, a late retirement
 * changes nothing, while a stop turns a retiring process into a stopping one. */
enum stop_kind { STOP_NONE, STOP_RETIRE, STOP_SHUTDOWN };
static atomic_int stop_requested;
static int stop_eventfd = -1;

/* Whether an accepted socket's local address a was accepted by a listener
 * bound to l: the same address, or l's wildcard on the same port. */
static bool listener_matches(const struct sockaddr_storage *l, const struct sockaddr_storage *a, bool exact)
{
	if (l->ss_family == AF_UNIX || a->ss_family == AF_UNIX)
		return l->ss_family == a->ss_family &&
		       !strcmp(((const struct sockaddr_un *)l)->sun_path, ((const struct sockaddr_un *)a)->sun_path);
	if (l->ss_family == AF_INET) {
		const struct sockaddr_in *l4 = (const void *)l, *a4 = (const void *)a;
		if (a->ss_family != AF_INET || l4->sin_port != a4->sin_port)
			return false;
		return exact ? l4->sin_addr.s_addr == a4->sin_addr.s_addr : l4->sin_addr.s_addr == htonl(INADDR_ANY);
	}
	const struct sockaddr_in6 *l6 = (const void *)l;
	in_port_t port = a->ss_family == AF_INET ? ((const struct sockaddr_in *)a)->sin_port
						   : ((const struct sockaddr_in6 *)a)->sin6_port;
	if (l->ss_family != AF_INET6 || l6->sin6_port != port)
		return false;
	if (!exact) /* [::] takes IPv4 too unless ipv6only */
		return IN6_IS_ADDR_UNSPECIFIED(&l6->sin6_addr);
	return a->ss_family == AF_INET6 &&
	       IN6_ARE_ADDR_EQUAL(&l6->sin6_addr, &((const struct sockaddr_in6 *)a)->sin6_addr);
}

/* Whether the listener that accepted fd has flag[] set: without a system
 * call when all groups agree. */
static bool group_flag(const struct server *srv, const bool *flag, int fd)
{
	int n = 0;
	for (int g = 0; g < srv->nlisten_groups; g++)
		n += flag[g];
	if (n == 0)
		return false;
	if (n == srv->nlisten_groups)
		return true;
	struct sockaddr_storage local;
	socklen_t len = sizeof(local);
	memset(&local, 0, sizeof(local));
	if (getsockname(fd, (struct sockaddr *)&local, &len) < 0)
		return false; /* the connection is gone anyway */
	for (int pass = 0; pass < 2; pass++) /* an exact address before a wildcard */
		for (int g = 0; g < srv->nlisten_groups; g++)
			if (listener_matches(&srv->listen_group_addr[g], &local, pass == 0))
				return flag[g];
	return false;
}

const struct tls_context *server_tls_for(const struct server *srv, int fd)
{
	return srv->tls && group_flag(srv, srv->listen_group_tls, fd) ? srv->tls : NULL;
}

bool server_proxy_for(const struct server *srv, int fd)
{
	return group_flag(srv, srv->listen_group_proxy, fd);
}

bool server_h2_only_for(const struct server *srv, int fd)
{
	return group_flag(srv, srv->listen_group_h2_only, fd);
}

/* The sites, once the shared pieces they point to (MIME, cache, ACME) are
 * open. A server of one site keeps its cache keys and log lines as they
 * were: no prefix, no site name. */
static int open_sites(struct server *srv)
{
	const struct config *cfg = srv->cfg;
	size_t n = 1 + (size_t)cfg->nsites;
	srv->top = malloc(sizeof(*srv->top));
	srv->sites.site = calloc(n, sizeof(*srv->sites.site));
	if (!srv->top || !srv->sites.site) {
		log_error("out of memory for %zu site(s)", n);
		return -1;
	}
	config_top_site(cfg, srv->top);
	srv->sites.reject_unknown = cfg->default_site == DEFAULT_SITE_REJECT;
	for (size_t i = 0; i < n; i++)
		srv->sites.site[i].root_fd = -1;
	for (size_t i = 0; i < n; i++) {
		struct site *site = &srv->sites.site[i];
		if (site_open(site, i == 0 ? srv->top : &cfg->sites[i - 1], cfg) < 0)
			return -1;
		srv->sites.n = i + 1;
		site->mime = srv->mime;
		site->cache = srv->cache;
		site->acme_fd = srv->acme_fd;
		site->stats_index = -1;
		site->srv = srv;
		if (n > 1) {
			/* digits then ':': no prefix is the start of another */
			site->cache_prefix_len = (size_t)snprintf(site->cache_prefix, sizeof(site->cache_prefix),
								  "%zu:", i);
			site->log_name = site->conf->name;
		}
	}
	return 0;
}

int server_init(struct server *srv, const struct config *cfg, const struct model *model)
{
	memset(srv, 0, sizeof(*srv));
	wire_share_limits();
	srv->cfg = cfg;
	srv->model = model;
	srv->wake_fd = srv->acme_fd = -1;
	srv->workers = cfg->workers > 0 ? cfg->workers : (int)sysconf(_SC_NPROCESSORS_ONLN);
	if (srv->workers < 1)
		srv->workers = 1;
	srv->limits = (struct http_limits){ cfg->max_request_line, cfg->max_head, cfg->max_headers };
	bool hsts = config_serves_tls(cfg) && cfg->hsts[0];
	/* "/ = Server: -" in [headers]: not even the session's own answers
	 * (to a request it could not parse) name the server */
	bool server = !header_rules_remove_everywhere(&cfg->headers, "Server");
	snprintf(srv->server_header, sizeof(srv->server_header), "%s%s%s%s%s%s%s",
		 server ? "Server: spindle" : "", server && cfg->server_tokens ? "/" : "",
		 server && cfg->server_tokens ? SPINDLE_VERSION : "", server ? "\r\n" : "",
		 /* tls: RFC 6797 7.2, only where HTTPS is served. The core cannot
		  * tell a TLS connection, so an instance with plain and TLS listen
		  * addresses sends it on both (a browser ignores it over HTTP, 8.1) */
		 hsts ? "Strict-Transport-Security: " : "", hsts ? cfg->hsts : "", hsts ? "\r\n" : "");

	char bad[256];
	if (cidr_list_parse(cfg->real_ip_from, &srv->real_ip_from, bad, sizeof(bad)) < 0) {
		/* config_validate() refused this already; a caller skipping it lands here */
		log_error("real_ip_from: %s", bad);
		return -1;
	}
	/* opened here, by the master, as the root is: the serving processes
	 * reach it through this descriptor (and Landlock's rule for it) */
	if (cfg->acme_webroot[0]) {
		srv->acme_fd = open(cfg->acme_webroot, O_PATH | O_DIRECTORY | O_CLOEXEC);
		if (srv->acme_fd < 0) {
			log_error("acme_webroot '%s': %s", cfg->acme_webroot, strerror(errno));
			return -1;
		}
	}
	if (cfg->types_file[0]) {
		char why[512];
		if (mime_overrides_load(cfg->types_file, &srv->mime, why, sizeof(why)) < 0) {
			log_error("types_file: %s", why);
			return -1;
		}
	}
	if (cfg->cache_size > 0) {
		srv->cache = cache_new(cfg->cache_size, cfg->cache_max_file, cfg->cache_revalidate_ms);
		if (!srv->cache)
			log_warn("file cache: out of memory, serving uncached");
	}
	if (open_sites(srv) < 0)
		return -1;
	/* stats: before the listeners (a live instance of the same name refuses
	 * the start) and before any fork (every worker inherits the mapping) */
	if (stats_open(srv) < 0)
		return -1;
	stats_register_sites(srv);
	if (workload_new(cfg, &srv->workload) < 0)
		return -1;
	/* tls: here, in the master before any fork, so the serving processes of
	 * a generation share its session-ticket keys */
	if (config_serves_tls(cfg) && !(srv->tls = tls_context_new(cfg)))
		return -1;

	return 0;
}

void server_close_listeners(struct server *srv)
{
	for (int i = 0; i < srv->nlisten; i++)
		close(srv->listen_fds[i]);
	srv->nlisten = 0;
}

int server_enter_serving(struct server *srv)
{
	/* A stop eventfd of this process's own: one inherited from the master
	 * would let an old generation's stop wake the new one during a reload. */
	atomic_store(&stop_requested, STOP_NONE);
	if (stop_eventfd >= 0)
		close(stop_eventfd); /* a serving process's child: its parent's */
	stop_eventfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	srv->wake_fd = stop_eventfd;
	if (srv->wake_fd < 0) {
		log_error("eventfd: %s", strerror(errno));
		return -1;
	}
	return 0;
}

void server_close(struct server *srv)
{
	/* server_close() may run twice after a failed server_init() */
	for (size_t i = 0; i < srv->sites.n; i++)
		site_close(&srv->sites.site[i]);
	free(srv->sites.site);
	srv->sites.site = NULL;
	srv->sites.n = 0;
	free(srv->top);
	srv->top = NULL;
	stats_close(srv); /* stats: unlinks the segment in the creating process only */
	cache_free(srv->cache);
	srv->cache = NULL;
	mime_overrides_free(srv->mime);
	srv->mime = NULL;
	workload_free(srv->workload);
	srv->workload = NULL;
	tls_context_free(srv->tls);
	srv->tls = NULL;
	if (srv->acme_fd >= 0)
		close(srv->acme_fd);
	if (srv->wake_fd >= 0)
		close(srv->wake_fd);
	srv->acme_fd = srv->wake_fd = stop_eventfd = -1;
}

static void wake_for_stop(void)
{
	int saved = errno;
	if (stop_eventfd >= 0) {
		uint64_t one = 1;
		ssize_t n = write(stop_eventfd, &one, sizeof(one));
		(void)n;
	}
	errno = saved;
}

void server_request_stop(void)
{
	atomic_store(&stop_requested, STOP_SHUTDOWN);
	wake_for_stop();
}

void server_request_retire(void)
{
	int none = STOP_NONE;
	atomic_compare_exchange_strong(&stop_requested, &none, STOP_RETIRE);
	wake_for_stop();
}

/* The value a retirement's SIGTERM carries: any other SIGTERM (systemd, kill,
 * the parent-death signal) is a real stop. */
#define RETIRE_SIGVAL 0x52455449 /* "RETI" */

int server_send_stop(pid_t pid, bool retire)
{
	if (!retire)
		return kill(pid, SIGTERM);
	return sigqueue(pid, SIGTERM, (union sigval){ .sival_int = RETIRE_SIGVAL });
}

void server_stop_from_signal(int sig, const siginfo_t *info)
{
	/* only the parent retires a process: a stranger's sigqueue is a stop */
	if (sig == SIGTERM && info && info->si_code == SI_QUEUE && info->si_value.sival_int == RETIRE_SIGVAL &&
	    info->si_pid == getppid())
		server_request_retire();
	else
		server_request_stop();
}

bool server_stopping(void)
{
	return atomic_load_explicit(&stop_requested, memory_order_relaxed) != STOP_NONE;
}

bool server_retiring(void)
{
	return atomic_load_explicit(&stop_requested, memory_order_relaxed) == STOP_RETIRE;
}
