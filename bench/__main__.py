"""python -m bench [--smoke] [--only EXP,...] [--repeats N] [--cores 1,2,4] [--plan] [--out DIR]

Runs the lab (see bench/README.md) and writes bench/results/<timestamp>/.
The default run is what `make bench` does (about 17 minutes on 2 cores; --plan
prints the estimate without running anything); --smoke runs every cell once
with tiny durations, to check the whole pipeline end to end."""
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

# Seconds a measured cell costs beyond its duration and warm-up (generator
# start-up, totals, parsing), and a server's start-up with its pre-check:
# measured on smoke runs of this machine.
CELL_OVERHEAD_S = 0.8
SERVER_START_S = 1.0
COUNT_BASED_CELL_S = 2.0      # seed 001's 500-request runs
OPEN_LOOP_DRAIN_S = 1.0       # vegeta waits up to its timeout for requests still in flight


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def rerender(out: Path) -> int:
    data = json.loads((out / "results.json").read_text())
    lab = SimpleNamespace(records=data["records"], notes=data.get("notes", {}),
                          server_memory=data.get("server_memory", []))
    from . import report
    report.write(lab, out, data["manifest"])
    print(f"re-rendered {out / 'report.md'}")
    return 0


def estimate_s(plan: list[dict], cell_s: float, warmup_s: float) -> float:
    t = 0.0
    for p in plan:
        timed = p["cells"] - p["count_based"]
        t += p["repeats"] * (timed * (cell_s + warmup_s + CELL_OVERHEAD_S)
                             + p["count_based"] * (COUNT_BASED_CELL_S + warmup_s + CELL_OVERHEAD_S))
        t += p["servers"] * SERVER_START_S
        t += p["repeats"] * p["open_loop"] * OPEN_LOOP_DRAIN_S
    return t


def missing_tools(vegeta: Path = VEGETA) -> list[str]:
    """The tools every default experiment needs. Without vegeta there is no
    warm-up and no open-loop cell: better to stop at once than to publish a
    run that silently lacks them."""
    import shutil
    need = {"ab": shutil.which("ab"), "wrk": shutil.which("wrk"), "curl": shutil.which("curl"),
            "taskset": shutil.which("taskset"), "prlimit": shutil.which("prlimit"),
            "timeout": shutil.which("timeout"), "nginx": "/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None,
            f"vegeta ({vegeta})": str(vegeta) if vegeta.exists() else None}
    return [name for name, path in need.items() if not path]


def run_experiments(lab: Lab, names: list[str], models: list[str], table: dict) -> None:
    """Runs the experiments in order; one that breaks (a missing tool, a bug) is
    noted in its section and the others still run, so the report is written."""
    for n in names:
        print(f"== {n}", flush=True)
        try:
            table[n](lab, models)
        except Exception as e:   # KeyboardInterrupt is not an Exception: it still stops the run
            import traceback
            traceback.print_exc()
            lab.note(n, f"EXPERIMENT FAILED part-way ({type(e).__name__}: {e}); the cells measured before "
                        f"the failure are reported, the rest are missing.")
            print(f"== {n} FAILED: {type(e).__name__}: {e}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--smoke", action="store_true", help="every cell once, 1 s each: checks the pipeline")
    ap.add_argument("--only", default="", help="comma-separated experiments: " + ",".join(experiments.EXPERIMENTS)
                    + f" (default: {','.join(experiments.DEFAULT)})")
    ap.add_argument("--repeats", type=int, default=0, help="repeats per cell (default 3; smoke 1)")
    ap.add_argument("--cell-seconds", type=float, default=0, help="seconds per time-based cell (default 3; smoke 1)")
    ap.add_argument("--cores", default="1,2,4", help="core counts for seed 002 (a); those above the machine's "
                                                     "are reported as not run")
    ap.add_argument("--plan", action="store_true", help="print the cells and the time estimate, run nothing")
    ap.add_argument("--out", default="", help="results directory (default bench/results/<timestamp>)")
    ap.add_argument("--models", default="", help="comma-separated spindle models (default: all)")
    ap.add_argument("--spindle", default=str(REPO / "spindle"), help="the spindle binary")
    ap.add_argument("--report-only", metavar="DIR", help="re-render report.md and plots from DIR/results.json")
    ap.add_argument("--publish", metavar="DIR", default="", help="after a complete run, replace DIR's report, "
                                                                 "data and plots with this run's (make bench: docs/bench)")
    args = ap.parse_args()
    if args.report_only:
        rc = rerender(Path(args.report_only))
        if args.publish and not rc:
            publish(Path(args.report_only), Path(args.publish))
        return rc

    repeats = args.repeats or (1 if args.smoke else 3)
    cell_s = args.cell_seconds or (1.0 if args.smoke else 3.0)
    warmup_s = 0.3 if args.smoke else 0.5
    cores = [int(x) for x in args.cores.split(",") if x]
    spindle = Path(args.spindle)
    lm = subprocess.run([str(spindle), "--list-models"], capture_output=True, text=True, check=True, timeout=20)
    all_models = [ln.split()[0] for ln in lm.stdout.splitlines() if ln.strip()]
    models = [m for m in args.models.split(",") if m] or all_models
    names = [n for n in args.only.split(",") if n] or list(experiments.DEFAULT)
    for n in names:
        if n not in experiments.EXPERIMENTS:
            ap.error(f"unknown experiment {n!r}")

    if args.plan:
        import tempfile
        import shutil
        plan_dir = Path(tempfile.mkdtemp(prefix="spindle-plan-"))
        lab = Lab(plan_dir, args.smoke, repeats, spindle, cell_s, warmup_s, cores)
        lab.plan = []
        try:
            for n in names:
                experiments.EXPERIMENTS[n](lab, models)
        finally:
            lab.cleanup()
            shutil.rmtree(plan_dir, ignore_errors=True)   # --plan leaves nothing behind
        total = 0
        for p in lab.plan:
            t = estimate_s([p], cell_s, warmup_s)
            total += t
            print(f"{p['exp']:<10} {p['cells']:3d} cells x {p['repeats']} repeats, {p['servers']:2d} servers: "
                  f"~{t / 60:.1f} min")
        print(f"total: {sum(p['cells'] * p['repeats'] for p in lab.plan)} measurements, ~{total / 60:.1f} min "
              f"({cell_s:g} s per cell + {warmup_s:g} s warm-up + {CELL_OVERHEAD_S:g} s overhead)")
        return 0

    missing = missing_tools()
    if missing:
        print(f"python -m bench: missing {', '.join(missing)}: run scripts/install-deps.sh bench", file=sys.stderr)
        return 2

    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = Path(args.out) if args.out else REPO / "bench" / "results" / stamp
    out.mkdir(parents=True, exist_ok=True)
    lab = Lab(out, args.smoke, repeats, spindle, cell_s, warmup_s, cores)
    lab.load_at_start = loadavg()
    # SIGTERM/SIGINT: stop our servers (finally below), then exit.
    signal.signal(signal.SIGTERM, _interrupt)
    mode = "smoke" if args.smoke else "default"
    print(f"spindle lab ({mode}: {repeats} repeat(s), {cell_s:g} s cells, {warmup_s:g} s warm-up): server on "
          f"CPU {SERVER_CPUS}, load on CPU {LOAD_CPUS}; results in {out}", flush=True)
    t0 = time.monotonic()
    started = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    interrupted = False
    try:
        lab.make_docroot()
        run_experiments(lab, names, models, experiments.EXPERIMENTS)
    except KeyboardInterrupt:
        interrupted = True
        print("interrupted: stopping servers, writing what was measured", flush=True)
    finally:
        lab.cleanup()
    elapsed = time.monotonic() - t0
    man = manifest(lab, models, mode, repeats, started, elapsed, names)
    man["interrupted"] = interrupted
    man["cell_s"], man["warmup_s"], man["cores_asked"] = cell_s, warmup_s, cores
    (out / "manifest.json").write_text(json.dumps(man, indent=2) + "\n")
    from . import report   # matplotlib: only needed once there is something to plot
    report.write(lab, out, man)
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


PUBLISHED = ("report.md", "results.csv", "results.json", "manifest.json")


def publish(out: Path, dest: Path) -> None:
    """docs/bench holds exactly one run: its report, data and plots."""
    import shutil
    dest.mkdir(parents=True, exist_ok=True)
    for old in list(dest.glob("*.png")) + [dest / n for n in PUBLISHED]:
        old.unlink(missing_ok=True)
    for f in [out / n for n in PUBLISHED] + sorted(out.glob("*.png")):
        if f.exists():
            shutil.copy2(f, dest / f.name)
    print(f"published to {dest}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
