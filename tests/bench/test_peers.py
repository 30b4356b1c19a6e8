"""The peers experiment (issue 10) without load: the peers' generated
configurations, a missing peer recorded as skipped rather than crashing the
run, the report's issue-shaped table, and which server wins a cell."""
from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench import checks, experiments, lab, report  # noqa: E402


# -- configurations ------------------------------------------------------------

def test_lighttpd_conf_serves_the_docroot_as_its_performance_notes_recommend(tmp_path):
    conf = lab.lighttpd_conf(tmp_path / "www", 8123, tmp_path)
    assert f'server.document-root = "{tmp_path / "www"}"' in conf
    assert 'server.bind = "127.0.0.1"' in conf and "server.port = 8123" in conf
    assert "server.max-worker = 0" in conf                 # one process, like spindle's one worker
    assert 'server.network-backend = "sendfile"' in conf
    assert 'server.stat-cache-engine = "inotify"' in conf
    assert "accesslog" not in conf


def test_h2o_conf_has_one_thread_and_drops_root_only_when_asked(tmp_path):
    conf = lab.h2o_conf(tmp_path / "www", 8124, tmp_path, None)
    assert "num-threads: 1" in conf
    assert f"file.dir: {tmp_path / 'www'}" in conf
    assert "host: 127.0.0.1" in conf and "port: 8124" in conf
    assert "user:" not in conf and "access-log" not in conf
    assert "user: nobody" in lab.h2o_conf(tmp_path / "www", 8124, tmp_path, "nobody")


def test_missing_peer_names_the_binary(monkeypatch):
    monkeypatch.setitem(lab.PEER_BINARIES, "lighttpd", "/nonexistent/lighttpd")
    monkeypatch.setitem(lab.PEER_BINARIES, "h2o", "/bin/true")
    assert "/nonexistent/lighttpd not installed" in lab.missing_peer("lighttpd")
    assert lab.missing_peer("h2o") is None


# -- a missing peer is a skipped row ------------------------------------------------

def test_a_missing_peer_is_recorded_as_skipped_and_the_rest_runs(tmp_path, monkeypatch):
    monkeypatch.setitem(lab.PEER_BINARIES, "lighttpd", "/nonexistent/lighttpd")
    monkeypatch.setitem(lab.PEER_BINARIES, "h2o", "/bin/true")
    monkeypatch.setitem(lab.PEER_BINARIES, "nginx", "/bin/true")
    ran = []
    monkeypatch.setattr(experiments, "run_cells", lambda lab_, exp, cells, *a: ran.extend(cells))
    lb = lab.Lab(tmp_path / "out", smoke=True, repeats=1, spindle_bin=Path("/bin/false"),
                 cell_s=0.1, warmup_s=0, cores=[1])
    try:
        experiments.peers(lb, ["epoll", "uring", "pool"])
    finally:
        lb.cleanup()
    skipped = [r for r in lb.records if r.get("skipped")]
    assert len(skipped) == len(experiments.PEER_CELLS)     # one per cell, lighttpd only
    assert {r["server"] for r in skipped} == {"lighttpd"}
    assert all("/nonexistent/lighttpd" in r["skipped"] for r in skipped)
    ran_servers = {c.server[1] for c in ran}
    assert ran_servers == {"nginx", "h2o", "epoll", "uring"}   # pool is not a peers row
    assert len(ran) == 4 * len(experiments.PEER_CELLS)
    assert any("lighttpd skipped" in n for n in lb.notes["peers"])


# -- the report ------------------------------------------------------------------

def _rec(server, cell, rep, rps, us, **extra):
    return {"exp": "peers", "cell": f"{server} {cell}", "server": server, "kind": "x", "model": server,
            "cpus": "0", "workers": 1, "rep": rep, "peer_cell": cell, "conc": 200, "tool": "wrk",
            "rps": rps, "p99_ms": 2.0, "server_us_per_req": us, "server_cores": rps * us / 1e6,
            "gen_share": 0.5, "client_bound": False, "other_cores": 0.0, "errors": 0, "problems": [],
            "_params": ["peer_cell", "conc"], **extra}


def _render(records):
    rep = report.Report(SimpleNamespace(records=records, notes={}, server_memory=[]), Path("."), {})
    rep.peers()
    return "\n".join(rep.md)


def test_report_has_one_row_per_server_with_ranges_a_skipped_row_and_the_winner():
    recs = []
    for rep, (a, b) in enumerate([(100_000, 60_000), (104_000, 61_000), (98_000, 59_000)], 1):
        recs.append(_rec("h2o", "keepalive", rep, a, 8.0 + rep / 10))
        recs.append(_rec("epoll", "keepalive", rep, b, 7.0 + rep / 10))
    recs.append({"exp": "peers", "cell": "lighttpd keepalive", "server": "lighttpd", "kind": "lighttpd",
                 "model": "lighttpd", "cpus": "0", "workers": 1, "rep": 1, "peer_cell": "keepalive", "conc": 200,
                 "skipped": "/usr/sbin/lighttpd not installed", "_params": ["peer_cell", "conc"]})
    md = _render(recs)
    rows = [ln for ln in md.splitlines() if ln.startswith("| h2o |") or ln.startswith("| epoll |")
            or ln.startswith("| lighttpd |")]
    assert len(rows) == 3
    assert "100.0k (98.0–104.0k) · 8.2 µs (8.1–8.3 µs)" in md
    assert "| lighttpd | skipped: /usr/sbin/lighttpd not installed |" in md
    # req/s: h2o's range clears epoll's; CPU per request: epoll's clears h2o's
    assert "req/s: h2o (its range clears every other server's)" in md
    assert "least server CPU per request: epoll (its range clears every other server's)" in md


def test_report_marks_client_bound_entries():
    recs = [_rec("h2o", "close", rep, 19_000, 27.0, client_bound=True, gen_share=0.97) for rep in (1, 2)]
    recs += [_rec("epoll", "close", rep, 17_000, 32.0) for rep in (1, 2)]
    md = _render(recs)
    assert "19.0k (19.0–19.0k) · 27.0 µs (27.0–27.0 µs) **CB**" in md


# -- who wins ----------------------------------------------------------------------

def _cell(lo, med, hi, reps=3, **extra):
    return {"rps": med, "rps_min": lo, "rps_max": hi, "reps_ok": reps, **extra}


def test_winner_needs_a_range_clear_of_every_other_server():
    assert checks.winner({"a": _cell(10, 11, 12), "b": _cell(5, 6, 7), "c": _cell(8, 9, 10.5)}, "rps") == \
        (None, "unsettled (a and c overlap)")
    assert checks.winner({"a": _cell(10, 11, 12), "b": _cell(5, 6, 7), "c": _cell(8, 9, 9.5)}, "rps")[0] == "a"


def test_winner_lower_is_better_for_cpu():
    cells = {"a": {"us": 5, "us_min": 4, "us_max": 6, "reps_ok": 3},
             "b": {"us": 9, "us_min": 8, "us_max": 10, "reps_ok": 3, "client_bound": True}}
    assert checks.winner(cells, "us", higher_better=False)[0] == "a"
    assert checks.winner(cells, "us", higher_better=True)[0] == "b"   # a client-bound loser only matters for rates


def test_winner_is_unsettled_by_a_client_bound_loser_one_run_or_too_few_servers():
    cb = _cell(5, 6, 7, client_bound=True)      # no CPU figures: its ceiling is unknown
    assert checks.winner({"a": _cell(10, 11, 12), "b": cb}, "rps") == (None, "unsettled (b was client-bound)")
    assert checks.winner({"a": _cell(10, 11, 12, reps=1), "b": _cell(5, 6, 7)}, "rps") == \
        (None, "unsettled (one run)")
    assert checks.winner({"a": _cell(10, 11, 12), "b": _cell(5, 6, 7, invalid="bad")}, "rps") == \
        (None, "fewer than two servers measured")
