/* test_children.c - the children of a forking model (src/models/children.c):
 * reaping with the exit status, passing SIGUSR1 on, and the stop's drain
 * (SIGTERM, then SIGKILL at the deadline), over real child processes.
 * Criterion runs each test in its own process, so each has its own SIGCHLD
 * handler and no other children. */
#include <criterion/criterion.h>

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../src/conn.h"
#include "../../src/models/child_signals.h"
#include "../../src/models/children.h"

static int nexited;
static struct child last_kid;
static int last_status;

static void record(struct children *ch, struct child kid, int status)
{
	(void)ch;
	nexited++;
	last_kid = kid;
	last_status = status;
}

enum behaviour {
	EXIT_3,        /* exits with status 3 at once */
	TERM_EXITS_0,  /* waits; a SIGTERM ends it with status 0 (a child draining cleanly) */
	TERM_IGNORED,  /* waits, deaf to SIGTERM (a child stuck in a long response) */
	USR1_REPORTS,  /* waits; writes 'U' to the report pipe on each SIGUSR1 */
};

static int report_fd = -1;

static void on_term(int sig)
{
	(void)sig;
	_exit(0);
}

static void on_usr1(int sig)
{
	(void)sig;
	ssize_t n = write(report_fd, "U", 1);
	(void)n;
}

/* Forks a child that behaves as asked; returns once it is ready for signals. */
static pid_t spawn(enum behaviour how, int report)
{
	int ready[2];
	cr_assert_eq(pipe(ready), 0);
	pid_t pid = fork();
	cr_assert(pid >= 0, "fork: %s", strerror(errno));
	if (pid == 0) {
		close(ready[0]);
		report_fd = report;
		if (how == EXIT_3)
			_exit(3);
		struct sigaction sa = { .sa_handler = SIG_IGN };
		sigemptyset(&sa.sa_mask);
		if (how == TERM_EXITS_0)
			sa.sa_handler = on_term;
		sigaction(SIGTERM, &sa, NULL);
		sa.sa_handler = how == USR1_REPORTS ? on_usr1 : SIG_DFL;
		sigaction(SIGUSR1, &sa, NULL);
		ssize_t n = write(ready[1], "r", 1);
		(void)n;
		for (int i = 0; i < 100; i++) /* never outlive a broken test by long */
			sleep(1);
		_exit(9);
	}
	close(ready[1]);
	char c;
	cr_assert_eq(read(ready[0], &c, 1), how == EXIT_3 ? 0 : 1, "the child got ready");
	close(ready[0]);
	return pid;
}

static struct children open_set(void)
{
	struct children ch = { .model = "test", .noun = "child(ren)", .cap = 4, .exited = record };
	cr_assert_eq(children_open(&ch), 0);
	return ch;
}

Test(children, an_exit_is_reaped_with_its_status_and_a_failure_is_kept)
{
	struct children ch = open_set();
	pid_t pid = spawn(EXIT_3, -1);
	children_add(&ch, pid, 7);

	int64_t give_up = conn_now_ms() + 5000;
	while (ch.n > 0 && conn_now_ms() < give_up) {
		children_wait(&ch, -1, -1, 1000); /* SIGCHLD wakes it */
		children_reap(&ch);
	}
	cr_assert_eq(ch.n, 0, "the child left the set");
	cr_assert_eq(nexited, 1);
	cr_assert_eq(last_kid.pid, pid);
	cr_assert_eq(last_kid.id, 7, "the model's id comes back with it");
	cr_assert(WIFEXITED(last_status) && WEXITSTATUS(last_status) == 3);
	cr_assert(ch.failed, "a non-zero exit is a failure");
	children_close(&ch);
}

Test(children, a_sigusr1_is_passed_on_to_every_child)
{
	int report[2];
	cr_assert_eq(pipe(report), 0);
	struct children ch = open_set();
	children_add(&ch, spawn(USR1_REPORTS, report[1]), 0);
	children_add(&ch, spawn(USR1_REPORTS, report[1]), 1);

	cr_assert_eq(raise(SIGUSR1), 0); /* child_signals' handler notes it in the pipe */
	children_reap(&ch);
	char got[2];
	size_t n = 0;
	while (n < 2) {
		struct pollfd pfd = { .fd = report[0], .events = POLLIN };
		cr_assert_eq(poll(&pfd, 1, 5000), 1, "both children heard it (%zu did)", n);
		ssize_t r = read(report[0], got + n, 2 - n);
		cr_assert(r > 0, "both children heard it");
		n += (size_t)r;
	}
	cr_assert_eq(memcmp(got, "UU", 2), 0);
	children_drain(&ch, conn_now_ms() + 100); /* they ignore SIGTERM: killed */
	children_close(&ch);
}

Test(children, the_drain_stops_children_with_sigterm)
{
	struct children ch = open_set();
	children_add(&ch, spawn(TERM_EXITS_0, -1), 0);
	children_add(&ch, spawn(TERM_EXITS_0, -1), 1);

	int64_t t0 = conn_now_ms();
	children_drain(&ch, t0 + 10000);
	cr_assert_eq(ch.n, 0);
	cr_assert_lt(conn_now_ms() - t0, 5000, "the drain ends when the children do, not at its deadline");
	cr_assert_eq(nexited, 2, "each clean exit is reported");
	cr_assert(WIFEXITED(last_status) && WEXITSTATUS(last_status) == 0);
	cr_assert(!ch.failed);
	children_close(&ch);
}

Test(children, the_drain_kills_a_child_deaf_to_sigterm_at_its_deadline)
{
	struct children ch = open_set();
	pid_t pid = spawn(TERM_IGNORED, -1);
	children_add(&ch, pid, 0);

	int64_t t0 = conn_now_ms();
	children_drain(&ch, t0 + 300);
	int64_t took = conn_now_ms() - t0;
	cr_assert_eq(ch.n, 0, "killed and reaped");
	cr_assert_geq(took, 300, "waited out the drain time first");
	cr_assert_lt(took, 5000);
	cr_assert_eq(nexited, 0, "those the drain kills are not reported");
	cr_assert(!ch.failed, "SIGKILL at the deadline is not a failure");
	cr_assert_eq(waitpid(pid, NULL, WNOHANG), -1, "no zombie left");
	cr_assert_eq(errno, ECHILD);
	children_close(&ch);
}
