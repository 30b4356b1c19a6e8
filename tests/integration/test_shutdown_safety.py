"""Shutdown safety: a drain costs no CPU while it waits, and a drain that
times out with connections still running ends the process cleanly."""
from __future__ import annotations

import os
import signal
import time

import pytest

import util
from conftest import HUGE_SIZE
from tlsutil import client_hello, tls_settings

CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pids: list[int]) -> float:
    """utime + stime of the given processes (all their threads), in seconds."""
    total = 0
    for pid in pids:
        st = util.proc_stat(pid)
        if st:  # fields 14 and 15 of /proc/PID/stat; st[0] is field 3
            total += int(st[11]) + int(st[12])
    return total / CLK_TCK


def instance_pids(srv: util.Server) -> list[int]:
    return [srv.proc.pid] + util.proc_descendants(srv.proc.pid)


@pytest.mark.concurrent
@pytest.mark.timing  # ASan: a drain with a download in flight in test_signals.py, every model
def test_drain_with_slow_download_costs_no_cpu(fresh_server, huge_docroot):
    """The fork model polled its stop eventfd while draining; the
    eventfd stays readable once stopping, so the drain spun at 100% CPU."""
    srv = fresh_server(root=huge_docroot.path, drain_timeout=30)
    with srv.connect(timeout=30, rcvbuf=16384) as c:
        c.send(util.build_request("GET", "/huge.bin"))
        head = c.read_head(time.monotonic() + util.scaled(5))
        assert head.startswith(b"HTTP/1.1 200 "), head
        c.sock.recv(16384)
        srv.signal(signal.SIGTERM)
        time.sleep(0.3)  # the stop has reached every process
        pids = instance_pids(srv)
        before, t0 = cpu_seconds(pids), time.monotonic()
        time.sleep(2.0)  # the download sits still: the drain has nothing to do
        used, elapsed = cpu_seconds(pids) - before, time.monotonic() - t0
        assert srv.alive(), "server gave up the in-flight download"
        print(f"{srv.model}: {used:.2f} s CPU over {elapsed:.2f} s of drain")
        assert used < 0.1 * elapsed, \
            f"{used:.2f} s of CPU in {elapsed:.2f} s of an idle drain: a busy loop"
        got = 0
        deadline = time.monotonic() + util.scaled(60)
        while time.monotonic() < deadline:  # finish it: the drain completes
            chunk = c.sock.recv(1 << 20)
            if not chunk:
                break
            got += len(chunk)
        assert got > 0 and got < HUGE_SIZE + 1
    rc = srv.proc.wait(util.scaled(15))
    assert rc == 0, srv.diagnostics()


SANITIZER_MARKS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "WARNING: ThreadSanitizer",
                   "runtime error:", "heap-use-after-free")


@pytest.mark.concurrent
def test_drain_timeout_with_slow_readers_exits_cleanly(fresh_server, huge_docroot):
    """The drain times out with connection threads still in their
    downloads (clients that stopped reading); the serving process must end
    without freeing what those threads use: exit 0, promptly, and under a
    sanitizer build (SPINDLE_BIN=./spindle-asan) without a report."""
    srv = fresh_server(root=huge_docroot.path, drain_timeout=1)
    conns = []
    try:
        for _ in range(12):
            c = srv.connect(timeout=10, rcvbuf=4096)
            c.send(util.build_request("GET", "/huge.bin"))
            conns.append(c)
        for c in conns:  # every download has begun, then nobody reads
            assert c.read_head(time.monotonic() + util.scaled(5)).startswith(b"HTTP/1.1 200 ")
        time.sleep(0.2)
        t0 = time.monotonic()
        srv.signal(signal.SIGTERM)
        rc = srv.proc.wait(util.scaled(15))
        took = time.monotonic() - t0
    finally:
        for c in conns:
            c.close()
    err = (srv.workdir / "stderr.txt").read_text(errors="replace") + srv.error_log.read_text(errors="replace")
    assert not [m for m in SANITIZER_MARKS if m in err], err[-4000:]
    assert rc == 0, srv.diagnostics()
    assert took < util.scaled(8), f"{took:.1f} s to stop with drain_timeout = 1 s"


@pytest.mark.solo  # 12 threads spin and must end within the master's drain window
@pytest.mark.concurrent
def test_drain_timeout_with_busy_connection_threads_exits_cleanly(model, fresh_server):
    """Made to happen: requests on the workload endpoint busy-wait
    past the drain timeout (and its grace), so their threads are still running
    when the serving process gives up waiting, and they finish one after
    another while it tears down (stats, cache, workload buckets, error pages).
    None of that may be freed under them. (Reproduced a heap-use-after-free
    in the ASan build before the fix, about every other run.)"""
    if model in ("epoll", "uring"):
        pytest.skip(f"{model}: a busy-wait runs on the event loop itself, one request after another")
    # wall-clock busy-waits: they must end at a known time (just past the
    # drain timeout and its 0.5 s grace), whatever the machine's load; CPU
    # delays (the default) on a loaded machine would end much later
    srv = fresh_server(drain_timeout=1, workload="on", work_unit="1ms", delay_kind="wall")
    # the busy-waits end around drain_timeout + its 0.5 s grace after the stop
    delays = [1500 + 20 * i for i in range(12)]
    conns = []
    try:
        for d in delays:
            c = srv.connect(timeout=10)
            c.send(util.build_request("GET", f"/work?delay={d}&bucket=1"))
            conns.append(c)
        time.sleep(0.1)  # every request is in its busy-wait
        t0 = time.monotonic()
        srv.signal(signal.SIGTERM)
        rc = srv.proc.wait(util.scaled(15))
        took = time.monotonic() - t0
    finally:
        for c in conns:
            c.close()
    err = (srv.workdir / "stderr.txt").read_text(errors="replace") + srv.error_log.read_text(errors="replace")
    assert not [m for m in SANITIZER_MARKS if m in err], err[-4000:]
    assert "killed by signal" not in err and "exited with status 0" in err, err[-3000:]
    assert rc == 0, srv.diagnostics()
    assert took < util.scaled(8), f"{took:.1f} s to stop with drain_timeout = 1 s"


@pytest.mark.concurrent
def test_drain_with_a_handshake_in_progress_costs_no_cpu(fresh_server, certs):
    """A TLS client half-way through its handshake when the stop comes (a
    slow ClientHello) gets the drain grace of an idle connection (1 s), then
    is closed; meanwhile nothing spins. pool handed such a connection back to
    its queue again and again for that second (a worker at 100% CPU and an
    "epoll_ctl(DEL)" error line per turn, thousands of them)."""

    srv = fresh_server(**tls_settings(certs, header_timeout="10s", drain_timeout=5))
    hello = client_hello(certs)
    with util.Conn.open(srv.port, timeout=util.scaled(10)) as c:
        c.send(hello[:40])
        time.sleep(0.3)  # the server holds the connection mid-handshake
        pids = instance_pids(srv)
        # Quiet first: a prefork worker still starting (its TLS context, its
        # threads) on a loaded machine would put its start-up in the window.
        quiet_by = time.monotonic() + util.scaled(5)
        while time.monotonic() < quiet_by:
            before = cpu_seconds(pids)
            time.sleep(0.1)
            if cpu_seconds(pids) - before < 0.02:
                break
        srv.signal(signal.SIGTERM)
        time.sleep(0.1)  # the stop has reached every process
        before, t0 = cpu_seconds(pids), time.monotonic()
        time.sleep(0.6)  # within the drain grace (1 s from the stop)
        used, elapsed = cpu_seconds(pids) - before, time.monotonic() - t0
        alive = srv.alive()
        print(f"{srv.model}: {used:.2f} s CPU over {elapsed:.2f} s of drain with a handshake in progress")
    rc = srv.proc.wait(util.scaled(15))
    assert rc == 0, srv.diagnostics()
    errors = [ln for ln in srv.error_log.read_text(errors="replace").splitlines() if "[error]" in ln]
    assert not errors, f"{len(errors)} error lines while draining, e.g. {errors[:3]}"
    if alive:  # else the processes' CPU is gone with them
        assert used < 0.2 * elapsed, \
            f"{used:.2f} s of CPU in {elapsed:.2f} s of a drain waiting for a handshake: a busy loop"
