"""The lab's machinery: the temporary document root, the servers (spindle
models and nginx, started and stopped by PID, pinned with taskset), the load
generators (ab, wrk, our Python clients, each bounded by count/time and by
`timeout`), response checks, and the interleaved, repeated cell executor.

Nothing here listens anywhere but 127.0.0.1, and the only processes ever
signalled are the ones this module started (Server.proc)."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from . import parsers

HOST = "127.0.0.1"
REPO = Path(__file__).resolve().parents[1]
NOFILE = 20000            # RLIMIT_NOFILE for servers and load generators (prlimit)

# Cores: on 2 CPUs, the server gets CPU 0 and every load generator CPU 1.
NCPU = os.cpu_count() or 1
SERVER_CPUS = "0"
LOAD_CPUS = "1" if NCPU > 1 else "0"
ALL_CPUS = f"0-{NCPU - 1}" if NCPU > 1 else "0"

# Files every cell may ask for: path -> size in bytes.
PAGE = "/bench/page.html"       # 4537 bytes (seed 000)
HELLO = "/bench/hello.txt"      # 13 bytes (seed 003)
B100 = "/bench/100b.txt"        # 100 bytes (seed 003)
MB1 = "/big/1m.bin"
MB100 = "/big/100m.bin"


def loadavg() -> float:
    """The 1-minute load average: the lab itself adds up to ~2 (server + load
    generator); more means something else is competing for the CPUs."""
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return -1.0


def ncpus_in(cpus: str) -> int:
    n = 0
    for part in cpus.split(","):
        a, _, b = part.partition("-")
        n += (int(b) - int(a) + 1) if b else 1
    return n


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


# --------------------------------------------------------------------------
# Servers
# --------------------------------------------------------------------------

@dataclass
class Server:
    """One server process tree: spindle (any model) or nginx."""
    kind: str                 # "spindle" | "nginx"
    model: str                # spindle model, or "nginx"
    cpus: str
    workers: int
    settings: dict = field(default_factory=dict)
    label: str = ""
    port: int = 0
    proc: subprocess.Popen | None = None
    argv: list = field(default_factory=list)
    conf_text: str = ""
    log_path: Path | None = None
    expected: dict = field(default_factory=dict)   # path -> (head bytes, body bytes)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def pids(self) -> list[int]:
        """The server's PID and all its descendants (from /proc)."""
        if not self.alive():
            return []
        children: dict[int, list[int]] = {}
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                stat = Path(f"/proc/{d}/stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(d))
        out, todo = [], [self.proc.pid]
        while todo:
            p = todo.pop()
            out.append(p)
            todo.extend(children.get(p, []))
        return out

    def memory(self) -> dict:
        """RSS and PSS summed over the process tree (kB -> MB), plus counts."""
        rss = pss = threads = 0
        pids = self.pids()
        for p in pids:
            try:
                for ln in Path(f"/proc/{p}/status").read_text().splitlines():
                    if ln.startswith("VmRSS:"):
                        rss += int(ln.split()[1])
                    elif ln.startswith("Threads:"):
                        threads += int(ln.split()[1])
                for ln in Path(f"/proc/{p}/smaps_rollup").read_text().splitlines():
                    if ln.startswith("Pss:"):
                        pss += int(ln.split()[1])
            except OSError:
                continue
        return {"rss_mb": rss / 1024, "pss_mb": pss / 1024, "processes": len(pids), "threads": threads}


class Lab:
    def __init__(self, out: Path, full: bool, repeats: int, spindle_bin: Path):
        self.out = out
        self.full = full
        self.repeats = repeats
        self.spindle_bin = spindle_bin
        self.logs = out / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.tmp = Path(tempfile.mkdtemp(prefix="spindle-bench-"))
        os.chmod(self.tmp, 0o755)   # nginx workers (user nobody) read the docroot
        self.docroot = self.tmp / "www"
        self.records: list[dict] = []
        self.notes: dict[str, list[str]] = {}
        self.servers: list[Server] = []
        self.nginx_conf_text = ""
        self.cell_no = 0

    # -- docroot ------------------------------------------------------------

    def make_docroot(self) -> None:
        shutil.copytree(REPO / "www", self.docroot)
        big = self.docroot / "big"
        big.mkdir()
        with open(big / "1m.bin", "wb") as f:
            f.write(os.urandom(1 << 20))
        with open(big / "100m.bin", "wb") as f:
            chunk = os.urandom(1 << 20)
            for _ in range(100):
                f.write(chunk)
        for dirpath, dirs, files in os.walk(self.docroot):
            os.chmod(dirpath, 0o755)
            for fn in files:
                os.chmod(os.path.join(dirpath, fn), 0o644)
        self.sizes = {p: (self.docroot / p.lstrip("/")).stat().st_size
                      for p in (PAGE, HELLO, B100, MB1, MB100)}
        want = {PAGE: 4537, HELLO: 13, B100: 100, MB1: 1 << 20, MB100: 100 << 20}
        for p, n in want.items():
            if self.sizes[p] != n:
                raise RuntimeError(f"docroot: {p} is {self.sizes[p]} bytes, expected {n}")

    def cleanup(self) -> None:
        for s in list(self.servers):
            self.stop(s)
        shutil.rmtree(self.tmp, ignore_errors=True)

    # -- servers ------------------------------------------------------------

    def spindle_argv(self, model: str, port: int, workers: int, settings: dict, log: Path) -> list[str]:
        a = [str(self.spindle_bin), "--config", str(REPO / "server.conf"), "--bind", HOST,
             "--port", str(port), "--root", str(self.docroot), "--model", model,
             "--set", f"workers={workers}", "--set", "access_log=off", "--set", f"error_log={log}"]
        for k, v in settings.items():
            a += ["--set", f"{k}={v}"]
        return a

    def nginx_conf(self, port: int, workers: int, d: Path) -> str:
        return f"""# generated by the spindle lab: nginx beside spindle, same docroot
daemon off;
master_process on;
worker_processes {workers};          # = spindle's worker count in the same cell
worker_rlimit_nofile {NOFILE};
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{
    worker_connections 16384;
}}
http {{
    include /etc/nginx/mime.types;
    default_type application/octet-stream;
    access_log off;                  # spindle runs with access_log = off too
    sendfile on;
    tcp_nopush on;
    keepalive_requests 1000000;
    keepalive_timeout 120s;
    open_file_cache max=1000 inactive=60s;   # spindle caches small files itself
    client_body_temp_path {d}/body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    server {{
        listen {HOST}:{port} backlog=4096;
        root {self.docroot};
        location / {{ }}
    }}
}}
"""

    def start(self, kind: str, model: str, cpus: str = SERVER_CPUS, workers: int | None = None,
              settings: dict | None = None) -> Server:
        workers = workers or ncpus_in(cpus)
        s = Server(kind, model, cpus, workers, dict(settings or {}))
        s.label = "nginx" if kind == "nginx" else model
        last = ""
        for _attempt in range(3):
            s.port = free_port()
            if kind == "nginx":
                d = self.tmp / f"nginx-{s.port}"
                d.mkdir()
                s.conf_text = self.nginx_conf(s.port, workers, d)
                (d / "nginx.conf").write_text(s.conf_text)
                self.nginx_conf_text = s.conf_text
                s.log_path = d / "error.log"
                cmd = ["/usr/sbin/nginx", "-p", str(d), "-c", str(d / "nginx.conf"), "-e", str(s.log_path)]
            else:
                s.log_path = self.logs / f"spindle-{model}-{s.port}.log"
                cmd = self.spindle_argv(model, s.port, workers, s.settings, s.log_path)
            s.argv = ["taskset", "-c", cpus, "prlimit", f"--nofile={NOFILE}:{NOFILE}", *cmd]
            err = open(self.logs / f"{s.label}-{s.port}.stderr", "wb")
            s.proc = subprocess.Popen(s.argv, stdin=subprocess.DEVNULL, stdout=err, stderr=err,
                                      cwd=self.tmp)
            err.close()
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and s.alive():
                try:
                    with socket.create_connection((HOST, s.port), timeout=0.5):
                        self.servers.append(s)
                        return s
                except OSError:
                    time.sleep(0.02)
            self.stop(s)
            last = (self.logs / f"{s.label}-{s.port}.stderr").read_text(errors="replace")[-500:]
        raise RuntimeError(f"cannot start {s.label}: {' '.join(s.argv)}\n{last}")

    def stop(self, s: Server, timeout: float = 15) -> int | None:
        """SIGTERM to the PID we started, wait; SIGKILL only if it will not exit."""
        if s in self.servers:
            self.servers.remove(s)
        if s.proc is None:
            return None
        if s.proc.poll() is None:
            s.proc.send_signal(signal.SIGTERM)
            try:
                s.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                print(f"  ! {s.label} ignored SIGTERM for {timeout}s: SIGKILL", flush=True)
                s.proc.kill()
                s.proc.wait(5)
        return s.proc.returncode

    # -- checks -------------------------------------------------------------

    def precheck(self, s: Server, paths: list[str]) -> None:
        """curl every URL once: status 200 and the file's exact size; records the
        head size too, to check wrk's byte counts later."""
        for p in paths:
            r = subprocess.run(["timeout", "60", "curl", "-s", "-o", "/dev/null", "-w",
                                "%{http_code} %{size_header} %{size_download}",
                                f"http://{HOST}:{s.port}{p}"],
                               capture_output=True, text=True)
            parts = r.stdout.split()
            if r.returncode != 0 or len(parts) != 3:
                raise RuntimeError(f"pre-check {s.label} {p}: curl failed: {r.stderr.strip()}")
            code, head, body = (int(x) for x in parts)
            want = self.sizes.get(p)
            if code != 200 or (want is not None and body != want):
                raise RuntimeError(f"pre-check {s.label} {p}: status {code}, {body} bytes (want 200, {want})")
            s.expected[p] = (head, body)

    # -- load generators ----------------------------------------------------

    def _run(self, cmd: list[str], limit_s: float) -> tuple[str, float, int]:
        t0 = time.monotonic()
        full = ["taskset", "-c", LOAD_CPUS, "timeout", "-k", "5", str(int(limit_s)),
                "prlimit", f"--nofile={NOFILE}:{NOFILE}", *cmd]
        r = subprocess.run(full, capture_output=True, text=True, stdin=subprocess.DEVNULL)
        out = r.stdout + ("\n" + r.stderr if r.stderr else "")
        if r.returncode == 124:
            out += f"\n[lab] killed by timeout after {limit_s:.0f}s"
        return out, time.monotonic() - t0, r.returncode

    def ab(self, s: Server, path: str, n: int, c: int, keepalive: bool) -> dict:
        # -r: a receive error (e.g. a reset) is counted in "Failed requests"
        # instead of aborting the run, so failures are measured and reported.
        cmd = ["ab", "-r", "-s", "20", "-n", str(n), "-c", str(c)] + (["-k"] if keepalive else []) \
            + [f"http://{HOST}:{s.port}{path}"]
        out, dt, rc = self._run(cmd, 30 + n / 200)
        m = {"cmd": " ".join(cmd), "tool": "ab"}
        try:
            m.update(parsers.parse_ab(out))
        except parsers.ParseError as e:
            return {**m, "failed_run": str(e), "raw": out[-2000:]}
        want = self.sizes.get(path)
        problems = []
        if want is not None and m["doc_length"] != want:
            problems.append(f"Document Length {m['doc_length']} != {want}")
        if m["complete"] != n:
            problems.append(f"only {m['complete']} of {n} requests completed")
        if m["failed"]:
            problems.append(f"{m['failed']} failed {m['failed_detail']}")
        if m["non2xx"]:
            problems.append(f"{m['non2xx']} non-2xx")
        if keepalive and m["keepalive_requests"] < m["complete"] * 0.9:
            problems.append(f"only {m['keepalive_requests']} of {m['complete']} requests kept alive")
        m["problems"] = problems
        m["raw"] = out[-2500:]
        return m

    def wrk(self, s: Server, path: str, c: int, duration: float, script: str = "summary.lua",
            script_args: list[str] | None = None, check_size: bool = True, timeout: str = "5s") -> dict:
        cmd = ["wrk", "-t", "1", "-c", str(c), "-d", f"{int(round(duration))}s", "--timeout", timeout,
               "-s", str(REPO / "bench" / "lua" / script), f"http://{HOST}:{s.port}{path}"]
        if script_args:
            cmd += ["--", *script_args]
        out, dt, rc = self._run(cmd, duration + 40)
        m = {"cmd": " ".join(cmd), "tool": "wrk"}
        try:
            m.update(parsers.parse_wrk(out))
        except parsers.ParseError as e:
            return {**m, "failed_run": str(e), "raw": out[-2000:]}
        problems = []
        for k in ("connect", "read", "write", "timeout"):
            if m[f"err_{k}"]:
                problems.append(f"{m[f'err_{k}']} socket {k} errors")
        if m["non2xx"] or m["err_status"]:
            problems.append(f"{max(m['non2xx'], m['err_status'])} non-2xx/3xx")
        if check_size and path in s.expected and m["requests"]:
            head, body = s.expected[path]
            per = m["bytes"] / m["requests"]
            big = body >= (1 << 20)
            # Small files: bytes/response must match curl's head+body. Big files:
            # the run ends mid-download, so bytes may exceed complete responses.
            if per < (head + body) * 0.99 or (not big and per > (head + body) * 1.01):
                problems.append(f"{per:.0f} bytes/response, expected {head + body}")
        if m["requests"] == 0:
            problems.append("no request completed")
        m["problems"] = problems
        m["raw"] = out[-2500:]
        return m

    def starves_second_connection(self, s: Server, path: str, wait_s: float = 1.0) -> bool:
        """True when, while one keep-alive connection stays open, a second one
        gets no response within wait_s (the iterative model's behaviour; wrk
        4.1 never counts such connections as timeouts)."""
        req = f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode()
        with socket.create_connection((HOST, s.port), timeout=5) as a:
            a.sendall(req)
            a.recv(65536)
            with socket.create_connection((HOST, s.port), timeout=5) as b:
                b.sendall(req)
                b.settimeout(wait_s)
                try:
                    return not b.recv(65536)
                except (socket.timeout, TimeoutError):
                    return True

    def client(self, args: list[str], limit_s: float = 120) -> dict:
        cmd = [sys.executable, "-m", "bench.client", *args]
        full = ["taskset", "-c", LOAD_CPUS, "timeout", "-k", "5", str(int(limit_s)), *cmd]
        r = subprocess.run(full, capture_output=True, text=True, cwd=REPO, stdin=subprocess.DEVNULL)
        try:
            return json.loads(r.stdout.strip().splitlines()[-1])
        except (IndexError, json.JSONDecodeError):
            return {"failed_run": f"client exited {r.returncode}: {r.stderr[-500:]}"}

    # -- cells --------------------------------------------------------------

    def note(self, exp: str, text: str) -> None:
        self.notes.setdefault(exp, [])
        if text not in self.notes[exp]:
            self.notes[exp].append(text)


@dataclass
class Cell:
    """One measurement to repeat: a server (by key) and a function producing metrics."""
    exp: str
    name: str                       # short, unique within the experiment
    server: tuple                   # (kind, model, cpus, workers, settings-tuple)
    params: dict
    run: Callable[[Lab, Server], dict]
    headline: str = ""              # short summary of the metric for the progress line


def server_key(kind: str, model: str, cpus: str = SERVER_CPUS, workers: int | None = None,
               **settings) -> tuple:
    return (kind, model, cpus, workers or ncpus_in(cpus), tuple(sorted(settings.items())))


def run_cells(lab: Lab, exp: str, cells: list[Cell], repeats: int, paths: list[str],
              progress_fmt: Callable[[dict], str]) -> None:
    """Runs the cells `repeats` times, in plan order each time (the plan already
    alternates servers), on servers started once for the experiment."""
    running: dict[tuple, Server] = {}
    total = len(cells) * repeats
    t_exp = time.monotonic()
    try:
        for key in dict.fromkeys(c.server for c in cells):
            kind, model, cpus, workers, settings = key
            s = lab.start(kind, model, cpus, workers, dict(settings))
            lab.precheck(s, paths)
            running[key] = s
        k = 0
        for rep in range(1, repeats + 1):
            for c in cells:
                k += 1
                s = running[c.server]
                if not s.alive():   # died in an earlier cell: that is a result too
                    lab.note(exp, f"{s.label} died (exit {s.proc.returncode}); restarted")
                    s = lab.start(*c.server[:4], dict(c.server[4]))
                    lab.precheck(s, paths)
                    running[c.server] = s
                load_before = loadavg()
                t0 = time.monotonic()
                try:
                    m = c.run(lab, s)
                except Exception as e:  # a broken cell is reported, the lab goes on
                    m = {"failed_run": f"{type(e).__name__}: {e}"}
                if not s.alive():
                    m.setdefault("problems", []).append(f"server died (exit {s.proc.returncode})")
                rec = {"exp": exp, "cell": c.name, "server": s.label, "kind": s.kind,
                       "model": s.model, "cpus": s.cpus, "workers": s.workers, "rep": rep,
                       **c.params, **m, "elapsed_s": time.monotonic() - t0, "loadavg1": load_before,
                       "_params": list(c.params)}
                lab.records.append(rec)
                if "failed_run" in m:
                    line = f"RUN FAILED: {m['failed_run'][:160]}"
                else:
                    line = progress_fmt(rec)
                    if m.get("problems"):
                        line += "  !! " + "; ".join(m["problems"])[:160]
                print(f"  [{k:3d}/{total}] {exp} {c.name:<34} rep {rep}/{repeats}: {line}", flush=True)
                time.sleep(0.2)   # let TIME_WAIT churn and stragglers settle
    finally:
        for s in running.values():
            rc = lab.stop(s)
            if rc not in (0, None) and s.kind == "spindle":
                lab.note(exp, f"spindle {s.label} exited {rc} after SIGTERM")
    print(f"  {exp}: {time.monotonic() - t_exp:.0f} s", flush=True)
