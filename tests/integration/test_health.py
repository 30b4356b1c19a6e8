"""health_path: the load balancer's check answers 200 while the
instance serves and 503 with Connection: close once it stops; a generation a
reload retires answers 200 with Connection: close; off by default."""
from __future__ import annotations

import signal
import time

import pytest

import util

HEALTH = "/healthz"


def test_health_path_is_off_by_default(server):
    r = server.get(HEALTH)
    assert r.status == 404, r


def test_health_path_answers_ok_while_serving(servers):
    srv = servers(health_path=HEALTH)
    with srv.connect() as c:
        for method in ("GET", "HEAD", "GET"):
            c.send(util.build_request(method, HEALTH))
            r = c.read_response(method)
            assert r.status == 200, r
            assert r.header("Cache-Control") == "no-store"
            assert r.header("Connection") is None, "a serving instance keeps the check's connection"
            assert r.body == (b"ok\n" if method == "GET" else b"")
    # a query string does not hide the check; other paths are still files
    assert srv.get(HEALTH + "?from=haproxy").status == 200
    assert srv.get("/a.txt").status == 200


def _master_stopping(srv: util.Server) -> bool:
    return "stopping: draining" in srv.error_log.read_text(errors="replace")


def test_health_path_answers_503_and_closes_while_draining(fresh_server, model):
    srv = fresh_server(health_path=HEALTH)
    with srv.connect(timeout=util.scaled(5)) as c:
        c.send(util.build_request("GET", HEALTH))
        assert c.read_response().status == 200
        srv.signal(signal.SIGTERM)
        # the master logs the stop, then tells the serving process to drain;
        # until that process has the signal the check still says 200 (and
        # keeps the connection), from then on 503
        assert util.wait_for(lambda: _master_stopping(srv), util.scaled(3)), srv.diagnostics()
        deadline = time.monotonic() + util.scaled(3)
        while True:
            c.send(util.build_request("GET", HEALTH))
            r = c.read_response()
            if r.status != 200 or time.monotonic() > deadline:
                break
            assert r.header("Connection") is None, r
            time.sleep(0.02)
        assert r.status == 503, r
        assert r.body == b"draining\n"
        assert r.header("Connection") == "close"
        assert c.wait_closed(util.scaled(3)), "the draining instance kept the connection open"
    assert srv.proc.wait(util.scaled(10)) == 0, srv.diagnostics()


def test_health_path_stays_ok_and_closes_when_a_reload_retires(fresh_server, model):
    """A balancer that keeps its check's connection (HAProxy's http-reuse)
    must not see the instance go down across a reload: the retiring
    generation answers 200 and closes, and the reconnect reaches the new one."""
    srv = fresh_server(health_path=HEALTH)
    with srv.connect(timeout=util.scaled(5)) as c:
        c.send(util.build_request("GET", HEALTH))
        assert c.read_response().status == 200
        srv.signal(signal.SIGHUP)
        # the new generation retires this one after its start-up grace
        deadline = time.monotonic() + util.scaled(5)
        while True:
            c.send(util.build_request("GET", HEALTH))
            r = c.read_response()
            assert r.status == 200, f"a reload is no stop: {r}\n{srv.diagnostics()}"
            assert r.body == b"ok\n"
            if r.header("Connection") == "close":
                break
            assert time.monotonic() < deadline, "the retiring generation kept the check's connection"
            time.sleep(0.02)
        assert c.wait_closed(util.scaled(3)), "the retiring generation kept the connection open"
    assert util.wait_for(lambda: "generation 1 (pid" in srv.error_log.read_text(errors="replace"),
                         util.scaled(5)), srv.diagnostics()
    r = srv.get(HEALTH)
    assert r.status == 200 and r.header("Connection") is None, r


def test_health_path_turns_503_when_a_stop_follows_a_retirement(fresh_server, model):
    """A stop that comes while a reload's retirement drains is a stop: the
    check turns 503 there too (fork and prefork pass it on to children they
    already told to retire)."""
    srv = fresh_server(health_path=HEALTH)
    with srv.connect(timeout=util.scaled(10)) as c:
        c.send(util.build_request("GET", HEALTH))
        assert c.read_response().status == 200
        # half a request: the retiring generation waits for the rest
        head = util.build_request("GET", HEALTH)
        c.send(head[:-2])
        srv.signal(signal.SIGHUP)
        assert util.wait_for(lambda: "generation 2: serving process" in srv.error_log.read_text(errors="replace"),
                             util.scaled(5)), srv.diagnostics()
        time.sleep(util.scaled(1))  # past the new generation's start-up grace: generation 1 retires
        srv.signal(signal.SIGTERM)
        assert util.wait_for(lambda: _master_stopping(srv), util.scaled(3)), srv.diagnostics()
        time.sleep(util.scaled(0.5))  # the stop reaches the serving processes
        c.send(head[-2:])
        r = c.read_response()
        assert r.status == 503 and r.header("Connection") == "close", r
    assert srv.proc.wait(util.scaled(10)) == 0, srv.diagnostics()


@pytest.mark.parametrize("value", ["healthz", ""])
def test_health_path_must_be_absolute(value, tmp_path):
    r = util.run_spindle("--check", "--root", str(tmp_path), "--set", f"health_path={value}")
    assert r.returncode == 2, r
    assert "health_path" in r.stderr
