"""The scale experiment (bench/scale.py): its plan (which servers, which
points, by default and with --full, and what it costs the default run), the
holding client and one point measured end to end against a small local
server, plain and TLS (no spindle needed), and the report's table, words and
plots from hand-made records."""
from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench import experiments, lab, report, scale  # noqa: E402
from bench.__main__ import DEFAULT_CELL_S, estimate_s, make_plan  # noqa: E402

MODELS = ["iterative", "fork", "thread", "pool", "prefork", "epoll", "uring"]
EVENT = ("epoll", "uring", "pool", "prefork", "nginx")


def _names(full=False) -> set[str]:
    plan = {p["exp"]: p for p in make_plan(["scale"], MODELS, full=full)}
    return set(plan["scale"]["names"])


def test_the_default_run_holds_1000_and_10000_and_the_floor_models_1000():
    names = _names()
    assert scale.POINTS == (1000, 10000)
    want = {f"{m} {t} {n} idle" for m in EVENT for t in ("http", "https") for n in scale.POINTS}
    want |= {f"{m} {t} 1000 idle" for m in scale.FLOOR_MODELS for t in ("http", "https")}
    assert names == want
    assert not any(n.startswith("iterative") for n in names)
    assert not any(" 15000 " in n for n in names)


def test_full_adds_5000_and_15000_and_5000_for_the_floor_models():
    names = _names(full=True)
    assert {f"{m} {t} {n} idle" for m in EVENT for t in ("http", "https") for n in scale.POINTS_FULL} <= names
    assert {f"{m} {t} 5000 idle" for m in scale.FLOOR_MODELS for t in ("http", "https")} <= names
    assert _names() < names


def test_scale_costs_the_default_run_at_most_three_and_a_half_minutes():
    plan = make_plan(["scale"], MODELS)
    assert plan[0]["repeats"] == scale.REPEATS == 1
    assert estimate_s(plan, DEFAULT_CELL_S, 0.25) <= 3.5 * 60
    # in the default run, between tls and overload's followers and the calibration
    assert "scale" in experiments.DEFAULT


def test_the_plan_says_why_iterative_is_not_run_and_what_the_floor_models_run_to(tmp_path):
    lb = lab.Lab(tmp_path, smoke=False, repeats=5, spindle_bin=Path("/bin/false"), cell_s=2.0, warmup_s=0.25,
                 cores=[1])
    lb.plan = []
    try:
        scale.scale(lb, MODELS)
    finally:
        lb.cleanup()
    notes = " ".join(lb.notes["scale"])
    assert "iterative not run" in notes and "one connection at a time" in notes
    assert "fork: a process per connection; thread: a thread per connection" in notes
    assert "Measured once" in notes


def test_memory_reads_this_process():
    m = scale.memory([__import__("os").getpid()])
    assert m["processes"] == 1 and m["threads"] >= 1
    assert 0 < m["pss_anon_kb"] <= m["pss_kb"] <= m["rss_kb"]


# A small keep-alive server: a thread per connection (so each held connection is visible as one)
SERVER = textwrap.dedent("""
    import http.server, ssl, sys
    class H(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        def do_GET(self):
            body = b"Hello, World!"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        def log_message(self, *a):
            pass
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H)
    srv.request_queue_size = 256
    if len(sys.argv) > 2:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(sys.argv[2], sys.argv[3])
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    srv.serve_forever()
""")


def _point(tmp_path, tls: bool, n: int) -> dict:
    lb = lab.Lab(tmp_path / "out", smoke=True, repeats=1, spindle_bin=Path("/bin/false"), cell_s=1.0,
                 warmup_s=0, cores=[1])
    lb.sizes = {lab.HELLO: 13}
    port = lab.free_port()
    argv = [sys.executable, "-c", SERVER, str(port)]
    if tls:
        argv += [str(x) for x in lab.make_test_certificate(tmp_path / "tls")]
    s = lab.Server("spindle", "test", "0", 1, label="test", port=port)
    s.proc = subprocess.Popen(argv)
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                __import__("socket").create_connection((lab.HOST, port), timeout=0.5).close()
                break
            except OSError:
                time.sleep(0.05)
        return scale.measure(lb, s, n, tls, settle_s=0.2, probes=20)
    finally:
        s.proc.terminate()
        s.proc.wait(10)
        lb.cleanup()


def test_a_point_holds_every_connection_then_times_a_fresh_client_plain(tmp_path):
    m = _point(tmp_path, False, 40)
    assert "failed_run" not in m, m
    assert m["open"] == 40 and m["open_at_end"] == 40 and m["errors"] == 0 and not m["problems"], m
    assert m["threads"] >= m["base_threads"] + 40          # a thread per held connection, in this server
    assert m["kb_per_conn"] > 0 and m["anon_kb_per_conn"] > 0
    assert m["probe_ok"] == 20 and 0 < m["p50_ms"] <= m["p99_ms"] <= m["max_ms"]
    assert '"open": 40' in m["_raw_full"]


def test_a_point_holds_every_connection_then_times_a_fresh_client_tls(tmp_path):
    m = _point(tmp_path, True, 20)
    assert "failed_run" not in m, m
    assert m["open"] == 20 and m["open_at_end"] == 20 and m["errors"] == 0 and not m["problems"], m
    assert m["probe_ok"] == 20 and m["p99_ms"] > 0


# --------------------------------------------------------------------------
# The report
# --------------------------------------------------------------------------

def _rec(server, transport, n, kb, p99, procs=2, threads=2, base_pss=10.0):
    pss = base_pss + kb * n / 1024
    return {"exp": "scale", "cell": f"{server} {'http' if transport == 'plain' else 'https'} {n} idle",
            "server": server, "kind": "spindle", "model": server, "cpus": "0", "workers": 1, "rep": 1,
            "tool": "python-hold", "conns": n, "transport": transport, "open": n, "opened": n, "open_at_end": n,
            "base_pss_mb": base_pss, "pss_mb": pss, "kb_per_conn": kb, "anon_kb_per_conn": kb * 0.95,
            "base_processes": 2, "processes": procs, "base_threads": 2, "threads": threads,
            "p50_ms": p99 / 3, "p99_ms": p99, "setup_us_per_conn": 40.0, "errors": 0, "problems": [],
            "server_cores": 0.2, "gen_share": 0.3, "client_bound": False, "other_cores": 0.0,
            "_params": ["conns", "transport"]}


def _records():
    out = []
    for n in (1000, 5000, 10000):
        out.append(_rec("epoll", "plain", n, 0.45, 0.20))
        out.append(_rec("nginx", "plain", n, 0.41 if n > 1000 else 0.60, 0.25 if n < 10000 else 0.80))
    for n in (1000, 10000):
        out.append(_rec("epoll", "TLS", n, 15.0, 1.5))
        out.append(_rec("nginx", "TLS", n, 16.0, 1.6))
    out.append(_rec("fork", "plain", 1000, 120.0, 0.9, procs=1001))
    out.append(_rec("thread", "plain", 1000, 9.0, 0.3, threads=1002))
    return out


def test_the_report_tables_words_and_plots_the_curves(tmp_path):
    rep = report.Report(SimpleNamespace(records=_records(), notes={}, server_memory=[]), tmp_path, {})
    rep.scale()
    text = "\n".join(rep.md)
    assert "## Cost against connections" in text
    row = next(ln for ln in text.splitlines() if ln.startswith("| epoll | TLS | 10,000 |"))
    assert "| 15.00 |" in row and "| 1.50 |" in row
    # the words come from the records: each curve's ends, its trend, the least and the most at the top point
    assert ("epoll 0.45 kB at 1,000 → 0.45 at 10,000 (flat: a fixed cost per connection; 0.45 kB for each "
            "connection from 1,000 to 10,000)") in text
    assert "nginx 0.60 kB at 1,000 → 0.41 at 10,000 (falls as connections grow" in text
    # nginx's held PSS: 10 + 0.60 MB at 1,000 and 10 + 4.0 at 10,000: 3.4 MB for 9,000 more
    assert "0.39 kB for each connection from 1,000 to 10,000" in text
    assert "At 10,000 connections the least is nginx's 0.41 kB" in text and "the most epoll's 0.45 kB" in text
    assert "**fork** (a process per connection): 120.0 kB per connection at 1,000 (plain HTTP), 1,001 processes" \
        in text
    assert "**thread** (a thread per connection): 9.0 kB" in text and "1,002 threads" in text
    assert "The most growth: nginx plain, 3.2 times its p99 at 1,000" in text
    assert "other load" not in text.split("How cost grows")[1]          # no point was disturbed
    for png in ("scale_memory.png", "scale_latency.png"):
        assert (tmp_path / png).stat().st_size > 10_000 and png in text
    assert report.main_metric(report.aggregate(_records())[0]) == "kb_per_conn"


def test_a_server_that_held_less_with_the_connections_says_so_and_its_marginal_cost():
    """A figure below zero (the server gave back, once they came, more than
    they cost: pool at 1,000 in a trial run) is said as such, and the cost
    per connection added between the points is still there."""
    recs = [_rec("pool", "plain", 1000, -0.71, 0.2, base_pss=4.0), _rec("pool", "plain", 10000, 0.34, 0.2, base_pss=4.1)]
    text = "\n".join(scale.cost_text(report.aggregate(recs), ["pool"]))
    assert "pool -0.71 kB at 1,000 → 0.34 at 10,000 (below zero at the fewest" in text
    m = ((4.1 + 0.34 * 10000 / 1024) - (4.0 - 0.71 * 1000 / 1024)) * 1024 / 9000
    assert f"{m:.2f} kB for each connection from 1,000 to 10,000" in text and 0.45 < m < 0.5


def test_a_point_measured_beside_other_load_is_marked_and_left_out_of_the_growth():
    recs = _records()
    busy = next(r for r in recs if r["server"] == "nginx" and r["conns"] == 10000 and r["transport"] == "plain")
    busy["other_cores"] = 1.6
    text = "\n".join(scale.cost_text(report.aggregate(recs), ["epoll", "nginx"]))
    assert "nginx plain 0.25 → 0.80† ms" in text and "the curves without one: 3 of 4" in text
    assert "The most growth among those: " in text and "nginx plain, 3.2" not in text


def test_the_summary_names_the_least_and_the_most_at_the_top_point():
    line = scale.summary_line(report.aggregate(_records()))
    assert "plain HTTP at 10,000: from nginx's 0.41 kB to epoll's 0.45 kB" in line
    assert "TLS at 10,000: from epoll's 15.00 kB to nginx's 16.00 kB" in line
    assert scale.summary_line([]) is None


def test_a_failed_point_is_no_curve_point():
    recs = _records() + [{"exp": "scale", "cell": "uring http 1000 idle", "server": "uring", "rep": 1,
                          "conns": 1000, "transport": "plain", "failed_run": "the holding client did not start",
                          "_params": ["conns", "transport"]}]
    rows = report.aggregate(recs)
    assert ("uring", "plain") not in scale.curves(rows)
