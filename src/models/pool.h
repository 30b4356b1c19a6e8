/* pool.h - the thread pool behind the pool and prefork models. */
#ifndef SPINDLE_MODELS_POOL_H
#define SPINDLE_MODELS_POOL_H

#include <stdatomic.h>
#include <stdbool.h>

struct server;

/* How full each of several pools on one listener is (prefork's workers, one
 * pool each). A pool full at a limit the overload policy refuses at (reject:
 * its queue or its cap; shed: its cap) must not refuse a connection another
 * pool could take: it stops watching the listener, as under queue, so the
 * kernel wakes one with room, and refuses only once no pool is below that
 * limit. Shared memory, mapped by the prefork master before it forks the
 * workers; slot i is worker i's enum overload_limit, OVERLOAD_AT_CAP while it
 * is not serving (a worker not started, stopping or dead takes nothing). */
struct pool_room {
	int pools;
	atomic_int limit[];
};

/* Every slot at its cap; NULL (logged) when it cannot be mapped. */
struct pool_room *pool_room_new(int pools);
void pool_room_free(struct pool_room *room);
/* Pool id is gone (its worker exited): it takes nothing. */
void pool_room_gone(struct pool_room *room, int id);

/* Serves srv's listeners with nthreads workers, at most max_conns connections open,
 * from the calling thread (which becomes the listener and idle poller) until
 * server_stopping(); then drains and joins every thread. room: NULL for a
 * pool alone on its listeners, else the table it shares as pool id. Returns
 * 0, or 1 after a logged fatal error. Creates threads: never fork() after
 * calling it. */
int pool_serve(const struct server *srv, int nthreads, int max_conns, struct pool_room *room, int id);

#endif
