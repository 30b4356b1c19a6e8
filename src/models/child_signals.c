/* child_signals.c - a self-pipe for SIGCHLD and SIGUSR1 (see the header). */
#include "child_signals.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define CHILD_LSAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(leak_sanitizer)
#define CHILD_LSAN 1
#endif
#endif
#ifdef CHILD_LSAN
#include <sanitizer/lsan_interface.h>
#endif

#include "../log/log.h"
#include "../server.h"

static int sig_pipe[2] = { -1, -1 };
static struct sigaction old_chld, old_usr1;

static void on_sigchld(int sig)
{
	int saved = errno;
	(void)sig;
	ssize_t n = write(sig_pipe[1], "c", 1); /* full pipe: a wake-up is pending anyway */
	(void)n;
	errno = saved;
}

/* SIGUSR1 reopens the logs here; the loop passes it on to the children,
 * which hold their own descriptors for the log files. */
static void on_sigusr1(int sig)
{
	int saved = errno;
	(void)sig;
	log_reopen();
	ssize_t n = write(sig_pipe[1], "u", 1);
	(void)n;
	errno = saved;
}

int child_signals_open(void)
{
	struct sigaction sa = { .sa_handler = on_sigchld, .sa_flags = SA_RESTART | SA_NOCLDSTOP };

	if (pipe2(sig_pipe, O_NONBLOCK | O_CLOEXEC) < 0)
		return -1;
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGCHLD, &sa, &old_chld) < 0)
		goto fail;
	sa.sa_handler = on_sigusr1;
	sa.sa_flags = SA_RESTART;
	if (sigaction(SIGUSR1, &sa, &old_usr1) < 0) {
		sigaction(SIGCHLD, &old_chld, NULL);
		goto fail;
	}
	return sig_pipe[0];
fail:
	close(sig_pipe[0]);
	close(sig_pipe[1]);
	sig_pipe[0] = sig_pipe[1] = -1;
	return -1;
}

void child_signals_close(void)
{
	if (sig_pipe[0] < 0)
		return;
	sigaction(SIGCHLD, &old_chld, NULL);
	sigaction(SIGUSR1, &old_usr1, NULL);
	close(sig_pipe[0]);
	close(sig_pipe[1]);
	sig_pipe[0] = sig_pipe[1] = -1;
}

pid_t child_fork(struct server *srv)
{
	sigset_t stops, old;
	pid_t parent = getpid();

	sigemptyset(&stops);
	sigaddset(&stops, SIGTERM);
	sigaddset(&stops, SIGINT);
	/* the forking models' parents are single-threaded: the process mask is theirs */
	sigprocmask(SIG_BLOCK, &stops, &old);
	pid_t pid = fork();
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		if (getppid() != parent)
			_exit(1); /* the parent died already */
		child_signals_close();
		if (server_enter_serving(srv) < 0)
			_exit(1);
	}
	sigprocmask(SIG_SETMASK, &old, NULL);
	return pid;
}

bool child_signals_drain(void)
{
	char buf[64];
	bool usr1 = false;
	ssize_t n;

	while ((n = read(sig_pipe[0], buf, sizeof(buf))) > 0)
		usr1 |= memchr(buf, 'u', (size_t)n) != NULL;
	return usr1;
}

bool child_exit_ok(int status)
{
	if (WIFSIGNALED(status))
		return WTERMSIG(status) == SIGKILL;
	return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

_Noreturn void child_exit(int rc)
{
#ifdef CHILD_LSAN
	/* a leak found here ends the child with LSan's exit code (or abort) */
	__lsan_do_leak_check();
#endif
	_exit(rc);
}
