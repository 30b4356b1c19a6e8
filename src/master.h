/* master.h - the supervising process (see master.c). */
#ifndef SPINDLE_MASTER_H
#define SPINDLE_MASTER_H

#include "config.h"

/* Builds a fresh configuration from the same sources as at start (the
 * config file and the command line); 0, or -1 after reporting why. */
typedef int (*config_builder)(struct config *cfg, void *arg);

/* Runs until SIGTERM/SIGINT; returns the process exit status. The logs must
 * be open. */
int master_run(const struct config *cfg, config_builder build, void *build_arg);

#endif
