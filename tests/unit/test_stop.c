/* test_stop.c - the stop request (server.c): a reload's retirement against a
 * real stop, and how a SIGTERM says which one it is. Criterion runs each test
 * in its own process, so each starts from "serving". */
#include <criterion/criterion.h>

#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "../../src/server.h"

/* What server_send_stop() sends for a retirement, as the receiver sees it
 * (sent to this process, taken with sigwaitinfo), then claimed to come from
 * the given sender. */
static siginfo_t retirement_from(pid_t sender)
{
	sigset_t set;
	siginfo_t info;
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigprocmask(SIG_BLOCK, &set, NULL);
	cr_assert_eq(server_send_stop(getpid(), true), 0);
	cr_assert_eq(sigwaitinfo(&set, &info), SIGTERM);
	cr_assert_eq(info.si_code, SI_QUEUE, "a retirement carries a value");
	info.si_pid = sender;
	return info;
}

Test(stop, a_stop_outranks_a_retirement)
{
	cr_assert(!server_stopping());
	server_request_retire();
	cr_assert(server_stopping() && server_retiring(), "a retiring process drains too");
	server_request_stop();
	cr_assert(server_stopping() && !server_retiring(), "a stop during a retirement turns checks to 503");
	server_request_retire();
	cr_assert(!server_retiring(), "a late retirement does not undo a stop");
}

Test(stop, a_plain_sigterm_is_a_stop)
{
	siginfo_t info;
	memset(&info, 0, sizeof(info));
	info.si_code = SI_USER;
	info.si_pid = getppid();
	server_stop_from_signal(SIGTERM, &info);
	cr_assert(server_stopping() && !server_retiring(), "kill -TERM from anyone is a stop");
}

Test(stop, the_parents_retirement_retires_and_sigint_still_stops)
{
	siginfo_t info = retirement_from(getppid());
	server_stop_from_signal(SIGTERM, &info);
	cr_assert(server_stopping() && server_retiring());
	server_stop_from_signal(SIGINT, &info);
	cr_assert(server_stopping() && !server_retiring(), "SIGINT is always a stop");
}

Test(stop, a_strangers_retirement_is_a_stop)
{
	siginfo_t info = retirement_from(getppid() + 1);
	server_stop_from_signal(SIGTERM, &info);
	cr_assert(server_stopping() && !server_retiring(), "only the parent retires a process");
}
