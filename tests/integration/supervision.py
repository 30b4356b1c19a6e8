"""Helpers for the tests of the master and of faults (test_master.py,
test_faults.py): load generators (wrk, a keep-alive client, a client opening
one connection per request) and reading the master's log and its serving
processes. Every load is bounded in time and stops by itself."""
from __future__ import annotations

import re
import shutil
import subprocess
import threading
import time
from pathlib import Path

import util
from conftest import A_TXT

# wrk is a test dependency (make test installs it): a missing one fails the
# tests that need it instead of skipping them
WRK = shutil.which("wrk") or "/usr/bin/wrk"

GEN_RE = r"generation {n}: serving process (\d+) runs the {model} model"


def one_serving(master: int, timeout: float = 3.0) -> int:
    pids = util.wait_for(lambda: (lambda s: s if len(s) == 1 else None)(util.serving_pids(master)), timeout)
    assert pids, f"expected exactly one serving process, found {util.serving_pids(master)}"
    return pids[0]


def log_text(srv: util.Server) -> str:
    return srv.error_log.read_text(errors="replace") if srv.error_log.exists() else ""


def wait_log(srv: util.Server, pattern: str, timeout: float) -> re.Match | None:
    rx = re.compile(pattern)
    return util.wait_for(lambda: rx.search(log_text(srv)), timeout)


class ConfigServer(util.Server):
    """A server whose model comes from a config file (--config, no --model), so
    that a reload re-reading the file can change it."""

    def __init__(self, config: Path, root: Path, workdir: Path, settings: dict | None = None):
        super().__init__("(from config)", root, workdir, settings,
                         extra_args=["--config", str(config)])

    def argv(self) -> list[str]:
        a = super().argv()
        i = a.index("--model")
        del a[i:i + 2]
        return a


class KeepAliveLoad:
    """nconn threads, each sending GET /a.txt on a keep-alive connection in a
    loop and verifying every answer. A response carrying "Connection: close"
    ends the connection cleanly and the thread reconnects; anything else that
    goes wrong (reset, EOF without a response, bad status or body, timeout) is
    a failure."""

    def __init__(self, port: int, nconn: int = 4, max_seconds: float = 40):
        self.port = port
        self.nconn = nconn
        self.max_seconds = max_seconds
        self.stop_ev = threading.Event()
        self.lock = threading.Lock()
        self.failures: list[str] = []
        self.requests = 0
        self.reconnects = 0
        self.threads = [threading.Thread(target=self._run, args=(i,), daemon=True)
                        for i in range(nconn)]

    def _run(self, i: int):
        deadline = time.monotonic() + self.max_seconds
        conn, served = None, 0
        while not self.stop_ev.is_set() and time.monotonic() < deadline:
            try:
                if conn is None:
                    conn, served = util.Conn.open(self.port, timeout=5), 0
                conn.send(util.build_request("GET", "/a.txt"))
                r = conn.read_response(timeout=5)
                if r.status != 200 or r.body != A_TXT:
                    raise AssertionError(f"status {r.status}, body {r.body[:60]!r}")
                served += 1
                with self.lock:
                    self.requests += 1
                if (r.header("Connection") or "").lower() == "close":
                    conn.close()
                    conn = None
                    with self.lock:
                        self.reconnects += 1
            except Exception as e:
                with self.lock:
                    self.failures.append(f"client {i}, request {served + 1} on its connection: "
                                         f"{e!r} at {time.monotonic():.3f}")
                if conn is not None:
                    conn.close()
                conn = None
                time.sleep(0.01)
        if conn is not None:
            conn.close()

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    def stop(self):
        self.stop_ev.set()
        for t in self.threads:
            t.join(10)


class ShortConnLoad:
    """Threads opening one connection per request (Connection: close); each
    attempt is recorded as (monotonic start time, error or None)."""

    def __init__(self, port: int, nthreads: int = 3, max_seconds: float = 30, timeout: float = 5,
                 opener=util.Conn.open):
        self.port = port
        self.opener = opener  # (port, timeout=) -> util.Conn; e.g. a TLS client
        self.max_seconds = max_seconds
        self.timeout = timeout  # per connection: connect, send, whole response
        self.stop_ev = threading.Event()
        self.lock = threading.Lock()
        self.attempts: list[tuple[float, str | None]] = []
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(nthreads)]

    def _run(self):
        deadline = time.monotonic() + self.max_seconds
        while not self.stop_ev.is_set() and time.monotonic() < deadline:
            t0 = time.monotonic()
            err = None
            try:
                with self.opener(self.port, timeout=self.timeout) as c:
                    c.send(util.build_request("GET", "/a.txt", {"Connection": "close"}))
                    r = c.read_response()
                if r.status != 200 or r.body != A_TXT:
                    err = f"status {r.status}, body {r.body[:60]!r}"
            except Exception as e:
                err = repr(e)
            with self.lock:
                self.attempts.append((t0, err))

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    def stop(self):
        self.stop_ev.set()
        for t in self.threads:
            t.join(10)


def run_wrk(port: int, seconds: float, conns: int = 20, threads: int = 1,
            path: str = "/a.txt", scheme: str = "http") -> subprocess.Popen:
    return subprocess.Popen([WRK, f"-t{threads}", f"-c{conns}", f"-d{max(1, round(seconds))}s",
                             "--timeout", "5s", f"{scheme}://{util.HOST}:{port}{path}"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def wrk_result(p: subprocess.Popen, timeout: float) -> dict:
    """wrk's figures: requests, socket_errors (connect, read, write, timeout),
    non2xx, and failed (socket errors + non-2xx) out of total (responses +
    socket errors)."""
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, _ = p.communicate()
        raise AssertionError(f"wrk did not finish in {timeout}s:\n{out}")
    res = {"out": out, "rc": p.returncode, "socket_errors": {}, "non2xx": 0, "requests": 0}
    m = re.search(r"(\d+) requests in", out)
    if m:
        res["requests"] = int(m.group(1))
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    if m:
        res["socket_errors"] = dict(zip(("connect", "read", "write", "timeout"),
                                        map(int, m.groups())))
    m = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if m:
        res["non2xx"] = int(m.group(1))
    errors = sum(res["socket_errors"].values())
    res["failed"] = errors + res["non2xx"]
    res["total"] = res["requests"] + errors
    return res
