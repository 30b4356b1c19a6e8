"""The lab's parsers (bench/parsers.py) against captured ab and wrk outputs
(tests/bench/samples/): numbers come out exact, failures are never lost."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench import parsers  # noqa: E402

SAMPLES = Path(__file__).parent / "samples"


def sample(name: str) -> str:
    return (SAMPLES / name).read_text()


def test_ab_connection_close():
    r = parsers.parse_ab(sample("ab_close.txt"))
    assert r["complete"] == 200
    assert r["failed"] == 0 and r["non2xx"] == 0 and r["errors"] == 0
    assert r["doc_length"] == 4537
    assert r["body_bytes"] == 200 * 4537
    assert r["concurrency"] == 10
    assert r["rps"] > 0 and r["ab_time_per_req_ms"] > 0 and r["ab_time_per_req_across_ms"] > 0
    assert r["ab_time_per_req_ms"] == pytest.approx(r["ab_time_per_req_across_ms"] * 10, rel=0.01)
    # ab's "Time per request" is the concurrency over the rate, not a measurement:
    # the latency the lab shows as the mean is ab's measured "Total" mean
    assert r["ab_time_per_req_ms"] == pytest.approx(r["concurrency"] * 1000 / r["rps"], rel=0.01)
    assert r["mean_ms"] == r["total_mean_ms"]
    assert r["keepalive_requests"] == 0
    for p in (50, 90, 99):
        assert f"p{p}_ms" in r
    assert r["p50_ms"] <= r["p90_ms"] <= r["p99_ms"] <= r["total_max_ms"]


def test_ab_keepalive():
    r = parsers.parse_ab(sample("ab_keepalive.txt"))
    assert r["complete"] == 500
    assert r["keepalive_requests"] == 500
    assert r["doc_length"] == 13


def test_ab_non2xx_counted_as_errors():
    r = parsers.parse_ab(sample("ab_non2xx.txt"))
    assert r["complete"] == 100
    assert r["non2xx"] == 100
    assert r["errors"] == 100


def test_ab_seed_output():
    """The seed 003 document's own ab output (an older ab 2.3 build)."""
    r = parsers.parse_ab(sample("ab_seed003_keepalive.txt"))
    assert r["complete"] == 100000
    assert r["keepalive_requests"] == 100000
    assert r["rps"] == pytest.approx(41204.08)
    assert r["ab_time_per_req_ms"] == pytest.approx(4.854)      # 200 / 41204.08 s: derived from the rate
    assert r["mean_ms"] == 5                                      # the measured "Total" mean
    assert r["doc_length"] == 13
    assert (r["p50_ms"], r["p90_ms"], r["p99_ms"]) == (1, 8, 49)
    assert (r["total_min_ms"], r["total_mean_ms"], r["total_sd_ms"], r["total_max_ms"]) == (0, 5, 12.1, 64)


def test_ab_failed_detail():
    text = sample("ab_close.txt").replace(
        "Failed requests:        0\n",
        "Failed requests:        7\n   (Connect: 0, Receive: 3, Length: 4, Exceptions: 0)\n")
    r = parsers.parse_ab(text)
    assert r["failed"] == 7
    assert r["failed_detail"] == {"connect": 0, "receive": 3, "length": 4, "exceptions": 0}
    assert r["errors"] == 7


def test_ab_aborted_run_raises():
    with pytest.raises(parsers.ParseError, match="Connection refused"):
        parsers.parse_ab(sample("ab_refused.txt"))


def test_wrk_summary_exact_counters():
    r = parsers.parse_wrk(sample("wrk_summary.txt"))
    assert r["requests"] == 47754
    assert r["bytes"] == 227738826
    assert r["duration_s"] == pytest.approx(1.000514)
    assert r["rps"] == pytest.approx(47754 / 1.000514)
    assert r["errors"] == 0 and r["non2xx"] == 0
    assert r["mean_ms"] == pytest.approx(0.2331)
    assert r["p50_ms"] == pytest.approx(0.142) and r["p99_ms"] == pytest.approx(2.657)
    # bytes per response = head + the 4537-byte body
    assert 4537 < r["bytes"] / r["requests"] < 4537 + 400


def test_wrk_non2xx():
    r = parsers.parse_wrk(sample("wrk_non2xx.txt"))
    assert r["non2xx"] == 43039 and r["err_status"] == 43039
    assert r["errors"] == 43039


def test_wrk_socket_errors():
    r = parsers.parse_wrk(sample("wrk_socket_errors.txt"))
    assert (r["err_read"], r["err_timeout"]) == (5, 3)
    assert r["errors"] == 8


def test_wrk_disagreeing_counts_raise():
    text = sample("wrk_socket_errors.txt").replace("read 5,", "read 6,")
    with pytest.raises(parsers.ParseError, match="disagree"):
        parsers.parse_wrk(text)


def test_wrk_without_summary_raises():
    text = "\n".join(ln for ln in sample("wrk_summary.txt").splitlines()
                     if not ln.startswith("SPINDLE_BENCH"))
    with pytest.raises(parsers.ParseError):
        parsers.parse_wrk(text)


# -- vegeta (open loop) ------------------------------------------------------

def test_vegeta_report_and_hdrplot():
    r = parsers.parse_vegeta(sample("vegeta_report.json"), sample("vegeta_hdrplot.txt"), 200)
    assert r["requests"] == 200 and r["ok"] == 200 and r["errors"] == 0
    assert r["target_rate"] == 200
    assert r["sent_rate"] == pytest.approx(201.01, rel=1e-3)
    assert r["p50_ms"] == pytest.approx(0.652758)
    assert r["p99_ms"] == pytest.approx(219.048993)
    assert r["max_ms"] == pytest.approx(225.230252)
    # p99.9 comes from the hdrplot: at or above p99, at most the maximum
    assert r["p99_ms"] <= r["p999_ms"] <= r["max_ms"]
    assert r["cdf"][0] == (0.085166, 0.0)
    fracs = [f for _, f in r["cdf"]]
    assert fracs == sorted(fracs) and fracs[-1] == 1.0


def test_vegeta_refused_counts_every_request_as_an_error():
    r = parsers.parse_vegeta(sample("vegeta_refused.json"), sample("vegeta_hdrplot.txt"), 50)
    assert r["requests"] == 50 and r["ok"] == 0 and r["errors"] == 50
    assert r["status_counts"] == {0: 50}
    assert "connection refused" in r["error_samples"][0]


def test_vegeta_garbage_is_a_parse_error():
    with pytest.raises(parsers.ParseError):
        parsers.parse_vegeta("not json", sample("vegeta_hdrplot.txt"), 10)
    with pytest.raises(parsers.ParseError):
        parsers.parse_vegeta(sample("vegeta_report.json"), "Value(ms) Percentile\n", 10)


def test_percentile_nearest_rank():
    v = [float(x) for x in range(1, 101)]
    assert parsers.percentile(v, 0.5) == 50
    assert parsers.percentile(v, 0.99) == 99
    assert parsers.percentile(v, 0.999) == 100
    assert parsers.percentile([7.0], 0.5) == 7.0
    cdf = [(1.0, 0.0), (2.0, 0.5), (3.0, 0.99), (9.0, 0.999), (10.0, 1.0)]
    assert parsers.percentile_from_cdf(cdf, 0.999) == 9.0
    assert parsers.percentile_from_cdf(cdf, 0.6) == 3.0


def test_workload_totals():
    t = parsers.parse_totals("total 1234 buckets 128 delay_units 2500 hold_units 7\n")
    assert t == {"total": 1234, "buckets": 128, "delay_units": 2500, "hold_units": 7}
    for bad in ("42\n", "total x buckets 1 delay_units 0 hold_units 0", "<html>404</html>"):
        with pytest.raises(parsers.ParseError):
            parsers.parse_totals(bad)


# -- /proc ---------------------------------------------------------------------

PROC_STAT = """cpu  100 5 50 1000 10 1 9 0 0 0
cpu0 60 5 30 400 5 1 4 0 0 0
cpu1 40 0 20 600 5 0 5 0 0 0
intr 12345
ctxt 999
"""


def test_proc_stat_and_deltas():
    from bench import procstat
    a = procstat.parse_proc_stat(PROC_STAT)
    assert set(a) == {"cpu", "cpu0", "cpu1"}
    assert a["cpu0"]["user"] == 60 and a["cpu0"]["softirq"] == 4
    assert procstat.busy_ticks(a["cpu0"]) == 60 + 5 + 30 + 1 + 4
    b = procstat.parse_proc_stat(PROC_STAT.replace("cpu0 60 5 30 400", f"cpu0 {60 + procstat.CLK_TCK} 5 30 400"))
    d = procstat.machine_delta(a, b)
    assert d["cpu0"]["busy_s"] == pytest.approx(1.0)
    assert d["cpu1"]["busy_s"] == 0


def test_pid_stat_with_spaces_and_parens_in_the_name():
    from bench import procstat
    fields = ["S", "77"] + ["0"] * 9 + ["10", "20", "30", "40"] + ["0"] * 30
    ppid, ticks = procstat.parse_pid_stat("1234 (a (weird) name) " + " ".join(fields))
    assert ppid == 77 and ticks == 100


def test_ab_counts_connections_closed_unanswered_as_complete():
    # A server that accepts, reads the request and closes without answering:
    # ab 2.3 reports 13,439 "Complete requests", 0 failed and 13,439 req/s.
    r = parsers.parse_ab(sample("ab_closed_without_response.txt"))
    assert r["complete"] == 13439 and r["failed"] == 0 and r["rps"] > 13000
    # Counted from the body bytes actually received, none was answered.
    good = parsers.ab_answered(r, 4537)
    assert good == {"answered": 0, "unanswered": 13439, "rps": 0.0}


def test_ab_reset_requests_are_not_throughput():
    # Every connection reset: ab still prints 12,638 "Requests per second".
    r = parsers.parse_ab(sample("ab_reset_every_request.txt"))
    assert r["rps"] > 12000 and r["failed"] == 22367
    assert parsers.ab_answered(r, 4537)["rps"] == 0.0


def test_ab_answered_on_a_clean_run_is_abs_own_rate():
    for name in ("ab_close.txt", "ab_keepalive.txt"):
        r = parsers.parse_ab(sample(name))
        good = parsers.ab_answered(r, r["doc_length"])
        assert good["unanswered"] == 0 and good["answered"] == r["complete"]
        assert abs(good["rps"] - r["rps"]) <= r["rps"] * 0.01


def test_ab_finished_with_no_request_complete():
    # ab prints no "Requests per second" when nothing completed (done == 0);
    # the run finished, so it is a measurement of zero, not an aborted run.
    text = sample("ab_closed_without_response.txt")
    text = text.replace("Complete requests:      13439", "Complete requests:      0")
    text = text.replace("Failed requests:        0", "Failed requests:        412\n"
                        "   (Connect: 0, Receive: 412, Length: 0, Exceptions: 0)")
    text = "\n".join(ln for ln in text.splitlines()
                     if not ln.startswith(("Requests per second", "Time per request", "Transfer rate")))
    r = parsers.parse_ab(text)
    assert r["complete"] == 0 and r["rps"] == 0.0 and r["errors"] == 412
    assert "mean_ms" not in r
