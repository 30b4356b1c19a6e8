#!/usr/bin/env python3
"""The hot-path cost of the content features (precompressed sidecars,
Cache-Control rules, a types file): wrk on a cached 13-byte file with the
features off, on (the file has no sidecar) and on with its gzip sidecar sent,
the three interleaved in one run. The server (epoll, one worker) is pinned to
CPU 1 and wrk to CPU 0; the server's CPU time per request comes from /proc.

    scripts/feature-cost.py [REPEATS]      # from the repository, after make

Every run is bounded: a 1 s warm-up and a 5 s wrk per case and repeat."""
from __future__ import annotations

import gzip
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BIN = Path(os.environ.get("SPINDLE_BIN", Path(__file__).resolve().parent.parent / "spindle"))
BODY = b"Hello, world!"
CONF_ON = """[content]
precompressed = br zstd gzip
types_file = {types}
cache_expires = on
[cache_control]
/assets/* = public, max-age=31536000, immutable
text/html = no-cache
*.txt = public, max-age=60
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def children(pid: int) -> list[int]:
    out = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                if (p / "stat").read_text().rsplit(")", 1)[1].split()[1] == str(pid):
                    out.append(int(p.name))
            except OSError:
                pass
    return out


def run_case(root: Path, conf: Path, target: str, header: str | None) -> tuple[float, float]:
    port = free_port()
    srv = subprocess.Popen(["taskset", "-c", "1", str(BIN), "--config", str(conf), "--port", str(port),
                            "--root", str(root), "--model", "epoll", "--set", "workers=1",
                            "--set", "stats=off"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        url = f"http://127.0.0.1:{port}{target}"
        hdr = ["-H", header] if header else []
        subprocess.run(["taskset", "-c", "0", "wrk", "-t1", "-c16", "-d1s", *hdr, url], capture_output=True,
                       timeout=30)
        kids = children(srv.pid)
        assert kids, "no serving process"
        c0 = sum(cpu_seconds(k) for k in kids)
        out = subprocess.run(["taskset", "-c", "0", "wrk", "-t1", "-c16", "-d5s", *hdr, url],
                             capture_output=True, text=True, timeout=60).stdout
        c1 = sum(cpu_seconds(k) for k in kids)
    finally:
        srv.terminate()
        srv.wait(10)
    requests = int(re.search(r"(\d+) requests in", out).group(1))
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    return rps, (c1 - c0) / requests * 1e6


def main() -> None:
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        root = base / "www"
        root.mkdir()
        (root / "a.txt").write_bytes(BODY)
        (root / "b.txt").write_bytes(BODY)
        (root / "b.txt.gz").write_bytes(gzip.compress(BODY))
        (base / "mime.types").write_text("text/x-custom zzqx\n")
        off, on = base / "off.conf", base / "on.conf"
        off.write_text("[server]\nworkers = 1\n")
        on.write_text(CONF_ON.format(types=base / "mime.types"))
        cases = [("off", off, "/a.txt", None),
                 ("on, no sidecar", on, "/a.txt", None),
                 ("on, gzip sidecar", on, "/b.txt", "Accept-Encoding: gzip")]
        results: dict[str, list[tuple[float, float]]] = {c[0]: [] for c in cases}
        for _ in range(repeats):
            for name, conf, target, header in cases:
                results[name].append(run_case(root, conf, target, header))
    base_cpu = statistics.median(c for _, c in results["off"])
    for name, runs in results.items():
        cpu = statistics.median(c for _, c in runs)
        print(f"{name:17s} req/s {' '.join(f'{r:8.0f}' for r, _ in runs)}   "
              f"CPU us/req {' '.join(f'{c:5.1f}' for _, c in runs)}   "
              f"median {cpu:5.1f} ({cpu / base_cpu:.2f}x off)")


if __name__ == "__main__":
    main()
