/* io.h - the system calls behind one step of the connection core, shared by
 * the readiness-based drivers (blocking and epoll). */
#ifndef SPINDLE_MODELS_IO_H
#define SPINDLE_MODELS_IO_H

#include "../tls/wire.h"

enum io_result {
	IO_PROGRESS, /* bytes moved; the socket may have more */
	IO_DRAINED,  /* bytes moved, and the socket has no more to give or take now */
	IO_AGAIN,    /* nothing moved: wait for readiness */
};

/* Does what wire_wants() asked for (READ, WRITE or SHUTDOWN) once, on a
 * non-blocking socket, and reports it to the core. */
enum io_result io_step(struct wire *c, int fd, enum conn_want want);

/* Largest file chunk sent in one call, so one big download cannot hog a loop
 * (nginx's sendfile_max_chunk is the same). */
#define IO_SENDFILE_CHUNK (2 * 1024 * 1024)

#endif
