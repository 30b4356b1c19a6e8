"""The h2 experiment without load: h2load's output parsed (captured runs of
nghttp2 1.52's h2load against spindle), the cells the default and the full
run ask for, nginx's h2c configuration, and the report's section: the table,
who wins, what HTTP/2 changes and the CPU target against h2o, all from the
records."""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench import experiments, lab, parsers, report  # noqa: E402
from bench.__main__ import make_plan  # noqa: E402

SAMPLES = Path(__file__).resolve().parent / "samples"
MODELS = ["iterative", "fork", "thread", "pool", "prefork", "epoll", "uring"]


# -- h2load's output -----------------------------------------------------------------

def test_parse_h2load_over_h2c():
    r = parsers.parse_h2load((SAMPLES / "h2load_h2c.txt").read_text())
    assert r["protocol"] == "h2c"
    assert r["ok"] == r["succeeded"] > 0 and r["failed"] == r["errored"] == r["timeout"] == r["non2xx"] == 0
    assert r["data_bytes"] == 13 * r["requests"]          # every answer the 13-byte body, none in flight
    assert r["rps"] == pytest.approx(r["ok"] / r["duration_s"])
    assert 0 < r["min_ms"] <= r["mean_ms"] <= r["max_ms"]
    assert r["header_savings_pct"] > 0


def test_parse_h2load_over_http11_and_its_units():
    r = parsers.parse_h2load((SAMPLES / "h2load_h1.txt").read_text())
    assert r["protocol"] == "http/1.1"
    assert r["ok"] > 0 and r["bytes"] > r["data_bytes"] > 0
    assert parsers._h2load_ms("250us") == pytest.approx(0.25)
    assert parsers._h2load_ms("1.50ms") == pytest.approx(1.5)
    assert parsers._h2load_ms("1.00s") == pytest.approx(1000.0)


def test_parse_h2load_refuses_a_run_that_did_not_finish():
    with pytest.raises(parsers.ParseError):
        parsers.parse_h2load("starting benchmark...\nspawning thread #0: 10 total client(s).\n"
                             "client could not connect to host\n")


# -- the cells -----------------------------------------------------------------------

def _h2_plan(full=False):
    return next(p for p in make_plan(["h2"], MODELS, full=full) if p["exp"] == "h2")


def test_default_run_asks_for_three_shapes_both_protocols_on_13_bytes():
    names = set(_h2_plan()["names"])
    servers = list(experiments.H2_MODELS) + ["h2o", "nginx"]
    want = {f"{srv} {p} {c}x{m} 13 B" for srv in servers for p in ("h2", "h1") for c, m in experiments.H2_SHAPES}
    # the CPU target's cell again at one offered rate, for every server but nginx (too slow for it)
    want |= {f"{srv} h2 10x10 13 B at {experiments.H2_MATCHED_RATE:,}/s" for srv in servers if srv != "nginx"}
    assert names == want
    assert _h2_plan()["repeats"] >= 5


def test_full_run_adds_every_model_and_the_100_kib_file_but_iterative_on_one_connection():
    names = set(_h2_plan(full=True)["names"])
    assert {"thread h2 100x1 100 KiB", "prefork h1 10x10 13 B", "iterative h2 1x100 13 B"} <= names
    assert not any(n.startswith("iterative") and "1x100" not in n for n in names)
    assert set(_h2_plan()["names"]) <= names


def test_nginx_h2c_configuration_puts_http2_on_its_plain_listener(tmp_path):
    lb = lab.Lab(tmp_path / "out", smoke=True, repeats=1, spindle_bin=Path("/bin/false"), cell_s=0.1,
                 warmup_s=0, cores=[1])
    try:
        conf = lb.nginx_h2c_conf(8125, 1, tmp_path)
    finally:
        lb.cleanup()
    assert "listen 127.0.0.1:8125 http2 backlog=4096;" in conf
    assert " ssl" not in conf and "sendfile on;" in conf and "open_file_cache" in conf


def test_h2c_cells_run_h2load_with_the_cells_shape(tmp_path, monkeypatch):
    lb = lab.Lab(tmp_path / "out", smoke=True, repeats=1, spindle_bin=Path("/bin/false"), cell_s=2.0,
                 warmup_s=0, cores=[1])
    lb.sizes = {lab.HELLO: 13}
    seen = {}

    def fake(cmd, limit_s, tool, parse):
        seen["cmd"] = cmd
        return ({"cmd": " ".join(cmd), "tool": tool, **parse((SAMPLES / "h2load_h2c.txt").read_text())}, "", 1.0)

    monkeypatch.setattr(lb, "_measure", fake)
    try:
        s = lab.Server("spindle", "epoll", "0", 1, port=9)
        m = lb.h2load(s, lab.HELLO, 10, 10, 1.0)
        assert seen["cmd"][:9] == ["h2load", "-t", "1", "-c", "10", "-m", "10", "-D", "1000ms"]
        assert m["problems"] == [] and m["errors"] == 0
        assert not any(a.startswith("--rps") for a in seen["cmd"])
        lb.h2load(s, lab.HELLO, 10, 10, 1.0, rate=100_000)        # a rate in all: h2load's is per connection
        assert "--rps=10000" in seen["cmd"]
        m = lb.h2load(s, lab.HELLO, 10, 10, 1.0, h1=True)
        assert "--h1" in seen["cmd"]
        assert any("not http/1.1" in p for p in m["problems"])      # the sample spoke h2c
    finally:
        lb.cleanup()


# -- the report ----------------------------------------------------------------------

def _rec(server, proto, shape, rep, rps, us, body="13 B", **extra):
    c, m = (int(x) for x in shape.split("x"))
    cell = f"{proto} {shape} {body}"
    return {"exp": "h2", "cell": f"{server} {cell}", "server": server, "kind": "x", "model": server, "cpus": "0",
            "workers": 1, "rep": rep, "h2_cell": cell, "proto": proto, "conns": c, "streams": m, "body": body,
            "conc": c * m, "tool": "h2load", "rps": rps, "mean_ms": 100 / rps * 1000, "server_us_per_req": us,
            "server_cores": 0.98, "server_cores_min": 0.97, "gen_share": 0.5, "client_bound": False,
            "other_cores": 0.0, "errors": 0, "problems": [], "ctx_vol_per_req": 0.01,
            "_params": ["h2_cell", "proto", "conns", "streams", "body", "conc"], **extra}


def _render(records):
    with tempfile.TemporaryDirectory() as out:
        rep = report.Report(SimpleNamespace(records=records, notes={}, server_memory=[]), Path(out), {})
        rep.preregister()
        rep.h2()
        made = sorted(p.name for p in Path(out).glob("*.png"))
    return "\n".join(rep.md), rep, made


def _records(epoll_us, h2o_us, jitter=0.02):
    recs = []
    for rep in range(1, 6):
        k = 1 + jitter * (rep - 3)
        for srv, us in (("epoll", epoll_us), ("pool", epoll_us * 1.5), ("h2o", h2o_us)):
            for shape in ("1x100", "10x10", "100x1"):
                recs.append(_rec(srv, "h2", shape, rep, 1e6 / (us * k), us * k))
                recs.append(_rec(srv, "h1", shape, rep, 1e6 / (us * 0.8 * k), us * 0.8 * k))
    return recs


def test_report_names_the_winner_why_and_what_http2_changes():
    md, rep, plots = _render(_records(10.0, 20.0))
    assert "| epoll |" in md and "| h2o |" in md and "| pool |" in md
    assert "most requests/s among spindle's models: **epoll** (ahead of every other after correction)" in md
    assert "among every server: **epoll**" in md
    assert "Why: epoll spent 10.0 µs of server CPU per request against pool's 15.0" in md
    # HTTP/2 costs each server 1/0.8 = 1.25x its HTTP/1.1 CPU per request in these records
    assert "epoll (13 B): 1×100 1.25× [" in md
    assert rep.h2_findings[0] == "1×100 13 B: epoll"
    assert plots == ["h2.png"]


def test_report_checks_the_cpu_target_against_h2o_from_the_interval():
    md, _, _ = _render(_records(10.0, 20.0))
    assert "epoll 0.50× [" in md and "]: **met**" in md
    md, _, _ = _render(_records(19.0, 20.0))
    assert "epoll 0.95× [" in md and "]: **missed**" in md
    md, _, _ = _render(_records(16.0, 20.0, jitter=0.3))       # 0.80 with a wide interval
    assert "epoll 0.80× [" in md and "]: **unsettled**" in md


def _matched(recs, epoll_us, h2o_us):
    """The target's cell at one offered rate beside the closed-loop records."""
    at = f"at {experiments.H2_MATCHED_RATE:,}/s"
    for rep in range(1, 6):
        for srv, us in (("epoll", epoll_us), ("h2o", h2o_us)):
            r = _rec(srv, "h2", "10x10", rep, 99_000.0, us * (1 + 0.01 * (rep - 3)), server_cores=0.4)
            r.update(h2_cell=f"{r['h2_cell']} {at}", cell=f"{srv} {r['h2_cell']} {at}", rate=100_000,
                     part="matched")
            recs.append(r)
    return recs


def test_report_checks_the_cpu_target_at_the_offered_rate_first():
    # closed loop: epoll at half h2o's rate, unsaturated (another load); at 100,000/s both: 1.25x
    recs = _records(10.0, 5.0)
    for r in recs:
        if r["server"] == "epoll":
            r.update(server_cores=0.5, server_cores_min=0.45)
    md, _, _ = _render(_matched(recs, 5.0, 4.0))
    target = next(ln for ln in md.splitlines() if ln.startswith("**Target**"))
    assert "13 B, at 100,000/s offered to each server, at most 0.8× h2o's (4.0 µs): epoll 1.25× [" in target
    assert "]: **missed**" in target.split("At each server's own pace")[0]
    # the closed-loop cell still said, and why its ratio does not compare
    assert "At each server's own pace (the closed-loop cell), at most 0.8× h2o's (5.0 µs): pool 3.00× [" in target
    assert "epoll 2.00× [" in target
    assert "at another load than the other" in target
    assert "| h2 10x10 13 B at 100,000/s | epoll |" in md
    # what spindle promises in the target's place, judged in the same cell: its event loops only
    promise = md.split("**Promised instead**", 1)[1].split("\n", 1)[0]
    assert f"at most {report.H2_PROMISE:g}× h2o's (4.0 µs): epoll 1.25× [" in promise and "]: **met**" in promise
    assert "pool" not in promise
    md, _, _ = _render(_matched(_records(10.0, 5.0), 12.0, 4.0))
    promise = md.split("**Promised instead**", 1)[1].split("\n", 1)[0]
    assert "epoll 3.00× [" in promise and "]: **missed**" in promise


def test_report_judges_no_target_where_the_two_servers_carried_different_loads():
    # closed loop only: epoll unsaturated at half h2o's rate, 2x its CPU a request. CPU per request falls
    # with load, so that ratio says neither met nor missed: the target stays open, and the line says why
    recs = _records(10.0, 5.0)
    for r in recs:
        if r["server"] == "epoll":
            r.update(server_cores=0.5, server_cores_min=0.45)
    md, _, _ = _render(recs)
    target = next(ln for ln in md.splitlines() if ln.startswith("**Target**"))
    assert "epoll 2.00× [" in target
    assert "]: **unsettled** (a server ran below its core's limit, at another load than the other" in target


def test_report_with_h2o_failed_at_the_offered_rate_says_so():
    recs = _matched(_records(10.0, 5.0), 5.0, 4.0)
    for r in recs:
        if r["server"] == "h2o" and " at " in r["h2_cell"]:
            r.update(invalid="the server did not start", server_us_per_req=None)
    md, _, _ = _render(recs)
    target = next(ln for ln in md.splitlines() if ln.startswith("**Target**"))
    assert "at 100,000/s offered to each server, at most 0.8× h2o's: h2o not measured." in target
    assert "At each server's own pace (the closed-loop cell), at most 0.8× h2o's (5.0 µs): pool" in target
    assert "**Promised instead**" in md and "at most 2.5× h2o's: h2o not measured." in md


def test_report_without_h2o_says_so():
    recs = [r for r in _records(10.0, 20.0) if r["server"] != "h2o"]
    md, _, _ = _render(recs)
    assert "h2o not measured" in md
