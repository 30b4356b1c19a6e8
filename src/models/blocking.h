/* blocking.h - serve one connection to its end from the calling thread: the
 * shared body of the iterative, fork, thread, pool and prefork models. */
#ifndef SPINDLE_MODELS_BLOCKING_H
#define SPINDLE_MODELS_BLOCKING_H

#include <sys/socket.h>

struct server;

/* Takes ownership of fd (non-blocking); returns when the connection is closed. */
void blocking_serve(const struct server *srv, int fd, const struct sockaddr *peer, socklen_t peerlen);

#endif
