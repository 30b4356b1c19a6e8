"""The peers experiment without load: the peers' generated
configurations, a missing peer recorded as skipped rather than crashing the
run, the report's issue-shaped table, and which server wins a cell."""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench import checks, experiments, lab, report  # noqa: E402


# -- configurations ------------------------------------------------------------

def test_lighttpd_conf_serves_the_docroot_as_its_documentation_recommends(tmp_path):
    conf = lab.lighttpd_conf(tmp_path / "www", 8123, tmp_path)
    assert f'server.document-root = "{tmp_path / "www"}"' in conf
    assert 'server.bind = "127.0.0.1"' in conf and "server.port = 8123" in conf
    assert "server.max-worker = 0" in conf                 # one process, like spindle's one worker
    assert 'server.network-backend = "sendfile"' in conf
    assert 'server.stat-cache-engine = "simple"' in conf
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
    lb.full = True          # every peers cell (the default's are in test_plan.py)
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
    import tempfile
    with tempfile.TemporaryDirectory() as out:     # the section writes its plot beside the report
        rep = report.Report(SimpleNamespace(records=records, notes={}, server_memory=[]), Path(out), {})
        rep.preregister()      # every comparison in the family before any verdict is printed
        rep.peers()
    return "\n".join(rep.md)


def test_report_has_one_row_per_server_with_ranges_a_skipped_row_and_the_winner():
    recs = []
    for rep, (a, b) in enumerate([(100_000, 60_000), (104_000, 61_000), (98_000, 59_000)], 1):
        # both at their core's limit: their CPU per request compares
        recs.append(_rec("h2o", "keepalive", rep, a, 8.0 + rep / 10, server_cores=0.97, server_cores_min=0.95))
        recs.append(_rec("epoll", "keepalive", rep, b, 7.0 + rep / 10, server_cores=0.97, server_cores_min=0.95))
    recs.append({"exp": "peers", "cell": "lighttpd keepalive", "server": "lighttpd", "kind": "lighttpd",
                 "model": "lighttpd", "cpus": "0", "workers": 1, "rep": 1, "peer_cell": "keepalive", "conc": 200,
                 "skipped": "/usr/sbin/lighttpd not installed", "_params": ["peer_cell", "conc"]})
    md = _render(recs)
    rows = [ln for ln in md.splitlines() if ln.startswith("| h2o |") or ln.startswith("| epoll |")
            or ln.startswith("| lighttpd |")]
    assert len(rows) == 3
    assert "100.0k (98.0–104.0k) · 8.2 µs (8.1–8.3 µs)" in md
    assert "| lighttpd | skipped |" in md
    assert "| lighttpd | skipped: /usr/sbin/lighttpd not installed |" in md      # the detail table says why
    # req/s: h2o well ahead of epoll; CPU per request: epoll 12% below h2o with ±1% repeats
    assert "req/s: h2o (ahead of every other server after correction)" in md
    assert "least server CPU per request: epoll (ahead of every other server after correction)" in md


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


# -- the tls experiment, without load -------------------------------------------

S_TIME = """
Now timing with session id reuse.
starting
rrrrrrrr*rrr
rrrrr

17 connections in 0.30s; 56.67 connections/user sec, bytes read 4148
17 connections in 2 real seconds, 244 bytes read per connection
"""


def test_s_time_parser_counts_resumed_connections():
    from bench import parsers
    assert parsers.parse_s_time(S_TIME) == {"connections": 17, "resumed": 16, "bytes_per_conn": 244}


def test_s_time_parser_refuses_output_without_a_summary():
    import pytest
    from bench import parsers
    with pytest.raises(parsers.ParseError):
        parsers.parse_s_time("connect: Connection refused\nconnect:errno=111\n")


def test_ab_parser_records_the_negotiated_tls():
    from bench import parsers
    text = (REPO / "tests/bench/samples/ab_close.txt").read_text()
    assert "tls" not in parsers.parse_ab(text)
    https = text.replace("Document Path:", "SSL/TLS Protocol:       TLSv1.3,TLS_AES_256_GCM_SHA384,256,256\n"
                                           "Server Temp Key:        X25519 253 bits\nDocument Path:", 1)
    assert parsers.parse_ab(https)["tls"] == "TLSv1.3,TLS_AES_256_GCM_SHA384,256,256"


def test_nginx_tls_conf_uses_the_certificate_and_mozilla_intermediate(tmp_path):
    lb = lab.Lab(tmp_path / "out", smoke=True, repeats=1, spindle_bin=Path("/bin/false"),
                 cell_s=0.1, warmup_s=0, cores=[1])
    try:
        conf = lb.nginx_tls_conf(8443, 1, tmp_path, "/c.pem", "/k.pem")
    finally:
        lb.cleanup()
    assert "listen 127.0.0.1:8443 ssl backlog=4096;" in conf
    assert "ssl_certificate /c.pem;" in conf and "ssl_certificate_key /k.pem;" in conf
    assert "ssl_protocols TLSv1.2 TLSv1.3;" in conf
    assert f"ssl_ciphers {lab.TLS_CIPHERS_12};" in conf
    assert all(c.startswith("ECDHE-") for c in lab.TLS_CIPHERS_12.split(":"))     # ECDHE only
    assert "sendfile on;" in conf                          # otherwise the file-serving nginx


def test_tls_experiment_skips_spindle_rows_when_spindle_refuses_the_tls_keys(tmp_path, monkeypatch):
    ran = []
    monkeypatch.setattr(experiments, "run_cells", lambda lab_, exp, cells, *a: ran.extend(cells))
    lb = lab.Lab(tmp_path / "out", smoke=True, repeats=1, spindle_bin=Path("/bin/false"),
                 cell_s=0.1, warmup_s=0, cores=[1])
    monkeypatch.setattr(lb, "tls_files", lambda: (tmp_path / "c.pem", tmp_path / "k.pem"))
    lb.full = True          # nginx's plain cell too (the default's cells are in test_plan.py)
    try:
        experiments.tls(lb, ["epoll", "pool"])
    finally:
        lb.cleanup()
    assert {c.server[1] for c in ran} == {"nginx", "nginx-tls"}
    assert len(ran) == len(experiments.TLS_CELLS)
    skipped = [r for r in lb.records if r.get("skipped")]
    assert {r["server"] for r in skipped} == {"epoll", "pool"}
    assert all("refuses the tls settings" in r["skipped"] for r in skipped)


def test_ranking_sentence_says_whether_the_order_changes():
    plain = {"a": {"server_us_per_req": 20}, "b": {"server_us_per_req": 30}, "c": {"skipped": "x"}}
    same = {"a": {"server_us_per_req": 200}, "b": {"server_us_per_req": 300}}
    swapped = {"a": {"server_us_per_req": 400}, "b": {"server_us_per_req": 300}}
    assert "plain HTTP a < b; full TLS handshakes a < b: the same" in report.ranking_sentence(plain, same)
    assert "full TLS handshakes b < a: **different**" in report.ranking_sentence(plain, swapped)
    assert "fewer than two" in report.ranking_sentence(plain, {"a": {"server_us_per_req": 1}})


# -- the pipelined latency client, against a scripted local server -------------------------

def _scripted_server(close_after: int):
    """A 127.0.0.1 server answering every request with one fixed 200 response,
    and closing each connection after `close_after` responses (the last one
    says Connection: close), as nginx and lighttpd do at keepalive_requests."""
    import socket
    import threading
    ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi"
    last = b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nhi"
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)

    def serve(c):
        n, buf = 0, b""
        with c:
            while n < close_after:
                data = c.recv(65536)
                if not data:
                    return
                buf += data
                while b"\r\n\r\n" in buf and n < close_after:
                    _, buf = buf.split(b"\r\n\r\n", 1)
                    n += 1
                    c.sendall(last if n == close_after else ok)

    def accept():
        while True:
            try:
                c, _ = srv.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(c,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return srv, len(ok)


def test_pipeline_client_times_batches_and_reconnects_when_the_server_closes():
    import asyncio
    from bench import client
    srv, size = _scripted_server(close_after=10)        # 4 per batch: the 3rd batch is cut short
    try:
        out = asyncio.run(client._pipeline("127.0.0.1", srv.getsockname()[1], "/", 2, 4, 0.3, size))
    finally:
        srv.close()
    assert out["errors"] == 0, out["error_samples"]
    assert out["batches"] > 4 and out["reconnects"] >= 2
    assert out["ok"] == out["batches"] * 4
    assert 0 < out["p50_ms"] <= out["p99_ms"] <= out["max_ms"]


def test_pipeline_client_reports_a_wrong_response_size():
    import asyncio
    from bench import client
    srv, size = _scripted_server(close_after=1000)
    try:
        out = asyncio.run(client._pipeline("127.0.0.1", srv.getsockname()[1], "/", 1, 4, 0.3, size // 2))
    finally:
        srv.close()
    assert out["errors"] == 1 and out["batches"] == 0


def test_report_shows_the_pipelined_batch_p99_and_its_winner():
    recs = []
    for rep in (1, 2, 3):
        recs.append({**_rec("h2o", "pipelined_latency", rep, 50_000, 5.0), "p99_ms": 2.0 + rep / 10})
        recs.append({**_rec("epoll", "pipelined_latency", rep, 50_000, 5.0), "p99_ms": 40.0 + rep})
    md = _render(recs)
    assert "p99 2.2 ms (2.1–2.3 ms)" in md
    assert "lowest p99: h2o (ahead of every other server after correction)" in md


def test_spindle_against_each_peer_on_cpu():
    recs = []
    for rep in (1, 2, 3):
        recs.append(_rec("h2o", "keepalive", rep, 100_000, 8.0 + rep / 10))
        recs.append(_rec("nginx", "keepalive", rep, 60_000, 15.0))
        recs.append(_rec("epoll", "keepalive", rep, 90_000, 5.0 + rep / 10))
        recs.append(_rec("uring", "keepalive", rep, 90_000, 7.9 + rep / 10))
    md = _render(recs)
    epoll = next(ln for ln in md.splitlines() if ln.startswith("  - epoll against each peer"))
    uring = next(ln for ln in md.splitlines() if ln.startswith("  - uring against each peer"))
    assert "5.2 µs against h2o 8.2 µs: 0.63x [0.60–0.67], less CPU (after correction)" in epoll
    assert "h2o 8.2 µs: 0.99x [0.95–1.02], unsettled" in uring
    # nginx ran at 60% of spindle's rate: a cheaper spindle at the heavier load could owe it to load
    assert "nginx 15.0 µs: 0.35x, unsettled (a server ran below its core's limit" in epoll


def test_a_stalled_peer_is_judged_on_its_own_and_does_not_hide_the_others():
    """nginx stalls on pipelined requests at 13% of its core: its CPU per
    request is a light load's and compares with nothing at another load,
    while h2o, at its limit, still compares with spindle."""
    recs = []
    for rep in (1, 2, 3):
        recs.append(_rec("nginx", "pipelined", rep, 18_500, 7.0 + rep / 10))
        recs.append(_rec("h2o", "pipelined", rep, 130_000, 7.2 + rep / 10))
        recs.append(_rec("epoll", "pipelined", rep, 900_000, 1.0 + rep / 100))
        recs.append(_rec("uring", "pipelined", rep, 900_000, 1.0 + rep / 100))
    md = _render(recs)
    epoll = next(ln for ln in md.splitlines() if ln.startswith("  - epoll against each peer"))
    assert "h2o 7.4 µs: 0.14x" in epoll and "less CPU (after correction)" in epoll.split("h2o")[1]
    assert "unsettled (a server ran below its core's limit" in epoll.split("nginx")[1].split(";")[0]


def test_negotiated_sentence_flags_servers_that_chose_different_suites():
    same = [{"server": "nginx", "tls": "TLSv1.3,TLS_AES_128_GCM_SHA256,256,128"},
            {"server": "epoll", "tls": "TLSv1.3,TLS_AES_128_GCM_SHA256,256,128"}, {"server": "epoll"}]
    assert "not like for like" not in report.negotiated_sentence(same)
    assert "epoll TLSv1.3,TLS_AES_128_GCM_SHA256,256,128" in report.negotiated_sentence(same)
    differ = same + [{"server": "uring", "tls": "TLSv1.3,TLS_AES_256_GCM_SHA384,256,256"}]
    assert "not like for like" in report.negotiated_sentence(differ)
    assert report.negotiated_sentence([{"server": "x"}]) == "Negotiated: not recorded."


def test_a_published_pair_the_new_leader_does_not_need_is_judged_again():
    """Only the leader's pairs are registered (every pair would weaken the
    correction), under ids that do not depend on who leads; when the leader
    changed since the published run, the published run's other pairs are
    judged again after the correction, so the replication reads a verdict
    for each instead of "not in this run"."""
    def render(rates, reference=None):
        recs = [_rec(srv, "keepalive", rep, rate * (1 + rep / 1000), 10.0) for rep in (1, 2, 3)
                for srv, rate in rates.items()]
        with tempfile.TemporaryDirectory() as out:
            rep = report.Report(SimpleNamespace(records=recs, notes={}, server_memory=[]), Path(out), {},
                                reference=reference)
            rep.preregister()
            rep.peers()        # the winners are read after the correction
            rep.judge_all()
        return rep
    first = render({"h2o": 100_000, "nginx": 60_000, "epoll": 80_000})
    ids = lambda rep: {i for i in rep.fam.items if i.startswith("peers/keepalive/rps/")}
    assert first.winners["peers/keepalive/rps/winner"] == "h2o"
    assert ids(first) == {"peers/keepalive/rps/epoll-vs-h2o", "peers/keepalive/rps/h2o-vs-nginx"}
    then = render({"h2o": 70_000, "nginx": 60_000, "epoll": 90_000}, reference=first.verdicts)
    assert then.winners["peers/keepalive/rps/winner"] == "epoll"
    assert ids(then) == {"peers/keepalive/rps/epoll-vs-h2o", "peers/keepalive/rps/epoll-vs-nginx",
                         "peers/keepalive/rps/h2o-vs-nginx"}
    again = {r["id"]: r for r in then.replication}["peers/keepalive/rps/h2o-vs-nginx"]
    assert (again["published"], again["now"], again["reprinted"]) == ("ahead", "ahead", "held")
