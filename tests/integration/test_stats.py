"""Live statistics: the shared-memory segment, spindle-stat, /metrics and /status.

Every count is checked exactly, in every model: process models (fork,
prefork) write from many processes into one segment."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

import util
from conftest import A_TXT, ERROR_404, RANGE_DATA

STAT_BIN = util.STAT_BIN
stat_json = util.stat_json
wait_stats = util.wait_stats


def shm_path(name) -> Path:
    return Path(f"/dev/shm/spindle-{name}")


@pytest.fixture(scope="module", autouse=True)
def _stat_binary():
    if not STAT_BIN.exists():
        pytest.fail(f"{STAT_BIN} does not exist (run `make`)", pytrace=False)


def _known_mix(srv: util.Server) -> None:
    """7 GET 200, 3 HEAD 200, 2 GET 404, 1 GET 206, 1 GET 304: 14 requests."""
    first = srv.get("/a.txt")
    assert first.status == 200 and first.body == A_TXT
    for _ in range(6):
        assert srv.get("/a.txt").status == 200
    for _ in range(3):
        assert srv.request("HEAD", "/a.txt").status == 200
    for _ in range(2):
        assert srv.get("/no-such-file.txt").status == 404
    r = srv.get("/range.txt", {"Range": "bytes=0-9"})
    assert r.status == 206 and r.body == RANGE_DATA[:10]
    assert srv.get("/a.txt", {"If-None-Match": first.header("ETag")}).status == 304


def test_counts_are_exact(fresh_server):
    srv = fresh_server()
    _known_mix(srv)
    s = wait_stats(srv.port, lambda s: s["requests"] >= 14)
    assert s["requests"] == 14
    assert s["methods"] == {"GET": 11, "HEAD": 3, "other": 0}
    assert s["status_codes"] == {"200": 10, "206": 1, "304": 1, "400": 0, "404": 2, "500": 0}
    assert s["status_classes"] == {"1xx": 0, "2xx": 11, "3xx": 1, "4xx": 2, "5xx": 0}
    assert s["errors"] == 0 and s["send_failures"] == 0
    assert s["bytes_sent"] == 7 * len(A_TXT) + 10 + 2 * len(ERROR_404)  # HEAD and 304: no body
    assert sum(w["requests"] for w in s["workers"]) == 14
    assert sum(b["count"] for b in s["latency_us"]["buckets"]) == 14
    assert s["alive"] is True and s["pid"] == srv.proc.pid
    # every connection is closed by now (the readiness probe's too)
    s = wait_stats(srv.port, lambda s: s["connections_active"] == 0)
    assert s["connections_active"] == 0
    assert s["connections_accepted"] >= 14


def test_counters_survive_a_reload(fresh_server):
    """README: a reload keeps the segment and its counters."""
    srv = fresh_server()
    _known_mix(srv)
    wait_stats(srv.port, lambda s: s["requests"] >= 14)
    segment = os.stat(shm_path(srv.port)).st_ino
    srv.signal(signal.SIGHUP)
    gen2 = util.wait_for(lambda: "generation 2: serving process" in srv.error_log.read_text(), 3)
    assert gen2, f"the reload did not start generation 2\n{srv.diagnostics()}"
    assert srv.get("/a.txt").body == A_TXT  # served by the new generation
    s = wait_stats(srv.port, lambda s: s["requests"] >= 15)
    assert s["requests"] == 15, s["requests"]
    assert s["status_codes"]["200"] == 11 and s["status_codes"]["404"] == 2
    assert os.stat(shm_path(srv.port)).st_ino == segment, "the reload replaced the segment"


def test_keepalive_reuse_counted(fresh_server):
    srv = fresh_server()
    with srv.connect() as c:
        for _ in range(4):
            c.send(util.build_request("GET", "/a.txt"))
            assert c.read_response().status == 200
    s = wait_stats(srv.port, lambda s: s["requests"] >= 4)
    assert s["requests"] == 4
    assert s["keepalive_reuses"] == 3


def test_two_viewers_at_once(fresh_server):
    srv = fresh_server()
    for _ in range(5):
        srv.get("/a.txt")
    wait_stats(srv.port, lambda s: s["requests"] >= 5)
    live = subprocess.Popen([str(STAT_BIN), "--port", str(srv.port), "--interval", "0.1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        once = [subprocess.Popen([str(STAT_BIN), "--once", "--json", "--port", str(srv.port)],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(2)]
        outs = [p.communicate(timeout=10) for p in once]
        assert all(p.returncode == 0 for p in once), outs
        views = [json.loads(o) for o, _ in outs]
        assert views[0]["requests"] == views[1]["requests"] == 5
        time.sleep(0.4)
        assert live.poll() is None, live.stderr.read()
    finally:
        live.send_signal(signal.SIGINT)
        out, err = live.communicate(timeout=5)
    assert live.returncode == 0, err
    assert b"requests/s" in out and b"latency" in out


def test_viewer_without_instance():
    r = subprocess.run([str(STAT_BIN), "--once", "--port", "1"], capture_output=True, text=True, timeout=10)
    assert r.returncode == 1
    assert "no spindle instance" in r.stderr


def test_segment_removed_on_sigterm(fresh_server):
    srv = fresh_server()
    assert srv.get("/a.txt").status == 200
    assert shm_path(srv.port).exists()
    assert srv.stop() == 0, srv.diagnostics()
    assert not shm_path(srv.port).exists()


def _port_free(port: int) -> bool:
    try:
        with socket.create_connection((util.HOST, port), timeout=0.2):
            return False
    except OSError:
        return True


def test_stale_segment_from_killed_instance_is_reclaimed(model, docroot, tmp_path):
    first = util.Server(model, docroot.path, tmp_path / "first").start()
    port = first.port
    assert first.get("/a.txt").status == 200
    first.kill()  # SIGKILL: no chance to clean up
    assert shm_path(port).exists(), "the killed instance's segment should be left behind"
    assert util.wait_for(lambda: _port_free(port), 10), "orphaned serving processes kept the port"
    second = util.Server(model, docroot.path, tmp_path / "second")
    second.port = port
    second.proc = subprocess.Popen(second.argv(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL, cwd=second.workdir)
    try:
        assert util.wait_for(lambda: second.proc.poll() is not None or not _port_free(port), 5)
        second.assert_alive("at start-up over a stale segment ")
        assert second.get("/a.txt").status == 200
        s = wait_stats(port, lambda s: s["requests"] >= 1)
        assert s["pid"] == second.proc.pid and s["requests"] == 1
        assert "reclaiming stale segment" in second.error_log.read_text()
    finally:
        assert second.stop() == 0, second.diagnostics()
    assert not shm_path(port).exists()


def test_live_instance_name_refused(model, fresh_server):
    name = f"pytest-{os.getpid()}-{model}"
    srv = fresh_server(stats_name=name)
    assert shm_path(name).exists()
    r = util.run_spindle("--port", str(util.free_port()), "--model", model, "--root", str(srv.root),
                         "--set", f"stats_name={name}", "--set", "error_log=-")
    assert r.returncode != 0
    assert "in use by a running spindle" in r.stderr
    assert srv.alive() and shm_path(name).exists(), "the refused start must not touch the live segment"
    assert srv.get("/a.txt").status == 200


def _metrics(srv: util.Server) -> tuple[dict, bytes]:
    r = srv.get("/metrics")
    assert r.status == 200, r
    assert r.header("Content-Type").startswith("text/plain; version=0.0.4")
    samples = {}
    for fam in text_string_to_metric_families(r.body.decode()):
        for s in fam.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples, r.body


def test_metrics_agree_with_viewer(fresh_server):
    srv = fresh_server(metrics="on")
    _known_mix(srv)
    wait_stats(srv.port, lambda s: s["requests"] >= 14)
    m, body = _metrics(srv)
    # the /metrics request itself is counted after its body was rendered
    s = wait_stats(srv.port, lambda s: s["requests"] >= 15)

    def val(name, **labels):
        return m[(name, tuple(sorted(labels.items())))]

    assert val("spindle_requests_total", method="GET") == s["methods"]["GET"] - 1 == 11
    assert val("spindle_requests_total", method="HEAD") == s["methods"]["HEAD"] == 3
    for code, n in s["status_codes"].items():
        assert val("spindle_responses_total", code=code) == n - (1 if code == "200" else 0)
    assert val("spindle_bytes_sent_total") == s["bytes_sent"] - len(body)
    assert val("spindle_request_duration_seconds_count") == 14
    assert val("spindle_request_duration_seconds_bucket", le="+Inf") == 14
    assert val("spindle_connections_accepted_total") <= s["connections_accepted"]
    # endpoints answer before the file cache is consulted
    assert val("spindle_cache_hits_total") == s["cache"]["hits"]
    assert val("spindle_cache_misses_total") == s["cache"]["misses"]
    workers = sum(v for (name, _), v in m.items() if name == "spindle_worker_requests_total")
    assert workers == 14
    page = srv.get("/status")
    assert page.status == 200 and b"spindle" in page.body and b"per worker" in page.body


def test_metrics_forbidden_outside_stats_allow(fresh_server):
    srv = fresh_server(metrics="on", stats_allow="10.0.0.0/8 ::1/128")
    for path in ("/metrics", "/status"):
        r = srv.get(path)
        assert r.status == 403, r
        assert b"forbidden" in r.body.lower() and b"spindle_" not in r.body


def test_metrics_off_by_default(server):
    assert server.get("/metrics").status == 404


def test_bad_stats_allow_refused_at_config():
    r = util.run_spindle("--set", "stats_allow=10.0.0.0/33", "--check")
    assert r.returncode == 2
    assert "stats_allow" in r.stderr and "10.0.0.0/33" in r.stderr


def test_cache_hit_and_revalidation(fresh_server, tmp_path):
    root = tmp_path / "www"
    root.mkdir()
    f = root / "f.txt"
    f.write_bytes(b"version one\n")
    srv = fresh_server(root=root, cache_revalidate="200ms")
    # one connection: in the fork model each connection has its own process (and cache)
    with srv.connect() as c:
        for _ in range(2):
            c.send(util.build_request("GET", "/f.txt"))
            assert c.read_response().body == b"version one\n"
        s = wait_stats(srv.port, lambda s: s["requests"] >= 2)
        assert (s["cache"]["hits"], s["cache"]["misses"]) == (1, 1)
        if srv.model != "fork":  # per-connection processes report no cache gauges
            assert s["cache"]["entries"] == 1 and s["cache"]["bytes"] >= len(b"version one\n")
        f.write_bytes(b"version two, longer\n")
        time.sleep(0.3)
        c.send(util.build_request("GET", "/f.txt"))
        assert c.read_response().body == b"version two, longer\n"
        s = wait_stats(srv.port, lambda s: s["requests"] >= 3)
        assert (s["cache"]["hits"], s["cache"]["misses"]) == (1, 2)
