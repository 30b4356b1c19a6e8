"""python -m bench [--full] [--only EXP,...] [--repeats N] [--out DIR]

Runs the lab (see bench/README.md) and writes bench/results/<timestamp>/."""
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

from . import experiments, report
from .lab import Lab, REPO, LOAD_CPUS, SERVER_CPUS, loadavg
from .manifest import manifest


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def rerender(out: Path) -> int:
    data = json.loads((out / "results.json").read_text())
    lab = SimpleNamespace(records=data["records"], notes=data.get("notes", {}))
    report.write(lab, out, data["manifest"])
    print(f"re-rendered {out / 'report.md'}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    ap.add_argument("--full", action="store_true", help="the whole matrix (default: quick grids)")
    ap.add_argument("--only", default="", help="comma-separated experiments: " + ",".join(experiments.EXPERIMENTS))
    ap.add_argument("--repeats", type=int, default=0, help="repeats per cell (default: quick 3, full 5)")
    ap.add_argument("--out", default="", help="results directory (default bench/results/<timestamp>)")
    ap.add_argument("--models", default="", help="comma-separated spindle models (default: all)")
    ap.add_argument("--spindle", default=str(REPO / "spindle"), help="the spindle binary")
    ap.add_argument("--report-only", metavar="DIR", help="re-render report.md and plots from DIR/results.json")
    args = ap.parse_args()
    if args.report_only:
        return rerender(Path(args.report_only))

    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = Path(args.out) if args.out else REPO / "bench" / "results" / stamp
    out.mkdir(parents=True, exist_ok=True)
    repeats = args.repeats or (5 if args.full else 3)
    spindle = Path(args.spindle)
    lm = subprocess.run([str(spindle), "--list-models"], capture_output=True, text=True, check=True)
    all_models = [ln.split()[0] for ln in lm.stdout.splitlines() if ln.strip()]
    models = [m for m in args.models.split(",") if m] or all_models
    names = [n for n in args.only.split(",") if n] or list(experiments.EXPERIMENTS)
    for n in names:
        if n not in experiments.EXPERIMENTS:
            ap.error(f"unknown experiment {n!r}")

    lab = Lab(out, args.full, repeats, spindle)
    lab.load_at_start = loadavg()
    # SIGTERM/SIGINT: stop our servers (finally below), then exit.
    signal.signal(signal.SIGTERM, _interrupt)
    mode = "FULL" if args.full else "quick"
    print(f"spindle lab ({mode}, {repeats} repeats): server on CPU {SERVER_CPUS}, load on CPU {LOAD_CPUS}; "
          f"results in {out}", flush=True)
    t0 = time.monotonic()
    started = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    interrupted = False
    try:
        lab.make_docroot()
        for n in names:
            print(f"== {n}", flush=True)
            experiments.EXPERIMENTS[n](lab, models)
    except KeyboardInterrupt:
        interrupted = True
        print("interrupted: stopping servers, writing what was measured", flush=True)
    finally:
        lab.cleanup()
    elapsed = time.monotonic() - t0
    man = manifest(lab, models, mode, repeats, started, elapsed, names)
    man["interrupted"] = interrupted
    (out / "manifest.json").write_text(json.dumps(man, indent=2) + "\n")
    report.write(lab, out, man)
    print(f"done in {elapsed / 60:.1f} min: {out / 'report.md'}", flush=True)
    return 130 if interrupted else 0


if __name__ == "__main__":
    sys.exit(main())
