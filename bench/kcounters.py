"""What each request costs the kernel, per cell, for the server's processes and
threads: user and system CPU apart, voluntary and involuntary context
switches, run-queue wait, minor and major page faults, system calls, and the
machine's softirq time, each divided by the requests served.

Where each figure comes from, and what a thread or process that exits during
the cell (fork's children, thread-per-connection's threads) does to it:

- user / system CPU: the server's cgroup (v1 cpuacct.usage_user/usage_sys,
  v2 cpu.stat user_usec/system_usec), which keeps an exited task's time. The
  kernel splits user from system by sampling at its timer tick (these
  figures move in steps of 1/HZ s even where the unit is ns), while the
  cgroup's total is the scheduler's exact runtime: the split is scaled to
  that total, as the kernel does for /proc's utime and stime. Without a
  cgroup, /proc/PID/stat utime+cutime / stime+cstime in ticks.
- minor / major faults: /proc/PID/stat minflt+cminflt / majflt+cmajflt summed
  over the server's processes at each end: the kernel folds an exited thread
  into its process's figure and a reaped child into its parent's c* fields,
  so a task that exits in the window stays in the sum (the same argument as
  bench/cpumeter.py's /proc meter).
- voluntary / involuntary switches and run-queue wait: per thread
  (/proc/PID/task/TID/status, .../schedstat), summed over the threads alive at
  either end, a thread born in the window counted from zero. The kernel keeps
  no per-process total of switches in /proc, so a thread that exits in the
  window takes its switches with it: these are lower bounds for fork and
  thread with a new connection per request; where perf works, `ctx_per_req`
  (perf's context-switches, inherited by every thread and child the server
  starts, summed when they exit) is the complete total to compare with.
- system calls: `perf stat -e raw_syscalls:sys_enter` attached to the
  server's threads for the cell (counting only, no sampling, no record
  written), inherited like the switches. Counting is not free: with the
  tracepoint on, every system call takes the kernel's slow path (a getppid()
  loop here: ~200 ns more per call, about twice a bare call), which would
  bias server CPU per request towards the servers that make more calls. So
  the lab attaches perf only with --syscalls (every cell, the report says
  so) and, by default, in cells no verdict rests on (the open loop's knee
  probes). Where perf cannot (no perf, perf_event_paranoid), or was not
  attached, syscalls_per_req is empty.
- softirq: /proc/stat's softirq column over the cell, all CPUs (the machine's,
  not only the server's: the loopback path runs in whichever task sent).

`--pmu` adds cycles and instructions to the perf events where the machine has
hardware counters (the manifest says whether it does)."""
from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

from . import procstat

PERF_EVENTS = ("raw_syscalls:sys_enter", "context-switches")
PMU_EVENTS = ("cycles", "instructions")


def parse_status_switches(text: str) -> tuple[int, int]:
    """/proc/.../status -> (voluntary, nonvoluntary) context switches."""
    vol = invol = 0
    for ln in text.splitlines():
        if ln.startswith("voluntary_ctxt_switches:"):
            vol = int(ln.split()[1])
        elif ln.startswith("nonvoluntary_ctxt_switches:"):
            invol = int(ln.split()[1])
    return vol, invol


def parse_faults(text: str) -> tuple[int, int, int, int]:
    """/proc/PID/stat -> (minflt + cminflt, majflt + cmajflt, utime + cutime,
    stime + cstime); the last two in ticks."""
    f = text.rsplit(")", 1)[1].split()
    # f[0] is field 3; minflt cminflt majflt cmajflt are 10-13, utime stime cutime cstime 14-17
    return (int(f[7]) + int(f[8]), int(f[9]) + int(f[10]), int(f[11]) + int(f[13]), int(f[12]) + int(f[14]))


def threads(pids: list[int], proc: Path = Path("/proc")) -> dict[int, tuple[int, int, int]]:
    """TID -> (voluntary, involuntary switches, ns waiting on a run queue)."""
    out = {}
    for p in pids:
        try:
            tids = os.listdir(proc / str(p) / "task")
        except OSError:
            continue
        for t in tids:
            d = proc / str(p) / "task" / t
            try:
                vol, invol = parse_status_switches((d / "status").read_text())
                wait = procstat.parse_schedstat((d / "schedstat").read_text())[1]
            except (OSError, IndexError, ValueError):
                continue
            out[int(t)] = (vol, invol, wait)
    return out


def processes(pids: list[int], proc: Path = Path("/proc")) -> tuple[int, int, int, int]:
    """Summed over the processes: (minor faults, major faults, user ticks,
    system ticks), each with the children they reaped."""
    tot = [0, 0, 0, 0]
    for p in pids:
        try:
            v = parse_faults((proc / str(p) / "stat").read_text())
        except (OSError, IndexError, ValueError):
            continue
        tot = [a + b for a, b in zip(tot, v)]
    return tuple(tot)


def cgroup_user_sys_ns(group: Path | None) -> tuple[int, int] | None:
    """(user, system, total) ns of a cgroup (v1 cpuacct or v2 cpu.stat), None without one."""
    if group is None:
        return None
    try:
        if (group / "cpuacct.usage_user").exists():
            return (int((group / "cpuacct.usage_user").read_text()), int((group / "cpuacct.usage_sys").read_text()),
                    int((group / "cpuacct.usage").read_text()))
        if (group / "cpu.stat").exists():
            kv = dict(ln.split() for ln in (group / "cpu.stat").read_text().splitlines() if ln.strip())
            return int(kv["user_usec"]) * 1000, int(kv["system_usec"]) * 1000, int(kv["usage_usec"]) * 1000
    except (OSError, KeyError, ValueError):
        return None
    return None


def snapshot(pids: list[int], group: Path | None) -> dict:
    return {"threads": threads(pids), "procs": processes(pids), "cg": cgroup_user_sys_ns(group),
            "softirq": procstat.parse_proc_stat(procstat.read("/proc/stat"))["cpu"]["softirq"]}


def delta(before: dict, after: dict) -> dict:
    """The window's totals (not yet per request)."""
    vol = invol = wait = 0
    for tid, (v1, i1, w1) in after["threads"].items():
        v0, i0, w0 = before["threads"].get(tid, (0, 0, 0))
        vol, invol, wait = vol + v1 - v0, invol + i1 - i0, wait + w1 - w0
    (mn0, mj0, u0, s0), (mn1, mj1, u1, s1) = before["procs"], after["procs"]
    out = {"ctx_vol": vol, "ctx_invol": invol, "runq_s": wait / 1e9, "minflt": mn1 - mn0, "majflt": mj1 - mj0,
           "softirq_s": (after["softirq"] - before["softirq"]) / procstat.CLK_TCK}
    if before["cg"] and after["cg"]:
        u, st, tot = ((a - b) / 1e9 for a, b in zip(after["cg"], before["cg"]))
        if u + st > 0:         # the tick-sampled split, scaled to the exact total
            u, st = tot * u / (u + st), tot * st / (u + st)
        out.update(user_s=u, sys_s=st, user_sys_from="cgroup (tick-sampled split of the exact total)")
    else:
        out.update(user_s=(u1 - u0) / procstat.CLK_TCK, sys_s=(s1 - s0) / procstat.CLK_TCK,
                   user_sys_from="/proc/PID/stat (ticks)")
    return out


class PerfCounter:
    """`perf stat` counting events on the given processes' threads (and what
    they start) until stop(); None from start() where perf cannot."""

    def __init__(self, proc: subprocess.Popen, events: tuple[str, ...]):
        self.proc, self.events = proc, events

    @classmethod
    def start(cls, pids: list[int], pmu: bool = False, cpus: str | None = None) -> "PerfCounter | None":
        if not pids or not works():
            return None
        events = PERF_EVENTS + (PMU_EVENTS if pmu else ())
        cmd = ["perf", "stat", "-x", ",", "--no-big-num", "-e", ",".join(events), "-p", ",".join(map(str, pids))]
        if cpus:
            cmd = ["taskset", "-c", cpus] + cmd
        try:
            p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                 start_new_session=True)
        except OSError:
            return None
        # perf prints nothing until it is stopped; it has attached once every
        # thread's counter is open, a few milliseconds on a quiet machine
        _wait_attached(p.pid, len(pids))
        return cls(p, events)

    def stop(self) -> dict[str, float]:
        try:
            self.proc.send_signal(signal.SIGINT)
            _, err = self.proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.communicate()
            return {}
        return parse_perf_csv(err)


def parse_perf_csv(text: str) -> dict[str, float]:
    """perf stat -x, output -> {event: count}; '<not supported>' is left
    out, '<not counted>' is 0 (the counter was open but its tasks never ran)."""
    out = {}
    for ln in text.splitlines():
        f = ln.split(",")
        if len(f) < 3 or not f[0]:
            continue
        if f[0] == "<not counted>":
            out[f[2]] = 0.0
            continue
        if f[0].startswith("<"):
            continue
        try:
            out[f[2]] = float(f[0])
        except ValueError:
            continue
    return out


def _wait_attached(perf_pid: int, _n: int, limit_s: float = 1.0) -> None:
    """Until perf holds perf_event descriptors (it opens them all before it
    starts counting), at most limit_s."""
    import time
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        try:
            if any(os.readlink(f"/proc/{perf_pid}/fd/{fd}") == "anon_inode:[perf_event]"
                   for fd in os.listdir(f"/proc/{perf_pid}/fd")):
                time.sleep(0.01)
                return
        except OSError:
            pass
        time.sleep(0.005)


_WORKS: bool | None = None


def works() -> bool:
    """Whether perf can count the syscall tracepoint here (asked once)."""
    global _WORKS
    if _WORKS is None:
        try:
            r = subprocess.run(["perf", "stat", "-x", ",", "-e", "raw_syscalls:sys_enter", "true"],
                               capture_output=True, text=True, timeout=20)
            _WORKS = r.returncode == 0 and "raw_syscalls:sys_enter" in parse_perf_csv(r.stderr)
        except (OSError, subprocess.TimeoutExpired):
            _WORKS = False
    return _WORKS


def per_request(d: dict, perf: dict[str, float] | None, served: int) -> dict:
    """results.csv's per-request columns."""
    if not served:
        return {}
    out = {"user_us_per_req": d["user_s"] * 1e6 / served, "sys_us_per_req": d["sys_s"] * 1e6 / served,
           "ctx_vol_per_req": d["ctx_vol"] / served, "ctx_invol_per_req": d["ctx_invol"] / served,
           "runq_us_per_req": d["runq_s"] * 1e6 / served, "minflt_per_req": d["minflt"] / served,
           "majflt_per_req": d["majflt"] / served, "softirq_us_per_req": d["softirq_s"] * 1e6 / served,
           "user_sys_from": d["user_sys_from"]}
    perf = perf or {}
    out["syscalls_per_req"] = perf["raw_syscalls:sys_enter"] / served if "raw_syscalls:sys_enter" in perf else None
    out["ctx_per_req"] = perf["context-switches"] / served if "context-switches" in perf else None
    if "cycles" in perf:
        out["cycles_per_req"] = perf["cycles"] / served
    if "instructions" in perf:
        out["instructions_per_req"] = perf["instructions"] / served
        if perf.get("cycles"):
            out["ipc"] = perf["instructions"] / perf["cycles"]
    return out
