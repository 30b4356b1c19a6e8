"""Past saturation ([server] overload): with `queue` every request waits its
turn, however long; with `shed` the requests that waited longer than
overload_target once the wait has stayed above it for an interval are
answered 503 with Retry-After at once, and the requests served keep a short
queue wait. Health checks and the statistics are never shed."""
from __future__ import annotations

import json
import threading
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

import util

CLIENTS = 40        # keep-alive clients, each asking for WORK_MS of CPU work in a loop
WORK_MS = 50
THREADS = 2         # the pool's: at most 40 requests a second of such work
LOAD_S = 3.0


def _queue_p99_s(srv: util.Server) -> tuple[float, float]:
    """(p99 of the served requests' queue wait in seconds, shed count) from /metrics."""
    r = srv.get("/metrics")
    assert r.status == 200, r
    buckets, count, shed = [], 0.0, None
    for fam in text_string_to_metric_families(r.body.decode()):
        if fam.name == "spindle_request_queue_seconds":
            for s in fam.samples:
                if s.name.endswith("_bucket"):
                    buckets.append((float(s.labels["le"]), s.value))
                elif s.name.endswith("_count"):
                    count = s.value
        elif fam.name == "spindle_requests_shed":
            shed = sum(s.value for s in fam.samples if s.labels.get("reason") == "queue_wait")
    assert count > 0 and shed is not None, r.body[:2000]
    buckets.sort()
    return next(le for le, c in buckets if c >= 0.99 * count), shed


def _load(srv: util.Server) -> dict:
    """CLIENTS keep-alive clients for LOAD_S seconds; the statuses they got, and
    whether every 503 said when to come back."""
    statuses: dict[int, int] = {}
    problems: list[str] = []
    lock = threading.Lock()
    start = threading.Barrier(CLIENTS)
    stop_at = [0.0]

    def client(i: int) -> None:
        try:
            start.wait(10)
            if i == 0:
                stop_at[0] = time.monotonic() + LOAD_S
            c = util.Conn.open(srv.port, timeout=util.scaled(30))
            try:
                while not stop_at[0] or time.monotonic() < stop_at[0]:
                    c.send(util.build_request("GET", f"/work?delay={WORK_MS}&bucket={i}"))
                    r = c.read_response("GET")
                    with lock:
                        statuses[r.status] = statuses.get(r.status, 0) + 1
                    if r.status == 503:
                        if r.header("Retry-After") != "1":
                            problems.append(f"503 without Retry-After: {r.headers}")
                        time.sleep(0.5)  # a client that heeds it, a little impatient
            finally:
                c.close()
        except Exception as e:  # reported below
            problems.append(f"client {i}: {e!r}")

    threads = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(util.scaled(60))
    assert not problems, problems[:5]
    return statuses


def _server(tmp_path, docroot, policy: str, **extra) -> util.Server:
    settings = {"workers": 1, "threads": THREADS, "workload": "on", "delay_kind": "cpu", "work_unit": "1ms",
                "metrics": "on", "overload": policy, "overload_target": "20ms", "health_path": "/healthz",
                **extra}
    return util.Server("pool", docroot.path, tmp_path / policy, settings).start()


def test_queue_lets_every_request_wait_its_turn(docroot, tmp_path):
    srv = _server(tmp_path, docroot, "queue")
    try:
        statuses = _load(srv)
        p99, shed = _queue_p99_s(srv)
    finally:
        srv.stop()
    assert set(statuses) == {200}, statuses
    assert p99 > 0.5, f"queue wait p99 {p99} s: the clients did not overload the pool"
    assert shed == 0


def test_shed_answers_the_longest_waiting_with_503_and_keeps_the_queue_short(docroot, tmp_path):
    log = tmp_path / "access.log"
    srv = _server(tmp_path, docroot, "shed", access_log=str(log), access_log_format="json")
    try:
        statuses = _load(srv)
        p99, shed = _queue_p99_s(srv)
        fresh = srv.get("/a.txt")
    finally:
        srv.stop()
    assert statuses.get(503, 0) > 0 and statuses.get(200, 0) > 0, statuses
    assert set(statuses) <= {200, 503}, statuses
    assert p99 <= 0.2, f"served requests' queue wait p99 {p99} s under shed (the bucket it falls in)"
    assert shed == statuses[503]
    assert fresh.status == 200
    lines = [json.loads(ln) for ln in log.read_text().splitlines()]
    shed_lines = [d for d in lines if d.get("shed") == "queue_wait"]
    assert len(shed_lines) == statuses[503] and all(d["status"] == 503 for d in shed_lines)
    errors = srv.error_log.read_text(errors="replace")
    assert "overload: requests have waited over the 20 ms target" in errors, errors[-2000:]


def test_health_checks_and_statistics_are_never_shed(docroot, tmp_path):
    """They wait in the same queue (their own wait may be long) but are
    answered, so a balancer and an operator still see the instance."""
    srv = _server(tmp_path, docroot, "shed")
    answers: list[int] = []
    probe_stop = threading.Event()

    def probe() -> None:
        while not probe_stop.wait(0.3):
            answers.append(srv.get("/healthz", timeout=util.scaled(10)).status)
            answers.append(srv.get("/metrics", timeout=util.scaled(10)).status)

    t = threading.Thread(target=probe)
    try:
        t.start()
        try:
            statuses = _load(srv)
        finally:
            probe_stop.set()
            t.join()
    finally:
        srv.stop()
    assert statuses.get(503, 0) > 0, statuses
    assert len(answers) >= 4 and set(answers) == {200}, answers


@pytest.mark.parametrize("bad, why", [("overload = drop", "overload"), ("overload_target = 0", "overload_target")])
def test_bad_overload_settings_are_refused_with_the_line(tmp_path, bad, why):
    conf = tmp_path / "bad.conf"
    conf.write_text(f"[server]\n{bad}\n")
    r = util.run_spindle("--config", str(conf), "--check")
    assert r.returncode != 0
    assert f"{conf}:2" in r.stderr and why in r.stderr, r.stderr
