"""One open-loop point: tools/openloop/openloop.c (built here on first use, in
about a second) sends requests at a constant or Poisson rate whatever the
server does, and times every request from when it was due, so a stall shows in
the percentiles (see bench/README.md for why not vegeta, oha or wrk2).

    python3 -m bench openloop --url URL --rate R --seconds S
                              [--arrivals poisson|constant] [--deadline-ms D] --json OUT

OUT gets p50_ms, p90_ms, p99_ms, p999_ms, max_ms, the achieved rate (answered
200 per second of schedule), errors and the generator's own CPU (getrusage of
its process: user and system seconds)."""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

REPO = Path(__file__).resolve().parents[1]
SOURCE = REPO / "tools" / "openloop" / "openloop.c"
BINARY = REPO / "build" / "openloop"


def build(binary: Path = BINARY) -> Path:
    """Compiles the generator when missing or older than its source."""
    if not binary.exists() or binary.stat().st_mtime < SOURCE.stat().st_mtime:
        binary.parent.mkdir(parents=True, exist_ok=True)
        tmp = binary.with_name(binary.name + f".{os.getpid()}.tmp")
        subprocess.run(["cc", "-std=c17", "-O2", "-o", str(tmp), str(SOURCE), "-lm"], check=True,
                       capture_output=True, timeout=120)
        tmp.replace(binary)
    return binary


def argv(url: str, rate: float, seconds: float, arrivals: str = "constant", max_conns: int = 1000,
         timeout_ms: float = 2000, seed: int = 1, hist: Path | None = None, binary: Path = BINARY,
         deadline_ms: float | None = None) -> list[str]:
    u = urlsplit(url)
    if u.scheme != "http" or not u.port or not u.hostname:
        raise ValueError(f"{url}: expected http://IPV4:PORT/PATH")
    a = [str(binary), "-h", u.hostname, "-p", str(u.port), "-u", (u.path or "/") + (f"?{u.query}" if u.query else ""),
         "-r", f"{rate:g}", "-d", f"{seconds:g}", "-a", arrivals, "-c", str(max_conns), "-t", f"{timeout_ms:g}",
         "-s", str(seed)]
    if hist:
        a += ["-H", str(hist)]
    if deadline_ms is not None:
        a += ["-D", f"{deadline_ms:g}"]
    return a


def parse(out: str) -> dict:
    """The generator's JSON line, plus the names the lab's tables use."""
    for ln in reversed(out.splitlines()):
        if ln.startswith("{"):
            m = json.loads(ln)
            m["requests"] = m["sent"]
            m["rps"] = m["achieved_rate"]
            m["sent_rate_ratio"] = m["sent_rate"] / m["rate"] if m["rate"] else 0.0
            return m
    raise ValueError(f"openloop printed no result: {out[-400:]}")


def goodput_fields(m: dict) -> dict:
    """Past a server's capacity, per second of schedule: `goodput_rate` (200s
    answered within the client's deadline and before the schedule ended: those
    answered in the tail after it had server time no steady state has),
    `good_tail_rate` (the on-time 200s answered in that tail), `late_rate` (200s after it: too late
    to be of use), `s503_rate` (refused or shed), and
    `lost_rate` (neither: timed out, reset, unparsable); the 200s' own p50
    and p99 (None where there was no 200)."""
    secs = m["seconds"]
    in_window = m.get("good_in_window", m["good"])
    return {"goodput_rate": in_window / secs, "good_tail_rate": (m["good"] - in_window) / secs, "late_rate": (m["ok"] - m["good"]) / secs,
            "s503_rate": m["status_503"] / secs, "other_status_rate": (m["non200"] - m["status_503"]) / secs,
            "lost_rate": (m["errors"] - m["non200"]) / secs,
            "ok_p50_ms": m["ok_p50_ms"] if m["ok_p50_ms"] >= 0 else None,
            "ok_p99_ms": m["ok_p99_ms"] if m["ok_p99_ms"] >= 0 else None,
            "deadline_ms": m["deadline_ms"]}


def run(url: str, rate: float, seconds: float, arrivals: str = "constant", hist: Path | None = None,
        prefix: list[str] | None = None, **kw) -> dict:
    cmd = (prefix or []) + argv(url, rate, seconds, arrivals, hist=hist, binary=build(), **kw)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 60)
    if r.returncode != 0:
        raise RuntimeError(f"openloop exited {r.returncode}: {r.stderr[-400:]}")
    m = parse(r.stdout)
    m["cmd"] = " ".join(cmd)
    return m


def main(args: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench openloop", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", required=True, help="http://127.0.0.1:PORT/PATH (IPv4, plain HTTP/1.1)")
    ap.add_argument("--rate", type=float, required=True, help="requests per second")
    ap.add_argument("--seconds", type=float, required=True, help="how long requests are scheduled")
    ap.add_argument("--arrivals", choices=("constant", "poisson"), default="constant")
    ap.add_argument("--connections", type=int, default=1000, help="at most this many connections (default 1000)")
    ap.add_argument("--timeout-ms", type=float, default=2000, help="a request unanswered this long after it "
                                                                    "was due is an error (default 2000)")
    ap.add_argument("--deadline-ms", type=float, default=None, help="count as goodput the 200s answered this "
                                                                     "soon after they were due (default: the timeout)")
    ap.add_argument("--seed", type=int, default=1, help="Poisson arrivals' seed")
    ap.add_argument("--hist", default="", help="also write the latency histogram here")
    ap.add_argument("--cpus", default="", help="pin the generator (taskset -c CPUS)")
    ap.add_argument("--json", required=True, help="write the result here ('-': stdout)")
    a = ap.parse_args(args)
    try:
        m = run(a.url, a.rate, a.seconds, a.arrivals, Path(a.hist) if a.hist else None,
                ["taskset", "-c", a.cpus] if a.cpus else None, max_conns=a.connections,
                timeout_ms=a.timeout_ms, seed=a.seed, deadline_ms=a.deadline_ms)
    except (ValueError, RuntimeError, subprocess.CalledProcessError) as e:
        print(f"python -m bench openloop: {e}", file=sys.stderr)
        return 2
    text = json.dumps(m, indent=1) + "\n"
    if a.json == "-":
        sys.stdout.write(text)
    else:
        Path(a.json).write_text(text)
    print(f"{a.rate:g}/s {a.arrivals}: achieved {m['achieved_rate']:.0f}/s, errors {m['errors']}, "
          f"p50 {m['p50_ms']:.3f} ms, p90 {m['p90_ms']:.3f}, p99 {m['p99_ms']:.3f}, p99.9 {m['p999_ms']:.3f}, "
          f"max {m['max_ms']:.3f}; 200s within {m['deadline_ms']:g} ms {m['good_rate']:.0f}/s, 503s "
          f"{m['status_503']}; generator CPU {m['gen_cpu_s']:.3f} s", file=sys.stderr)
    return 0
