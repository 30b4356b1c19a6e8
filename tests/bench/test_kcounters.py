"""The kernel counters per request (bench/kcounters.py) against workloads whose
counts are known: N voluntary sleeps are about N voluntary switches, N
getppid() calls about N system calls (also from threads that exit before the
count is read), K fresh pages touched at least K minor faults."""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench import kcounters  # noqa: E402

# A child that waits for a line, does the work, says "done" and waits again.
WORKER = r"""
import mmap, os, sys, threading, time
sys.stdin.readline()
what, n = sys.argv[1], int(sys.argv[2])
if what == "sleep":
    for _ in range(n):
        time.sleep(0.001)
elif what == "getppid":
    for _ in range(n):
        os.getppid()
elif what == "threads":       # n calls spread over 4 threads that exit before the count is read
    def work():
        for _ in range(n // 4):
            os.getppid()
    ts = [threading.Thread(target=work) for _ in range(4)]
    for t in ts: t.start()
    for t in ts: t.join()
elif what == "pages":
    m = mmap.mmap(-1, n * 4096)
    for i in range(n):
        m[i * 4096] = 1
sys.stdout.write("done\n"); sys.stdout.flush()
sys.stdin.readline()
"""


def measure(what: str, n: int, perf: bool = False) -> tuple[dict, dict]:
    p = subprocess.Popen([sys.executable, "-c", WORKER, what, str(n)], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    try:
        time.sleep(0.2)            # the interpreter has started and waits on stdin
        pc = kcounters.PerfCounter.start([p.pid]) if perf else None
        before = kcounters.snapshot([p.pid], None)
        p.stdin.write("go\n")
        p.stdin.flush()
        assert p.stdout.readline() == "done\n"
        after = kcounters.snapshot([p.pid], None)
        counts = pc.stop() if pc else {}
        return kcounters.delta(before, after), counts
    finally:
        p.stdin.close()
        p.wait(10)


def test_n_sleeps_are_about_n_voluntary_switches():
    d, _ = measure("sleep", 200)
    assert 200 <= d["ctx_vol"] <= 260, d


def test_touching_k_pages_is_at_least_k_minor_faults():
    d, _ = measure("pages", 2000)
    assert 2000 <= d["minflt"] <= 2600, d
    assert d["majflt"] == 0


needs_perf = pytest.mark.skipif(not kcounters.works(), reason="perf cannot count raw_syscalls:sys_enter here")


@needs_perf
def test_n_getppid_calls_are_about_n_system_calls():
    _, c = measure("getppid", 20000, perf=True)
    assert 20000 <= c["raw_syscalls:sys_enter"] <= 20000 + 200, c


@needs_perf
def test_system_calls_of_threads_that_exit_are_counted():
    # perf's counters are inherited by the threads the process starts and
    # summed when they exit: what the thread-per-connection model needs
    _, c = measure("threads", 20000, perf=True)
    assert 20000 <= c["raw_syscalls:sys_enter"] <= 20000 + 400, c


def test_per_request_divides_by_the_requests_served():
    d = {"user_s": 0.002, "sys_s": 0.004, "ctx_vol": 300, "ctx_invol": 10, "runq_s": 0.001, "minflt": 50,
         "majflt": 0, "softirq_s": 0.01, "user_sys_from": "cgroup"}
    r = kcounters.per_request(d, {"raw_syscalls:sys_enter": 1200.0, "context-switches": 320.0}, 100)
    assert r["user_us_per_req"] == pytest.approx(20) and r["sys_us_per_req"] == pytest.approx(40)
    assert r["ctx_vol_per_req"] == 3 and r["ctx_invol_per_req"] == pytest.approx(0.1)
    assert r["runq_us_per_req"] == pytest.approx(10) and r["minflt_per_req"] == pytest.approx(0.5)
    assert r["syscalls_per_req"] == 12 and r["ctx_per_req"] == pytest.approx(3.2)


def test_parsers_read_the_kernels_text():
    stat = ("42 (a (b) c) S 1 42 42 0 -1 4194560 100 7 3 1 11 12 13 14 20 0 1 0 5 1000 20 "
            "18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0")
    assert kcounters.parse_faults(stat) == (107, 4, 24, 26)
    assert kcounters.parse_status_switches("Name:\tx\nvoluntary_ctxt_switches:\t5\n"
                                           "nonvoluntary_ctxt_switches:\t2\n") == (5, 2)
    assert kcounters.parse_perf_csv("1234,,raw_syscalls:sys_enter,1000,100.00,,\n"
                                    "<not supported>,,cycles,0,100.00,,\n"
                                    "<not counted>,,context-switches,0,100.00,,\n") \
        == {"raw_syscalls:sys_enter": 1234.0, "context-switches": 0.0}


def test_the_cgroups_tick_sampled_split_is_scaled_to_its_exact_total():
    # 3 ticks of user and 1 of system sampled, 0.2 s of exact runtime: 0.15 s and 0.05 s
    before = {"threads": {}, "procs": (0, 0, 0, 0), "softirq": 0, "cg": (0, 0, 0)}
    after = {"threads": {}, "procs": (0, 0, 0, 0), "softirq": 0, "cg": (12_000_000, 4_000_000, 200_000_000)}
    d = kcounters.delta(before, after)
    assert d["user_s"] == pytest.approx(0.15) and d["sys_s"] == pytest.approx(0.05)
