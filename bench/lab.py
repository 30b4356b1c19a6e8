"""The lab's machinery: the temporary document root, the servers (spindle
models and nginx, started and stopped by PID, pinned with taskset), the load
generators (ab, wrk, vegeta, our Python clients, each bounded by count/time and
by `timeout`), response checks, and the interleaved, repeated cell executor,
which warms each cell up, then records the CPU time of the server and of the
load generator and what else ran on the machine (bench/procstat.py), and marks
cells whose numbers cannot be reported (bench/checks.py).

Nothing here listens anywhere but 127.0.0.1, and the only processes ever
signalled are the ones this module started (Server.proc)."""
from __future__ import annotations

import json
import os
import random
import re
import resource
import select
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from . import checks, cpumeter, kcounters, parsers, procstat, reqtimes
from . import openloop as openloop_gen

HOST = "127.0.0.1"
REPO = Path(__file__).resolve().parents[1]
NOFILE = 20000            # RLIMIT_NOFILE for servers and load generators (prlimit)
NGINX_CONNECTIONS = 2048  # nginx's per-worker connection slots (preallocated: see report)
VEGETA = REPO / "build" / "go" / "bin" / "vegeta"   # scripts/install-deps.sh bench
# The other servers measured beside spindle (Debian packages: scripts/install-deps.sh bench).
PEER_BINARIES = {"nginx": "/usr/sbin/nginx", "lighttpd": "/usr/sbin/lighttpd", "h2o": "/usr/bin/h2o"}

# Cores: on 2 CPUs, the server gets CPU 0 and every load generator CPU 1.
NCPU = os.cpu_count() or 1
SERVER_CPUS = "0"
LOAD_CPUS = "1" if NCPU > 1 else "0"
ALL_CPUS = f"0-{NCPU - 1}" if NCPU > 1 else "0"

# Files every cell may ask for: path -> size in bytes.
PAGE = "/bench/page.html"       # 4537 bytes (seed 000)
HELLO = "/bench/hello.txt"      # 13 bytes (seed 003)
B100 = "/bench/100b.txt"        # 100 bytes (seed 003)
KB100 = "/big/100k.bin"          # 100 KiB (the h2 experiment)
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
    """One server process tree: spindle (any model), nginx, lighttpd or h2o."""
    kind: str                 # "spindle" | "nginx" | "lighttpd" | "h2o"
    model: str                # spindle model, or the peer's name
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
    scheme: str = "http"      # "https" for a TLS server (the tls experiment)
    h2c_only: bool = False    # a plain port that speaks HTTP/2 only (nginx's `listen ... http2`)
    cg_key: str = ""          # its cgroup in the CPU meter (bench/cpumeter.py)

    def url(self, path: str) -> str:
        return f"{self.scheme}://{HOST}:{self.port}{path}"

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


def missing_peer(kind: str) -> str | None:
    """Why a peer server cannot run here (its binary is not installed), or None."""
    path = PEER_BINARIES.get(kind)
    if path is None:
        return f"unknown server {kind!r}"
    if not os.access(path, os.X_OK):
        return f"{path} not installed (scripts/install-deps.sh bench)"
    return None


def lighttpd_conf(docroot: Path, port: int, d: Path) -> str:
    """lighttpd as its documentation recommends for static files: one process,
    sendfile, the stat cache on with the engine its wiki recommends ("simple",
    which caches each stat() for a second; "inotify" exists but the wiki
    advises "simple" for typical use), no access log (spindle runs without
    one too)."""
    return f"""# generated by the spindle lab: lighttpd serving files beside spindle, same docroot
server.document-root = "{docroot}"
server.bind = "{HOST}"
server.port = {port}
server.use-ipv6 = "disable"
server.max-worker = 0                   # one process, as spindle's one worker
server.max-fds = {NOFILE}
server.max-connections = {NGINX_CONNECTIONS}     # = nginx's worker_connections
server.network-backend = "sendfile"
server.stat-cache-engine = "simple"     # its stat cache, as its wiki recommends: one stat() per file per second
server.pid-file = "{d}/lighttpd.pid"
server.errorlog = "{d}/error.log"
index-file.names = ("index.html")
mimetype.assign = (".html" => "text/html", ".txt" => "text/plain", ".bin" => "application/octet-stream",
                   "" => "application/octet-stream")
"""


def h2o_conf(docroot: Path, port: int, d: Path, drop_to: str | None) -> str:
    """h2o as its documentation sets up a file server: file.dir, one worker
    thread. h2o 2.2 has no sendfile (it reads files into its buffers) and no
    directive for its open-file cache, which is always on (capacity twice
    http2-max-concurrent-requests-per-connection, purged every event-loop pass).
    No access-log directive: none is written."""
    user = f"user: {drop_to}                      # h2o refuses to run as root without one\n" if drop_to else ""
    return f"""# generated by the spindle lab: h2o serving files beside spindle, same docroot
num-threads: 1                          # one worker thread, as spindle's one worker
max-connections: {NGINX_CONNECTIONS}                 # = nginx's worker_connections
error-log: {d}/error.log
{user}listen:
  host: {HOST}
  port: {port}
hosts:
  default:
    paths:
      /:
        file.dir: {docroot}
"""


# Mozilla's "intermediate" profile, ECDHE only: TLS 1.2 suites in its order,
# and the TLS 1.3 suites in the same order (AES-128 first), with the server's
# preference deciding, as spindle does: so both servers negotiate the
# same suite with the same client (the report checks what ab negotiated).
TLS_CIPHERS_12 = ("ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384:"
                  "ECDHE-RSA-AES256-GCM-SHA384:ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305")
TLS_CIPHERS_13 = "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256"


def make_test_certificate(d: Path) -> tuple[Path, Path]:
    """A self-signed ECDSA P-256 certificate for 127.0.0.1, made with openssl
    for this run only (the key never leaves the run's temporary directory)."""
    d.mkdir(parents=True, exist_ok=True)
    cert, key = d / "cert.pem", d / "key.pem"
    if not cert.exists():
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                        "-nodes", "-days", "2", "-subj", "/CN=localhost",
                        "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
                        "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True, timeout=60)
    return cert, key


def nginx_tls_block(cert: str, key: str) -> str:
    """nginx's TLS settings for the tls experiment: Mozilla intermediate suites
    in the server's order, session cache and tickets both on (spindle resumes
    with tickets)."""
    return f"""        ssl_certificate {cert};
        ssl_certificate_key {key};
        ssl_protocols TLSv1.2 TLSv1.3;
        ssl_ciphers {TLS_CIPHERS_12};
        ssl_conf_command Ciphersuites {TLS_CIPHERS_13};
        ssl_prefer_server_ciphers on;
        ssl_session_cache shared:SSL:10m;
        ssl_session_timeout 1d;
        ssl_session_tickets on;
"""


class Lab:
    def __init__(self, out: Path, smoke: bool, repeats: int, spindle_bin: Path,
                 cell_s: float, warmup_s: float, cores: list[int]):
        self.out = out
        self.smoke = smoke
        self.repeats = repeats
        self.cell_s = cell_s          # measured seconds per time-based cell
        self.warmup_s = warmup_s      # unmeasured load before every measured cell
        self.cores = cores            # core counts asked for (seed 002 (a))
        self.plan: list[dict] | None = None   # set by --plan: run_cells only counts
        self.full = False             # --full: also the cells the default run leaves out (see README)
        self.syscalls = False         # --syscalls: perf stat on the server in every cell (bench/kcounters.py)
        self.pmu = False              # --pmu: perf's cycles and instructions too, where the machine has them
        # An untimed calibration run (calibrate_calls) caps every tool's duration at this; None: as asked
        self.short_s: float | None = None
        self.call_calibration: list[dict] = []   # its runs: system calls and switches per request per cell
        self.exp_elapsed: dict[str, float] = {}   # experiment -> wall seconds it took
        # A server the next experiment runs too (same key) stays up into it
        # instead of being stopped and started again (run_cells).
        self.carry_keys: set = set()
        self.carried: dict[tuple, "Server"] = {}
        # Cells measured once and reported in two experiments (the same server
        # key and command): (server key, Cell.same_as) -> the records.
        self.measured: dict[tuple, list[dict]] = {}
        self.spindle_bin = spindle_bin
        self.logs = out / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.tmp = Path(tempfile.mkdtemp(prefix="spindle-bench-"))
        os.chmod(self.tmp, 0o755)   # nginx workers (user nobody) read the docroot
        self.docroot = self.tmp / "www"
        self.records: list[dict] = []
        self.notes: dict[str, list[str]] = {}
        self.retaken: list[dict] = []        # disturbed repeats taken again (their records are not results)
        self.servers: list[Server] = []
        self.nginx_confs: dict[str, str] = {}
        self.peer_confs: dict[str, str] = {}  # lighttpd and h2o, as they ran
        self.server_memory: list[dict] = []   # each server's idle memory right after start
        self.cell_no = 0
        self.seed: int | None = ORDER_SEED   # measurement order (None: the old fixed alternation)
        # The CPU meter (bench/cpumeter.py): /proc until the run makes its
        # cgroups (start_meter), so a Lab that only plans touches nothing.
        self.meter = cpumeter.ProcMeter()
        self.raw = out / "raw"          # every cell's generator output, as it came

    def order_seed(self, exp: str) -> str | None:
        """Each experiment's shuffle, from the run's seed and its name (so adding
        an experiment does not reorder the others)."""
        return None if self.seed is None else f"{self.seed}/{exp}"

    def start_meter(self) -> str:
        """The best CPU meter the machine allows, the lab's process inside it."""
        self.meter = cpumeter.make_meter()
        if isinstance(self.meter, cpumeter.CgroupMeter):
            self.meter.adopt_self()
        return self.meter.method

    # -- docroot ------------------------------------------------------------

    def make_docroot(self) -> None:
        shutil.copytree(REPO / "www", self.docroot)
        big = self.docroot / "big"
        big.mkdir()
        with open(big / "1m.bin", "wb") as f:
            f.write(os.urandom(1 << 20))
        with open(big / "100k.bin", "wb") as f:
            f.write(os.urandom(100 << 10))
        with open(big / "100m.bin", "wb") as f:
            chunk = os.urandom(1 << 20)
            for _ in range(100):
                f.write(chunk)
        for dirpath, dirs, files in os.walk(self.docroot):
            os.chmod(dirpath, 0o755)
            for fn in files:
                os.chmod(os.path.join(dirpath, fn), 0o644)
        self.sizes = {p: (self.docroot / p.lstrip("/")).stat().st_size
                      for p in (PAGE, HELLO, B100, KB100, MB1, MB100)}
        want = {PAGE: 4537, HELLO: 13, B100: 100, KB100: 100 << 10, MB1: 1 << 20, MB100: 100 << 20}
        for p, n in want.items():
            if self.sizes[p] != n:
                raise RuntimeError(f"docroot: {p} is {self.sizes[p]} bytes, expected {n}")

    def cleanup(self) -> None:
        for s in list(self.servers):
            self.stop(s)
        self.meter.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    # -- servers ------------------------------------------------------------

    def spindle_argv(self, model: str, port: int, workers: int, settings: dict, log: Path) -> list[str]:
        a = [str(self.spindle_bin), "--config", str(REPO / "server.conf"), "--bind", HOST,
             "--port", str(port), "--root", str(self.docroot), "--model", model,
             "--set", f"workers={workers}", "--set", "access_log=off", "--set", f"error_log={log}",
             # /metrics on: the lab reads the request timing histograms before and after
             # every cell (bench/reqtimes.py); per request it costs two length compares
             "--set", "metrics=on"]
        for k, v in settings.items():
            a += ["--set", f"{k}={v}"]
        return a

    def _nginx_common(self, port: int, workers: int, d: Path) -> str:
        return f"""daemon off;
master_process on;
worker_processes {workers};          # = spindle's worker count in the same cell
worker_rlimit_nofile {NOFILE};
pid {d}/nginx.pid;
error_log {d}/error.log warn;
"""

    def nginx_conf(self, port: int, workers: int, d: Path, connections: int = NGINX_CONNECTIONS,
                   keepalive_timeout: str = "", tcp_nopush: str = "on", keepalive_requests: str = "") -> str:
        """A realistic file server: nginx's defaults (keepalive_requests 1000,
        keepalive_timeout 75s) plus sendfile and open_file_cache, which any
        production static-file set-up enables. connections and
        keepalive_timeout: for the idle_rss experiment, which holds 10,000
        connections for longer than 75 s. tcp_nopush: off for the delayed-ACK
        experiment (with it on, nginx clears TCP_NODELAY to cork a sendfile
        response, and uncorks when the connection goes idle).
        keepalive_requests: for the h2 experiment, whose generator (h2load)
        never opens a connection again once nginx has ended it."""
        room = ("room for c = 1000 plus the listener; see the report's note" if connections == NGINX_CONNECTIONS
                else "room for the idle_rss experiment's connections")
        keepalive = f"    keepalive_timeout {keepalive_timeout};\n" if keepalive_timeout else ""
        if keepalive_requests:
            keepalive += (f"    keepalive_requests {keepalive_requests};   # h2load never reconnects "
                          f"(nginx's default: 1000, then GOAWAY or close)\n")
        return f"""# generated by the spindle lab: nginx serving files beside spindle, same docroot
{self._nginx_common(port, workers, d)}events {{
    worker_connections {connections};    # {room}
}}
http {{
{keepalive}    include /etc/nginx/mime.types;
    default_type application/octet-stream;
    access_log off;                  # spindle runs with access_log = off too
    sendfile on;
    tcp_nopush {tcp_nopush};
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

    def nginx_tls_conf(self, port: int, workers: int, d: Path, cert: str, key: str, **kw) -> str:
        """The file-serving nginx on a TLS port (the tls experiment)."""
        conf = self.nginx_conf(port, workers, d, **kw)
        listen = f"        listen {HOST}:{port} backlog=4096;\n"
        if listen not in conf:
            raise RuntimeError("nginx_conf's listen line changed: the tls experiment cannot make it a TLS port")
        return conf.replace(listen, f"        listen {HOST}:{port} ssl backlog=4096;\n" + nginx_tls_block(cert, key))

    def nginx_h2c_conf(self, port: int, workers: int, d: Path, **kw) -> str:
        """The file-serving nginx on a port that speaks HTTP/2 by prior
        knowledge (the h2 experiment): nginx 1.22's `listen ... http2` without
        ssl, which its documentation describes ("nginx can also be configured to
        accept HTTP/2 connections without SSL"); such a port speaks HTTP/2 only,
        so the HTTP/1.1 cells use the ordinary file-serving nginx."""
        conf = self.nginx_conf(port, workers, d, **kw)
        listen = f"        listen {HOST}:{port} backlog=4096;\n"
        if listen not in conf:
            raise RuntimeError("nginx_conf's listen line changed: the h2 experiment cannot make it an h2c port")
        return conf.replace(listen, f"        listen {HOST}:{port} http2 backlog=4096;\n")

    def tls_files(self) -> tuple[Path, Path]:
        return make_test_certificate(self.tmp / "tls")

    def spindle_tls_refusal(self, cert: Path, key: Path) -> str | None:
        """Why this spindle cannot serve HTTPS (it does not accept the tls
        settings), or None when --check accepts them."""
        r = subprocess.run([str(self.spindle_bin), "--config", str(REPO / "server.conf"), "--set", "tls=on",
                            "--set", f"tls_certificate={cert}", "--set", f"tls_certificate_key={key}", "--check"],
                           capture_output=True, text=True, timeout=20)
        if r.returncode == 0:
            return None
        return f"this spindle refuses the tls settings ({(r.stderr or r.stdout).strip()[:160]})"

    def nginx_seed003_conf(self, port: int, workers: int, d: Path) -> str:
        """Seed 003's nginx, as its document shows it: worker_processes 1,
        worker_connections 768, keepalive_requests 100 (its 1.18's default), no access_log
        directive (so nginx's default: every request logged), a 13-byte
        `return 200`."""
        return f"""# generated by the spindle lab: seed 003's nginx configuration (a 13-byte return 200)
{self._nginx_common(port, 1, d)}events {{
    worker_connections 768;
}}
http {{
    keepalive_requests 100;          # nginx 1.18's default (the seed's nginx); 1.19.10 raised it to 1000
    access_log {d}/access.log;       # nginx's default (combined format), as in the seed
    client_body_temp_path {d}/body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    server {{
        listen {HOST}:{port} backlog=4096;
        location / {{
            add_header Content-Type text/plain;
            return 200 'Hello, World!';
        }}
    }}
}}
"""

    def start(self, kind: str, model: str, cpus: str = SERVER_CPUS, workers: int | None = None,
              settings: dict | None = None) -> Server:
        workers = workers or ncpus_in(cpus)
        settings = dict(settings or {})
        # Lab-only settings (never passed to the server): its descriptor limit,
        # and a label that tells variants of one model apart.
        nofile = int(settings.pop("_nofile", NOFILE))
        label = settings.pop("_label", "")
        # "off" or "on": tools/nodelay's LD_PRELOAD shim turns TCP_NODELAY off (or forces it on) in the
        # server, with no change to its code (the delayed-ACK experiment)
        nodelay = settings.pop("_nodelay", "")
        nginx_kw = {k: settings.pop(f"_nginx_{k}") for k in ("connections", "keepalive_timeout", "tcp_nopush",
                                                             "keepalive_requests")
                    if f"_nginx_{k}" in settings}
        s = Server(kind, model, cpus, workers, settings)
        s.label = label or model
        last = ""
        for _attempt in range(3):
            s.port = free_port()
            if kind == "nginx":
                d = self.tmp / f"nginx-{s.port}"
                d.mkdir()
                if model == "nginx-tls":
                    s.scheme = "https"
                    s.conf_text = self.nginx_tls_conf(s.port, workers, d, settings["tls_certificate"],
                                                      settings["tls_certificate_key"], **nginx_kw)
                elif model == "nginx-seed003":
                    s.conf_text = self.nginx_seed003_conf(s.port, workers, d)
                elif model == "nginx-h2c":
                    s.h2c_only = True
                    s.conf_text = self.nginx_h2c_conf(s.port, workers, d, **nginx_kw)
                else:
                    s.conf_text = self.nginx_conf(s.port, workers, d, **nginx_kw)
                (d / "nginx.conf").write_text(s.conf_text)
                variant = ", ".join(f"{k} {v}" for k, v in nginx_kw.items())
                self.nginx_confs[f"{model} ({variant})" if variant else model] = s.conf_text
                s.log_path = d / "error.log"
                cmd = [PEER_BINARIES["nginx"], "-p", str(d), "-c", str(d / "nginx.conf"), "-e", str(s.log_path)]
            elif kind in ("lighttpd", "h2o"):
                cmd = self._peer_cmd(s)
            elif kind == "floor":
                cmd = [str(self.floor_binary()), str(s.port)]
            else:
                s.scheme = "https" if settings.get("tls") == "on" else "http"
                s.log_path = self.logs / f"spindle-{model}-{s.port}.log"
                cmd = self.spindle_argv(model, s.port, workers, s.settings, s.log_path)
            shim = ["env", f"LD_PRELOAD={self.nodelay_shim()}", f"NODELAY_SHIM={nodelay}"] if nodelay else []
            s.argv = ["taskset", "-c", cpus, "prlimit", f"--nofile={nofile}:{nofile}", *shim, *cmd]
            err = open(self.logs / f"{s.label}-{s.port}.stderr", "wb")
            s.cg_key = f"{s.label}-{s.port}"
            s.proc = subprocess.Popen(self.meter.enter_argv(self.meter.server_group(s.cg_key), s.argv),
                                      stdin=subprocess.DEVNULL, stdout=err, stderr=err, cwd=self.tmp)
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

    def floor_binary(self) -> Path:
        """tools/floor/floor_epoll.c, built for this run: the calibration
        server (it answers every request with the same 13-byte response, so
        its rate moves only with the host)."""
        out = self.tmp / "floor_epoll"
        if not out.exists():
            subprocess.run(["cc", "-O2", "-o", str(out), str(REPO / "tools" / "floor" / "floor_epoll.c")],
                           check=True, capture_output=True, timeout=120)
        return out

    def nodelay_shim(self) -> Path:
        """tools/nodelay/nodelay_shim.c, built for this run (an LD_PRELOAD
        library: see its first comment)."""
        out = self.tmp / "nodelay_shim.so"
        if not out.exists():
            subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", str(out),
                            str(REPO / "tools" / "nodelay" / "nodelay_shim.c"), "-ldl"],
                           check=True, capture_output=True, timeout=120)
        return out

    def _peer_cmd(self, s: Server) -> list[str]:
        """Writes lighttpd's or h2o's configuration into its own directory and
        returns the command that runs it in the foreground."""
        if s.workers != 1:
            raise ValueError(f"{s.kind} runs with one worker only in the lab (asked for {s.workers})")
        d = self.tmp / f"{s.kind}-{s.port}"
        d.mkdir()
        s.log_path = d / "error.log"
        if s.kind == "lighttpd":
            s.conf_text = lighttpd_conf(self.docroot, s.port, d)
            cmd = [PEER_BINARIES["lighttpd"], "-D", "-f", str(d / "lighttpd.conf")]
            name = "lighttpd.conf"
        else:
            s.conf_text = h2o_conf(self.docroot, s.port, d, "nobody" if os.geteuid() == 0 else None)
            cmd = [PEER_BINARIES["h2o"], "-c", str(d / "h2o.conf")]
            name = "h2o.conf"
        (d / name).write_text(s.conf_text)
        self.peer_confs[s.kind] = s.conf_text
        return cmd

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
        self.meter.release(s.cg_key)
        return s.proc.returncode

    # -- checks -------------------------------------------------------------

    def precheck(self, s: Server, paths: list[str]) -> None:
        """curl every URL once: status 200 and the file's exact size; records the
        head size too, to check wrk's byte counts later."""
        for p in paths:
            # -k: the tls experiment's certificate is self-signed, made for the run
            h2 = ["--http2-prior-knowledge"] if s.h2c_only else []
            r = subprocess.run(["timeout", "60", "curl", "-s", "-k", *h2, "-o", "/dev/null", "-w",
                                "%{http_code} %{size_header} %{size_download}", s.url(p)],
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
        r = subprocess.run(self.meter.enter_argv(getattr(self.meter, "gen", None), full), capture_output=True, text=True, stdin=subprocess.DEVNULL)
        out = r.stdout + ("\n" + r.stderr if r.stderr else "")
        if r.returncode == 124:
            out += f"\n[lab] killed by timeout after {limit_s:.0f}s"
        return out, time.monotonic() - t0, r.returncode

    def _measure(self, cmd: list[str], limit_s: float, tool: str,
                 parse: Callable[[str], dict]) -> tuple[dict, str, float]:
        """Runs a load generator (pinned, bounded) and parses its output: (metrics,
        output, wall seconds); metrics carry failed_run when the output says the
        run did not finish."""
        out, dt, _rc = self._run(cmd, limit_s)
        m = {"cmd": " ".join(cmd), "tool": tool, "_raw_full": out}
        try:
            m.update(parse(out))
        except parsers.ParseError as e:
            m.update(failed_run=str(e), raw=out[-2000:])
        return m, out, dt

    def ab(self, s: Server, path: str, n: int, c: int, keepalive: bool, seconds: float = 0) -> dict:
        """ab -n N, or time-based when seconds > 0 (-t S with N as a ceiling), so
        every connection makes many requests instead of measuring the burst of
        initial connections."""
        # -r: a receive error (e.g. a reset) is counted in "Failed requests"
        # instead of aborting the run, so failures are measured and reported.
        seconds = self.capped(seconds)
        timed = ["-t", str(max(1, int(round(seconds))))] if seconds else []
        cmd = ["ab", "-r", "-s", "20", *timed, "-n", str(n), "-c", str(c)] + (["-k"] if keepalive else []) \
            + [s.url(path)]
        m, out, _ = self._measure(cmd, 30 + (seconds * 2 if seconds else n / 200), "ab", parsers.parse_ab)
        if "failed_run" in m:
            return m
        want = self.sizes.get(path)
        problems = []
        if want is not None and m["doc_length"] != want:
            problems.append(f"Document Length {m['doc_length']} != {want}")
        if want:
            # req/s and failures from the bodies received: ab counts a connection
            # closed unanswered as a complete request and in its rate.
            good = parsers.ab_answered(m, want)
            m["ab_rps"], m["rps"] = m["rps"], good["rps"]
            m["answered"], m["unanswered"] = good["answered"], good["unanswered"]
            m["errors"] = max(m["errors"], good["unanswered"])
            if good["unanswered"]:
                problems.append(f"{good['unanswered']} of {m['complete']} requests ab counted as complete got "
                                f"no full response (req/s counts only the {good['answered']} answered)")
        if not seconds and m["complete"] != n:
            problems.append(f"only {m['complete']} of {n} requests completed")
        # Time-based runs amortize the initial burst of c connections; a run that
        # got fewer than 10 requests per connection slot mostly measured that burst.
        if seconds and m["complete"] < 10 * c and m["complete"] < n:
            problems.append(f"only {m['complete']} requests for {c} connections (< 10 per connection: "
                            f"mostly the initial connection burst)")
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
        duration = self.capped(duration)
        cmd = ["wrk", "-t", "1", "-c", str(c), "-d", f"{int(round(duration))}s", "--timeout", timeout,
               "-s", str(REPO / "bench" / "lua" / script), s.url(path)]
        if script_args:
            cmd += ["--", *script_args]
        m, out, _ = self._measure(cmd, duration + 40, "wrk", parsers.parse_wrk)
        if "failed_run" in m:
            return m
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

    def s_time(self, s: Server, path: str, seconds: float) -> dict:
        """TLS connections that resume a session, one at a time, each doing one
        GET of `path` (openssl s_time -reuse -www): resumed handshakes/s and,
        with the server's CPU, CPU per resumed handshake."""
        seconds = self.capped(seconds)
        cmd = ["openssl", "s_time", "-connect", f"{HOST}:{s.port}", "-www", path,
               "-time", str(max(1, int(round(seconds)))), "-reuse"]
        m, out, dt = self._measure(cmd, seconds + 30, "s_time", parsers.parse_s_time)
        if "failed_run" in m:
            return m
        n = m["connections"]
        problems = []
        if m["resumed"] < n * 0.95:
            problems.append(f"only {m['resumed']} of {n} connections resumed a session")
        # s_time asks in HTTP/1.0, so the head differs by a few bytes from curl's 1.1 one
        head, body = s.expected.get(path, (0, 0))
        wrong = bool(body) and abs(m["bytes_per_conn"] - (head + body)) > 0.1 * (head + body)
        if wrong:
            problems.append(f"{m['bytes_per_conn']} bytes per connection, expected about {head + body}")
        m.update(ok=0 if wrong else n, errors=n if wrong else 0, rps=n / dt if dt > 0 else 0.0,
                 problems=problems, raw=out[-500:])
        return m

    def vegeta(self, s: Server, targets: list[str], rate: float, duration: float,
               timeout: str = "5s", max_workers: int = 2000, keepalive: bool = True) -> dict:
        """Open loop: vegeta sends `rate` requests per second whatever the server
        does (up to max_workers outstanding), cycling through the targets."""
        if not VEGETA.exists():
            return {"failed_run": f"{VEGETA} missing: run scripts/install-deps.sh bench"}
        duration = self.capped(duration)
        self.cell_no += 1
        tdir = self.tmp / "vegeta"
        tdir.mkdir(exist_ok=True)
        tfile, rfile = tdir / f"targets-{self.cell_no}.txt", tdir / f"results-{self.cell_no}.bin"
        tfile.write_text("".join(f"GET {s.url(t)}\n" for t in targets))
        cmd = [str(VEGETA), "attack", f"-rate={rate:g}/s", f"-duration={duration:g}s", f"-timeout={timeout}",
               f"-max-workers={max_workers}", f"-keepalive={'true' if keepalive else 'false'}",
               f"-targets={tfile}", f"-output={rfile}"]
        out, dt, rc = self._run(cmd, duration + 30)
        m = {"cmd": " ".join(cmd).replace(str(tdir) + "/", ""), "tool": "vegeta"}
        if rc != 0 or not rfile.exists():
            return {**m, "failed_run": f"vegeta exited {rc}: {out[-400:]}"}
        # Decoding the results is not load generation: its CPU and time are
        # taken out of the cell's generator share and wall time (run_cells).
        ru0, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
        rep = subprocess.run([str(VEGETA), "report", "-type=json", str(rfile)], capture_output=True, text=True,
                             timeout=120)
        hdr = subprocess.run([str(VEGETA), "report", "-type=hdrplot", str(rfile)], capture_output=True, text=True,
                             timeout=120)
        ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        m["_post_wall_s"] = time.monotonic() - t0
        m["_post_cpu_s"] = (ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime)
        rfile.unlink(missing_ok=True)
        # vegeta's own summary and its latency histogram, as printed
        m["_raw_full"] = (f"{out}\n--- vegeta report -type=json\n{rep.stdout}{rep.stderr}"
                          f"\n--- vegeta report -type=hdrplot\n{hdr.stdout}{hdr.stderr}")
        try:
            m.update(parsers.parse_vegeta(rep.stdout, hdr.stdout, rate))
        except parsers.ParseError as e:
            return {**m, "failed_run": str(e), "raw": (rep.stdout + rep.stderr)[-2000:]}
        problems = []
        if m["errors"]:
            problems.append(f"{m['errors']} of {m['requests']} requests failed: {m['error_samples'][:2]}")
        m["fell_behind"] = m["sent_rate"] < rate * 0.95
        if m["fell_behind"]:
            problems.append(f"vegeta sent only {m['sent_rate']:.0f}/s of the {rate:g}/s asked: the generator fell "
                            f"behind (out of CPU or of its {max_workers} workers), so this cell is not open loop")
        m["problems"] = problems
        return m

    def openloop(self, s: Server, path: str, rate: float, duration: float, arrivals: str = "constant",
                 timeout_ms: float = 2000, max_conns: int = 1000, deadline_ms: float | None = None) -> dict:
        """Open loop with every latency timed from its intended send time
        (bench/openloop.py, tools/openloop/openloop.c); the raw file keeps the
        generator's JSON and its latency histogram."""
        self.cell_no += 1
        hdir = self.tmp / "openloop"
        hdir.mkdir(exist_ok=True)
        hist = hdir / f"hist-{self.cell_no}.txt"
        cmd = openloop_gen.argv(s.url(path), rate, duration, arrivals, max_conns, timeout_ms,
                                seed=self.cell_no, hist=hist, binary=openloop_gen.build(), deadline_ms=deadline_ms)
        out, _dt, rc = self._run(cmd, duration + timeout_ms / 1000 + 30)
        m = {"cmd": " ".join(cmd).replace(str(hdir) + "/", ""), "tool": "openloop"}
        if rc != 0:
            return {**m, "failed_run": f"openloop exited {rc}: {out[-400:]}"}
        try:
            m.update(openloop_gen.parse(out))
        except (ValueError, KeyError) as e:
            return {**m, "failed_run": str(e), "raw": out[-2000:]}
        m["_raw_full"] = out + "\n--- latency histogram (from the intended send time)\n" + \
            (hist.read_text() if hist.exists() else "(none)\n")
        hist.unlink(missing_ok=True)
        problems = []
        if m["errors"]:
            problems.append(f"{m['errors']} of {m['scheduled']} requests failed ({m['timeouts']} timed out)")
        m["fell_behind"] = m["ok"] < m["scheduled"] * 0.95
        if m["fell_behind"]:
            problems.append(f"answered {m['ok']} of {m['scheduled']} scheduled: the server did not keep up")
        m["problems"] = problems
        return m

    def h2load(self, s: Server, path: str, conns: int, streams: int, duration: float, h1: bool = False,
               rate: int = 0) -> dict:
        """h2load (nghttp2's load generator), one thread, time-based: `conns`
        connections with `streams` requests in flight on each, over HTTP/2 by
        prior knowledge (h2c) or, with h1, over HTTP/1.1, where h2load
        pipelines the `streams` requests on each connection; with rate, at
        most that many requests a second in all (`--rps`, per connection).
        Checks the protocol it spoke, the answers' status and their body bytes."""
        duration = self.capped(duration)
        cmd = ["h2load", "-t", "1", "-c", str(conns), "-m", str(streams), "-D", f"{max(1, int(duration * 1000))}ms",
               *(["--h1"] if h1 else []), *([f"--rps={rate // conns}"] if rate else []), s.url(path)]
        m, out, _ = self._measure(cmd, duration + 30, "h2load", parsers.parse_h2load)
        if "failed_run" in m:
            return m
        problems = []
        want = "http/1.1" if h1 else "h2c"
        if m.get("protocol") != want:
            problems.append(f"h2load spoke {m.get('protocol') or 'nothing'}, not {want}")
        bad = m["failed"] + m["errored"] + m["timeout"]
        if bad:
            problems.append(f"{bad} requests failed ({m['failed']} failed, {m['errored']} errored, "
                            f"{m['timeout']} timed out)")
        if m["non2xx"]:
            problems.append(f"{m['non2xx']} non-2xx")
        size = self.sizes.get(path)
        # streams still in flight when the duration ends may have brought part of their bodies
        if size and m["ok"] and not (0.99 * m["ok"] * size <= m["data_bytes"] <= 1.01 * (m["ok"] + conns * streams) * size):
            problems.append(f"{m['data_bytes'] / m['ok']:.0f} body bytes per answer, expected {size}")
        if m["ok"] == 0:
            problems.append("no request answered")
        m.update(errors=bad + m["non2xx"], problems=problems, raw=out[-2500:], h2_conns=conns, h2_streams=streams)
        return m

    def capped(self, seconds: float) -> float:
        """A tool's duration: as asked, or at most short_s during a calibration run."""
        return min(seconds, self.short_s) if self.short_s and seconds else seconds

    def beside_slow_clients(self, s: Server, path: str, rate: float, seconds: float, writers: int,
                            readers: int, big: str = MB1, timeout_ms: float = 2000) -> dict:
        """A fresh client's open loop (Lab.openloop: latency from each request's
        intended send time) while `writers` clients trickle a request head a
        byte at a time and `readers` read a large file 32 bytes at a time
        (python -m bench.client slow). The server's threads and processes are
        read while the slow clients are held. A fresh request that timed out
        is a latency of at least the timeout: where more than 1% did, p99_ms is
        at least that (p99_censored), not the answered ones' p99 alone."""
        seconds = self.capped(seconds)
        cmd = [sys.executable, "-m", "bench.client", "slow", HOST, str(s.port), str(writers), str(readers),
               str(seconds + 30 + timeout_ms / 1000), path, big]
        full = ["taskset", "-c", LOAD_CPUS, "timeout", "-k", "5", str(int(seconds + 60 + timeout_ms / 1000)),
                "prlimit", f"--nofile={NOFILE}:{NOFILE}", *cmd]
        p = subprocess.Popen(self.meter.enter_argv(getattr(self.meter, "gen", None), full), stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
        try:
            ready, _, _ = select.select([p.stdout], [], [], 20)
            first = json.loads(p.stdout.readline() or "{}") if ready else {}
            if not first:
                return {"failed_run": "the slow clients did not report within 20 s"}
            held = s.memory()
            m = self.openloop(s, path, rate, seconds, "constant", timeout_ms=timeout_ms)
            p.stdin.close()
            ready, _, _ = select.select([p.stdout], [], [], 15)
            end = json.loads(p.stdout.readline() or "{}") if ready else {}
        finally:
            if p.stdin and not p.stdin.closed:
                p.stdin.close()            # the slow clients stop and close their connections
            if p.poll() is None:
                try:
                    p.wait(15)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        if "failed_run" in m:
            return m
        m.update(slow_writers=first.get("writers"), slow_readers=first.get("readers"),
                 slow_readers_served=first.get("readers_served"),
                 slow_ready_s=first.get("ready_s"), slow_held_at_end=end.get("held_at_end"),
                 slow_dropped=end.get("dropped"), held_threads=held["threads"], held_processes=held["processes"],
                 answered_share=m["ok"] / m["scheduled"] if m.get("scheduled") else 0.0)
        m["cmd"] = f"{' '.join(cmd)} & {m['cmd']}"
        for k in ("mean_ms", "p50_ms", "p90_ms", "p99_ms", "p999_ms", "max_ms"):
            if (m.get(k) or 0) < 0:        # openloop prints -1 where no request was answered
                m[k] = None
        # a number, not a bool: the report's aggregates take the median of numbers only
        m["p99_censored"] = int(bool(m.get("scheduled")) and m.get("timeouts", 0) > 0.01 * m["scheduled"])
        m["timeout_ms"] = timeout_ms
        if m["p99_censored"]:
            m["p99_ms"] = max(m.get("p99_ms") or 0.0, timeout_ms)
        if first.get("errors"):
            m.setdefault("problems", []).append(f"{first['errors']} slow client(s) could not connect: "
                                                f"{first.get('error_samples', [])[:2]}")
        return m

    def warm(self, s: Server, path: str) -> None:
        """Unmeasured load on the cell's URL right before it is measured: threads,
        caches and the kernel's socket paths are warm, idle workers awake. 1000
        requests/s: the default 0.25 s is 250 requests, as many as the earlier
        0.5 s at 500/s sent, in half the time."""
        if self.warmup_s <= 0:
            return
        if s.h2c_only:      # vegeta speaks HTTP/1.1 on http://: the same 250 requests from h2load
            cmd = ["h2load", "-t", "1", "-c", "1", "-m", "10", "-n", str(max(1, int(1000 * self.warmup_s))),
                   s.url(path)]
            full = ["taskset", "-c", LOAD_CPUS, "timeout", "-k", "5", str(int(self.warmup_s + 20)), *cmd]
            subprocess.run(full, capture_output=True, text=True, stdin=subprocess.DEVNULL)
            return
        if not VEGETA.exists():
            return
        cmd = [str(VEGETA), "attack", "-rate=1000/s", f"-duration={self.warmup_s:g}s", "-timeout=5s",
               "-max-workers=64", "-output=/dev/null", "-insecure"]
        full = ["taskset", "-c", LOAD_CPUS, "timeout", "-k", "5", str(int(self.warmup_s + 20)), *cmd]
        subprocess.run(full, input=f"GET {s.url(path)}\n", capture_output=True, text=True)

    def totals(self, s: Server) -> dict | None:
        """The workload endpoint's counters, once they stop moving (requests from
        the warm-up or a finished cell may still be completing)."""
        last = None
        deadline = time.monotonic() + 30
        for _ in range(60):
            try:
                with socket.create_connection((HOST, s.port), timeout=10) as c:
                    c.sendall(f"GET /work?totals HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
                    data = b""
                    while chunk := c.recv(4096):
                        data += chunk
            except OSError:
                # A server still busy with the cell's last requests (all threads
                # taken) may be slow to answer: retry, bounded, before giving up.
                if time.monotonic() > deadline or not s.alive():
                    return None
                time.sleep(0.2)
                continue
            body = data.split(b"\r\n\r\n", 1)[-1].decode(errors="replace")
            try:
                now = parsers.parse_totals(body)
            except parsers.ParseError:
                return None
            if now == last:
                return now
            last = now
            time.sleep(0.05)
        return last

    def http_get(self, s: Server, path: str, timeout: float = 5.0) -> str | None:
        """One GET with Connection: close, over TLS where the server speaks
        it (certificates unchecked: the tls experiment's are made for the
        run); the body of a 200, else None."""
        try:
            raw = socket.create_connection((HOST, s.port), timeout=timeout)
            if s.scheme == "https":
                ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
                raw = ctx.wrap_socket(raw, server_hostname=HOST)
            with raw as c:
                c.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
                data = b""
                while chunk := c.recv(65536):
                    data += chunk
        except (OSError, ssl.SSLError):
            return None
        head, _, body = data.partition(b"\r\n\r\n")
        if not head.startswith((b"HTTP/1.1 200", b"HTTP/1.0 200")):
            return None
        return body.decode(errors="replace")

    def request_times(self, s: Server) -> dict | None:
        """spindle's queue-wait and service-time histograms as they stand
        (bench/reqtimes.py), or None: another server, or /metrics unreadable."""
        if s.kind != "spindle" or not s.alive():
            return None
        # a server past its knee may still be full when the cell ends (overload = reject answers 503
        # until its connections close): ask again, briefly, before going without
        for attempt in range(3):
            text = self.http_get(s, "/metrics")
            if text or not s.alive():
                break
            time.sleep(0.2)
        return reqtimes.parse_metrics(text) if text else None

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

    def pipeline_latency(self, s: Server, path: str, conns: int, depth: int, seconds: float) -> dict:
        """Per-batch latency with `depth` requests pipelined per write on `conns`
        connections (bench/client.py pipeline), which wrk cannot report."""
        head, body = s.expected[path]
        r = self.client(["pipeline", HOST, str(s.port), path, str(conns), str(depth), f"{seconds:g}",
                         str(head + body)], limit_s=seconds + 60)
        if "failed_run" not in r:
            r["tool"] = "python-pipeline"
            r["requests"] = r["ok"]
            r["problems"] = [f"{r['errors']} connection(s) failed: {r['error_samples'][:2]}"] if r["errors"] else []
        return r

    def client(self, args: list[str], limit_s: float = 120) -> dict:
        cmd = [sys.executable, "-m", "bench.client", *args]
        full = ["taskset", "-c", LOAD_CPUS, "timeout", "-k", "5", str(int(limit_s)), *cmd]
        r = subprocess.run(self.meter.enter_argv(getattr(self.meter, "gen", None), full), capture_output=True,
                           text=True, cwd=REPO, stdin=subprocess.DEVNULL)
        raw = f"$ {' '.join(cmd)}\n{r.stdout}{r.stderr}"
        try:
            return {**json.loads(r.stdout.strip().splitlines()[-1]), "_raw_full": raw}
        except (IndexError, json.JSONDecodeError):
            return {"failed_run": f"client exited {r.returncode}: {r.stderr[-500:]}", "_raw_full": raw}

    # -- cells --------------------------------------------------------------

    def keep_raw(self, exp: str, cell: str, rep: int, server: str, m: dict) -> str | None:
        """Writes what the generator printed for one measurement (and, for our
        Python clients, every latency they measured) under raw/, and returns
        its path relative to the run's folder."""
        text = m.pop("_raw_full", None)
        if text is None and m.get("lat_ms"):
            text = json.dumps({k: m[k] for k in ("lat_ms", "cdf") if k in m})
        if text is None:
            return None
        safe = lambda x: re.sub(r"[^A-Za-z0-9_.=-]+", "_", str(x))
        d = self.raw / safe(exp)
        d.mkdir(parents=True, exist_ok=True)
        f = d / f"{safe(cell)}--{safe(server)}--rep{rep}.txt"
        f.write_text((f"$ {m['cmd']}\n" if m.get("cmd") else "") + text)
        return str(f.relative_to(self.out))

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
    warm_path: str = ""             # URL warmed up before every measurement ("" = none)
    workload: dict | None = None    # workload cells: {"unit_s", "kind", "cores", "in_flight"} for the checks
    extra_s: float = 0.0            # seconds the tool runs beyond lab.cell_s (for the plan's estimate)
    # False where a second measurement on the same running server would read what the first left
    # behind (memory held by connections opened before), so a disturbed one is kept, not retaken
    retake: bool = True
    # The exact command, for a cell another experiment also needs: on the same
    # server key it is measured once per run and reported in both ("" = never shared)
    same_as: str = ""
    # Count system calls and context switches per request in an untimed run after the repeats
    # (calibrate_calls): perf's tracepoint slows every call, so never in a timed repeat
    count_calls: bool = False
    # An open-loop tool that waits for the requests still in flight after its schedule, then decodes its
    # results (vegeta: the plan's OPEN_LOOP_DRAIN_S); tools/openloop stops within a millisecond of its
    # last answer when the server keeps up (the published run's openloop took 2.4 min, estimated 3.6)
    drains: bool = True


ORDER_SEED = 20261126
# Reading spindle's /metrics before and after a cell (Lab.request_times), for the plan's estimate
METRICS_READ_S = 0.02    # the default run's shuffle; recorded in the manifest (order_seed)

# A repeat measured while something outside the lab used the CPUs is taken again at the end of its
# experiment. A quiet run's worst cell reads +0.10 cores of other load (the 2026-11-26 published run,
# 685 cells); a run while builds ran beside it read up to +1.14, and every verdict it lost to the
# published run traced to such repeats (a pool cell at 1,150 req/s among four at 1,840).
RETAKE_OTHER_CORES = 0.15
# The calibration run that counts system calls (calibrate_calls): at most this long, and what it costs
# beyond that in the plan's estimate (the cell's bookkeeping 0.3 s, perf's attach and stop 0.07 s)
CALL_CAL_S = 1.0
CALL_CAL_OVERHEAD_S = 0.4
MAX_RETAKES = 2          # per repeat; a third disturbed reading is kept, and flagged by its other load


def disturbed(m: dict) -> bool:
    """Whether a measurement shared the machine with load from outside the lab."""
    return "failed_run" not in m and (m.get("other_cores") or 0) > RETAKE_OTHER_CORES


def stalled(params: dict, m: dict) -> str:
    """Why a repeat of a matched-load cell did not run at its offered rate ('' when
    it did, or for any other cell). The rule is fixed before the run: a failed
    request, a generator that sent under 95% of the rate or passed 90% of its
    core (vegeta does only when the server stalls: its mean latency in such
    repeats was 10-112 ms against 1.2 ms or less in every other), or under 95%
    of the rate answered. Such a repeat compares CPU per request at another
    load, and one of them voided the whole pair (claims.matched_ok), so it is
    taken again, like a disturbed one, instead."""
    if params.get("part") != "matched" or "failed_run" in m:
        return ""
    rate = params.get("rate") or 0
    if m.get("errors"):
        return f"{m['errors']} requests failed"
    if m.get("fell_behind"):
        return "the generator fell behind its rate"
    if m.get("client_bound"):
        return f"the generator passed 90% of its core (mean latency {m.get('mean_ms', 0):.1f} ms)"
    if (m.get("rps") or 0) < 0.95 * rate:
        return f"{m.get('rps') or 0:.0f}/s answered of {rate:g}/s"
    return ""


def measurement_order(cells: list[Cell], repeats: int, seed: int | str | None = None
                      ) -> list[tuple[int, Cell, bool]]:
    """(repeat, cell, warm_up) in the order they run. Each repeat is a round
    over every cell, so a slow spell of the host lands on every server of the
    round alike. Within a round the cells are grouped by server (a switch of
    server costs a warm-up), and with a seed the servers' order and each
    server's cells are shuffled anew every round (random.Random(seed): the
    same seed gives the same order, and the report records it); without one,
    the servers' order is reversed every other round. A cell is warmed up
    unless the measurement just before it loaded the same server process: that
    measurement (seconds of load, a few thousand requests at least) is its
    warm-up; the files are in the page cache from the start."""
    servers = list(dict.fromkeys(c.server for c in cells))
    rng = random.Random(str(seed)) if seed is not None else None
    out, prev = [], None
    for rep in range(1, repeats + 1):
        if rng is not None:
            keys = servers[:]
            rng.shuffle(keys)
        else:
            keys = servers if rep % 2 else servers[::-1]
        for key in keys:
            mine = [c for c in cells if c.server == key]
            if rng is not None:
                rng.shuffle(mine)
            for c in mine:
                out.append((rep, c, bool(c.warm_path) and prev != c.server))
                prev = c.server
    return out


def server_key(kind: str, model: str, cpus: str = SERVER_CPUS, workers: int | None = None,
               **settings) -> tuple:
    return (kind, model, cpus, workers or ncpus_in(cpus), tuple(sorted(settings.items())))


def _served(m: dict) -> int:
    """Requests answered successfully in a run, whatever the tool."""
    for k in ("ok",):
        if k in m:
            return int(m[k])
    if m.get("tool") == "ab":
        if "answered" in m:
            return int(m["answered"])
        return max(0, int(m.get("complete", 0)) - int(m.get("failed", 0)) - int(m.get("non2xx", 0)))
    if m.get("tool") == "wrk":
        return int(m.get("requests", 0)) - int(m.get("non2xx", 0))
    return int(m.get("requests", 0))


def exclude_post_processing(m: dict, wall_s: float, gen_cpu_s: float) -> tuple[float, float]:
    """A tool's post-processing after the load stopped (vegeta decoding its
    results) is neither load generation nor part of the measured window: take
    its wall time and CPU out (and the markers out of m)."""
    post_wall = m.pop("_post_wall_s", 0.0)
    post_cpu = m.pop("_post_cpu_s", 0.0)
    return max(1e-9, wall_s - post_wall), max(0.0, gen_cpu_s - post_cpu)


def account(m: dict, wall_s: float, server_cpu_s: float, gen_cpu_s: float, mach: dict, load_cpus: int,
            meter: dict | None = None) -> dict:
    """Per-cell CPU figures: the server's and the generator's CPU, server CPU
    per request, whether the generator may have been the bottleneck, and what
    else used the CPUs. `meter` is bench/cpumeter.py's reading of the same
    window (other load, the lab's own CPU, per CPU where it has them, its
    window and method); without it other load is /proc/stat's busy time minus
    server and generator. Interrupt work is not subtracted: the kernel charges
    a softirq that runs inside a task (the loopback receive path inside the
    server's send) to that task, so it is in the server's or the generator's
    figure already. Other load is reported as measured, negative or not."""
    cpus = {k: v for k, v in mach.items() if k != "cpu"}
    busy = sum(v["busy_s"] for v in cpus.values())
    irq = sum(v["softirq_s"] for v in cpus.values())
    steal = sum(v.get("steal_s", 0.0) for v in cpus.values())
    # /proc/stat's shares are of its own window (ticks elapsed per CPU), not of
    # the monotonic wall time: on a virtual machine whose tick accounting runs
    # ahead of its clock, busy/wall read more cores than exist.
    window = max((v["total_s"] for v in cpus.values()), default=0.0) or wall_s
    served = _served(m)
    out = {"wall_s": wall_s, "server_cpu_s": server_cpu_s, "server_cores": server_cpu_s / wall_s if wall_s else 0,
           "gen_cpu_s": gen_cpu_s, "gen_share": checks.generator_share(gen_cpu_s, wall_s, load_cpus),
           "client_bound": checks.client_bound(gen_cpu_s, wall_s, load_cpus),
           "served": served,
           "server_us_per_req": server_cpu_s * 1e6 / served if served else None,
           # big files: CPU per byte moved (µs per MB = 10^6 bytes) says more than per request
           "server_us_per_mb": server_cpu_s * 1e12 / m["bytes"] if m.get("bytes") else None,
           "softirq_cores": irq / window if window else 0,
           "steal_cores": steal / window if window else 0}
    if meter is not None:
        w = meter.get("window_s") or wall_s
        out.update(other_cpu_s=meter["other_cpu_s"], other_cores=meter["other_cpu_s"] / w if w else 0,
                   lab_cores=meter["lab_cpu_s"] / w if w else 0, cpu_meter=meter["method"])
        if meter.get("kthread_cpu_s") is not None:
            out["kthread_cores"] = meter["kthread_cpu_s"] / w if w else 0
        for k, v in meter.items():
            if re.fullmatch(r"other_cpu\d+_s", k):
                out[k[:-2] + "_cores"] = v / w if w else 0
    else:
        out.update(other_cpu_s=busy - server_cpu_s - gen_cpu_s,
                   other_cores=(busy - server_cpu_s - gen_cpu_s) / window if window else 0,
                   cpu_meter="/proc/stat busy - server - generator (ticks)")
    for name, v in sorted(cpus.items()):
        out[f"{name}_busy"] = v["busy_s"] / v["total_s"] if v["total_s"] else 0
    return out


AB_LATENCY_MIN_MS = 5     # ab's per-request times are whole milliseconds: coarser below this


def little_unchecked(m: dict, conc: int | None) -> str | None:
    """Why Little's law cannot be checked on this cell, or None when it can."""
    if m.get("tool") == "python-hold":
        return ("idle connections held (the scale experiment): none of them is a request in flight, and the fresh "
                "client's go one at a time")
    if m.get("tool") == "vegeta" or conc is None:
        return "open loop: the rate is fixed and requests in flight are not, so there is no closed-loop identity"
    if not conc:
        return "no fixed number of connections recorded"
    if m.get("tool") == "s_time":
        return "openssl s_time reports connections per second and no latency"
    if m.get("tool") == "ab":
        mean = m.get("total_mean_ms")
        if mean is None:
            return "ab printed no per-request times"
        if mean < AB_LATENCY_MIN_MS:
            return (f"ab's measured mean is under {AB_LATENCY_MIN_MS} ms, in whole milliseconds: its rounding "
                    f"alone moves the product by more than the check's tolerance")
        return None
    if m.get("mean_ms", m.get("avg_ms")) is None:
        if "pipeline" in m.get("cmd", ""):
            return ("requests pipelined: wrk times each request as if alone on its connection, so the cell "
                    "reports no latency to multiply")
        return f"{m.get('tool', 'the tool')} reported no mean latency"
    return None


def littles_law_for(m: dict, conc: int | None) -> tuple[float | None, str | None]:
    """Little's law for a closed-loop cell (see checks.littles_law), with the
    tool's own per-request latency: ab's measured 'Total' mean (its 'Time per
    request' is computed as c x time / n, so Little's law holds for it by
    construction and would check nothing), wrk's and our client's mean."""
    if little_unchecked(m, conc):
        return None, None
    mean = m.get("total_mean_ms") if m.get("tool") == "ab" else m.get("mean_ms", m.get("avg_ms"))
    return checks.littles_law(m.get("rps", 0), mean, conc)


def physics_checks(m: dict, server_cores: int, conc: int | None) -> None:
    """Adds the cell's physical consistency checks to m: server CPU within its
    cores (else invalid) and Little's law for closed loops (else a problem, and
    where it cannot be checked, why: `little_unchecked`)."""
    why = checks.server_cpu_check(m["server_cpu_s"], m["wall_s"], server_cores)
    if why:
        m["invalid"] = "; ".join(w for w in (m.get("invalid"), why) if w)
    ratio, why = littles_law_for(m, conc)
    if ratio is not None:
        m["little_ratio"] = ratio
    else:
        m["little_unchecked"] = little_unchecked(m, conc) or "no rate or latency measured"
    if why:
        m.setdefault("problems", []).append(why)


def workload_checks(m: dict, before: dict | None, after: dict | None, wall_s: float, wl: dict,
                    server_cpu_s: float | None = None) -> dict:
    """The seed-002 validity checks after a cell (see bench/checks.py). wall_s and
    server_cpu_s cover the same window as the two totals."""
    if before is None or after is None:
        return {"invalid": "could not read /work?totals before and after the cell"}
    units = (after["delay_units"] - before["delay_units"]) + (after["hold_units"] - before["hold_units"])
    rate, why_cpu = checks.cpu_work_check(units, wl["unit_s"], wall_s, wl["cores"], wl["kind"], server_cpu_s)
    delta = after["total"] - before["total"]
    why_bucket = checks.bucket_check(delta, _served(m), wl["in_flight"])
    out = {"work_s_per_s": rate, "bucket_delta": delta}
    why = "; ".join(w for w in (why_cpu, why_bucket) if w)
    if why:
        out["invalid"] = why
    return out


def skip_cells(lab: Lab, exp: str, cells: list[Cell], why: str) -> None:
    """Cells whose server cannot run on this machine (a peer not installed):
    one record per cell saying so, so the report shows a skipped row rather
    than a missing one, and the run goes on."""
    if lab.plan is not None or not cells:
        return
    for c in cells:
        lab.records.append({"exp": exp, "cell": c.name, "server": dict(c.server[4]).get("_label", c.server[1]),
                            "kind": c.server[0], "model": c.server[1], "cpus": c.server[2],
                            "workers": c.server[3], "rep": 1, **c.params, "skipped": why,
                            "_params": list(c.params)})
    names = ", ".join(dict.fromkeys(dict(c.server[4]).get("_label", c.server[1]) for c in cells))
    print(f"  {exp}: {len(cells)} cell(s) of {names} SKIPPED: {why}", flush=True)
    lab.note(exp, f"{names} skipped: {why}.")


def reuse_measured(lab: Lab, exp: str, cells: list[Cell]) -> None:
    """Cells an earlier experiment of this run measured with the same server
    and command: its records again, under this experiment's cell name and
    parameters, saying where they come from."""
    if lab.plan is not None:
        return
    for c in cells:
        src_recs = lab.measured[(c.server, c.same_as)]
        for src in src_recs:
            rec = {k: v for k, v in src.items() if k not in src.get("_params", [])}
            rec.update({"exp": exp, "cell": c.name, **c.params, "_params": list(c.params),
                        "reused_from": f"{src['exp']}: {src['cell']}"})
            lab.records.append(rec)
        where = f"{src_recs[0]['exp']}: {src_recs[0]['cell']}" if src_recs else "an earlier experiment"
        print(f"  {exp} {c.name}: measured in {where} (same server and command), not again", flush=True)
        lab.note(exp, f"{c.name}: the same server and command (`{c.same_as}`) as {where}, measured once "
                      f"in this run and reported in both.")


def call_cal_cost(lab: Lab, c: Cell) -> float:
    """The plan's estimate of one cell's calibration run (calibrate_calls)."""
    if c.params.get("n"):
        return 1.2 + CALL_CAL_OVERHEAD_S            # a count-based cell runs whole (seed 001: ~1.15 s)
    return min(CALL_CAL_S, lab.cell_s) + max(0.0, c.extra_s) + CALL_CAL_OVERHEAD_S


def apply_call_counts(records: list[dict], exp: str, cell: str, counts: dict) -> int:
    """Puts a calibration run's system calls and context switches per request
    on the cell's timed records that perf did not count (calls_from says
    where they come from); returns how many it filled."""
    n = 0
    for r in records:
        if r.get("exp") != exp or r.get("cell") != cell or "failed_run" in r or r.get("syscalls_per_req") is not None:
            continue
        r.update(counts, calls_from="calibration run (untimed, perf attached)")
        n += 1
    return n


def calibrate_calls(lab: Lab, exp: str, cells: list[Cell], running: dict[tuple, Server]) -> None:
    """System calls per request in the default run, without slowing a timed
    repeat: after an experiment's repeats, each cell marked count_calls runs
    once more, for at most CALL_CAL_S, on the same server with `perf stat`
    attached (bench/kcounters.py). Its counts per request (system calls, and
    context switches, every thread's and child's) go on the cell's records;
    nothing else of this run is kept: its CPU, rate and latency carry the
    tracepoint's cost and are no result. lab.call_calibration keeps each run
    (results.json). Nothing happens where perf cannot count the tracepoint."""
    if not cells or not kcounters.works():
        return
    order = list(running)
    for c in sorted(cells, key=lambda c: order.index(c.server) if c.server in order else len(order)):
        s = running.get(c.server)
        if s is None or not s.alive():
            continue
        perf = kcounters.PerfCounter.start(s.pids(), lab.pmu, LOAD_CPUS)
        if perf is None:
            return
        lab.short_s = CALL_CAL_S
        t0 = time.monotonic()
        try:
            m = c.run(lab, s)
        except Exception as e:
            m = {"failed_run": f"{type(e).__name__}: {e}"}
        finally:
            lab.short_s = None
            counts = perf.stop()
        m.pop("_raw_full", None)
        served = _served(m) if "failed_run" not in m else 0
        rec = {"exp": exp, "cell": c.name, "server": s.label, "cmd": m.get("cmd", ""), "served": served,
               "seconds": round(time.monotonic() - t0, 3), "perf": counts}
        if "failed_run" in m:
            rec["failed_run"] = m["failed_run"]
        per = kcounters.per_request({"user_s": 0, "sys_s": 0, "ctx_vol": 0, "ctx_invol": 0, "runq_s": 0,
                                     "minflt": 0, "majflt": 0, "softirq_s": 0, "user_sys_from": ""}, counts, served)
        got = {k: per.get(k) for k in ("syscalls_per_req", "ctx_per_req") if per.get(k) is not None}
        rec.update(got)
        lab.call_calibration.append(rec)
        filled = apply_call_counts(lab.records, exp, c.name, got) if got else 0
        print(f"  {exp} {c.name:<34} calls: " + (f"{got.get('syscalls_per_req', 0):.1f} system calls and "
                                                   f"{got.get('ctx_per_req', 0):.2f} switches per request over "
                                                   f"{served} requests (untimed, on {filled} records)"
                                                   if got else f"not counted ({m.get('failed_run', 'no requests')})"),
              flush=True)


def run_cells(lab: Lab, exp: str, cells: list[Cell], repeats: int, paths: list[str],
              progress_fmt: Callable[[dict], str]) -> None:
    """Runs the cells `repeats` times (measurement_order: rounds, grouped by
    server), on servers started once for the experiment. Every measurement is
    preceded by a warm-up (or by load on the same URL) and wrapped in CPU
    accounting."""
    names = [c.name for c in cells]
    shared = [c for c in cells if c.same_as and (c.server, c.same_as) in lab.measured]
    cells = [c for c in cells if c not in shared]
    if lab.plan is not None:          # --plan: count, do not run
        for c in cells:
            if c.same_as:
                lab.measured[(c.server, c.same_as)] = []
        order = measurement_order(cells, repeats, lab.order_seed(exp))
        lab.plan.append({"exp": exp, "cells": len(cells), "repeats": repeats,
                         "servers": len(dict.fromkeys(c.server for c in cells)),
                         "count_based": sum(1 for c in cells if c.params.get("n")),
                         "open_loop": sum(1 for c in cells if c.drains and ("rate" in c.params
                                                                             or c.params.get("open_loop"))),
                         "warmups": sum(1 for _, _, w in order if w),
                         "keys": list(dict.fromkeys(c.server for c in cells)),
                         "names": names, "shared": len(shared),
                         "call_cal_s": 0.0 if lab.syscalls else sum(call_cal_cost(lab, c) for c in cells
                                                                    if c.count_calls),
                         "extra_s": repeats * sum(c.extra_s + (METRICS_READ_S if c.server[0] == "spindle" else 0.0)
                                                  for c in cells)})
        return
    reuse_measured(lab, exp, shared)
    running: dict[tuple, Server] = {}
    broken: dict[tuple, str] = {}     # servers that would not start (or pass the pre-check): why
    total = len(cells) * repeats
    t_exp = time.monotonic()
    load_cpus = ncpus_in(LOAD_CPUS)

    def start_checked(key: tuple) -> Server | None:
        """A server that cannot start fails its own cells, not the run."""
        kind, model, cpus, workers, settings = key
        s = None
        try:
            s = lab.start(kind, model, cpus, workers, dict(settings))
            lab.precheck(s, paths)
        except Exception as e:
            if s is not None:
                lab.stop(s)
            broken[key] = f"{type(e).__name__}: {e}"
            print(f"  ! {exp}: {broken[key][:300]}", flush=True)
            lab.note(exp, f"a server could not be started or failed its pre-check; its cells are recorded as "
                          f"failed runs: {broken[key][:300]}")
            return None
        running[key] = s
        return s

    keys = list(dict.fromkeys(c.server for c in cells))
    for key in [k for k in lab.carried if k not in keys]:   # kept for an experiment that did not run
        lab.stop(lab.carried.pop(key))
    try:
        for key in keys:
            s = lab.carried.pop(key, None)
            if s is not None and s.alive():
                try:
                    lab.precheck(s, paths)
                    running[key] = s
                    print(f"  {exp}: {s.label} kept running from the experiment before", flush=True)
                    continue
                except Exception:
                    lab.stop(s)
            s = start_checked(key)
            if s is not None:
                lab.server_memory.append({"exp": exp, "server": s.label, "workers": s.workers, **s.memory()})
        order = list(measurement_order(cells, repeats, lab.order_seed(exp)))
        retakes: dict[tuple[int, int], int] = {}     # (cell, repeat) -> times taken again
        for k, (rep, c, warm_up) in enumerate(order, 1):   # a retake appends to order
            s = running.get(c.server)
            if s is not None and not s.alive():   # died in an earlier cell: that is a result too
                lab.note(exp, f"{s.label} died (exit {s.proc.returncode}); restarted")
                lab.stop(s)
                del running[c.server]
                s = start_checked(c.server)
                warm_up = bool(c.warm_path)      # a fresh process: the load before it ran elsewhere
            if s is None:
                # under the label a running server has, so a pair the plan measured finds the failure
                # (claims.planned) instead of judging the pair on another basis
                label = dict(c.server[4]).get("_label", c.server[1])
                lab.records.append({"exp": exp, "cell": c.name, "server": label, "kind": c.server[0],
                                    "model": c.server[1], "cpus": c.server[2], "workers": c.server[3],
                                    "rep": rep, **c.params, "failed_run": broken[c.server],
                                    "_params": list(c.params)})
                print(f"  [{k:3d}/{total}] {exp} {c.name:<34} rep {rep}/{repeats}: RUN FAILED: "
                      f"server not running", flush=True)
                continue
            if warm_up:
                lab.warm(s, c.warm_path)
            tot0 = lab.totals(s) if c.workload else None
            # the server's own histograms, read outside the CPU window (their reading costs the server a
            # request): the cell's queue wait and service time are the difference (bench/reqtimes.py)
            rt0 = lab.request_times(s)
            t_tot0 = time.monotonic()
            pids0 = s.pids()
            # perf counts the server's system calls and switches for the cell (inherited by what
            # it starts), on the generators' CPU and in the lab's cgroup. Counting the syscall
            # tracepoint slows every system call (~0.2 us each on this VM), so only where asked:
            # --syscalls (every cell) or a cell that is no verdict's (the open loop's knee probes)
            perf = kcounters.PerfCounter.start(pids0, lab.pmu, LOAD_CPUS) \
                if lab.syscalls or c.params.get("count_syscalls") else None
            kc0 = kcounters.snapshot(pids0, lab.meter.server_group(s.cg_key))
            sched0 = procstat.threads_schedstat(pids0)
            t_meter0 = time.monotonic()
            mach0, cpu0 = procstat.machine(), lab.meter.snapshot(s.cg_key, pids0)
            ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.monotonic()
            try:
                m = c.run(lab, s)
            except Exception as e:  # a broken cell is reported, the lab goes on
                m = {"failed_run": f"{type(e).__name__}: {e}"}
            wall = time.monotonic() - t0
            ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            pids1 = s.pids()
            mach1, cpu1 = procstat.machine(), lab.meter.snapshot(s.cg_key, pids1)
            meter_window = time.monotonic() - t_meter0
            sched1 = procstat.threads_schedstat(pids1)
            kc1 = kcounters.snapshot(pids1, lab.meter.server_group(s.cg_key))
            perf_counts = perf.stop() if perf else None
            rt1 = lab.request_times(s) if rt0 is not None else None
            if not s.alive():
                m.setdefault("problems", []).append(f"server died (exit {s.proc.returncode})")
            gen = (ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime)
            post_cpu = m.get("_post_cpu_s", 0.0)
            wall, gen = exclude_post_processing(m, wall, gen)
            figs = cpumeter.cell_figures(cpu0, cpu1, gen + post_cpu)
            figs.update(window_s=meter_window, method=lab.meter.method)
            if cpu0.get("gen") is None:
                # /proc: the lab reaps the generators (and vegeta's decoding, which is not load) into its own
                # figure; the generator is getrusage's, without the decoding
                figs["gen_cpu_s"] = gen
                figs["lab_cpu_s"] += post_cpu
            raw_path = lab.keep_raw(exp, c.name, rep, s.label, m)
            if "failed_run" not in m:
                m.update(account(m, wall, figs["server_cpu_s"], figs["gen_cpu_s"],
                                 procstat.machine_delta(mach0, mach1), load_cpus, meter=figs))
                # the server's threads' time waiting for a CPU (live threads; one that exits takes its own)
                m["server_runq_wait_s"] = procstat.schedstat_delta(sched0, sched1)[1]
                m.update(kcounters.per_request(kcounters.delta(kc0, kc1), perf_counts, m.get("served") or 0))
                m.update(reqtimes.fields(reqtimes.delta(rt0, rt1)))
            if raw_path:
                m["raw_file"] = raw_path
                closed = not (c.params.get("open_loop") or "rate" in c.params)
                physics_checks(m, ncpus_in(s.cpus),
                               (c.params.get("conc") or c.params.get("par") or 0) if closed else None)
                if c.workload:
                    tot1 = lab.totals(s)
                    srv_end = lab.meter.snapshot(s.cg_key, s.pids())
                    wl = workload_checks(m, tot0, tot1, time.monotonic() - t_tot0, c.workload,
                                         server_cpu_s=cpumeter.cell_figures(cpu0, srv_end, 0.0)["server_cpu_s"])
                    if m.get("invalid") and wl.get("invalid"):
                        wl["invalid"] = m["invalid"] + "; " + wl["invalid"]
                    m.update(wl)
            rec = {"exp": exp, "cell": c.name, "server": s.label, "kind": s.kind,
                   "model": s.model, "cpus": s.cpus, "workers": s.workers, "rep": rep,
                   **c.params, **m, "elapsed_s": wall, "loadavg1": loadavg(),
                   "warm_up": ("openloop 1000/s" if warm_up else "the measurement before (same server)")
                   if c.warm_path else "none",
                   **({"delay_kind": c.workload["kind"]} if c.workload else {}),
                   "_params": list(c.params)}
            taken = retakes.get((id(c), rep), 0)
            stall = stalled(c.params, m)
            if c.retake and (disturbed(m) or stall) and taken < MAX_RETAKES:
                retakes[(id(c), rep)] = taken + 1
                order.append((rep, c, bool(c.warm_path)))   # later, after a warm-up of its own
                total += 1
                why = f"did not run at its rate ({stall})" if stall else \
                    f"other load {m['other_cores']:+.2f} cores (over {RETAKE_OTHER_CORES})"
                rec["retaken_because"] = why
                lab.retaken.append(rec)
                lab.note(exp, f"{s.label} {c.name} repeat {rep}: {why}; taken again at the end of the experiment")
                print(f"  [{k:3d}/{total}] {exp} {c.name:<34} rep {rep}/{repeats}: {why}: taken again later",
                      flush=True)
                continue
            rec["retakes"] = taken
            lab.records.append(rec)
            if c.same_as:
                lab.measured.setdefault((c.server, c.same_as), []).append(rec)
            if "failed_run" in m:
                line = f"RUN FAILED: {m['failed_run'][:160]}"
            else:
                try:
                    line = progress_fmt(rec)
                except (KeyError, TypeError, ValueError) as e:   # a progress line never stops the run
                    line = f"(no summary line: {type(e).__name__} {e})"
                line += (f"  srv {m['server_cores']:.2f} cores, gen {m['gen_share']:.0%}"
                         f"{' CLIENT-BOUND' if m['client_bound'] else ''}, other {m['other_cores']:.2f}")
                if m.get("invalid"):
                    line += "  INVALID: " + m["invalid"][:160]
                if m.get("problems"):
                    line += "  !! " + "; ".join(m["problems"])[:160]
            print(f"  [{k:3d}/{total}] {exp} {c.name:<34} rep {rep}/{repeats}: {line}", flush=True)
        if not lab.syscalls:           # with --syscalls every repeat was counted already
            calibrate_calls(lab, exp, [c for c in cells if c.count_calls], running)
    finally:
        for key, s in list(running.items()):
            if key in lab.carry_keys and s.alive():
                lab.carried[key] = s     # the next experiment runs it too: lab.cleanup() stops it at the end
                continue
            rc = lab.stop(s)
            if rc not in (0, None) and s.kind == "spindle":
                lab.note(exp, f"spindle {s.label} exited {rc} after SIGTERM")
    print(f"  {exp}: {time.monotonic() - t_exp:.0f} s", flush=True)
