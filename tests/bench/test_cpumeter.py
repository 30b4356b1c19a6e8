"""The lab's CPU meter (bench/cpumeter.py) and schedstat reader
(bench/procstat.py): known busy loops read as what they used, in the part of
the cell they ran in; an idle remainder reads as about zero; exited children
and threads are counted to the millisecond, not in 10 ms ticks."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench import cpumeter, lab, procstat  # noqa: E402

# A process that spins until its own CPU time (getrusage: the scheduler's
# runtime, microseconds) reaches argv[1] seconds, optionally after forking
# argv[2] children that each spin argv[3] seconds and are reaped, then prints
# the CPU it and its children used in all (interpreter start-up included) and
# waits for its stdin to close, so a reading can be taken while it is alive.
SPIN = r"""
import os, resource, sys
def used(who=resource.RUSAGE_SELF):
    r = resource.getrusage(who); return r.ru_utime + r.ru_stime
def spin(s):
    while used() < s: pass
target, kids, each = float(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
start = 0.0
if len(sys.argv) > 4:       # enter this cgroup first: count from there on
    open(sys.argv[4], "w").write(str(os.getpid()))
    start = used()
for _ in range(kids):
    pid = os.fork()
    if pid == 0:
        base = used(); 
        while used() - base < each: pass
        os._exit(0)
    os.waitpid(pid, 0)
spin(start + target)
print(used() + used(resource.RUSAGE_CHILDREN) - start, flush=True)
sys.stdin.read()
"""


class Spinner:
    def __init__(self, argv_prefix: list[str], target_s: float, kids: int = 0, each_s: float = 0.0,
                 enter: Path | None = None):
        cmd = [*argv_prefix, sys.executable, "-c", SPIN, str(target_s), str(kids), str(each_s)]
        if enter is not None:
            cmd.append(str(enter / "cgroup.procs"))
        self.p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def used(self) -> float:
        """The CPU it reports, once it has finished spinning (it stays alive)."""
        line = self.p.stdout.readline()
        assert line, "spinner died"
        return float(line)

    def end(self) -> None:
        self.p.stdin.close()
        self.p.wait(20)


def writable_hierarchies() -> list[tuple[Path, int]]:
    """Every CPU-accounting hierarchy this machine lets the lab write: cgroup
    v1 cpuacct and the v2 tree (both, where both are mounted)."""
    out = []
    if (cpumeter.V1_ROOT / "cpuacct.usage").exists() and os.access(cpumeter.V1_ROOT, os.W_OK):
        out.append((cpumeter.V1_ROOT, 1))
    for root in cpumeter.V2_ROOTS:
        if (root / "cgroup.controllers").exists() and os.access(root, os.W_OK):
            out.append((root, 2))
    return out


@pytest.fixture(params=writable_hierarchies() or [None], ids=lambda p: f"v{p[1]}" if p else "none")
def scoped_meter(request):
    """A meter whose "machine" is a cgroup of the test's own: the known busy
    loops are all that runs in it, so the other helpers' load on a shared
    machine does not enter the reading. Its children: the lab's part (server,
    generators) and `elsewhere`, standing for the rest of the machine."""
    if request.param is None:
        yield None
        return
    root, version = request.param
    scope = root / f"spindle-labtest-{os.getpid()}"
    scope.mkdir()
    meter = cpumeter.CgroupMeter(scope, version)
    elsewhere = scope / "elsewhere"
    elsewhere.mkdir()
    try:
        yield meter, elsewhere
    finally:
        meter.close()
        for d in (elsewhere, scope):
            d.rmdir()


def test_busy_loop_outside_the_cell_reads_as_that_much_other_load(scoped_meter):
    if scoped_meter is None:
        # no writable cgroup hierarchy: the /proc meter, machine-wide, where
        # neighbours can only add to the reading
        meter = cpumeter.ProcMeter()
        before = meter.snapshot(None, [])
        other = Spinner(["taskset", "-c", lab.LOAD_CPUS], 0.3)
        known = other.used()
        after = meter.snapshot(None, [])
        other.end()
        assert cpumeter.cell_figures(before, after, 0.0)["other_cpu_s"] >= known - 0.03
        return
    meter, elsewhere = scoped_meter
    before = meter.snapshot("srv")
    srv = Spinner(CgroupEnter(meter.server_group("srv")), 0.2)
    gen = Spinner(CgroupEnter(meter.gen), 0.15)
    # the free core's busy loop: neither server nor generator
    other = Spinner(["taskset", "-c", lab.LOAD_CPUS] + CgroupEnter(elsewhere), 0.3)
    known = {"server": srv.used(), "gen": gen.used(), "other": other.used()}
    after = meter.snapshot("srv")
    for s in (srv, gen, other):
        s.end()
    figs = cpumeter.cell_figures(before, after, gen_fallback_s=0.0)
    assert known["other"] >= 0.3
    assert figs["other_cpu_s"] == pytest.approx(known["other"], abs=0.003)
    assert figs["server_cpu_s"] == pytest.approx(known["server"], abs=0.003)
    assert figs["gen_cpu_s"] == pytest.approx(known["gen"], abs=0.003)
    if "machine_percpu" in before:      # v1: per CPU too, and they add up
        per = sum(v for k, v in figs.items() if k.startswith("other_cpu") and k != "other_cpu_s")
        # read a moment after the totals: they agree to the CPU used in between
        assert per == pytest.approx(figs["other_cpu_s"], abs=0.001)


def test_nothing_else_running_reads_as_about_zero_other_load(scoped_meter):
    if scoped_meter is None:
        pytest.fail("no writable cgroup hierarchy: an idle machine cannot be isolated on a shared one")
    meter, _ = scoped_meter
    before = meter.snapshot("srv")
    srv = Spinner([], 0.2, enter=meter.server_group("srv"))
    gen = Spinner([], 0.2, enter=meter.gen)
    srv.used(), gen.used()
    time.sleep(0.2)                    # idle time in the window reads as nothing at all
    after = meter.snapshot("srv")
    srv.end(), gen.end()
    figs = cpumeter.cell_figures(before, after, 0.0)
    assert abs(figs["other_cpu_s"]) < 0.002
    assert figs["server_cpu_s"] > 0.2 and figs["gen_cpu_s"] > 0.2


def CgroupEnter(group: Path) -> list[str]:
    return cpumeter.CgroupMeter.enter_argv(group, [])


def test_machine_meter_sees_a_busy_loop_of_another_process():
    """The meter the lab uses on this machine (root cgroup or /proc), machine-
    wide: the other helpers' load can only add, so the bound is one-sided."""
    meter = cpumeter.make_meter()
    try:
        t0 = time.monotonic()
        before = meter.snapshot(None, [])
        other = Spinner(["taskset", "-c", lab.LOAD_CPUS], 0.3)
        known = other.used()
        after = meter.snapshot(None, [])
        window = time.monotonic() - t0
        other.end()
        figs = cpumeter.cell_figures(before, after, 0.0)
        # a task running at a reading is charged up to its last scheduler tick
        # (4 ms at HZ=250); the /proc meter counts whole 10 ms ticks
        ncpu = os.cpu_count() or 1
        tick = 0.005 * ncpu if isinstance(meter, cpumeter.CgroupMeter) and not meter.machine_from_procstat \
            else 0.03 * ncpu
        assert known - 0.002 - tick <= figs["other_cpu_s"] <= ncpu * window + tick
    finally:
        meter.close()


def test_forked_children_are_counted_to_the_millisecond(scoped_meter):
    """A fork-per-request server: 200 children of ~1 ms each, reaped before
    the reading. The cgroup sees every one (they exited) to within a
    millisecond in all (the spinner enters its cgroup itself and counts from
    there); the /proc figure (the parent's cutime) is whole 10 ms
    ticks, which put every µs/request of a 500-request cell on a multiple of
    20 µs."""
    if scoped_meter is None:
        pytest.fail("no writable cgroup hierarchy: exited children cannot be counted in nanoseconds here")
    meter, _ = scoped_meter
    before = meter.snapshot("srv")
    srv = Spinner([], 0.05, kids=200, each_s=0.001, enter=meter.server_group("srv"))
    known = srv.used()
    after = meter.snapshot("srv", [srv.p.pid])
    ticks = cpumeter.ProcMeter().snapshot(None, [srv.p.pid])["server"] / 1e9
    srv.end()
    measured = cpumeter.cell_figures(before, after, 0.0)["server_cpu_s"]
    assert known > 0.2
    assert measured == pytest.approx(known, abs=0.001)
    assert round(ticks * 100, 6) == round(ticks * 100)      # the old figure: whole ticks
    assert (after["server"] - before["server"]) % 10_000_000 != 0     # not whole ticks: µs/request not on a grid


def test_proc_meter_arithmetic_with_exits_and_reaping(tmp_path, monkeypatch):
    """/proc fallback: a process alive at the first reading that exits and is
    reaped counts only its time after that reading (its parent's cutime takes
    its whole lifetime, its own first figure leaves the sum); one born and
    reaped inside the window counts whole."""
    def stat(pid, ppid, ut, st, cut, cst):
        return f"{pid} (x y) S {ppid} 0 0 0 0 0 0 0 0 0 {ut} {st} {cut} {cst} 20 0 1 0\n"

    def proc(entries):
        d = tmp_path / f"p{len(list(tmp_path.iterdir()))}"
        d.mkdir()
        for pid, text in entries.items():
            (d / str(pid)).mkdir()
            (d / str(pid) / "stat").write_text(text)
        return d
    t0 = proc({1: stat(1, 0, 10, 10, 0, 0), 50: stat(50, 1, 20, 5, 0, 0), 60: stat(60, 1, 7, 3, 0, 0)})
    # 50 ran 15 more ticks then exited, reaped by 1 (cutime += 40 lifetime); 60 reaped a child born and
    # gone inside the window (12 ticks) and ran 4 more itself; 70 is new
    t1 = proc({1: stat(1, 0, 10, 10, 30, 10), 60: stat(60, 1, 9, 5, 10, 2), 70: stat(70, 60, 3, 0, 0, 0)})
    a, b = cpumeter.machine_process_ticks(t0), cpumeter.machine_process_ticks(t1)
    assert sum(b.values()) - sum(a.values()) == 15 + 12 + 4 + 3


def test_schedstat_parser():
    assert procstat.parse_schedstat("123456789 2000 37\n") == (123456789, 2000, 37)


def test_schedstat_reader_sums_every_live_thread_in_nanoseconds():
    code = ("import threading, time, resource, sys\n"
            "def spin():\n"
            "    t = time.thread_time()\n"
            "    while time.thread_time() - t < 0.03: pass\n"
            "ts = [threading.Thread(target=spin) for _ in range(3)]\n"
            "[t.start() for t in ts]\n"
            "ev = threading.Event(); w = threading.Thread(target=ev.wait); w.start()\n"
            "[t.join() for t in ts]\n"
            "spin()\n"
            "r = resource.getrusage(resource.RUSAGE_SELF)\n"
            "print(r.ru_utime + r.ru_stime, threading.get_native_id(), w.native_id, flush=True)\n"
            "sys.stdin.read(); ev.set()\n")
    p = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        own, main_tid, waiter_tid = p.stdout.readline().split()
        threads = procstat.threads_schedstat([p.pid])
    finally:
        p.stdin.close()
        p.wait(20)
    own = float(own)
    # the main thread and the waiting one are alive; the three spinners have
    # exited (or are exiting) and take their own figures with them
    assert {int(main_tid), int(waiter_tid)} <= set(threads)
    main_run = threads[int(main_tid)][0] / 1e9
    assert 0.03 <= main_run < own - 0.06          # its own spin, not the process's 0.12 s
    assert sum(r for r, _ in threads.values()) / 1e9 <= own + 0.002
    assert threads[int(main_tid)][0] % 10_000_000 != 0      # nanoseconds, not ticks
    run, wait = procstat.schedstat_delta({}, threads)
    assert run == pytest.approx(sum(r for r, _ in threads.values()) / 1e9) and wait >= 0
    # a thread alive at both readings counts only what it did in between
    later = {t: (r + 5_000_000, w + 1_000_000) for t, (r, w) in threads.items()}
    assert procstat.schedstat_delta(threads, later) == pytest.approx((0.005 * len(threads), 0.001 * len(threads)))


def test_kernel_threads_are_kthreadd_and_its_children(tmp_path):
    def stat(pid, comm, ppid):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "stat").write_text(f"{pid} ({comm}) S {ppid} 0 0 0 0 0 0 0 0 0 5 5 0 0 20 0 1 0\n")
    stat(1, "init", 0)
    stat(2, "kthreadd", 0)
    stat(15, "ksoftirqd/1", 2)
    stat(99, "kworker/0:1-events", 2)
    stat(300, "sh", 1)
    assert sorted(procstat.kernel_threads(tmp_path)) == [2, 15, 99]
    (tmp_path / "2" / "stat").write_text("2 (bash) S 1 0 0 0 0 0 0 0 0 0 5 5 0 0 20 0 1 0\n")
    assert procstat.kernel_threads(tmp_path) == []      # a PID namespace: no kernel thread in sight


def test_a_cell_reads_the_kernel_threads_time_apart(scoped_meter):
    if scoped_meter is None:
        pytest.fail("no writable cgroup hierarchy")
    meter, _ = scoped_meter
    before = meter.snapshot("srv")
    after = meter.snapshot("srv")
    figs = cpumeter.cell_figures(before, after, 0.0)
    assert 0.0 <= figs["kthread_cpu_s"] < 0.5
    assert (len(before["kthreads"]) > 0) == Path("/proc/2/stat").read_text().startswith("2 (kthreadd)")
