"""The lab reads spindle's queue-wait and service-time histograms from /metrics
before and after every cell (bench/reqtimes.py, bench/lab.run_cells): the
parser against spindle's exposition format, the difference of two readings,
the percentiles interpolated as spindle's own, and a real spindle measured
through run_cells, whose record carries the cell's requests and no more."""
from __future__ import annotations

import math
import socket
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench import lab, reqtimes  # noqa: E402

LADDER_US = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10_000, 20_000, 50_000, 100_000, 200_000,
             500_000, 1_000_000, 2_000_000, 5_000_000, 10_000_000]


def exposition(queue: dict, service: dict, model: str = "epoll") -> str:
    """What spindle's /metrics prints for the two histograms: {upper bound in
    µs (None: +Inf): count in that bucket}, cumulated, with a sum."""
    out = ["# HELP spindle_requests_total x", 'spindle_requests_total{method="GET"} 12']
    for name, h in (("spindle_request_queue_seconds", queue), ("spindle_request_service_seconds", service)):
        out += [f"# HELP {name} x", f"# TYPE {name} histogram"]
        cum = 0
        for le in LADDER_US + [None]:
            cum += h.get(le, 0)
            out.append(f'{name}_bucket{{model="{model}",le="{"+Inf" if le is None else f"{le / 1e6:.9g}"}"}} {cum}')
        total_s = sum((le or 20_000_000) * n for le, n in h.items()) / 1e6 * 0.75
        out.append(f'{name}_sum{{model="{model}"}} {total_s:.9f}')
        out.append(f'{name}_count{{model="{model}"}} {cum}')
    return "\n".join(out) + "\n"


def test_parse_reads_both_histograms_in_spindles_format():
    h = reqtimes.parse_metrics(exposition({5: 3, 20: 1}, {50: 4}))
    assert set(h) == {"queue", "service"}
    q = h["queue"]
    assert len(q["le_s"]) == 23 and math.isinf(q["le_s"][-1]) and q["le_s"][2] == pytest.approx(5e-6)
    assert q["cum"][-1] == 4 and q["count"] == 4
    assert h["service"]["count"] == 4


def test_other_servers_or_builds_without_timing_have_none():
    assert reqtimes.parse_metrics('spindle_requests_total{method="GET"} 3\n') is None
    assert reqtimes.parse_metrics("") is None


def test_the_cell_is_the_difference_and_its_percentiles_interpolate_like_spindle():
    before = reqtimes.parse_metrics(exposition({5: 10}, {50: 10}))
    # the cell: 100 requests, queue 90 in (10, 20] µs and 10 in (1, 2] ms; service all in (100, 200] µs
    after = reqtimes.parse_metrics(exposition({5: 10, 20: 90, 2000: 10}, {50: 10, 200: 100}))
    d = reqtimes.delta(before, after)
    assert d["queue"]["count"] == 100 and sum(d["queue"]["counts"]) == 100
    f = reqtimes.fields(d)
    assert f["timed_requests"] == 100
    # rank 50 of 100: 50/90 of the way through (10, 20] µs, as stats_ladder_quantile_us
    assert f["queue_p50_us"] == pytest.approx(10 + 10 * 50 / 90)
    # rank 99: 9/10 of the way through (1000, 2000] µs
    assert f["queue_p99_us"] == pytest.approx(1000 + 1000 * 9 / 10)
    assert f["service_p50_us"] == pytest.approx(150)
    assert f["queue_hist"] == [[20, 90], [2000, 10]]
    # the mean is the sums' difference over the count: exact, not from the buckets
    assert f["queue_mean_us"] == pytest.approx((after["queue"]["sum_s"] - before["queue"]["sum_s"]) * 1e6 / 100)


def test_the_unbounded_bucket_reads_as_at_least_its_lower_bound():
    d = reqtimes.delta(reqtimes.parse_metrics(exposition({}, {})),
                       reqtimes.parse_metrics(exposition({None: 4}, {None: 4})))
    assert reqtimes.fields(d)["queue_p50_us"] == 10_000_000
    assert reqtimes.fields(d)["queue_hist"] == [[None, 4]]


def test_a_restarted_server_or_a_missing_reading_gives_no_figures():
    big = reqtimes.parse_metrics(exposition({5: 100}, {50: 100}))
    small = reqtimes.parse_metrics(exposition({5: 3}, {50: 3}))
    assert reqtimes.delta(big, small) is None
    assert reqtimes.delta(None, small) is None
    assert reqtimes.fields(None) == {}


# -- a real spindle through the lab's cell executor ---------------------------------------------------------

@pytest.fixture
def a_lab(tmp_path):
    spindle = REPO / "spindle"
    if not spindle.exists():
        pytest.fail("build spindle first (make all)")
    lb = lab.Lab(tmp_path / "out", smoke=True, repeats=1, spindle_bin=spindle, cell_s=0.1, warmup_s=0, cores=[1])
    lb.docroot = tmp_path / "www"
    lb.docroot.mkdir()
    (lb.docroot / "hello.txt").write_text("Hello, World!")
    try:
        yield lb
    finally:
        lb.cleanup()


def keepalive_requests(n: int):
    """A cell: n keep-alive GETs of /hello.txt on one connection, one at a time."""
    def run(lab_, s):
        req = b"GET /hello.txt HTTP/1.1\r\nHost: x\r\n\r\n"
        with socket.create_connection((lab.HOST, s.port), timeout=10) as c:
            for _ in range(n):
                c.sendall(req)
                data = b""
                while not data.endswith(b"Hello, World!"):
                    chunk = c.recv(4096)
                    assert chunk, "the server closed the connection"
                    data += chunk
        return {"tool": "python", "ok": n, "requests": n}
    return run


def test_every_spindle_cell_records_its_queue_wait_and_service_time(a_lab):
    key = lab.server_key("spindle", "epoll")
    lab.run_cells(a_lab, "t", [lab.Cell("t", "300 keep-alive", key, {"conc": 1}, keepalive_requests(300))],
                  1, [], lambda r: "")
    rec = a_lab.records[0]
    assert "failed_run" not in rec
    # the cell's 300 and the reading before it (itself a request, timed like the others); not the one after
    assert rec["timed_requests"] in (300, 301)
    for k in ("queue", "service"):
        assert rec[f"{k}_mean_us"] > 0 and rec[f"{k}_p50_us"] > 0 and rec[f"{k}_p99_us"] >= rec[f"{k}_p50_us"]
        assert sum(c for _, c in rec[f"{k}_hist"]) == rec["timed_requests"]
    # one request at a time on a quiet server: picked up as it arrives, served in well under a millisecond
    assert rec["service_p50_us"] < 1000


def test_a_server_without_the_histograms_records_none(a_lab, monkeypatch):
    """nginx or the peers: no /metrics is read, no field is written."""
    key = lab.server_key("spindle", "epoll")
    monkeypatch.setattr(a_lab, "request_times", lambda s: None)
    lab.run_cells(a_lab, "t", [lab.Cell("t", "10", key, {"conc": 1}, keepalive_requests(10))], 1, [],
                  lambda r: "")
    assert not any(k.startswith(("queue_", "service_", "timed_")) for k in a_lab.records[0])
