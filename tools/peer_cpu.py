#!/usr/bin/env python3
"""peer_cpu.py - server CPU per request: spindle beside h2o and lighttpd.

On a shared, loaded machine req/s wander, but the CPU a server spends per
request is steady. Each server runs one worker pinned to one CPU, the load
generator (wrk or ab) to another; the server's CPU time (utime + stime of its
process tree, from /proc) is read before and after each run and divided by the
requests (or megabytes) served. Every cell is repeated and the median printed.

    .venv/bin/python tools/peer_cpu.py [--repeats 3] [--seconds 5]
        [--servers epoll,uring,h2o,lighttpd] [--cells ka,conn,big]
        [--base OLD_SPINDLE --servers base:uring,uring,...]
        [--servers floor-uring,floor-epoll,uring,h2o --cells ka]

The floor servers (tools/floor/) do only what any keep-alive server must per
request: receive, find where each request ends, send a constant response. Their
CPU per request is what these kernel calls cost with no HTTP work: a reference
for how far down doing less could go, not a proven minimum (fewer wake-ups per
request would go lower). The keep-alive cell only; they are compiled
into a scratch directory on use.

A standalone tool, not a lab experiment (bench/experiments owns those): it
reuses only the lab's /proc accounting. Servers are started and stopped by PID.
"""
from __future__ import annotations

import argparse
import os
import pwd
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.procstat import tree_cpu_s  # noqa: E402

SERVER_CPU, CLIENT_CPU = "1", "0"
SMALL = b"Hello, world\n"         # 13 bytes, as in the issue's table
BIG_SIZE = 1 << 20
MODELS = ("iterative", "fork", "thread", "pool", "prefork", "epoll", "uring")
FLOORS = {"floor-uring": ("floor_uring.c", ["-luring"]), "floor-epoll": ("floor_epoll.c", [])}
FLOOR_DIR = Path(__file__).resolve().parent / "floor"
PEERS = ("h2o", "lighttpd")

CELLS = {
    # name: (label, generator, path, concurrency)
    "ka": ("wrk -c200 keep-alive, 13 B", "wrk", "/hello.txt", 200),
    "conn": ("ab -c200, new connection per request", "ab", "/hello.txt", 200),
    "big": ("wrk -c50, 1 MB file", "wrk", "/big.bin", 50),
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def descendants(root: int) -> list[int]:
    """root and every process below it (spindle's master forks the server)."""
    parent = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                text = Path(f"/proc/{d}/stat").read_text()
                parent[int(d)] = int(text.rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                pass
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += [c for c, pp in parent.items() if pp == p]
    return out


def wait_port(port: int, limit_s: float = 10) -> None:
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on port {port}")


class Server:
    def __init__(self, name: str, argv: list[str], port: int, tmp: Path):
        self.name, self.port = name, port
        self.log = open(tmp / f"{name}.log", "ab")
        self.proc = subprocess.Popen(["taskset", "-c", SERVER_CPU] + argv, stdout=self.log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        wait_port(port)
        time.sleep(0.3)  # let the master fork its worker

    def cpu_s(self) -> float:
        return tree_cpu_s(descendants(self.proc.pid))

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)  # our own session, started above
            self.proc.wait(5)
        self.log.close()


def start(name: str, docroot: Path, tmp: Path, spindle: Path, base: Path | None) -> Server:
    port = free_port()
    if name.split(":")[-1] in MODELS:
        # "base:MODEL" runs the --base binary (a build to compare with)
        binary = base if name.startswith("base:") else spindle
        model = name.split(":")[-1]
        argv = [str(binary), "-m", model, "-w", "1", "-p", str(port), "-r", str(docroot),
                "--set", "error_log=-", "--set", f"stats_name=perf{port}"]
    elif name in FLOORS:
        argv = [str(build_floor(name, tmp)), str(port)]
    elif name == "h2o":
        conf = tmp / "h2o.conf"
        conf.write_text(f"""num-threads: 1
listen: {{host: 127.0.0.1, port: {port}}}
user: {pwd.getpwuid(os.getuid()).pw_name}
file.send-gzip: OFF
hosts:
  default:
    paths:
      /:
        file.dir: {docroot}
""")
        argv = ["h2o", "-c", str(conf)]
    elif name == "lighttpd":
        conf = tmp / "lighttpd.conf"
        conf.write_text(f"""server.document-root = "{docroot}"
server.bind = "127.0.0.1"
server.port = {port}
server.max-worker = 0
server.network-backend = "sendfile"
server.stat-cache-engine = "simple"
server.max-keep-alive-requests = 10000
server.max-connections = 4096
server.max-fds = 8192
mimetype.assign = (".txt" => "text/plain", ".bin" => "application/octet-stream")
""")
        argv = ["lighttpd", "-D", "-f", str(conf)]
    else:
        raise SystemExit(f"unknown server {name}")
    return Server(name, argv, port, tmp)


def build_floor(name: str, tmp: Path) -> Path:
    source, libs = FLOORS[name]
    binary = tmp / name
    if not binary.exists():
        subprocess.run(["cc", "-O2", "-Wall", "-o", str(binary), str(FLOOR_DIR / source)] + libs, check=True)
    return binary


def run_gen(kind: str, port: int, path: str, conc: int, seconds: float) -> tuple[int, float]:
    """(requests completed, wall seconds) of one bounded run."""
    url = f"http://127.0.0.1:{port}{path}"
    if kind == "wrk":
        cmd = ["wrk", "-t1", f"-c{conc}", f"-d{seconds:g}s", url]
    else:
        # a fixed count, sized for about `seconds` on this machine; -r: keep going on errors
        cmd = ["ab", "-q", "-r", "-n", str(int(4000 * seconds)), "-c", str(conc), url]
    t0 = time.monotonic()
    out = subprocess.run(["taskset", "-c", CLIENT_CPU] + cmd, capture_output=True, text=True,
                         timeout=seconds * 6 + 30).stdout
    wall = time.monotonic() - t0
    if kind == "wrk":
        m = re.search(r"(\d+) requests in ([\d.]+)s", out)
        if not m:
            raise RuntimeError(f"wrk output not understood:\n{out}")
        errs = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
        return int(m.group(1)) - (int(errs.group(1)) if errs else 0), float(m.group(2))
    done = int(re.search(r"Complete requests:\s+(\d+)", out).group(1))
    failed = int(re.search(r"Failed requests:\s+(\d+)", out).group(1))
    t = float(re.search(r"Time taken for tests:\s+([\d.]+)", out).group(1))
    return done - failed, t or wall


def measure(srv: Server, cell: str, seconds: float) -> dict:
    _, kind, path, conc = CELLS[cell]
    run_gen(kind, srv.port, path, conc, 1)  # warm caches
    before = srv.cpu_s()
    n, wall = run_gen(kind, srv.port, path, conc, seconds)
    cpu = srv.cpu_s() - before
    r = {"rps": n / wall, "cores": cpu / wall}
    if cell == "big":
        r["gbps"] = n * BIG_SIZE / wall / 1e9
        r["us_per_mb"] = cpu / (n * BIG_SIZE / 1e6) * 1e6 if n else float("inf")
    else:
        r["us_per_req"] = cpu / n * 1e6 if n else float("inf")
    return r


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--servers", default="epoll,uring,h2o,lighttpd")
    ap.add_argument("--cells", default="ka,conn,big")
    ap.add_argument("--base", help='spindle binary for servers named "base:MODEL"')
    ap.add_argument("--spindle", default=str(Path(__file__).resolve().parent.parent / "spindle"))
    a = ap.parse_args()
    servers, cells = a.servers.split(","), a.cells.split(",")
    for name in servers:
        if name in FLOORS and cells != ["ka"]:
            raise SystemExit(f"{name} answers every request alike: measure it with --cells ka only")

    tmp = Path(tempfile.mkdtemp(prefix="peer_cpu-"))
    docroot = tmp / "www"
    docroot.mkdir()
    (docroot / "hello.txt").write_bytes(SMALL)
    (docroot / "big.bin").write_bytes(os.urandom(BIG_SIZE))
    os.chmod(tmp, 0o755)

    results: dict[tuple[str, str], list[dict]] = {}
    for rep in range(a.repeats):
        for name in servers:  # interleaved, so drifting load hits every server alike
            srv = start(name, docroot, tmp, Path(a.spindle), a.base and Path(a.base))
            try:
                for cell in cells:
                    results.setdefault((name, cell), []).append(measure(srv, cell, a.seconds))
            finally:
                srv.stop()
        print(f"repeat {rep + 1}/{a.repeats} done", file=sys.stderr)

    def med(name: str, cell: str, key: str) -> float:
        return statistics.median(r[key] for r in results[(name, cell)])

    def spread(name: str, cell: str, key: str, fmt: str) -> str:
        vals = [r[key] for r in results[(name, cell)]]
        return f"{min(vals):{fmt}}–{max(vals):{fmt}}"

    print("| cell | " + " | ".join(servers) + " |")
    print("|---|" + "---|" * len(servers))
    for cell in cells:
        row = []
        for name in servers:
            if cell == "big":
                row.append(f"{med(name, cell, 'gbps'):.2f} GB/s · {med(name, cell, 'us_per_mb'):.0f} µs/MB"
                           f" ({spread(name, cell, 'us_per_mb', '.0f')}) · {med(name, cell, 'cores'):.2f} cores")
            else:
                row.append(f"{med(name, cell, 'rps') / 1000:.1f}k · {med(name, cell, 'us_per_req'):.2f} µs"
                           f" ({spread(name, cell, 'us_per_req', '.1f')})")
        print(f"| {CELLS[cell][0]} | " + " | ".join(row) + " |")
    peers = [p for p in servers if p in PEERS]
    if peers:
        for cell in (c for c in cells if c != "big"):
            best = min(peers, key=lambda p: med(p, cell, "us_per_req"))
            ratios = ", ".join(f"{n} {med(n, cell, 'us_per_req') / med(best, cell, 'us_per_req'):.2f}x"
                               for n in servers if n not in PEERS)
            print(f"{CELLS[cell][0]}: CPU per request against the best peer ({best}): {ratios}")
    print(f"(medians of {a.repeats}; server on CPU {SERVER_CPU}, generator on CPU {CLIENT_CPU}, "
          f"{a.seconds:g} s per run; µs = server CPU per request, (range over repeats))")
    return 0


if __name__ == "__main__":
    sys.exit(main())
