"""python -m bench [--smoke|--full] [--only EXP,...] [--repeats N] [--cores 1,2,4] [--plan] [--out DIR]

Runs the lab (see bench/README.md) and writes bench/results/<timestamp>/.
The default run is what `make bench` does (5 repeats of 2 s cells, in a
shuffled order with a recorded seed, between two calibration cells; under 30
minutes on 2 cores: --plan prints the estimate without running anything);
--full adds the cells the default leaves out to stay in budget; --smoke runs
every cell once with tiny durations, to check the whole pipeline end to end."""
from __future__ import annotations

import argparse
import datetime
import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

from . import experiments
from .lab import Lab, REPO, LOAD_CPUS, SERVER_CPUS, VEGETA, loadavg
from .manifest import manifest
from . import procstat
from .lab import ORDER_SEED

# What the estimate charges, calibrated on the default runs of 2026-11-22
# (seeds and openloop: 13.2 min, published then; peers and tls: 11.9 min,
# docs/bench/partial), which this model puts at 25.7 min against 25.1
# measured (the whole default run published since: 17.0 min against 18.0): a time-based cell ran 3.04-3.37 s for 3 s asked (ab and wrk stop
# a little after their -t/-d), plus up to ~0.4 s of our bookkeeping (/proc
# scans, totals) on a loaded machine; a warm-up cost its duration plus vegeta's
# start-up; a server start with its curl pre-check 0.03-0.06 s, its stop 0.02 s.
CELL_OVERHEAD_S = 0.3
PERF_OVERHEAD_S = 0.0         # perf stat per cell: 0.07 s, only with --syscalls (not in the default run)
WARMUP_OVERHEAD_S = 0.1
SERVER_START_S = 0.3
COUNT_BASED_CELL_S = 1.2      # seed 001's 500-request runs (1.15 s measured)
OPEN_LOOP_DRAIN_S = 0.2       # vegeta waits for requests still in flight, then decodes its results
DEFAULT_BUDGET_S = 30 * 60    # make bench in at most 30 minutes on 2 cores, with 5 repeats
DEFAULT_REPEATS = 5           # the fewest that give a median an interval and Holm a chance (bench/stats.py)
DEFAULT_CELL_S = 2.0          # 5 x 2 s beats 3 x 3 s: drift between repeats, not noise within one, dominates


def host_steal(before: dict, after: dict) -> dict:
    """The host's steal time over the run (/proc/stat, all CPUs): time a
    hypervisor ran something else while this machine wanted its CPUs."""
    b, a = before.get("cpu", {}), after.get("cpu", {})
    total = sum(a.values()) - sum(b.values())
    st = a.get("steal", 0) - b.get("steal", 0)
    return {"steal_s": st / procstat.CLK_TCK, "share": st / total if total > 0 else 0.0}


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def rerender(out: Path, reference: Path | None = None) -> int:
    data = json.loads((out / "results.json").read_text())
    lab = SimpleNamespace(records=data["records"], notes=data.get("notes", {}),
                          server_memory=data.get("server_memory", []),
                          call_calibration=data.get("call_calibration", []))
    from . import report
    # the reference this run was first compared with, so a re-render prints the same replication,
    # unless another is named
    if reference is not None:
        ref = report.load_reference(reference)
    else:
        ref = data["reference_verdicts"] if "reference_verdicts" in data else report.load_reference(None)
    man = data["manifest"]
    from .manifest import git_revision
    now = git_revision()
    if now != man.get("spindle_revision"):
        man["rendered_by"] = now     # the verdicts are this commit's rules over the run's measurements
    report.write(lab, out, man, ref)
    print(f"re-rendered {out / 'report.md'}")
    return 0


def estimate_s(plan: list[dict], cell_s: float, warmup_s: float) -> float:
    t = 0.0
    for p in plan:
        timed = p["cells"] - p["count_based"]
        t += p["repeats"] * (timed * (cell_s + CELL_OVERHEAD_S + PERF_OVERHEAD_S)
                             + p["count_based"] * (COUNT_BASED_CELL_S + CELL_OVERHEAD_S + PERF_OVERHEAD_S))
        t += p["warmups"] * (warmup_s + WARMUP_OVERHEAD_S) if warmup_s > 0 else 0
        t += p["extra_s"]
        t += p.get("call_cal_s", 0.0)    # the untimed runs that count system calls (lab.calibrate_calls)
        t += (p["servers"] - p.get("carried_in", 0)) * SERVER_START_S
        t += p["repeats"] * p["open_loop"] * OPEN_LOOP_DRAIN_S
    return t


def make_plan(names: list[str], models: list[str], smoke: bool = False, full: bool = False,
              repeats: int = DEFAULT_REPEATS, cell_s: float = DEFAULT_CELL_S, warmup_s: float = 0.25,
              cores: list[int] | None = None, spindle: Path = REPO / "spindle",
              seed: int | None = None) -> list[dict]:
    """The cells each experiment would run, counted, nothing started."""
    import tempfile
    import shutil
    plan_dir = Path(tempfile.mkdtemp(prefix="spindle-plan-"))
    lab = Lab(plan_dir, smoke, repeats, spindle, cell_s, warmup_s, cores or [1, 2, 4])
    lab.plan = []
    lab.full = full
    if seed is not None:
        lab.seed = seed
    try:
        for n in names:
            experiments.EXPERIMENTS[n](lab, models)
    finally:
        lab.cleanup()
        shutil.rmtree(plan_dir, ignore_errors=True)   # --plan leaves nothing behind
    lab.plan = merge_plan(lab.plan, cell_s)
    for before, p in zip(lab.plan, lab.plan[1:]):     # servers kept up from the experiment before
        p["carried_in"] = len(set(before["keys"]) & set(p["keys"]))
    return lab.plan


def merge_plan(plan: list[dict], cell_s: float) -> list[dict]:
    """One entry per experiment: an experiment that runs its cells in several
    batches (openloop: calibration, knee probes, sweep) is counted as one, a
    batch with fewer repeats than the experiment's charged as extra time."""
    out: list[dict] = []
    for p in plan:
        if not out or out[-1]["exp"] != p["exp"]:
            out.append(dict(p))
            continue
        q = out[-1]
        if p["repeats"] > q["repeats"]:
            q, p = dict(p), q
            out[-1] = q
        per_cell = cell_s + CELL_OVERHEAD_S + PERF_OVERHEAD_S
        q["extra_s"] += p["extra_s"] - (q["repeats"] - p["repeats"]) * p["cells"] * per_cell
        for k in ("cells", "count_based", "open_loop", "warmups", "shared"):
            q[k] += p[k]
        q["call_cal_s"] = q.get("call_cal_s", 0.0) + p.get("call_cal_s", 0.0)
        q["keys"] = list(dict.fromkeys(q["keys"] + p["keys"]))
        q["servers"] = len(q["keys"])
        q["names"] = q["names"] + p["names"]
    return out


def missing_tools(vegeta: Path = VEGETA) -> list[str]:
    """The tools every default experiment needs. Without vegeta there is no
    warm-up and no open-loop cell: better to stop at once than to publish a
    run that silently lacks them."""
    import shutil
    need = {"ab": shutil.which("ab"), "wrk": shutil.which("wrk"), "curl": shutil.which("curl"),
            "taskset": shutil.which("taskset"), "prlimit": shutil.which("prlimit"),
            "timeout": shutil.which("timeout"), "h2load": shutil.which("h2load"), "nginx": "/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None,
            f"vegeta ({vegeta})": str(vegeta) if vegeta.exists() else None}
    return [name for name, path in need.items() if not path]


def run_experiments(lab: Lab, names: list[str], models: list[str], table: dict,
                    plan: list[dict] | None = None) -> None:
    """Runs the experiments in order; one that breaks (a missing tool, a bug) is
    noted in its section and the others still run, so the report is written.
    Servers the next experiment also runs (from the plan) stay up into it."""
    keys = {p["exp"]: set(p["keys"]) for p in plan or []}
    for i, n in enumerate(names):
        print(f"== {n}", flush=True)
        lab.carry_keys = keys.get(names[i + 1], set()) if i + 1 < len(names) else set()
        t0 = time.monotonic()
        try:
            table[n](lab, models)
        except Exception as e:   # KeyboardInterrupt is not an Exception: it still stops the run
            import traceback
            traceback.print_exc()
            lab.note(n, f"EXPERIMENT FAILED part-way ({type(e).__name__}: {e}); the cells measured before "
                        f"the failure are reported, the rest are missing.")
            print(f"== {n} FAILED: {type(e).__name__}: {e}", flush=True)
        finally:
            lab.exp_elapsed[n] = time.monotonic() - t0


def main() -> int:
    if sys.argv[1:2] == ["openloop"]:      # one open-loop point, not a lab run (bench/openloop.py)
        from . import openloop
        return openloop.main(sys.argv[2:])
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--smoke", action="store_true", help="every cell once, 1 s each: checks the pipeline")
    ap.add_argument("--full", action="store_true", help="also the cells the default run leaves out to stay "
                                                        "under 20 minutes (bench/README.md says which)")
    ap.add_argument("--only", default="", help="comma-separated experiments: " + ",".join(experiments.EXPERIMENTS)
                    + f" (default: {','.join(experiments.DEFAULT)})")
    ap.add_argument("--repeats", type=int, default=0, help=f"repeats per cell (default {DEFAULT_REPEATS}; smoke 1)")
    ap.add_argument("--cell-seconds", type=float, default=0,
                    help=f"seconds per time-based cell (default {DEFAULT_CELL_S:g}; smoke 1)")
    ap.add_argument("--seed", type=int, default=None, help="the measurement order's shuffle (default: "
                                                           "bench/lab.py ORDER_SEED; recorded in the manifest)")
    ap.add_argument("--no-calibration", action="store_true", help="skip the calibration cell at the start "
                                                                  "and end of the run")
    ap.add_argument("--cores", default="1,2,4", help="core counts for seed 002 (a); those above the machine's "
                                                     "are reported as not run")
    ap.add_argument("--syscalls", action="store_true", help="count system calls and context switches per "
                    "request with perf stat in every cell (it slows each system call: the report says so)")
    ap.add_argument("--pmu", action="store_true", help="with --syscalls, also cycles and instructions per request, "
                                                       "where the machine exposes hardware counters")
    ap.add_argument("--plan", action="store_true", help="print the cells and the time estimate, run nothing")
    ap.add_argument("--out", default="", help="results directory (default bench/results/<timestamp>)")
    ap.add_argument("--models", default="", help="comma-separated spindle models (default: all)")
    ap.add_argument("--spindle", default=str(REPO / "spindle"), help="the spindle binary")
    ap.add_argument("--reference", default="", help="the published verdicts to replicate (default "
                                                     "docs/bench/verdicts.json)")
    ap.add_argument("--report-only", metavar="DIR", help="re-render report.md and plots from DIR/results.json")
    ap.add_argument("--publish", metavar="DIR", default="", help="after a complete run, replace DIR's report, "
                                                                 "data and plots with this run's (make bench: docs/bench)")
    args = ap.parse_args()
    if args.report_only:
        rc = rerender(Path(args.report_only), Path(args.reference) if args.reference else None)
        if args.publish and not rc:
            publish(Path(args.report_only), Path(args.publish))
        return rc

    repeats = args.repeats or (1 if args.smoke else DEFAULT_REPEATS)
    cell_s = args.cell_seconds or (1.0 if args.smoke else DEFAULT_CELL_S)
    warmup_s = 0.2 if args.smoke else 0.25
    cores = [int(x) for x in args.cores.split(",") if x]
    spindle = Path(args.spindle)
    lm = subprocess.run([str(spindle), "--list-models"], capture_output=True, text=True, check=True, timeout=20)
    all_models = [ln.split()[0] for ln in lm.stdout.splitlines() if ln.strip()]
    models = [m for m in args.models.split(",") if m] or all_models
    names = [n for n in args.only.split(",") if n] or list(experiments.DEFAULT)
    for n in names:
        if n not in experiments.EXPERIMENTS:
            ap.error(f"unknown experiment {n!r}")
    if not args.no_calibration:
        names = experiments.with_calibration(names)
    seed = args.seed if args.seed is not None else ORDER_SEED

    if args.plan:
        plan = make_plan(names, models, args.smoke, args.full, repeats, cell_s, warmup_s, cores, spindle, seed)
        total = 0
        for p in plan:
            t = estimate_s([p], cell_s, warmup_s)
            total += t
            print(f"{p['exp']:<10} {p['cells']:3d} cells x {p['repeats']} repeats, {p['servers']:2d} servers "
                  f"({p.get('carried_in', 0)} kept up from the one before), {p['warmups']:3d} warm-ups: "
                  f"~{t / 60:.1f} min")
        print(f"total: ~{sum(p['cells'] * p['repeats'] for p in plan)} measurements, ~{total / 60:.1f} min "
              f"({cell_s:g} s per cell + {CELL_OVERHEAD_S:g} s overhead; a {warmup_s:g} s warm-up before a cell "
              f"unless the one before it loaded the same server)")
        return 0

    missing = missing_tools()
    if missing:
        print(f"python -m bench: missing {', '.join(missing)}: run scripts/install-deps.sh bench", file=sys.stderr)
        return 2

    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    # absolute: the servers it starts are handed paths inside it, and they do not share the lab's directory
    out = Path(args.out).resolve() if args.out else REPO / "bench" / "results" / stamp
    out.mkdir(parents=True, exist_ok=True)
    lab = Lab(out, args.smoke, repeats, spindle, cell_s, warmup_s, cores)
    lab.full = args.full
    lab.syscalls = args.syscalls or args.pmu
    lab.pmu = args.pmu
    lab.seed = seed
    plan = make_plan(names, models, args.smoke, args.full, repeats, cell_s, warmup_s, cores, spindle, seed)
    stat0 = procstat.machine()
    lab.load_at_start = loadavg()
    # SIGTERM/SIGINT: stop our servers (finally below), then exit.
    signal.signal(signal.SIGTERM, _interrupt)
    mode = "smoke" if args.smoke else "full" if args.full else "default"
    print(f"spindle lab ({mode}: {repeats} repeat(s), {cell_s:g} s cells, {warmup_s:g} s warm-up): server on "
          f"CPU {SERVER_CPUS}, load on CPU {LOAD_CPUS}; results in {out}", flush=True)
    t0 = time.monotonic()
    started = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    interrupted = False
    try:
        print(f"CPU meter: {lab.start_meter()}", flush=True)
        lab.make_docroot()
        run_experiments(lab, names, models, experiments.EXPERIMENTS, plan)
    except KeyboardInterrupt:
        interrupted = True
        print("interrupted: stopping servers, writing what was measured", flush=True)
    finally:
        lab.cleanup()
    elapsed = time.monotonic() - t0
    steal = host_steal(stat0, procstat.machine())
    man = manifest(lab, models, mode, repeats, started, elapsed, names)
    man["order_seed"] = seed
    man["steal"] = steal
    man["cpu_meter"] = lab.meter.method
    man["interrupted"] = interrupted
    man["cell_s"], man["warmup_s"], man["cores_asked"] = cell_s, warmup_s, cores
    man["experiment_elapsed_s"] = {n: round(t, 1) for n, t in lab.exp_elapsed.items()}
    man["experiment_estimate_s"] = {p["exp"]: round(estimate_s([p], cell_s, warmup_s), 1) for p in plan}
    (out / "manifest.json").write_text(json.dumps(man, indent=2) + "\n")
    from . import report   # matplotlib: only needed once there is something to plot
    report.write(lab, out, man, report.load_reference(Path(args.reference) if args.reference else report.REFERENCE))
    print(f"done in {elapsed / 60:.1f} min: {out / 'report.md'}", flush=True)
    failed_cells = sum(1 for r in lab.records if "failed_run" in r)
    failed_exps = [n for n, notes in lab.notes.items() if any(t.startswith("EXPERIMENT FAILED") for t in notes)]
    if failed_cells or failed_exps:
        print(f"WARNING: {failed_cells} measurement(s) failed"
              + (f"; experiment(s) that broke part-way: {', '.join(failed_exps)}" if failed_exps else "")
              + " (see the report's failures section)", flush=True)
    if args.publish and not interrupted:
        publish(out, Path(args.publish))
    return 130 if interrupted else 0


PUBLISHED = ("report.md", "index.html", "results.csv", "results.json", "manifest.json", "verdicts.json")


def publish(out: Path, dest: Path) -> None:
    """docs/bench holds exactly one run: its report (Markdown and HTML), data,
    plots and every cell's raw generator output (raw/)."""
    import shutil
    dest.mkdir(parents=True, exist_ok=True)
    for old in list(dest.glob("*.png")) + [dest / n for n in PUBLISHED]:
        old.unlink(missing_ok=True)
    shutil.rmtree(dest / "raw", ignore_errors=True)
    for f in [out / n for n in PUBLISHED] + sorted(out.glob("*.png")):
        if f.exists():
            shutil.copy2(f, dest / f.name)
    if (out / "raw").is_dir():
        shutil.copytree(out / "raw", dest / "raw")
    print(f"published to {dest}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
