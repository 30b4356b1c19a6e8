"""The service manager's notification protocol (sd_notify(3)): the
test plays systemd with a datagram socket of its own in $NOTIFY_SOCKET and
checks READY=1 once serving, RELOADING=1 + MONOTONIC_USEC then READY=1 around
a reload, STATUS= with the model and requests served, STOPPING=1 on SIGTERM."""
from __future__ import annotations

import os
import re
import signal
import socket
import time

import pytest

import util

STATUS_RE = re.compile(r"serving with the (\w+) model, (\d+) requests served")
STATUS_INTERVAL = 2.0  # master.c's STATUS_INTERVAL_MS


class Manager:
    """The receiving end of NOTIFY_SOCKET: every datagram, as KEY=value dicts."""

    def __init__(self, address: str):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(address)
        self.seen: list[dict] = []

    def next(self, timeout: float) -> dict:
        self.sock.settimeout(timeout)
        data = self.sock.recv(4096)
        msg = dict(line.split("=", 1) for line in data.decode().split("\n") if line)
        self.seen.append(msg)
        return msg

    def wait(self, pred, timeout: float) -> dict:
        """The first message (from now) for which pred holds."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no matching notification within {timeout}s; saw {self.seen}")
            try:
                msg = self.next(left)
            except socket.timeout:
                continue
            if pred(msg):
                return msg

    def close(self):
        self.sock.close()


@pytest.fixture
def manager(tmp_path, monkeypatch):
    path = str(tmp_path / "notify.sock")
    m = Manager(path)
    monkeypatch.setenv("NOTIFY_SOCKET", path)
    yield m
    m.close()


def test_notify_ready_reload_status_stopping(model, manager, fresh_server):
    srv = fresh_server()
    first = manager.wait(lambda m: "READY" in m, util.scaled(5))
    assert first == {"READY": "1"}
    for _ in range(3):
        assert srv.get("/a.txt").status == 200
    before = time.monotonic()
    srv.signal(signal.SIGHUP)
    reloading = manager.wait(lambda m: "RELOADING" in m, util.scaled(5))
    assert reloading["RELOADING"] == "1"
    # CLOCK_MONOTONIC, the clock Python's monotonic() reads on Linux
    usec = int(reloading["MONOTONIC_USEC"])
    assert before - 1 <= usec / 1e6 <= time.monotonic() + 1, (usec, before)
    manager.wait(lambda m: m.get("READY") == "1", util.scaled(5))
    # with READY=1 comes a STATUS= naming the model and counting the requests
    status = manager.wait(lambda m: "STATUS" in m, util.scaled(2))
    st = STATUS_RE.search(status["STATUS"])
    assert st and st.group(1) == model and int(st.group(2)) >= 3, status

    assert srv.stop() == 0, srv.diagnostics()
    stopping = manager.wait(lambda m: "STOPPING" in m, util.scaled(2))
    assert stopping["STOPPING"] == "1"
    order = [k for m in manager.seen for k in m if k in ("READY", "RELOADING", "STOPPING")]
    assert order == ["READY", "RELOADING", "READY", "STOPPING"], manager.seen


def test_notify_ready_again_after_a_failed_reload(model, manager, docroot, tmp_path):
    """A reload whose configuration is invalid leaves the old one serving:
    the manager must hear READY=1 again, or it would wait forever."""
    conf = tmp_path / "spindle.conf"
    conf.write_text("[server]\nthreads = 2\n")
    srv = util.Server(model, docroot.path, tmp_path / "srv", extra_args=["--config", str(conf)]).start()
    try:
        manager.wait(lambda m: "READY" in m, util.scaled(5))
        conf.write_text("[server]\nthreads = lots\n")
        srv.signal(signal.SIGHUP)
        manager.wait(lambda m: "RELOADING" in m, util.scaled(5))
        manager.wait(lambda m: m.get("READY") == "1", util.scaled(5))
        assert srv.get("/a.txt").status == 200
    finally:
        assert srv.stop() == 0, srv.diagnostics()


def test_notify_abstract_socket_name(tmp_path, monkeypatch, docroot):
    """'@name' is the abstract namespace: no file, the name ends at its length."""
    name = f"spindle-test-{os.getpid()}-{time.monotonic_ns()}"
    m = Manager("\0" + name)
    monkeypatch.setenv("NOTIFY_SOCKET", "@" + name)
    srv = util.Server("epoll", docroot.path, tmp_path).start()
    try:
        assert m.wait(lambda msg: "READY" in msg, util.scaled(5)) == {"READY": "1"}
        for _ in range(2):
            assert srv.get("/a.txt").status == 200
        # and STATUS= again now and then, not only at READY=1
        status = m.wait(lambda msg: (st := STATUS_RE.search(msg.get("STATUS", ""))) and int(st.group(2)) >= 2,
                        util.scaled(STATUS_INTERVAL + 3))
        assert "epoll" in status["STATUS"]
    finally:
        assert srv.stop() == 0, srv.diagnostics()
        m.close()


def test_notify_bad_socket_is_reported_and_serving_goes_on(tmp_path, monkeypatch, docroot):
    monkeypatch.setenv("NOTIFY_SOCKET", "relative/path")
    srv = util.Server("epoll", docroot.path, tmp_path).start()
    try:
        assert srv.get("/a.txt").status == 200
        assert "NOTIFY_SOCKET" in srv.error_log.read_text()
    finally:
        assert srv.stop() == 0, srv.diagnostics()
