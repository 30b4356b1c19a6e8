"""The CPU meter of every cell: the server's CPU (every process and thread it
runs, including those that exit during the cell), the load generator's, the
lab's own, and what *else* ran on the machine, in nanoseconds.

Where a CPU-accounting cgroup hierarchy is writable (cgroup v1 `cpuacct`:
nanoseconds, per CPU; cgroup v2: `cpu.stat` usage_usec), the lab makes one
cgroup for itself with children: one per server (the server and everything it
forks or spawns), one for the load generators, one for the lab's own Python
process (warm-ups, pre-checks, result decoding). A cgroup's usage is the
scheduler's own runtime of its tasks, kept after they exit: no 10 ms ticks,
no child lost because it exited before the cell ended.

Other load = the machine's task time − the lab's cgroup. The machine's task
time is the root cgroup's usage (v1: the scheduler's runtime of every task),
or, on v2, /proc/stat's busy time without steal. Both count interrupt work the
way the kernel charges it: with tick-based accounting (no
CONFIG_IRQ_TIME_ACCOUNTING) a softirq that runs inside a task (the loopback
receive path inside the server's send) is that task's time, so nothing is
subtracted twice and the result is reported as measured, negative or not.

Of other load, the kernel's own threads (ksoftirqd, kworkers: children of
kthreadd) are read apart from their schedstat: softirq work the kernel defers
to ksoftirqd under load is the cell's, though no task of the cell ran it.

Without a writable hierarchy (no root, a read-only /sys/fs/cgroup), /proc:
every process's utime + stime + the children it reaped (cutime + cstime),
summed over the machine (a process that exits is reaped into its parent's
cutime), in 10 ms ticks; `method` says which meter a record used.

Nothing here signals or moves a process the lab did not start: processes
enter a cgroup by exec'ing through `sh -c 'echo $$ > cgroup.procs; exec ...'`
(enter_argv), the lab's own process moves itself, and close() moves it back."""
from __future__ import annotations

import os
import re
import time
from pathlib import Path

from . import procstat

V1_ROOT = Path("/sys/fs/cgroup/cpuacct")
V2_ROOTS = (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified"))
PREFIX = "spindle-lab-"


def _v2_usage_ns(d: Path) -> int:
    for ln in (d / "cpu.stat").read_text().splitlines():
        if ln.startswith("usage_usec "):
            return int(ln.split()[1]) * 1000
    raise OSError(f"{d}/cpu.stat has no usage_usec")


def _v1_usage_ns(d: Path) -> int:
    return int((d / "cpuacct.usage").read_text())


def _v1_percpu_ns(d: Path) -> list[int]:
    return [int(x) for x in (d / "cpuacct.usage_percpu").read_text().split()]


def procstat_task_ns(text: str) -> int:
    """/proc/stat's busy time without steal, as ns: the ticks every task was
    charged (user nice system irq softirq)."""
    c = procstat.parse_proc_stat(text)["cpu"]
    return (c["user"] + c["nice"] + c["system"] + c["irq"] + c["softirq"]) * 10**9 // procstat.CLK_TCK


def _own_cgroup(controller_line: str) -> str:
    """This process's path in a hierarchy, from /proc/self/cgroup: 'cpuacct'
    (v1, possibly 'cpu,cpuacct') or '' (v2)."""
    for ln in Path("/proc/self/cgroup").read_text().splitlines():
        _, ctrls, path = ln.split(":", 2)
        if controller_line in ctrls.split(",") or (controller_line == "" and ctrls == ""):
            return path
    return "/"


def _remove_stale(base: Path) -> None:
    """Empty cgroups left by a lab run that died (its PID is gone)."""
    for d in base.glob(PREFIX + "*"):
        m = re.fullmatch(PREFIX + r"(\d+)(?:-.*)?", d.name)
        if not m or Path(f"/proc/{m.group(1)}").exists():
            continue
        for child in d.iterdir():
            if child.is_dir():
                try:
                    child.rmdir()
                except OSError:
                    pass
        try:
            d.rmdir()
        except OSError:
            pass


class CgroupMeter:
    """The cgroup meter over `base` (the hierarchy's root, or any cgroup taken
    as "the machine": the tests use their own). version 1 = cpuacct, 2 = cpu.stat."""

    def __init__(self, base: Path, version: int, name: str = "", machine_from_procstat: bool = False):
        self.base, self.version = base, version
        self.usage = _v1_usage_ns if version == 1 else _v2_usage_ns
        self.machine_from_procstat = machine_from_procstat
        self.method = ("cgroup v1 cpuacct (ns)" if version == 1 else "cgroup v2 cpu.stat (µs)") \
            + ("; machine: /proc/stat busy without steal (10 ms ticks)" if machine_from_procstat else "")
        self.dir = base / (name or f"{PREFIX}{os.getpid()}")
        self.dir.mkdir(exist_ok=True)
        self.gen = self._child("gen")
        self.self_dir = self._child("lab")
        self.servers: dict[str, Path] = {}
        self.home: Path | None = None

    def _child(self, name: str) -> Path:
        d = self.dir / name
        d.mkdir(exist_ok=True)
        return d

    def adopt_self(self) -> None:
        """Moves the lab's own process into its cgroup (it moves back on close)."""
        own = _own_cgroup("cpuacct" if self.version == 1 else "")
        self.home = self.base / own.lstrip("/") if self.base in (V1_ROOT, *V2_ROOTS) else self.base
        (self.self_dir / "cgroup.procs").write_text(str(os.getpid()))

    def server_group(self, key: str) -> Path:
        d = self.servers.get(key)
        if d is None:
            d = self.servers[key] = self._child("srv-" + re.sub(r"[^A-Za-z0-9_.-]", "_", key))
        return d

    @staticmethod
    def enter_argv(group: Path, argv: list[str]) -> list[str]:
        """argv run from inside `group`: the shell writes its own PID into the
        cgroup, then becomes the command (same PID), so every process and
        thread it starts is counted from its first instruction."""
        return ["sh", "-c", 'echo $$ > "$0" && exec "$@"', str(group / "cgroup.procs"), *argv]

    def machine_ns(self) -> int:
        if self.machine_from_procstat:
            return procstat_task_ns(procstat.read("/proc/stat"))
        return self.usage(self.base)

    def snapshot(self, server_key: str | None, server_pids: list[int] | None = None) -> dict:
        snap = {"machine": self.machine_ns(), "lab": self.usage(self.dir), "gen": self.usage(self.gen),
                "server": self.usage(self.server_group(server_key)) if server_key else 0}
        if self.version == 1 and not self.machine_from_procstat:   # right after the totals: little skew
            snap["machine_percpu"] = _v1_percpu_ns(self.base)
            snap["lab_percpu"] = _v1_percpu_ns(self.dir)
        snap["kthreads"] = kernel_thread_times()
        return snap

    def release(self, key: str) -> None:
        d = self.servers.pop(key, None)
        if d is not None:
            try:
                d.rmdir()
            except OSError:
                pass

    def close(self) -> None:
        if self.home is not None:
            try:
                (self.home / "cgroup.procs").write_text(str(os.getpid()))
            except OSError:
                pass
        for d in [*self.servers.values(), self.gen, self.self_dir, self.dir]:
            try:
                d.rmdir()
            except OSError:
                pass


class ProcMeter:
    """The /proc fallback: every process's own and reaped children's CPU, in
    ticks. The lab's part is its own process with its children (the
    generators it reaps); the server's is its process tree (Server.pids)."""
    method = "/proc/PID/stat utime+stime+cutime+cstime (10 ms ticks)"

    def __init__(self) -> None:
        self.servers: dict[str, list[int]] = {}

    @staticmethod
    def enter_argv(group, argv: list[str]) -> list[str]:
        return argv

    def server_group(self, key: str):
        return None

    def snapshot(self, server_key: str | None, server_pids: list[int] | None = None) -> dict:
        allp = machine_process_ticks()
        tck = 10**9 // procstat.CLK_TCK
        srv = sum(allp.get(p, 0) for p in server_pids or [])
        return {"machine": sum(allp.values()) * tck, "lab": allp.get(os.getpid(), 0) * tck + srv * tck,
                "server": srv * tck, "gen": None, "kthreads": kernel_thread_times()}

    def release(self, key: str) -> None:
        pass

    def close(self) -> None:
        pass


def machine_process_ticks(proc: Path = Path("/proc")) -> dict[int, int]:
    """PID -> utime + stime + cutime + cstime (ticks) of every process. Summed
    over the machine between two snapshots this is every task's CPU in the
    window: a process that exits is reaped into its parent's cutime (whole
    lifetime), and its own figure from the first snapshot leaves the sum."""
    out = {}
    for d in proc.iterdir():
        if not d.name.isdigit():
            continue
        try:
            out[int(d.name)] = procstat.parse_pid_stat((d / "stat").read_text())[1]
        except (OSError, IndexError, ValueError):
            continue
    return out


_KTHREADS: tuple[float, list[int]] = (0.0, [])


def kernel_thread_times(max_age_s: float = 30.0) -> dict[int, tuple[int, int]]:
    """The kernel's own threads' schedstat (they are part of other load). The
    list of them is found by a scan of /proc at most every max_age_s seconds
    (tens of milliseconds on a busy machine; kworkers come and go slowly)."""
    global _KTHREADS
    now = time.monotonic()
    if now - _KTHREADS[0] > max_age_s:
        _KTHREADS = (now, procstat.kernel_threads())
    return procstat.threads_schedstat(_KTHREADS[1])


def make_meter(prefer: str = "auto"):
    """The best meter this machine allows: cgroup v1 cpuacct, cgroup v2, /proc."""
    if prefer in ("auto", "cgroup"):
        try:
            if (V1_ROOT / "cpuacct.usage").exists() and os.access(V1_ROOT, os.W_OK):
                _remove_stale(V1_ROOT)
                return CgroupMeter(V1_ROOT, 1)
            for root in V2_ROOTS:
                if (root / "cgroup.controllers").exists() and os.access(root, os.W_OK):
                    _remove_stale(root)
                    return CgroupMeter(root, 2, machine_from_procstat=True)
        except OSError:
            pass
    return ProcMeter()


def cell_figures(before: dict, after: dict, gen_fallback_s: float) -> dict:
    """Seconds of CPU in a cell's window: server, generator, the lab's own
    rest (its process, idle servers of the same experiment) and other load
    (unclamped), plus per CPU where the meter has it."""
    d = {k: (after[k] - before[k]) / 1e9 for k in ("machine", "lab", "server")}
    gen = (after["gen"] - before["gen"]) / 1e9 if before.get("gen") is not None else gen_fallback_s
    # The generators are inside the lab's part with either meter (their
    # cgroup is a child of the lab's; /proc: the lab process reaps them).
    out = {"server_cpu_s": d["server"], "gen_cpu_s": gen, "other_cpu_s": d["machine"] - d["lab"],
           "lab_cpu_s": d["lab"] - d["server"] - gen}
    if "kthreads" in before and "kthreads" in after:
        out["kthread_cpu_s"] = procstat.schedstat_delta(before["kthreads"], after["kthreads"])[0]
    if "machine_percpu" in before and "machine_percpu" in after:
        for i, (m0, m1, l0, l1) in enumerate(zip(before["machine_percpu"], after["machine_percpu"],
                                                 before["lab_percpu"], after["lab_percpu"])):
            out[f"other_cpu{i}_s"] = ((m1 - m0) - (l1 - l0)) / 1e9
    return out
