/* pool.h - the thread pool behind the pool and prefork models. */
#ifndef SPINDLE_MODELS_POOL_H
#define SPINDLE_MODELS_POOL_H

struct server;

/* Serves srv's listeners with nthreads workers, at most max_conns connections open,
 * from the calling thread (which becomes the listener and idle poller) until
 * server_stopping(); then drains and joins every thread. Returns 0, or 1
 * after a logged fatal error. Creates threads: never fork() after calling it. */
int pool_serve(const struct server *srv, int nthreads, int max_conns);

#endif
