/* registry.c - every concurrency model, looked up by name. */
#include "model.h"

#include <string.h>

extern const struct model model_iterative;
extern const struct model model_fork;
extern const struct model model_thread;
extern const struct model model_pool;
extern const struct model model_prefork;
extern const struct model model_epoll;
extern const struct model model_uring;

const struct model *const model_registry[] = {
	&model_iterative,
	&model_fork,
	&model_thread,
	&model_pool,
	&model_prefork,
	&model_epoll,
	&model_uring,
	NULL,
};

const struct model *model_find(const char *name)
{
	for (const struct model *const *m = model_registry; *m; m++)
		if (strcmp((*m)->name, name) == 0)
			return *m;
	return NULL;
}
