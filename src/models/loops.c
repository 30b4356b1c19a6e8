/* loops.c - starts, joins and cleans up a model's event loops (see the
 * header). */
#include "loops.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "../log/log.h"
#include "../server.h"
#include "slots.h"

#define LOOPS_STACK (256 * 1024)

int loops_run(const struct server *srv, const struct loop_ops *ops)
{
	int nloops = srv->workers < SLOTS_MAX_LOOPS ? srv->workers : SLOTS_MAX_LOOPS;
	char *loops = calloc((size_t)nloops, ops->size);
	pthread_t *threads = calloc((size_t)nloops, sizeof(*threads));
	struct conn_slots slots;
	pthread_attr_t attr;
	int inited = 0, started = 0, rc = 0;

	memset(&slots, 0, sizeof(slots)); /* slots_destroy() is safe after a failed init */
	if (!loops || !threads || slots_init(&slots, srv->cfg->max_connections, nloops) < 0) {
		log_error("%s: cannot set up %d loops: %m", ops->name, nloops);
		rc = 1;
		goto out;
	}
	for (int i = 0; i < nloops; i++) {
		inited = i + 1; /* a loop whose init failed is cleaned up too */
		if (ops->init(loops + (size_t)i * ops->size, srv, i, nloops, &slots) < 0) {
			rc = 1;
			goto out;
		}
	}
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, LOOPS_STACK);
	for (; started < nloops; started++) {
		int err = pthread_create(&threads[started], &attr, ops->main, loops + (size_t)started * ops->size);
		if (err) {
			log_error("pthread_create: %s", strerror(err));
			rc = 1;
			server_request_stop(); /* the loops already running drain and end */
			break;
		}
	}
	pthread_attr_destroy(&attr);
	for (int i = 0; i < started; i++)
		pthread_join(threads[i], NULL);
out:
	for (int i = 0; i < inited; i++)
		if (ops->fini(loops + (size_t)i * ops->size))
			rc = 1;
	free(loops);
	free(threads);
	slots_destroy(&slots);
	return rc;
}
