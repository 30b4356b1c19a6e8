/* model.h - a concurrency model is a driver: it decides who calls the
 * connection core (conn.h) and when. It never knows HTTP. */
#ifndef SPINDLE_MODELS_MODEL_H
#define SPINDLE_MODELS_MODEL_H

struct server;

enum model_flags {
	MODEL_LISTENER_PER_WORKER = 1 << 0, /* wants one SO_REUSEPORT listener per worker */
};

struct model {
	const char *name;
	const char *summary;  /* one line, for --list-models */
	unsigned flags;
	/* Serves until server_stopping() turns true, then drains and returns 0
	 * (or non-zero after a fatal error, which it has logged). */
	int (*run)(struct server *srv);
};

const struct model *model_find(const char *name);

/* NULL-terminated, in --list-models order. */
extern const struct model *const model_registry[];

#endif
