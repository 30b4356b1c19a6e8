/* notify.c - readiness and state notifications to a service manager over
 * the documented datagram protocol (sd_notify(3), "NOTIFY_SOCKET"), without
 * linking libsystemd: one AF_UNIX datagram per message, to a path or, for a
 * name starting with '@', to the abstract namespace. */
#include "notify.h"

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "log/log.h"

static int notify_fd = -1;

int notify_open(void)
{
	const char *name = getenv("NOTIFY_SOCKET");
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	size_t len;

	if (!name || !name[0])
		return 0;
	len = strlen(name);
	if ((name[0] != '/' && name[0] != '@') || len >= sizeof(sa.sun_path)) {
		log_error("notify: NOTIFY_SOCKET '%s' is neither an absolute path nor an @abstract name "
			  "that fits a UNIX socket address; not notifying", name);
		return -1;
	}
	memcpy(sa.sun_path, name, len);
	if (name[0] == '@')
		sa.sun_path[0] = '\0'; /* abstract: the length, not a NUL, ends the name */
	int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		log_error("notify: socket: %m; not notifying");
		return -1;
	}
	/* connect once, so every message is one send() and the address is
	 * checked here, at start, where a mistake can be reported */
	socklen_t salen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len + (name[0] == '/'));
	if (connect(fd, (struct sockaddr *)&sa, salen) < 0) {
		log_error("notify: connect to %s: %m; not notifying", name);
		close(fd);
		return -1;
	}
	notify_fd = fd;
	return 0;
}

bool notify_enabled(void)
{
	return notify_fd >= 0;
}

void notify_send(const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	if (notify_fd < 0)
		return;
	va_start(ap, fmt);
	int n = vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n >= sizeof(msg))
		n = sizeof(msg) - 1;
	/* MSG_DONTWAIT: a manager that stopped reading must not stall the
	 * master; its queue being full loses a message, as sd_notify would */
	if (send(notify_fd, msg, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT) < 0 && errno != EAGAIN)
		log_warn("notify: send '%.*s': %m", (int)strcspn(msg, "\n"), msg);
}

void notify_reloading(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	notify_send("RELOADING=1\nMONOTONIC_USEC=%llu",
		    (unsigned long long)ts.tv_sec * 1000000ULL + (unsigned long long)ts.tv_nsec / 1000);
}

void notify_close(void)
{
	if (notify_fd >= 0)
		close(notify_fd);
	notify_fd = -1;
}
