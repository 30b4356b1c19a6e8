"""The suite's own safety net (conftest.py), tried from the outside: a
pytest session of its own (pytester, in a subprocess) runs a test that
lets a failure happen the way a real one would, and the session must fail
on it, naming it. Each case is a path a report once took unseen: a
sanitizer report from a spindle not started through util.Server (a
`--check` run, a master started by hand under an rlimit), a crash in a
server the test started itself, a server left running whose serving
process crashes while the session stops it."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import util

pytest_plugins = ("pytester",)

HERE = Path(__file__).resolve().parent


@pytest.fixture
def session(pytester, monkeypatch):
    """A pytester directory holding the suite's conftest.py and the helper
    modules it imports, so the inner tests run under the same net as this
    suite's (and the same binary: util.py finds it from its own place otherwise)."""
    monkeypatch.setenv("SPINDLE_BIN", str(util.spindle_bin()))
    monkeypatch.setenv("TMPDIR", str(pytester.path))  # its stray-report directory, kept with it
    for name in ("conftest.py", "util.py", "tlsutil.py"):
        shutil.copy(HERE / name, pytester.path / name)
    pytester.makeini("[pytest]\naddopts = -p no:cacheprovider\ntimeout = 60\n")
    return pytester


def run(pytester, *args: str):
    return pytester.runpytest_subprocess(*args, timeout=util.scaled(120))


@pytest.mark.parametrize("jobs", [[], ["-n", "1"]], ids=["serial", "xdist"])
def test_a_report_from_a_spindle_started_by_hand_fails_the_test(session, jobs):
    """What a sanitizer runtime does with log_path: writes PATH.PID. The
    writer here is a stand-in started the way test_master.py starts a master
    under an rlimit (plain Popen, the suite's environment)."""
    session.makepyfile(test_inner='''
        import os, subprocess, sys
        REPORT = "==1==ERROR: AddressSanitizer: heap-use-after-free\\n"
        # what the runtime does: PATH.PID under log_path, else stderr
        WRITE = ("import os, sys; o = os.environ.get('ASAN_OPTIONS', ''); "
                 "p = o.split('log_path=')[1].split(':')[0] if 'log_path=' in o else None; "
                 "open(p + '.' + str(os.getpid()), 'w').write(REPORT) if p else sys.stderr.write(REPORT)"
                 ).replace("REPORT", repr(REPORT))
        def test_started_by_hand():
            # stderr goes where test_master.py's rlimit starts send it: a file nobody reads
            subprocess.run([sys.executable, "-c", WRITE], stderr=subprocess.DEVNULL, check=True)
    ''')
    r = run(session, *jobs)
    out = r.stdout.str()
    assert r.ret != 0, out
    r.assert_outcomes(passed=1, errors=1)
    assert "heap-use-after-free" in out and "started outside util.Server" in out, out


def test_a_crash_in_an_adopted_server_fails_the_test(session, docroot):
    """A master started by the test itself (as test_cli.py, test_listen.py
    do), once adopted: its serving process crashing is a failure even though
    the master restarts it and (in a plain build) exits 0."""
    session.makepyfile(test_inner=f'''
        import os, signal, subprocess, time
        from pathlib import Path
        import util
        def test_own_master(tmp_path):
            port = util.free_port()
            proc = subprocess.Popen([str(util.spindle_bin()), "--bind", util.HOST, "--port", str(port),
                                     "--root", {str(docroot.path)!r}, "--model", "epoll",
                                     "--set", f"error_log={{tmp_path}}/error.log", "--set", "access_log=off"],
                                    stdin=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            util.Server.adopt(proc, tmp_path, tmp_path / "error.log")
            pids = util.wait_for(lambda: util.serving_pids(proc.pid), util.scaled(5))
            assert pids
            os.kill(pids[0], signal.SIGABRT)  # an assert(); sanitizers leave SIGABRT alone
            assert util.wait_for(lambda: "restarting it" in (tmp_path / "error.log").read_text(), util.scaled(5))
            proc.send_signal(signal.SIGTERM)
            proc.wait(util.scaled(10))  # 0 from a plain build: only the net sees the crash
    ''')
    r = run(session)
    out = r.stdout.str()
    r.assert_outcomes(passed=1, errors=1)
    assert "killed by signal 6" in out, out


@pytest.mark.parametrize("jobs", [[], ["-n", "1"]], ids=["serial", "xdist"])
def test_a_server_left_running_that_crashes_while_stopping_fails_the_run(session, jobs):
    """The test leaves its server up (as one that failed early does); the
    session stops it at the end, and its serving process crashes then: it is
    still inside a 3 s request when the master logs that it is stopping, and a
    thread of the test crashes it at that line. (An unread download held it
    only as long as the kernel's buffers were smaller than the file: on a host
    with larger ones the process had drained and exited before the kill.)"""
    session.makepyfile(test_inner='''
        import os, signal, threading
        import util
        from conftest import A_TXT
        HELD = []
        def test_leaves_its_server(docroot, tmp_path):
            srv = util.Server("epoll", docroot.path, tmp_path / "srv",
                              {"drain_timeout": "10s", "workload": "on", "work_unit": "1ms",
                               "buckets": "1", "delay_kind": "wall"}).start()
            assert srv.get("/a.txt").body == A_TXT
            serving = util.serving_pids(srv.proc.pid)[0]
            busy = srv.connect()
            busy.send(util.build_request("GET", "/work?delay=3000&bucket=0"))
            HELD.append(busy)  # in flight for 3 s: the serving process is still in it when stopping

            def crash_while_stopping():
                if util.wait_for(lambda: "stopping:" in srv.error_log.read_text(), 60):
                    os.kill(serving, signal.SIGABRT)
            threading.Thread(target=crash_while_stopping, daemon=True).start()
    ''')
    r = run(session, *jobs)
    out = r.stdout.str() + r.stderr.str()
    assert r.ret != 0, out
    assert "left running by their tests" in out or "left running" in out, out
    assert "killed by signal 6" in out, out


def test_a_broken_shared_server_under_x_still_names_the_failing_test(session):
    """`make asan-test` runs with -x: after a failure found at a test's
    teardown (the net's own checks), pytest tears the module's shared
    servers down from its own sessionfinish, where the pool's failed check
    raised an INTERNALERROR that replaced the summary naming the failing
    test. Now it is printed and the run fails as a failing test does."""
    session.makepyfile(test_inner='''
        def test_kills_its_shared_server(servers):
            srv = servers()
            srv.proc.kill()  # passes; its teardown finds the server dead
            srv.proc.wait()

        def test_never_run(server):
            assert server.alive()
    ''')
    r = run(session, "-x", "-k", "epoll")
    out = r.stdout.str() + r.stderr.str()
    assert r.ret == pytest.ExitCode.TESTS_FAILED, out
    assert "INTERNALERROR" not in out and "Traceback" not in r.stderr.str(), out
    assert "ERROR test_inner.py::test_kills_its_shared_server[epoll]" in out, out
    assert "epoll: had already died" in out, out


def test_skip_list_names_a_unit_test_skip_with_its_reason(tmp_path):
    """`make test` ends with every skip and its reason (scripts/skip-summary.py).
    A unit test's cr_skip_test() is counted nowhere by Criterion (its summary
    line leaves skips out, its XML drops the reason): the unit runs write JSON
    reports, and the list must show such a skip, reason included."""
    src = tmp_path / "t.c"
    src.write_text('#include <criterion/criterion.h>\n'
                   'Test(kernel, needs_openat2) { cr_skip_test("no openat2 on this kernel"); }\n'
                   'Test(kernel, runs) { cr_assert(1); }\n')
    exe = tmp_path / "t"
    subprocess.run(["cc", "-o", str(exe), str(src), "-lcriterion"], check=True, timeout=60)
    reports = tmp_path / "reports"
    reports.mkdir()
    r = subprocess.run([str(exe), f"--json={reports / 'unit.json'}"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    out = subprocess.run([sys.executable, str(util.REPO_ROOT / "scripts/skip-summary.py"), str(reports)],
                         capture_output=True, text=True, check=True, timeout=60).stdout
    assert "skipped tests in make test: 1 " in out, out
    assert "[unit] 1 x no openat2 on this kernel" in out and "kernel::needs_openat2" in out, out


def test_a_fresh_server_stopped_by_its_test_must_have_exited_0(session):
    """fresh_server checked the exit status only of servers it stopped
    itself: a test that stopped its own and dropped the status hid an
    unclean exit (here: the master killed)."""
    session.makepyfile(test_inner='''
        import signal
        def test_stops_its_own(fresh_server):
            srv = fresh_server()
            srv.signal(signal.SIGKILL)
            srv.stop()  # the status is dropped
    ''')
    r = run(session, "-k", "epoll")
    out = r.stdout.str()
    r.assert_outcomes(passed=1, errors=1)
    assert "stopped by the test, exit status -9" in out, out


def test_a_cut_short_leak_check_is_no_finding_but_any_report_beside_it_is():
    """LeakSanitizer's tracer prints only 'Unable to get registers' when the
    process it checks at exit is SIGKILLed (the drain timeout killing a fork
    child that was already exiting): no finding. Anything else in the file
    still fails the test."""
    lost = "==22021==Unable to get registers from thread 22020.\n"
    assert util.report_findings(lost).strip() == ""
    leak = "==7==ERROR: LeakSanitizer: detected memory leaks\nDirect leak of 8 byte(s)\n"
    assert "LeakSanitizer" in util.report_findings(lost + leak)
    assert "runtime error" in util.report_findings("x.c:1:2: runtime error: signed integer overflow\n" + lost)


def test_a_report_a_serving_process_could_not_symbolize_is_named_when_shown():
    """A serving process may not start a symbolizer (landlock), so its
    report's frames are module+offset only: the report shown names them."""
    binary = util.spindle_bin()
    nm = subprocess.run(["nm", "--defined-only", str(binary)], capture_output=True, text=True).stdout
    main_at = next(int(ln.split()[0], 16) for ln in nm.splitlines() if ln.split()[-1] == "main")
    report = (f"==1==ERROR: AddressSanitizer: SEGV on unknown address 0x000000000008\n"
              f"    #0 0x7f0000001234  ({binary}+{main_at + 4:#x}) (BuildId: 00)\n"
              f"    #1 0x7f0000005678  (/no/such/module.so+0x10)\n")
    shown = util.symbolized(report)
    assert f"+{main_at + 4:#x}) in main " in shown, shown
    assert "(/no/such/module.so+0x10)\n" in shown, "a frame nothing can name is left as it was"
