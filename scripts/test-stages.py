#!/usr/bin/env python3
"""Runs `make test`'s stages: phases one after another, the lanes of a phase
side by side, the stages of a lane in order. Each stage is a make target; its
output goes to REPORTS/stage-TARGET.log and is printed whole, under a header
naming the stage and its result, when the stage ends (so the outputs of
concurrent stages never interleave). A failed stage lets its phase finish but
no later phase start; the exit status is 1 when any stage failed.

At the end a table gives each stage's start, wall time and CPU time (its
processes and every descendant they waited for, from wait4), and each
phase's wall time, our CPU share and the whole machine's (from /proc/stat:
the difference is what else ran on the machine). It is written to
REPORTS/stages.txt too. Standard library only: it runs before the venv exists.

usage: test-stages.py [--reports DIR] [--make MAKE] PHASE...
  PHASE: "NAME: LANE LANE ...", a LANE: TARGET[+TARGET...]
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

NCPU = os.cpu_count() or 1


def machine_busy() -> tuple[float, float]:
    """(busy, total) jiffies of every CPU since boot."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    total = sum(fields[:8])  # guest time is already counted in user
    return total - idle, total


def clock(seconds: float) -> str:
    return f"{int(seconds) // 60}:{int(seconds) % 60:02d}"


class Stage:
    def __init__(self, phase: str, target: str):
        self.phase, self.target = phase, target
        self.start = self.wall = self.cpu = None
        self.status: int | None = None  # None: not run
        self.log: Path | None = None

    @property
    def result(self) -> str:
        if self.status is None:
            return "not run"
        return "passed" if self.status == 0 else f"FAILED ({self.status})"


class Runner:
    def __init__(self, make: str, reports: Path):
        self.make, self.reports = make, reports
        self.t0 = time.monotonic()
        self.print_lock = threading.Lock()
        # Sub-makes run one at a time per stage unless a stage asks for more
        # (the build does): the caller's -j and jobserver stay with the caller.
        flags = os.environ.get("MAKEFLAGS", "")
        self.env = dict(os.environ)
        self.env["MAKEFLAGS"] = " ".join(w for w in flags.split()
                                         if not re.match(r"(-j|--jobserver|--jobs)", w)
                                         and not re.fullmatch(r"j\d*", w))

    def say(self, text: str) -> None:
        with self.print_lock:
            sys.stdout.write(text)
            sys.stdout.flush()

    def run_stage(self, st: Stage) -> None:
        st.log = self.reports / f"stage-{st.target}.log"
        st.start = time.monotonic() - self.t0
        self.say(f"== [{clock(st.start)}] {st.phase}: {st.target} started\n")
        with open(st.log, "wb") as out:
            proc = subprocess.Popen([self.make, "--no-print-directory", st.target], stdout=out,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=self.env)
            _, wstatus, usage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(wstatus)
        st.wall = time.monotonic() - self.t0 - st.start
        st.cpu = usage.ru_utime + usage.ru_stime
        st.status = proc.returncode
        text = st.log.read_text(errors="replace")
        end = "" if text.endswith("\n") or not text else "\n"
        self.say(f"==== {st.phase}: {st.target} {st.result} after {st.wall:.0f} s "
                 f"(CPU {st.cpu:.0f} s); its output ({st.log}):\n{text}{end}"
                 f"==== end of {st.target}\n")

    def run_lane(self, lane: list[Stage]) -> None:
        for st in lane:
            self.run_stage(st)
            if st.status != 0:
                return


def parse_phase(text: str) -> tuple[str, list[list[str]]]:
    name, sep, lanes = text.partition(":")
    if not sep or not lanes.split():
        raise SystemExit(f"test-stages: bad phase {text!r} (expected 'NAME: LANE ...')")
    return name.strip(), [lane.split("+") for lane in lanes.split()]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reports", default="build/test-reports", type=Path)
    ap.add_argument("--make", default=os.environ.get("MAKE", "make"))
    ap.add_argument("phases", nargs="+")
    args = ap.parse_args()
    args.reports.mkdir(parents=True, exist_ok=True)
    phases = []
    for text in args.phases:
        name, lanes = parse_phase(text)
        phases.append((name, [[Stage(name, t) for t in lane] for lane in lanes]))

    runner = Runner(args.make, args.reports)
    phase_rows = []
    failed = False
    for name, lanes in phases:
        if failed:
            break
        t_start, (busy0, total0) = time.monotonic(), machine_busy()
        threads = [threading.Thread(target=runner.run_lane, args=(lane,)) for lane in lanes]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        busy1, total1 = machine_busy()
        wall = time.monotonic() - t_start
        ours = sum(st.cpu or 0 for lane in lanes for st in lane)
        machine = (busy1 - busy0) / max(total1 - total0, 1)
        phase_rows.append((name, wall, ours / (wall * NCPU), machine))
        failed = any(st.status not in (None, 0) for lane in lanes for st in lane)

    total = time.monotonic() - runner.t0
    lines = [f"make test stages: {clock(total)} in all on {NCPU} CPUs "
             f"(CPU share: of all {NCPU} CPUs over the stage's or phase's wall time)",
             f"{'phase':<8} {'stage':<22} {'start':>6} {'wall':>6} {'CPU s':>6} {'share':>6}  result"]
    for name, lanes in phases:
        for lane in lanes:
            for st in lane:
                if st.status is None:
                    lines.append(f"{name:<8} {st.target:<22} {'':>6} {'':>6} {'':>6} {'':>6}  not run")
                    continue
                lines.append(f"{name:<8} {st.target:<22} {clock(st.start):>6} {clock(st.wall):>6} "
                             f"{st.cpu:>6.0f} {st.cpu / max(st.wall, 0.1) / NCPU:>6.0%}  {st.result}")
    lines.append(f"{'phase':<8} {'wall':>6} {'ours':>6} {'machine':>8}")
    for name, wall, ours, machine in phase_rows:
        lines.append(f"{name:<8} {clock(wall):>6} {ours:>6.0%} {machine:>8.0%}")
    bad = [st for _, lanes in phases for lane in lanes for st in lane if st.status not in (None, 0)]
    for st in bad:
        tail = st.log.read_text(errors="replace").splitlines()[-40:]
        lines.append(f"\nstage {st.target} ({st.phase}) FAILED with status {st.status}; "
                     f"the end of its output (all of it above and in {st.log}):")
        lines += ["  " + ln for ln in tail]
    if bad:
        lines.append(f"\nmake test: {len(bad)} stage(s) failed: {', '.join(st.target for st in bad)}")
    report = "\n".join(lines) + "\n"
    (args.reports / "stages.txt").write_text(report)
    runner.say("\n" + report)
    return 1 if bad else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # the stages got the same SIGINT from the terminal
        sys.exit(130)
