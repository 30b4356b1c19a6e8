"""Where each request's time goes, from inside the server: queue wait (readable
to picked up) and service time (picked up to the last byte) in every model, in
/metrics (spindle_request_queue_seconds, spindle_request_service_seconds),
spindle-stat --json, /status and the JSON access log; and the two kinds of
queue: a pool's work queue and an event loop's turn."""
from __future__ import annotations

import json
import os
import socket
import struct
import threading
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

import util
from test_stats import (OFF_LAYOUT, OFF_NSLOTS, OFF_SLOT_SIZE, REAL_SLOTS_OFF, _patched, _run_stat_on,  # noqa: F401
                        real_segment)

QUEUE = "spindle_request_queue_seconds"
SERVICE = "spindle_request_service_seconds"
BURST = 20          # concurrent requests
WORK_MS = 20        # of spinning each (delay_kind = wall: the same 20 ms whoever else runs)
OLD_SLOT_SIZE = 512  # a worker slot before the timing histograms (src/stats/shm.h)


def _histograms(srv: util.Server) -> dict:
    """{(name, model): {"sum", "count", "buckets": [(le, cumulative)]}} from /metrics."""
    r = srv.get("/metrics")
    assert r.status == 200, r
    out: dict = {}
    for fam in text_string_to_metric_families(r.body.decode()):
        if fam.name not in (QUEUE, SERVICE):
            continue
        assert fam.type == "histogram"
        for s in fam.samples:
            h = out.setdefault((fam.name, s.labels["model"]), {"buckets": []})
            if s.name.endswith("_bucket"):
                h["buckets"].append((float(s.labels["le"]), s.value))
            elif s.name.endswith("_sum"):
                h["sum"] = s.value
            elif s.name.endswith("_count"):
                h["count"] = s.value
    return out


def _burst(srv: util.Server) -> None:
    """BURST requests for WORK_MS of work each, all sent at once, each on its own connection."""
    errors: list[str] = []
    start = threading.Barrier(BURST)

    def client(i: int):
        try:
            start.wait(10)
            r = srv.get(f"/work?delay={WORK_MS}&bucket=1", headers={"Connection": "close"},
                        timeout=util.scaled(30))
            assert r.status == 200, r
        except Exception as e:  # reported below
            errors.append(f"client {i}: {e!r}")

    threads = [threading.Thread(target=client, args=(i,)) for i in range(BURST)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, "\n".join(errors)


def _burst_times(model: str, docroot, tmp_path, **settings) -> tuple[float, float, float]:
    """(queue sum, service sum, requests) of one burst, read from /metrics before and after."""
    srv = util.Server(model, docroot.path, tmp_path / model,
                      {"metrics": "on", "workload": "on", "work_unit": "1ms", "delay_kind": "wall",
                       **settings}).start()
    try:
        before = _histograms(srv)
        _burst(srv)
        after = util.wait_for(lambda: (lambda h: h if h[(SERVICE, model)]["count"]
                                       >= before[(SERVICE, model)]["count"] + BURST + 1 else None)(
            _histograms(srv)), 5)
        assert after, "the burst's responses were not all counted"
        # a /metrics request is counted after it rendered: the first one, and
        # those that found the burst not all counted yet, are in the difference
        # (microseconds each)
        q = after[(QUEUE, model)]["sum"] - before[(QUEUE, model)]["sum"]
        s = after[(SERVICE, model)]["sum"] - before[(SERVICE, model)]["sum"]
        n = after[(SERVICE, model)]["count"] - before[(SERVICE, model)]["count"]
    finally:
        assert srv.stop() == 0, srv.diagnostics()
    return q, s, n


@pytest.mark.solo  # 20 ms of spinning per request, measured to the millisecond
def test_pool_requests_wait_in_the_work_queue(docroot, tmp_path):
    """2 workers, 20 requests of 20 ms: 2 are served at once and the others
    wait in the work queue. The listener admits at most 2 x threads = 4
    connections not yet served (the rest wait in the kernel's listen backlog,
    which no stamp sees), so from the pair served third on each request waits
    two service times: 2 x 20 ms + 16 x 40 ms = 0.68 s at the least. Service
    is the 20 ms of work: 0.4 s in all."""
    q, s, n = _burst_times("pool", docroot, tmp_path, threads="2")
    assert BURST + 1 <= n <= BURST + 20
    assert q >= 0.6, f"queue wait {q:.3f} s in all: the work queue's wait was not counted"
    assert 0.4 <= s <= util.scaled(0.4 * 2.5), f"service {s:.3f} s in all, for {BURST} x {WORK_MS} ms of work"


@pytest.mark.solo
def test_epoll_requests_wait_behind_the_others_in_the_loops_turn(docroot, tmp_path):
    """One loop: the 20 connections come in one turn (or a few) and the loop
    serves them one after another, so the k-th waits about k x 20 ms: 3.8 s
    in all for one turn. Service is the 20 ms of work as in a pool."""
    q, s, n = _burst_times("epoll", docroot, tmp_path, workers="1")
    assert BURST + 1 <= n <= BURST + 20
    assert q >= 1.0, f"queue wait {q:.3f} s in all: the wait behind the loop's other connections was not counted"
    assert 0.4 <= s <= util.scaled(0.4 * 2.5), f"service {s:.3f} s in all, for {BURST} x {WORK_MS} ms of work"


def test_every_model_times_every_request(model, fresh_server):
    """A few requests (a kept-alive connection, then new connections): both
    histograms count each one under the model's label, with sane values, and
    spindle-stat, /status and the JSON access log agree."""
    srv = fresh_server(metrics="on", access_log_format="json")
    with srv.connect() as conn:
        for _ in range(3):
            conn.send(util.build_request("GET", "/a.txt"))
            assert conn.read_response().status == 200
    for _ in range(2):
        assert srv.get("/a.txt", headers={"Connection": "close"}).status == 200
    util.wait_stats(srv.port, lambda s: s["requests"] >= 5)
    h = _histograms(srv)
    for name in (QUEUE, SERVICE):
        v = h[(name, model)]
        assert v["count"] == 5, (name, v)
        assert v["buckets"][-1] == (float("inf"), 5)
        assert [c for _, c in v["buckets"]] == sorted(c for _, c in v["buckets"]), "buckets are cumulative"
        assert len(v["buckets"]) == 23 and v["buckets"][0][0] == 1e-6 and v["buckets"][-2][0] == 10
    assert h[(QUEUE, model)]["sum"] >= 0
    assert 0 < h[(SERVICE, model)]["sum"] < util.scaled(5), h

    s = util.wait_stats(srv.port, lambda s: s["service_us"]["count"] >= 6)  # the /metrics request too
    for key in ("queue_us", "service_us"):
        v = s[key]
        assert v["count"] == 6 and sum(b["count"] for b in v["buckets"]) == 6, v
        assert 0 <= v["p50"] <= v["p99"] <= v["p999"], v
    assert s["service_us"]["p50"] > 0 and s["service_us"]["sum"] > 0

    page = srv.get("/status")
    assert page.status == 200 and b"queue wait" in page.body and b"p99.9" in page.body

    lines = util.wait_for(lambda: (lambda ls: ls if len(ls) >= 7 else None)(
        srv.access_log.read_text().splitlines()), 3)
    assert lines, srv.access_log.read_text()
    for line in lines:
        d = json.loads(line)
        for key in ("queue_us", "service_us", "first_byte_us"):
            assert isinstance(d[key], int) and 0 <= d[key] < util.scaled(5) * 1e6, (key, d)
        assert d["first_byte_us"] <= d["service_us"], d


def test_viewer_reads_a_segment_of_the_previous_layout(real_segment):  # noqa: F811
    """The timing histograms were added at the end of each slot, and readers
    step through the slots by the header's slot_size: a segment of the layout
    before them (slots of 512 bytes) still reads, with its counts right and no
    timing (null), rather than being misread or refused; slots too small even
    for that are refused."""
    name = f"v1seg{os.getpid()}"
    size = struct.unpack_from("<I", real_segment, OFF_SLOT_SIZE)[0]
    nslots = struct.unpack_from("<I", real_segment, OFF_NSLOTS)[0]
    assert size > OLD_SLOT_SIZE
    slots = b"".join(real_segment[REAL_SLOTS_OFF + i * size:REAL_SLOTS_OFF + i * size + OLD_SLOT_SIZE]
                     for i in range(nslots))
    old = real_segment[:REAL_SLOTS_OFF] + slots
    old = _patched(old, ("<I", OFF_SLOT_SIZE, OLD_SLOT_SIZE), ("<Q", OFF_LAYOUT, len(old)))
    r = _run_stat_on(name, real_segment, "--json")  # this build's: the same counts, and timing
    assert r.returncode == 0, (r.returncode, r.stderr)
    now = json.loads(r.stdout)
    assert isinstance(now["service_us"], dict) and isinstance(now["queue_us"], dict), now
    r = _run_stat_on(name, old, "--json")
    assert r.returncode == 0, (r.returncode, r.stderr)
    s = json.loads(r.stdout)
    for key in ("requests", "methods", "status_codes", "bytes_sent", "connections_accepted", "workers"):
        assert s[key] == now[key], (key, s[key], now[key])
    assert s["queue_us"] is None and s["service_us"] is None, s
    r = _run_stat_on(name, old)
    assert r.returncode == 0 and b"queue wait" not in r.stdout, r.stdout
    # slots that cannot even hold the counters before them are refused
    r = _run_stat_on(name, _patched(old, ("<I", OFF_SLOT_SIZE, OLD_SLOT_SIZE - 64)), "--json")
    assert r.returncode == 1 and b"inconsistent" in r.stderr, r.stderr


CLIENTS = 8          # reconnecting (or keep-alive) clients
CLIENT_WORK_MS = 3   # of spinning per request
RUN_S = 1.0          # how long they keep at it
SLACK_US = 1000      # the log's whole microseconds, and the two clocks' reads


def _timed_clients(srv: util.Server, keep_alive: bool) -> dict[str, float]:
    """CLIENTS clients send CPU-bound requests back to back for RUN_S, each
    the moment the previous one is answered (on a new connection each, or on
    one kept alive). {target: client-measured latency in µs}: from connect()
    (or, kept alive, from the send) to the response's last byte."""
    latency: dict[str, float] = {}
    errors: list[str] = []
    lock = threading.Lock()
    start = threading.Barrier(CLIENTS)

    def client(i: int):
        try:
            start.wait(10)
            end = time.monotonic() + RUN_S
            conn = srv.connect(timeout=util.scaled(30)) if keep_alive else None
            k = 0
            while time.monotonic() < end:
                target = f"/work?delay={CLIENT_WORK_MS}&bucket={i}&id={i}.{k}"
                k += 1
                if keep_alive:
                    t0 = time.monotonic()
                    conn.send(util.build_request("GET", target))
                    r = conn.read_response()
                    t1 = time.monotonic()
                    assert r.status == 200, r
                else:
                    t0 = time.monotonic()
                    with socket.create_connection((util.HOST, srv.port), timeout=util.scaled(30)) as s:
                        s.sendall(util.build_request("GET", target, headers={"Connection": "close"}))
                        data = b""
                        while chunk := s.recv(65536):
                            data += chunk
                    t1 = time.monotonic()
                    assert data.startswith(b"HTTP/1.1 200 "), data[:200]
                with lock:
                    latency[target] = (t1 - t0) * 1e6
            if conn:
                conn.close()
        except Exception as e:  # reported below
            errors.append(f"client {i}: {e!r}")

    threads = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, "\n".join(errors)
    return latency


@pytest.mark.timing  # ASan: every model's stamps in test_every_model_times_every_request
@pytest.mark.parametrize("keep_alive", [False, True], ids=["reconnecting", "kept_alive"])
def test_queue_wait_never_exceeds_what_the_client_waited(model, fresh_server, keep_alive):
    """A request's stamps cannot start before its client connected (or, kept
    alive, sent it): queue wait + service time <= the latency the client
    measured, for every request, even while clients reconnect (or send their
    next request) the moment they are answered. One event loop (one worker)
    makes them share a loop's turns; a loop that accepted and served new
    connections until its backlog ran dry never ended its turn while clients
    kept reconnecting, and stamped all of them with that turn's start."""
    srv = fresh_server(workload="on", work_unit="1ms", delay_kind="wall", access_log_format="json", workers="1")
    latency = _timed_clients(srv, keep_alive)
    assert len(latency) >= CLIENTS * 5, f"only {len(latency)} requests were answered in {RUN_S} s"
    logged: dict[str, dict] = {}

    def read_log():
        for line in srv.access_log.read_text().splitlines():
            d = json.loads(line)
            logged[d["target"]] = d
        return all(t in logged for t in latency)

    assert util.wait_for(read_log, 5), f"{len(set(latency) - set(logged))} requests not logged"
    over = []
    for target, lat_us in latency.items():
        d = logged[target]
        if d["queue_us"] + d["service_us"] > lat_us + SLACK_US:
            over.append((target, d["queue_us"], d["service_us"], round(lat_us)))
    assert not over, (f"{len(over)} of {len(latency)} requests stamped longer than their client waited "
                      f"(target, queue_us, service_us, client µs): {sorted(over, key=lambda o: -o[1])[:5]}")


def test_epoll_reconnecting_clients_do_not_starve_open_connections(docroot, tmp_path):
    """One loop, CLIENTS clients reconnecting for 3 ms requests: a request on
    a connection already open is answered within a turn or two (a turn takes
    at most 64 new connections, here the CLIENTS waiting), not when the
    reconnecting stops: a loop that accepted until its backlog ran dry never
    got back to epoll_wait to hear of it."""
    srv = util.Server("epoll", docroot.path, tmp_path / "epoll",
                      {"workload": "on", "work_unit": "1ms", "delay_kind": "wall", "workers": "1"}).start()
    open_conn = srv.connect(timeout=util.scaled(30))
    open_conn.send(util.build_request("GET", "/a.txt"))  # registered with the loop: it waits for its next
    assert open_conn.read_response().status == 200
    load = threading.Thread(target=_timed_clients, args=(srv, False))
    load.start()
    worst = 0.0
    try:
        time.sleep(RUN_S / 4)
        for _ in range(3):
            t0 = time.monotonic()
            open_conn.send(util.build_request("GET", "/a.txt"))
            assert open_conn.read_response().status == 200
            worst = max(worst, time.monotonic() - t0)
            time.sleep(RUN_S / 8)
    finally:
        load.join(60)
        open_conn.close()
        assert srv.stop() == 0, srv.diagnostics()
    # a turn: CLIENTS x 3 ms of work; the reconnecting went on for RUN_S
    assert worst < util.scaled(0.2), f"an open connection waited {worst:.3f} s behind new ones"
