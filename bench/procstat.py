"""/proc readers for the lab's CPU accounting: what each CPU did
(/proc/stat: busy, interrupt and steal ticks), a process tree's CPU in ticks
(/proc/PID/stat, the /proc fallback of bench/cpumeter.py), and each thread's
time on a CPU and waiting for one in nanoseconds (/proc/PID/task/TID/schedstat).
The parsers are pure functions of the files' text (tests/bench)."""
from __future__ import annotations

import os
from pathlib import Path

CLK_TCK = os.sysconf("SC_CLK_TCK")

# /proc/stat "cpuN" columns (man 5 proc): user nice system idle iowait irq softirq steal
_COLS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


def parse_proc_stat(text: str) -> dict[str, dict[str, int]]:
    """'cpu' (all) and 'cpuN' lines -> {name: {column: ticks}}."""
    out = {}
    for ln in text.splitlines():
        if not ln.startswith("cpu"):
            continue
        parts = ln.split()
        out[parts[0]] = {c: int(v) for c, v in zip(_COLS, parts[1:9])}
    return out


def busy_ticks(cols: dict[str, int]) -> int:
    """Everything but idle and iowait (steal counts as busy: the CPU was not ours)."""
    return sum(v for k, v in cols.items() if k not in ("idle", "iowait"))


def parse_pid_stat(text: str) -> tuple[int, int]:
    """/proc/PID/stat -> (ppid, utime + stime + cutime + cstime in ticks). The
    command name may hold spaces and parentheses: split after the last ')'."""
    rest = text.rsplit(")", 1)[1].split()
    # rest[0] is field 3 (state); utime..cstime are fields 14..17
    return int(rest[1]), sum(int(x) for x in rest[11:15])


def read(path: str) -> str:
    return Path(path).read_text()


def tree_cpu_s(pids: list[int]) -> float:
    """CPU seconds used so far by these processes and the children they reaped
    (a reaped child has left the tree, so nothing is counted twice)."""
    ticks = 0
    for p in pids:
        try:
            ticks += parse_pid_stat(read(f"/proc/{p}/stat"))[1]
        except (OSError, IndexError, ValueError):
            continue
    return ticks / CLK_TCK


def machine() -> dict[str, dict[str, int]]:
    return parse_proc_stat(read("/proc/stat"))


def machine_delta(before: dict, after: dict) -> dict:
    """Per-CPU busy seconds and softirq seconds between two snapshots."""
    out = {}
    for name, cols in after.items():
        if name not in before:
            continue
        b = before[name]
        out[name] = {"busy_s": (busy_ticks(cols) - busy_ticks(b)) / CLK_TCK,
                     "softirq_s": (cols["softirq"] + cols["irq"] - b["softirq"] - b["irq"]) / CLK_TCK,
                     "steal_s": (cols["steal"] - b["steal"]) / CLK_TCK,
                     "total_s": (sum(cols.values()) - sum(b.values())) / CLK_TCK}
    return out


def parse_schedstat(text: str) -> tuple[int, int, int]:
    """/proc/PID/task/TID/schedstat -> (ns on a CPU, ns waiting on a run
    queue, time slices): the scheduler's own clock, not ticks."""
    run, wait, slices = text.split()[:3]
    return int(run), int(wait), int(slices)


def threads_schedstat(pids: list[int], proc: Path = Path("/proc")) -> dict[int, tuple[int, int]]:
    """TID -> (on-CPU ns, run-queue wait ns) of every live thread of these
    processes. A thread that exits takes its figures with it: the cell's CPU
    comes from cgroups (bench/cpumeter.py), this gives the run-queue wait."""
    out = {}
    for p in pids:
        try:
            tids = [d.name for d in (proc / str(p) / "task").iterdir()]
        except OSError:
            continue
        for t in tids:
            try:
                run, wait, _ = parse_schedstat((proc / str(p) / "task" / t / "schedstat").read_text())
            except (OSError, ValueError):
                continue
            out[int(t)] = (run, wait)
    return out


def schedstat_delta(before: dict[int, tuple[int, int]], after: dict[int, tuple[int, int]]) -> tuple[float, float]:
    """(on-CPU s, run-queue wait s) between two snapshots, over the threads
    alive at the end (a thread born in the window counts from zero)."""
    run = wait = 0
    for tid, (r1, w1) in after.items():
        r0, w0 = before.get(tid, (0, 0))
        run += r1 - r0
        wait += w1 - w0
    return run / 1e9, wait / 1e9


def kernel_threads(proc: Path = Path("/proc")) -> list[int]:
    """kthreadd (PID 2) and its children: ksoftirqd, kworkers and the rest of
    the kernel's own threads, whose CPU is other load but may be the cell's
    (softirq work deferred to ksoftirqd under load). None visible (a
    container's own PID namespace, where PID 2 is anybody): an empty list."""
    try:
        if "(kthreadd)" not in (proc / "2" / "stat").read_text():
            return []
    except OSError:
        return []
    out = []
    for d in proc.iterdir():
        if not d.name.isdigit():
            continue
        try:
            ppid, _ = parse_pid_stat((d / "stat").read_text())
        except (OSError, IndexError, ValueError):
            continue
        if d.name == "2" or ppid == 2:
            out.append(int(d.name))
    return out
