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
    assert r["rps"] > 0 and r["mean_ms"] > 0 and r["mean_across_ms"] > 0
    assert r["mean_ms"] == pytest.approx(r["mean_across_ms"] * 10, rel=0.01)
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
    assert r["mean_ms"] == pytest.approx(4.854)
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
