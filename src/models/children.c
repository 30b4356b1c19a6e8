/* children.c - the running children of a forking model, reaped, signalled
 * and drained (see the header). */
#include "children.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "../conn.h"
#include "../log/log.h"
#include "../server.h"
#include "child_signals.h"

/* While a drain waits on children told only to retire, it looks this often
 * whether a real stop came meanwhile. */
#define CHILDREN_RETIRE_RECHECK_MS 100

int children_open(struct children *ch)
{
	ch->n = 0;
	ch->draining = ch->failed = false;
	ch->run = calloc((size_t)ch->cap, sizeof(*ch->run));
	if (!ch->run) {
		log_error("%s: out of memory for %d child slots", ch->model, ch->cap);
		return -1;
	}
	ch->sig_fd = child_signals_open();
	if (ch->sig_fd < 0) {
		log_error("%s: signal pipe: %s", ch->model, strerror(errno));
		free(ch->run);
		ch->run = NULL;
		return -1;
	}
	return 0;
}

void children_close(struct children *ch)
{
	child_signals_close();
	ch->sig_fd = -1;
	free(ch->run);
	ch->run = NULL;
	ch->n = 0;
}

void children_add(struct children *ch, pid_t pid, int id)
{
	ch->run[ch->n++] = (struct child){ .pid = pid, .id = id };
}

/* Takes pid out of the set; false if it was not in it. */
static bool children_forget(struct children *ch, pid_t pid, struct child *kid)
{
	for (int i = 0; i < ch->n; i++) {
		if (ch->run[i].pid == pid) {
			*kid = ch->run[i];
			ch->run[i] = ch->run[--ch->n];
			return true;
		}
	}
	return false;
}

static int child_kill(pid_t pid, int sig)
{
	return sig == SIGTERM ? server_send_stop(pid, server_retiring()) : kill(pid, sig);
}

void children_signal(const struct children *ch, int sig)
{
	for (int i = 0; i < ch->n; i++)
		if (child_kill(ch->run[i].pid, sig) < 0 && errno != ESRCH)
			log_warn("%s: kill %d: %s", ch->model, (int)ch->run[i].pid, strerror(errno));
}

void children_reap(struct children *ch)
{
	bool reopen = child_signals_drain();
	struct child kid;
	int status;
	pid_t pid;

	while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
		if (!children_forget(ch, pid, &kid))
			continue;
		if (!child_exit_ok(status))
			ch->failed = true;
		ch->exited(ch, kid, status);
	}
	if (pid < 0 && errno != ECHILD)
		log_error("%s: waitpid: %s", ch->model, strerror(errno));
	if (reopen)
		children_signal(ch, SIGUSR1);
}

void children_wait(const struct children *ch, int wake_fd, int listen_fd, int timeout_ms)
{
	struct pollfd pfd[3] = {
		{ .fd = ch->sig_fd, .events = POLLIN },
		{ .fd = wake_fd, .events = POLLIN }, /* poll() skips fd -1 */
		{ .fd = listen_fd, .events = POLLIN },
	};
	if (poll(pfd, 3, timeout_ms) < 0 && errno != EINTR)
		log_error("%s: poll: %s", ch->model, strerror(errno));
}

void children_drain(struct children *ch, int64_t deadline)
{
	ch->draining = true;
	children_reap(ch);
	bool told_retire = server_retiring();
	children_signal(ch, SIGTERM);
	while (ch->n > 0) {
		int64_t left = deadline - conn_now_ms();
		if (left <= 0)
			break;
		/* Not the stop eventfd: it stays readable once stopping, and
		 * watching it here made the whole drain a busy loop. So a stop
		 * that may still come while the children only retire is looked
		 * for now and then, and passed on: their checks turn 503 too. */
		if (told_retire && left > CHILDREN_RETIRE_RECHECK_MS)
			left = CHILDREN_RETIRE_RECHECK_MS;
		children_wait(ch, -1, -1, (int)left);
		if (told_retire && !server_retiring()) {
			children_signal(ch, SIGTERM);
			told_retire = false;
		}
		children_reap(ch);
	}
	if (ch->n > 0) {
		log_warn("%s: drain timeout: killing %d %s", ch->model, ch->n, ch->noun);
		children_signal(ch, SIGKILL);
	}
	while (ch->n > 0) {
		struct child kid;
		int status;
		pid_t pid = waitpid(-1, &status, 0);
		if (pid < 0) {
			if (errno == EINTR)
				continue;
			if (errno != ECHILD)
				log_error("%s: waitpid: %s", ch->model, strerror(errno));
			break;
		}
		children_forget(ch, pid, &kid);
	}
}
