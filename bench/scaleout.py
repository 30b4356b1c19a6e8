"""The `scaleout` experiment (outside the default run, `--only
scaleout`): spindle behind HAProxy with one instance and with two, beside
spindle reached directly, so the report shows what the proxy costs and what a
second instance brings back.

On the lab's two cores this is not a scaling curve: the instances share the
server core (CPU 0) and HAProxy shares the load generator's (CPU 1), so the
second instance can only show the balancing overhead, or a gain where one
instance waits on something other than the CPU. On a bigger machine, give
each instance its own cores (--cores) and the same cells measure scale.

HAProxy is the Debian package (scripts/install-deps.sh test); it is started
and stopped by PID like every lab process and listens on 127.0.0.1 only."""
from __future__ import annotations

import http.client
import shutil
import signal
import subprocess
import time
from pathlib import Path

from .lab import HOST, LOAD_CPUS, PAGE, Cell, Lab, Server, free_port, run_cells, server_key

HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"
CONNS = 50
INSTANCE = {"workers": 1}   # one event loop per instance: instances, not loops, are what varies


def haproxy_config(port: int, backends: list[int], health_path: str | None = None) -> str:
    """What docs/deploy.md recommends, on loopback: round robin, keep-alive to
    the servers, idempotent requests retried on another server after a refused
    or closed connection; with health_path, servers checked every 100 ms and
    out after one failure (the scale-out test drains and reloads under load)."""
    check = " check" if health_path else ""
    servers = "\n".join(f"    server s{i} {HOST}:{p}{check}" for i, p in enumerate(backends))
    checks = (f"    option httpchk GET {health_path}\n    http-check expect status 200\n"
              f"    default-server inter 100ms fastinter 100ms downinter 100ms fall 1 rise 2\n"
              if health_path else "")
    return f"""global
    # two descriptors per connection must fit the lab's NOFILE
    maxconn 4000
    nbthread 1

defaults
    mode http
    timeout connect 1s
    timeout client 30s
    timeout server 30s
    retries 3
    option redispatch 1
    retry-on all-retryable-errors
    http-reuse safe

frontend web
    bind {HOST}:{port}
    default_backend spindles

backend spindles
    balance roundrobin
{checks}{servers}
"""


class HAProxy:
    """haproxy -db (foreground) on a free loopback port, started and stopped by
    PID; ready once probe_path answers 200 through it."""

    def __init__(self, workdir: Path, backends: list[int], probe_path: str, cpus: str | None = None,
                 health_path: str | None = None, ready_s: float = 5):
        self.port = free_port()
        d = workdir / f"haproxy-{self.port}"
        d.mkdir(parents=True)
        self.cfg = d / "haproxy.cfg"
        self.cfg.write_text(haproxy_config(self.port, backends, health_path))
        self.out = open(d / "haproxy.out", "wb")
        pin = ["taskset", "-c", cpus] if cpus else []
        self.proc = subprocess.Popen([*pin, HAPROXY, "-db", "-f", str(self.cfg)], stdin=subprocess.DEVNULL,
                                     stdout=self.out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + ready_s
        while time.monotonic() < deadline and self.proc.poll() is None:
            if self._status(probe_path) == 200:
                return
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"haproxy did not serve {probe_path} within {ready_s} s: "
                           f"{(d / 'haproxy.out').read_text(errors='replace')[-500:]}")

    def _status(self, path: str) -> int | None:
        c = http.client.HTTPConnection(HOST, self.port, timeout=2)
        try:
            c.request("GET", path)
            return c.getresponse().status
        except OSError:
            return None
        finally:
            c.close()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.out.close()


def _through_haproxy(instances: int, dur: float):
    """wrk through HAProxy to the cell's instance and instances - 1 more like it."""
    def run(lab: Lab, s: Server) -> dict:
        extra = []
        hp = None
        try:
            for _ in range(instances - 1):
                e = lab.start(s.kind, s.model, s.cpus, s.workers, dict(s.settings))
                extra.append(e)
                lab.precheck(e, [PAGE])
            hp = HAProxy(lab.tmp, [s.port] + [e.port for e in extra], PAGE, cpus=LOAD_CPUS)
            front = Server("haproxy", "haproxy", LOAD_CPUS, 1)
            front.port = hp.port
            front.expected = {}   # HAProxy may rewrite the head: no byte-count check
            lab.warm(front, PAGE)
            m = lab.wrk(front, PAGE, CONNS, dur)
            # the other instances' CPU is not in the cell's accounting (the lab
            # follows the cell's own server): say so instead of hiding it
            m["instances"] = instances
            return m
        finally:
            if hp is not None:
                hp.stop()
            for e in extra:
                lab.stop(e)
    return run


def scaleout(lab: Lab, models: list[str]) -> None:
    dur = lab.cell_s
    key = server_key("spindle", "epoll", workers=1)
    cells = [
        Cell("scaleout", "epoll direct", key, {"setup": "direct", "instances": 1},
             lambda lab_, s: {**lab_.wrk(s, PAGE, CONNS, dur), "instances": 1}, warm_path=PAGE),
        Cell("scaleout", "haproxy -> 1 epoll", key, {"setup": "haproxy", "instances": 1}, _through_haproxy(1, dur)),
        Cell("scaleout", "haproxy -> 2 epoll", key, {"setup": "haproxy", "instances": 2}, _through_haproxy(2, dur)),
    ]
    lab.note("scaleout", f"`wrk -t1 -c {CONNS} -d {dur}s` on the 4537-byte page: to spindle epoll (one event loop) "
                         f"directly, then through HAProxy (round robin, keep-alive to the servers, retries as docs/deploy.md, pinned to the "
                         f"generator's CPU {LOAD_CPUS}) to one and to two such instances, all on the server CPU. "
                         f"Server CPU per request counts the first instance only; the generator's share includes "
                         f"HAProxy's CPU (a child of the lab, reaped within the cell).")
    run_cells(lab, "scaleout", cells, lab.repeats, [PAGE],
              lambda r: f"{r['rps']:8.0f} req/s  p99 {r['p99_ms']:7.2f} ms  errors {r['errors']}")
