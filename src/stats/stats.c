/* stats.c - creating, reclaiming and writing the statistics segment. */
#include "stats.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../fs/cache.h"
#include "../log/log.h"
#include "../models/model.h"
#include "../server.h"
#include "cidr.h"
#include "snapshot.h"

/* One per server_init(): a generation of serving processes. A reload in the
 * creating process (the master) maps the same segment again and carries on
 * counting in it; the name goes when the last generation using it closes. */
struct stats {
	struct stats_header *h;
	size_t len;
	char shm_name[96];     /* "/spindle-NAME", or "" for a private mapping */
	pid_t creator;         /* only this process removes the name */
	int fd;                /* of the named segment, kept to grow it back (-1: private) */
	ino_t ino;             /* of the segment, to never unlink a successor's */
	uint32_t cache_base;   /* first cache block of this generation */
	uint32_t ncaches;      /* cache blocks it uses */
	uint32_t nslots;       /* worker slots its processes count in */
	char want_name[96];    /* the name its configuration asks for, taken at promotion ("": has it) */
	struct cidr_list allow;
};

/* The named segment this process created, and how many generations use it. */
static ino_t seg_ino;
static char seg_name[96];
static int seg_refs;
static uint32_t seg_nslots; /* the most any generation used: the header's copy is for readers */

/* Segments this process created earlier under other names (a reload changed
 * stats_name) and how many draining generations still use each: the last
 * one to close removes the name, as for the current one. */
#define RETIRED_MAX 16
static struct retired_seg {
	ino_t ino;
	int refs;
} retired[RETIRED_MAX];

static void retire_current(void)
{
	if (seg_refs == 0)
		return;
	for (int i = 0; i < RETIRED_MAX; i++) {
		if (retired[i].refs == 0) {
			retired[i] = (struct retired_seg){ seg_ino, seg_refs };
			return;
		}
	}
	log_warn("stats: %s: too many statistics segments in use; it stays in /dev/shm", seg_name);
}

/* Drops a closing generation's use of segment ino; true when it was the last. */
static bool release_use(ino_t ino)
{
	if (ino == seg_ino) {
		if (--seg_refs > 0)
			return false;
		seg_ino = 0;
		return true;
	}
	for (int i = 0; i < RETIRED_MAX; i++)
		if (retired[i].refs > 0 && retired[i].ino == ino)
			return --retired[i].refs == 0;
	return false;
}

/* Which cache blocks of that segment a generation holds (creator only). A
 * generation may drain across several reloads, so blocks are handed out per
 * generation rather than by the parity of its number: one that outlives two
 * reloads must neither share its gauges with the newest nor, when it ends,
 * zero the newest one's. */
static bool cache_block_used[2 * STATS_CACHE_HALF];

/* First fit of n free blocks; returns the first, or -1 when none is free. */
static int cache_blocks_take(uint32_t n)
{
	for (uint32_t i = 0; i + n <= 2 * STATS_CACHE_HALF; i++) {
		uint32_t k = 0;
		while (k < n && !cache_block_used[i + k])
			k++;
		if (k == n) {
			for (k = 0; k < n; k++)
				cache_block_used[i + k] = true;
			return (int)i;
		}
		i += k; /* i + k is used: start after it */
	}
	return -1;
}

/* Where the cache blocks and the slots begin: constants of this build, and
 * the segment's length. The writers locate their counters with these, never
 * with the offsets and counts in the header, which anyone able to write the
 * segment could change under them (a slot count of 0, an offset past the
 * mapping). */
static size_t layout_sizes(size_t *caches_off, size_t *slots_off)
{
	size_t hdr = (sizeof(struct stats_header) + STATS_LINE - 1) / STATS_LINE * STATS_LINE;
	*caches_off = hdr;
	*slots_off = hdr + (size_t)2 * STATS_CACHE_HALF * sizeof(struct stats_cache_block);
	return *slots_off + (size_t)STATS_MAX_SLOTS * sizeof(struct stats_slot);
}

static struct stats_cache_block *cache_block(struct stats_header *h, uint32_t i)
{
	size_t coff, soff;
	layout_sizes(&coff, &soff);
	return (struct stats_cache_block *)((char *)h + coff + (size_t)i * sizeof(struct stats_cache_block));
}

static struct stats_slot *slot_block(struct stats_header *h, uint32_t i)
{
	size_t coff, soff;
	layout_sizes(&coff, &soff);
	return (struct stats_slot *)((char *)h + soff + (size_t)i * sizeof(struct stats_slot));
}

static void cache_blocks_zero(struct stats_header *h, uint32_t base, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		struct cache_gauges *g = &cache_block(h, base + i)->g;
		atomic_store(&g->bytes, 0);
		atomic_store(&g->entries, 0);
	}
}

_Thread_local struct stats_slot *stats_thread_slot;
struct stats_slot *stats_process_slot;

/* This process's view: set in the creator, inherited across fork() and
 * adjusted by stats_process_start(). */
static struct stats_header *proc_h;
static int proc_fd = -1;     /* its descriptor, and its length */
static struct stats_header hdr_saved; /* what the creator wrote in it, to restore */
static size_t proc_len;
static uint32_t proc_nslots; /* the slots in use, as this process knows them */
static int proc_base;
static uint32_t proc_cache_base, proc_ncaches;
static atomic_int proc_next_id;

#define PROBE_WAIT_MS 20
#define PROBE_TRIES 25 /* half a second for a starting instance to fill its header */

/* Field 22 of /proc/PID/stat, the process's start time in clock ticks since
 * boot: with the pid it names one process, even after the pid is reused.
 * 0 when unknown. */
static uint64_t proc_starttime(pid_t pid)
{
	char path[64], buf[1024];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	char *p = strrchr(buf, ')'); /* comm may hold spaces and parentheses */
	if (!p)
		return 0;
	/* after ") ": field 3 (state) ... field 22; a zombie is dead already */
	if (p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X'))
		return 0;
	for (int field = 2; field < 22 && p; field++)
		p = strchr(p + 1, ' ');
	return p ? strtoull(p + 1, NULL, 10) : 0;
}

static bool owner_alive(pid_t pid, uint64_t starttime)
{
	if (pid <= 0 || pid == getpid())
		return false;
	uint64_t now = proc_starttime(pid);
	if (starttime != 0 && access("/proc/self/stat", F_OK) == 0)
		return now == starttime; /* 0: gone, or a zombie */
	/* no /proc: trust kill(pid, 0) */
	return kill(pid, 0) == 0 || errno == EPERM;
}

enum probe { PROBE_GONE, PROBE_STALE, PROBE_LIVE, PROBE_UNTRUSTED, PROBE_FOREIGN };

#define STATS_MODE 0640

/* Looks at an existing segment: whose is it, can its content be trusted, and
 * is its creator still running? Anyone can create a name in /dev/shm, so
 * nothing in a segment is believed (not even "my owner is alive", which would
 * keep us from starting) unless our own user made it, no one else could have
 * written it, and it has our size: another user's is PROBE_FOREIGN, a
 * doubtful one of ours PROBE_UNTRUSTED (reclaimed like a stale one). */
static enum probe probe(const char *shm_name, size_t want_len, pid_t *pid_out, uid_t *uid_out, const char **why)
{
	for (int tries = 0;; tries++) {
		int fd = shm_open(shm_name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0);
		if (fd < 0 && errno == ENOENT)
			return PROBE_GONE;
		if (fd < 0) {
			/* a symlink (ELOOP) or something we may not open: whose
			 * is it? Another user's is not ours to remove, even
			 * when we could (as root, in the sticky /dev/shm). */
			char path[128];
			struct stat lst;
			snprintf(path, sizeof(path), "/dev/shm%s", shm_name);
			if (lstat(path, &lst) == 0 && lst.st_uid != geteuid()) {
				*uid_out = lst.st_uid;
				return PROBE_FOREIGN;
			}
			*why = "not a segment that can be opened (a symlink?)";
			return PROBE_UNTRUSTED;
		}
		struct stat st;
		struct stats_header *h = MAP_FAILED;
		if (fstat(fd, &st) < 0) {
			close(fd);
			return PROBE_STALE;
		}
		*uid_out = st.st_uid;
		if (st.st_uid != geteuid()) {
			close(fd);
			return PROBE_FOREIGN;
		}
		*why = !S_ISREG(st.st_mode)		   ? "not a regular file"
		       : (st.st_mode & 07137) != 0	   ? "others could write it (mode too open)"
		       : st.st_size != 0 && (size_t)st.st_size != want_len ? "not the size of a segment"
								   : NULL;
		if (*why) {
			close(fd);
			return PROBE_UNTRUSTED;
		}
		if (st.st_size >= (off_t)sizeof(*h))
			h = mmap(NULL, sizeof(*h), PROT_READ, MAP_SHARED, fd, 0);
		close(fd);
		if (h != MAP_FAILED) {
			bool ours = __atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) == STATS_MAGIC;
			*pid_out = h->pid;
			bool alive = ours && owner_alive(h->pid, h->pid_starttime);
			munmap(h, sizeof(*h));
			if (ours)
				return alive ? PROBE_LIVE : PROBE_STALE;
		}
		/* empty or unfinished: maybe an instance is still filling it in */
		if (tries == PROBE_TRIES) {
			*why = "never initialised";
			return PROBE_UNTRUSTED;
		}
		struct timespec ts = { 0, PROBE_WAIT_MS * 1000000L };
		nanosleep(&ts, NULL);
	}
}

static bool name_ok(const char *s)
{
	if (!*s || strlen(s) > 60)
		return false;
	for (; *s; s++)
		if (!isalnum((unsigned char)*s) && *s != '-' && *s != '_' && *s != '.')
			return false;
	return true;
}

/* Truncating copy (the header keeps a summary, long roots are cut). */
static void copy_str(char *dst, size_t cap, const char *src)
{
	size_t n = strnlen(src, cap - 1);
	memcpy(dst, src, n);
	dst[n] = '\0';
}

/* Creates the named segment with O_EXCL and a private mode: fd, or -1 after
 * saying why. Sets *fallback when the name cannot be used at all (statistics
 * then stay private to the instance and spindle-stat cannot see them). */
static int create_named(const char *shm_name, const char *inst, size_t len, bool *fallback)
{
	for (int attempt = 0; attempt < 3; attempt++) {
		int fd = shm_open(shm_name, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, STATS_MODE);
		if (fd >= 0) {
			fchmod(fd, STATS_MODE); /* whatever the umask */
			return fd;
		}
		if (errno != EEXIST) {
			log_warn("stats: shm_open %s: %s: statistics stay private (no spindle-stat)", shm_name,
				 strerror(errno));
			*fallback = true;
			return -1;
		}
		pid_t pid = 0;
		uid_t uid = 0;
		const char *why = NULL;
		switch (probe(shm_name, len, &pid, &uid, &why)) {
		case PROBE_LIVE:
			log_error("stats: instance '%s' is in use by a running spindle (pid %d)", inst, (int)pid);
			fprintf(stderr,
				"spindle: statistics instance '%s' (/dev/shm%s) is in use by a running spindle, "
				"pid %d: stop it, or set another stats_name\n",
				inst, shm_name, (int)pid);
			return -1;
		case PROBE_FOREIGN:
			/* Not ours to read, trust or remove (Apache's scoreboard and
			 * nginx's zones avoid the question with anonymous memory). */
			log_error("stats: /dev/shm%s belongs to uid %d, not to this user (uid %d): refusing it; "
				  "statistics stay private (no spindle-stat) until it is removed or stats_name changes",
				  shm_name, (int)uid, (int)geteuid());
			*fallback = true;
			return -1;
		case PROBE_UNTRUSTED:
			log_warn("stats: reclaiming /dev/shm%s: %s", shm_name, why);
			goto reclaim;
		case PROBE_STALE:
			log_warn("stats: reclaiming stale segment /dev/shm%s (left by pid %d, no longer running)",
				 shm_name, (int)pid);
		reclaim:
			if (shm_unlink(shm_name) < 0 && errno != ENOENT) {
				log_warn("stats: shm_unlink %s: %s", shm_name, strerror(errno));
				*fallback = true;
				return -1;
			}
			break;
		case PROBE_GONE:
			break;
		}
	}
	log_warn("stats: %s keeps reappearing: statistics stay private", shm_name);
	*fallback = true;
	return -1;
}

/* Anyone running as this user can truncate the segment, and every access
 * to the pages cut off then faults (SIGBUS): the serving processes would die
 * at their next count, and again at each restart. A process about to serve
 * (and the master, before it touches the segment) grows it back first; the
 * counters that were cut off start again from zero. */
static int truncation_caught; /* set by stats_on_sigbus, in any thread: atomics only */

static void segment_repair(struct stats_header *h, int fd, size_t len)
{
	struct stat sb;
	if (fd < 0 || fstat(fd, &sb) < 0)
		return;
	if ((size_t)sb.st_size < len) {
		log_warn("stats: the segment was truncated to %lld bytes by another process: growing it back to "
			 "%zu (the counters cut off restart from zero)", (long long)sb.st_size, len);
		if (ftruncate(fd, (off_t)len) < 0) {
			log_warn("stats: ftruncate: %s", strerror(errno));
			return;
		}
	} else if (__atomic_exchange_n(&truncation_caught, 0, __ATOMIC_RELAXED)) {
		log_warn("stats: the segment was truncated by another process while serving: grown back to %zu "
			 "(the counters cut off restart from zero)", len);
	} else if (__atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) != STATS_MAGIC && hdr_saved.magic == STATS_MAGIC) {
		/* grown back by another process of ours (a fork child's SIGBUS handler) */
		log_warn("stats: the segment's header was lost (truncated or overwritten by another process): "
			 "restoring it");
	} else {
		return;
	}
	if (__atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) != STATS_MAGIC && hdr_saved.magic == STATS_MAGIC) {
		/* the header went too: readers need it back */
		memcpy((char *)h + sizeof(h->magic), (const char *)&hdr_saved + sizeof(h->magic),
		       sizeof(*h) - sizeof(h->magic));
		__atomic_store_n(&h->magic, STATS_MAGIC, __ATOMIC_RELEASE);
	}
}

/* stats_name = auto: the port, which tells instances on one machine apart;
 * with `listen` lines that of the first TCP address, or for UNIX sockets
 * alone "unix-" and the socket's file name. */
static void auto_name(const struct config *cfg, char *inst, size_t len)
{
	for (int i = 0; i < cfg->nlisten; i++)
		if (cfg->listen[i].kind == LISTEN_TCP) {
			snprintf(inst, len, "%d", cfg->listen[i].port);
			return;
		}
	if (cfg->nlisten == 0) {
		snprintf(inst, len, "%d", cfg->port);
		return;
	}
	const char *base = strrchr(cfg->listen[0].path, '/');
	snprintf(inst, len, "unix-%.50s", base ? base + 1 : cfg->listen[0].path);
	for (char *p = inst; *p; p++)
		if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.", *p))
			*p = '_';
}

/* "ADDR[ tls], ..." into the header's listen field; an address that does
 * not fit whole is left out and the list ends with "...". */
static void write_listen(struct stats_header *h, const struct listen_addr *addrs, const bool *tls, int n)
{
	char buf[sizeof(h->listen)];
	size_t o = 0;
	buf[0] = '\0';
	for (int i = 0; i < n; i++) {
		struct listen_addr a = addrs[i];
		char one[256];
		/* where it listens, not how the socket file is set up */
		a.mode = -1;
		a.owner[0] = a.group[0] = '\0';
		a.tls = tls ? tls[i] : a.tls;
		listen_addr_format(&a, one, sizeof(one));
		size_t need = strlen(one) + (i ? 2 : 0);
		if (o + need + 4 >= sizeof(buf)) { /* room kept for ", ..." */
			snprintf(buf + o, sizeof(buf) - o, "%s...", i ? ", " : "");
			break;
		}
		o += (size_t)snprintf(buf + o, sizeof(buf) - o, "%s%s", i ? ", " : "", one);
	}
	copy_str(h->listen, sizeof(h->listen), buf);
}

/* What the configuration asks for: its `listen` lines, else bind and port;
 * tls = on makes every one HTTPS. */
static void listen_summary(struct stats_header *h, const struct config *cfg)
{
	struct listen_addr one = { .kind = LISTEN_TCP, .port = cfg->port, .mode = -1, .tls = cfg->tls };
	const struct listen_addr *addrs = cfg->listen;
	int n = cfg->nlisten;
	bool tls[CONFIG_MAX_LISTEN];
	if (n == 0) {
		if (strcmp(cfg->bind, "*") != 0)
			copy_str(one.host, sizeof(one.host), cfg->bind);
		addrs = &one;
		n = 1;
	}
	for (int i = 0; i < n; i++)
		tls[i] = addrs[i].tls || cfg->tls;
	write_listen(h, addrs, tls, n);
}

void stats_set_listen(const struct server *srv, const struct listen_addr *addrs, const bool *tls, int n)
{
	struct stats *st = srv->stats;
	if (!st || st->creator != getpid())
		return;
	segment_repair(st->h, st->fd, st->len);
	write_listen(st->h, addrs, tls, n);
	memcpy(hdr_saved.listen, st->h->listen, sizeof(hdr_saved.listen));
}

int stats_open(struct server *srv)
{
	const struct config *cfg = srv->cfg;
	if (!cfg->stats)
		return 0; /* no segment: every counting hook finds no slot and does nothing */
	struct stats *st = calloc(1, sizeof(*st));
	char inst[64], why[160];
	int fd = -1;

	if (!st) {
		log_error("stats: out of memory");
		return -1;
	}
	if (cidr_list_parse(cfg->stats_allow, &st->allow, why, sizeof(why)) < 0) {
		/* config_validate() already refused this; a caller skipping it lands here */
		log_error("stats: stats_allow: %s", why);
		free(st);
		return -1;
	}
	if (strcmp(cfg->stats_name, "auto") == 0)
		auto_name(cfg, inst, sizeof(inst));
	else
		copy_str(inst, sizeof(inst), cfg->stats_name);
	if (!name_ok(inst)) {
		log_error("stats: stats_name '%s': use letters, digits, '-', '_' or '.'", inst);
		free(st);
		return -1;
	}

	long long w = srv->workers, t = cfg->threads > 0 ? cfg->threads : 1;
	long long nslots = w * t > w ? w * t : w;
	if (nslots < 1)
		nslots = 1;
	if (nslots > STATS_MAX_SLOTS)
		nslots = STATS_MAX_SLOTS;
	long long ncaches = w < 1 ? 1 : w > STATS_CACHE_HALF ? STATS_CACHE_HALF : w;
	/* Room for the most slots and cache blocks any reload may want: tmpfs
	 * only allocates the pages that are written. */
	size_t caches_off, slots_off;
	size_t len = layout_sizes(&caches_off, &slots_off);

	bool fallback = false, reuse = false;
	struct stat sb;
	snprintf(st->shm_name, sizeof(st->shm_name), "/spindle-%s", inst);
	if (seg_refs > 0 && strcmp(seg_name, st->shm_name) != 0) {
		/* A reload under another name (a new stats_name, or auto and a new
		 * port): the counters carry on in the same segment, which takes
		 * the new name once this generation serves (stats_promote), so a
		 * reload that fails leaves it where the running one is. */
		memcpy(st->want_name, st->shm_name, sizeof(st->want_name));
		snprintf(st->shm_name, sizeof(st->shm_name), "%s", seg_name);
		copy_str(inst, sizeof(inst), seg_name + strlen("/spindle-"));
	}
	if (seg_refs > 0 && strcmp(seg_name, st->shm_name) == 0) {
		/* a reload: the segment is ours, keep counting in it */
		fd = shm_open(st->shm_name, O_RDWR | O_NOFOLLOW | O_CLOEXEC, 0);
		reuse = fd >= 0 && fstat(fd, &sb) == 0 && sb.st_ino == seg_ino && sb.st_uid == geteuid() &&
			(sb.st_mode & 07137) == 0 && (size_t)sb.st_size == len;
		if (!reuse && fd >= 0)
			close(fd);
	}
	if (!reuse)
		fd = create_named(st->shm_name, inst, len, &fallback);
	if (fd < 0 && !fallback) {
		free(st);
		return -1;
	}
	void *p;
	if (fd >= 0) {
		st->creator = getpid(); /* from here on, stats_close() removes the name */
		if (!reuse && ftruncate(fd, (off_t)len) < 0) {
			log_error("stats: ftruncate %s: %s", st->shm_name, strerror(errno));
			goto fail;
		}
		p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		if (fstat(fd, &sb) == 0)
			st->ino = sb.st_ino;
	} else {
		st->shm_name[0] = '\0';
		p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	}
	if (p == MAP_FAILED) {
		log_error("stats: mmap: %s", strerror(errno));
		goto fail;
	}
	st->h = p;
	st->len = len;
	st->fd = fd;
	fd = -1;

	struct stats_header *h = st->h;
	if (reuse) {
		/* the new generation's summary; the counters carry on */
		atomic_fetch_add(&h->generation, 1);
		if ((uint32_t)nslots > seg_nslots)
			seg_nslots = (uint32_t)nslots;
		nslots = seg_nslots;
		goto summary;
	}
	struct timespec rt;
	clock_gettime(CLOCK_REALTIME, &rt);
	h->version = STATS_VERSION;
	h->header_size = sizeof(*h);
	h->layout_size = len;
	h->pid = getpid();
	h->pid_starttime = proc_starttime(getpid());
	h->start_unix_ns = (int64_t)rt.tv_sec * 1000000000 + rt.tv_nsec;
	h->start_mono_ns = stats_mono_ns();
	atomic_init(&h->generation, 1);
summary:
	h->nslots = (uint32_t)nslots;
	h->ncaches = 2 * STATS_CACHE_HALF;
	h->slot_size = sizeof(struct stats_slot);
	h->caches_off = caches_off;
	h->slots_off = slots_off;
	h->port = cfg->nlisten ? 0 : cfg->port; /* listen lines replace bind and port: none of ours */
	h->workers = srv->workers;
	h->threads = cfg->threads;
	h->cache_size_mb = (int32_t)(cfg->cache_size >> 20);
	copy_str(h->name, sizeof(h->name), inst);
	copy_str(h->model, sizeof(h->model), srv->model ? srv->model->name : "?");
	copy_str(h->version_str, sizeof(h->version_str), SPINDLE_VERSION);
	copy_str(h->bind, sizeof(h->bind), cfg->nlisten ? "" : cfg->bind);
	copy_str(h->root, sizeof(h->root), cfg->root);
	listen_summary(h, cfg);
	__atomic_store_n(&h->magic, STATS_MAGIC, __ATOMIC_RELEASE); /* readers may look now */
	memcpy(&hdr_saved, (const void *)h, sizeof(hdr_saved));

	if (st->ino) {
		if (!reuse) {
			retire_current();
			seg_ino = st->ino;
			snprintf(seg_name, sizeof(seg_name), "%s", st->shm_name);
			seg_refs = 0;
			seg_nslots = (uint32_t)nslots;
			memset(cache_block_used, 0, sizeof(cache_block_used));
		}
		seg_refs++;
	}
	int base = st->ino ? cache_blocks_take((uint32_t)ncaches) : 0; /* a private mapping is this generation's alone */
	if (base < 0) {
		/* every block is held by generations still draining: this one's
		 * caches go uncounted rather than corrupt theirs */
		log_warn("stats: no free cache gauges for this generation (%d still draining)", seg_refs - 1);
		st->ncaches = 0;
	} else {
		st->cache_base = (uint32_t)base;
		st->ncaches = (uint32_t)ncaches;
		cache_blocks_zero(h, st->cache_base, st->ncaches);
	}
	st->nslots = (uint32_t)nslots;
	srv->stats = st;
	stats_serving_start(srv);
	return 0;
fail:
	if (fd >= 0)
		close(fd);
	if (!reuse && st->creator == getpid() && st->shm_name[0])
		shm_unlink(st->shm_name);
	free(st);
	return -1;
}

void stats_close(struct server *srv)
{
	struct stats *st = srv->stats;
	if (!st)
		return;
	srv->stats = NULL;
	segment_repair(st->h, st->fd, st->len);
	if (st->h == proc_h) {
		cache_set_gauges(srv->cache, NULL);
		stats_process_slot = NULL;
		stats_thread_slot = NULL;
		proc_h = NULL;
		proc_fd = -1;
	}
	if (st->creator == getpid()) {
		/* this generation's processes are gone: so are their caches, and
		 * only their blocks are cleared and given back */
		cache_blocks_zero(st->h, st->cache_base, st->ncaches);
		if (st->ino && st->ino == seg_ino)
			for (uint32_t i = 0; i < st->ncaches; i++)
				cache_block_used[st->cache_base + i] = false;
		/* the current segment may have been renamed since this generation opened it */
		char name[sizeof(seg_name)];
		snprintf(name, sizeof(name), "%s", st->ino && st->ino == seg_ino ? seg_name : st->shm_name);
		if (st->ino && release_use(st->ino)) {
			struct stat sb;
			char path[128];
			snprintf(path, sizeof(path), "/dev/shm%s", name);
			/* never remove a segment another instance created under the name since */
			if (stat(path, &sb) == 0 && sb.st_ino == st->ino && shm_unlink(name) < 0 && errno != ENOENT)
				log_warn("stats: shm_unlink %s: %s", name, strerror(errno));
		}
	}
	munmap(st->h, st->len);
	if (st->fd >= 0)
		close(st->fd);
	free(st);
}

static struct stats_slot *slot_for(long long id)
{
	long long n = proc_nslots;
	long long i = ((proc_base + id) % n + n) % n;
	struct stats_slot *s = slot_block(proc_h, (uint32_t)i);
	atomic_store_explicit(&s->bound, 1, memory_order_relaxed);
	return s;
}

void stats_bind_slot(int id)
{
	if (proc_h) {
		segment_repair(proc_h, proc_fd, proc_len); /* a thread or loop about to serve */
		stats_thread_slot = slot_for(id);
	}
}

int stats_next_id(void)
{
	return atomic_fetch_add_explicit(&proc_next_id, 1, memory_order_relaxed);
}

void stats_process_start(struct server *srv, int proc)
{
	if (!proc_h)
		return;
	segment_repair(proc_h, proc_fd, proc_len);
	atomic_store(&proc_next_id, 0);
	if (proc >= 0) {
		proc_base = proc * (srv->cfg->threads > 0 ? srv->cfg->threads : 1);
		/* the master's cache was empty when it forked: this worker's starts at zero */
		cache_set_gauges(srv->cache, proc_ncaches ? &cache_block(proc_h, proc_cache_base +
									    (uint32_t)proc % proc_ncaches)->g
							  : NULL);
		stats_process_slot = slot_for(0);
	} else {
		proc_base = 0;
		cache_set_gauges(srv->cache, NULL);
		stats_process_slot = slot_for(atomic_fetch_add(&proc_h->next_proc, 1));
	}
	stats_thread_slot = stats_process_slot;
}

/* A truncation can also come while a process serves, between two counts: the
 * next count then faults. The handler grows the segment back (ftruncate is
 * async-signal-safe) and returns, so the faulting write runs again on a page
 * that exists; the header is restored at the next repair. A SIGBUS anywhere
 * else keeps its default action. Installed in serving processes, inherited by
 * their workers. */
static void stats_on_sigbus(int sig, siginfo_t *si, void *uc)
{
	(void)uc;
	const char *a = si->si_addr, *base = (const char *)proc_h;
	if (base && proc_fd >= 0 && a >= base && a < base + proc_len && ftruncate(proc_fd, (off_t)proc_len) == 0) {
		__atomic_store_n(&truncation_caught, 1, __ATOMIC_RELAXED); /* lock-free: signal-safe */
		return;
	}
	signal(sig, SIG_DFL);
	raise(sig);
}

static void stats_catch_truncation(void)
{
	struct sigaction sa = { .sa_sigaction = stats_on_sigbus, .sa_flags = SA_SIGINFO | SA_RESTART };
	sigemptyset(&sa.sa_mask);
	sigaction(SIGBUS, &sa, NULL);
}

void stats_serving_start(struct server *srv)
{
	struct stats *st = srv->stats;

	/* everything a writer needs, from this generation's own record (the
	 * build's layout, never the segment header's) */
	proc_h = st ? st->h : NULL;
	proc_fd = st ? st->fd : -1;
	proc_len = st ? st->len : 0;
	proc_nslots = st ? st->nslots : 0;
	proc_base = 0;
	atomic_store(&proc_next_id, 0);
	proc_cache_base = st ? st->cache_base : 0;
	proc_ncaches = st ? st->ncaches : 0;
	stats_thread_slot = NULL;
	if (!proc_h) {
		stats_process_slot = NULL;
		cache_set_gauges(srv->cache, NULL);
		return;
	}
	segment_repair(proc_h, proc_fd, proc_len); /* before the first touch */
	if (proc_fd >= 0 && getpid() != st->creator)
		stats_catch_truncation(); /* a serving process (the master repairs before each touch) */
	stats_process_slot = slot_block(proc_h, 0);
	cache_set_gauges(srv->cache, proc_ncaches ? &cache_block(proc_h, proc_cache_base)->g : NULL);
}

/* Moves the current segment to st->want_name without replacing anything
 * there: true once it is there. A stale or doubtful segment of ours under
 * the name is reclaimed; a live instance's, or another user's, is left
 * alone, and the segment keeps its name: two instances that would share a
 * name (auto, one port on two addresses) then stay apart, and the log says
 * how to name them. */
static bool segment_rename(struct stats *st)
{
	char from[128], to[128];
	struct stat sb;
	snprintf(from, sizeof(from), "/dev/shm%s", seg_name);
	snprintf(to, sizeof(to), "/dev/shm%s", st->want_name);
	if (lstat(from, &sb) < 0 || !S_ISREG(sb.st_mode) || sb.st_ino != seg_ino) {
		log_warn("stats: /dev/shm%s is no longer this instance's segment: it keeps no name", seg_name);
		return false;
	}
	for (int attempt = 0; attempt < 3; attempt++) {
		if (renameat2(AT_FDCWD, from, AT_FDCWD, to, RENAME_NOREPLACE) == 0)
			return true;
		if (errno != EEXIST)
			break;
		pid_t pid = 0;
		uid_t uid = 0;
		const char *why = NULL;
		switch (probe(st->want_name, st->len, &pid, &uid, &why)) {
		case PROBE_GONE:
			continue;
		case PROBE_STALE:
		case PROBE_UNTRUSTED:
			log_warn("stats: reclaiming /dev/shm%s: %s", st->want_name,
				 why ? why : "left by an instance no longer running");
			if (shm_unlink(st->want_name) < 0 && errno != ENOENT)
				goto keep;
			continue;
		case PROBE_LIVE:
			log_warn("stats: statistics stay under /dev/shm%s: %s belongs to a running spindle (pid %d); "
				 "set stats_name to tell the instances apart", seg_name, st->want_name, (int)pid);
			return false;
		case PROBE_FOREIGN:
			log_warn("stats: statistics stay under /dev/shm%s: %s belongs to uid %d", seg_name, st->want_name,
				 (int)uid);
			return false;
		}
	}
keep:
	log_warn("stats: cannot rename /dev/shm%s to %s: %s; statistics stay under the old name", seg_name,
		 st->want_name, strerror(errno));
	return false;
}

void stats_promote(const struct server *srv)
{
	struct stats *st = srv->stats;
	if (!st || st->creator != getpid() || !st->want_name[0] || !st->ino || st->ino != seg_ino)
		return;
	if (strcmp(st->want_name, seg_name) != 0 && segment_rename(st)) {
		log_info("stats: /dev/shm%s is now /dev/shm%s; the counters carry on", seg_name, st->want_name);
		snprintf(seg_name, sizeof(seg_name), "%s", st->want_name);
		segment_repair(st->h, st->fd, st->len);
		copy_str(st->h->name, sizeof(st->h->name), seg_name + strlen("/spindle-"));
		memcpy(hdr_saved.name, st->h->name, sizeof(hdr_saved.name));
	}
	st->want_name[0] = '\0';
}

void stats_register_sites(struct server *srv)
{
	struct stats *st = srv->stats;
	if (!st || srv->sites.n < 2 || st->creator != getpid())
		return;
	struct stats_header *h = st->h;
	for (size_t i = 0; i < srv->sites.n; i++) {
		struct site *site = &srv->sites.site[i];
		const char *name = site->conf->name;
		int free_at = -1;
		for (int j = 0; j < STATS_SITES_MAX && site->stats_index < 0; j++) {
			if (strncmp(h->site[j], name, STATS_SITE_NAME) == 0)
				site->stats_index = j;
			else if (!h->site[j][0] && free_at < 0)
				free_at = j;
		}
		if (site->stats_index >= 0)
			continue;
		if (free_at < 0) {
			log_warn("stats: no room to count site '%s' apart (%d site names since the start)", name,
				 STATS_SITES_MAX);
			continue;
		}
		copy_str(h->site[free_at], sizeof(h->site[free_at]), name);
		site->stats_index = free_at;
	}
	memcpy(hdr_saved.site, h->site, sizeof(hdr_saved.site));
}

void stats_site_response(int site)
{
	struct stats_slot *s = stats_here();
	if (s && site >= 0 && site < STATS_SITES_MAX)
		STATS_ADD(s, site_requests[site], 1);
}

void stats_new_generation(const struct server *srv)
{
	if (srv->stats) {
		segment_repair(srv->stats->h, srv->stats->fd, srv->stats->len);
		atomic_fetch_add(&srv->stats->h->generation, 1);
	}
}

const struct stats_header *stats_snapshot(const struct server *srv, struct stats_copy *c, char *err, size_t errlen)
{
	if (!srv->stats) {
		snprintf(err, errlen, "no statistics");
		return NULL;
	}
	segment_repair(srv->stats->h, srv->stats->fd, srv->stats->len); /* readers need the header back */
	return stats_read_copy(srv->stats->h, srv->stats->len, c, err, errlen);
}

bool stats_peer_allowed(const struct server *srv, const struct sockaddr_storage *peer)
{
	return srv->stats && cidr_list_match(&srv->stats->allow, (const struct sockaddr *)peer);
}

static int latency_bucket(int64_t ns)
{
	if (ns <= 1000)
		return 0;
	uint64_t us = ((uint64_t)ns + 999) / 1000; /* round up: bucket i holds <= 2^i us */
	int i = 64 - __builtin_clzll(us - 1);
	return i < STATS_LAT_BUCKETS - 1 ? i : STATS_LAT_BUCKETS - 1;
}

void stats_response(enum stats_method method, int status, uint64_t body_bytes, int64_t latency_ns, bool reused)
{
	struct stats_slot *s = stats_here();
	if (!s)
		return;
	STATS_ADD(s, requests, 1);
	STATS_ADD(s, method[method], 1);
	if (status >= 100 && status < 600)
		STATS_ADD(s, status_class[status / 100 - 1], 1);
	int ci = -1;
	switch (status) {
	case 200: ci = STATS_200; break;
	case 206: ci = STATS_206; break;
	case 304: ci = STATS_304; break;
	case 400: ci = STATS_400; break;
	case 404: ci = STATS_404; break;
	case 500: ci = STATS_500; break;
	}
	if (ci >= 0)
		STATS_ADD(s, code[ci], 1);
	if (status >= 500)
		STATS_ADD(s, errors, 1);
	if (body_bytes)
		STATS_ADD(s, bytes_sent, body_bytes);
	if (reused)
		STATS_ADD(s, keepalive_reuses, 1);
	if (latency_ns < 0)
		latency_ns = 0;
	STATS_ADD(s, latency_ns_sum, (unsigned long long)latency_ns);
	STATS_ADD(s, latency[latency_bucket(latency_ns)], 1);
}

void stats_request_time(int64_t queue_ns, int64_t service_ns)
{
	struct stats_slot *s = stats_here();
	if (!s)
		return;
	queue_ns = queue_ns > 0 ? queue_ns : 0;
	service_ns = service_ns > 0 ? service_ns : 0;
	STATS_ADD(s, queue_ns_sum, (unsigned long long)queue_ns);
	STATS_ADD(s, service_ns_sum, (unsigned long long)service_ns);
	STATS_ADD(s, queue[stats_ladder_bucket(queue_ns)], 1);
	STATS_ADD(s, service[stats_ladder_bucket(service_ns)], 1);
}

bool stats_enabled(const struct server *srv)
{
	return srv->stats != NULL;
}
