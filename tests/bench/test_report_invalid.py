"""An invalid cell is shown as INVALID everywhere its numbers would appear
("a cell that breaks it is marked invalid, not reported"), in every
column of every table, not only in the median columns; and every workload
table and plot names the delay_kind it used."""
from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench import report  # noqa: E402


def _rec(exp, cell, server, rep, **m):
    base = {"exp": exp, "cell": cell, "server": server, "kind": "spindle", "model": server, "cpus": "0",
            "workers": 1, "rep": rep, "tool": "ab", "rps": 1000.0 + rep, "mean_ms": 5.0, "p50_ms": 4.0,
            "p99_ms": 77.0, "p999_ms": 88.0, "errors": 0, "problems": [], "server_cpu_s": 1.0,
            "server_us_per_req": 10.0, "gen_share": 0.5, "client_bound": False, "other_cores": 0.0}
    return {**base, **m}


def _lines_of(md: list[str], server: str) -> list[str]:
    return [ln for ln in md if ln.startswith(f"| {server} |")]


def test_an_invalid_cell_shows_no_number_in_any_table(tmp_path):
    inv = "server used 1.4 CPU-seconds per second on 1 core"
    records = []
    for rep in (1, 2, 3):
        records += [_rec("seed000", "epoll ab -c 30", "epoll", rep, part="main", conc=30,
                         _params=["part", "conc"], invalid=inv),
                    _rec("seed004", "prefork-4x10 ab -k c=10", "prefork-4x10", rep, conc=10, keepalive=True,
                         _params=["conc", "keepalive"], invalid=inv),
                    _rec("openloop", "epoll 1000/s", "epoll", rep, rate=1000, tool="vegeta",
                         _params=["rate"], invalid=inv)]
    rep = report.Report(SimpleNamespace(records=records, notes={}, server_memory=[]), tmp_path, {})
    rep.seed000()
    rep.seed004()
    rep.openloop()
    text = "\n".join(rep.md)
    for n in ("77", "88", "4.00", "77.00", "88.00"):
        assert f"| {n} |" not in text, f"an invalid cell's figure {n} is in a table:\n{text}"
    assert "INVALID" in text


def test_every_workload_table_and_plot_says_which_delay_kind(tmp_path):
    records = []
    for rep in (1, 2):
        common = dict(tool="wrk", delay_kind="wall", work_s_per_s=0.9, bucket_delta=10)
        records += [
            _rec("seed001", "pool 500 req / 50 parallel", "pool", rep, n=500, par=50, avg_ms=3.0, max_ms=9.0,
                 std_ms=1.0, lat_ms=[1.0, 2.0, 3.0], _params=["n", "par"], **common),
            _rec("seed002", "pool 1c d1-3 b128", "pool", rep, cores=1, dmin=1, dmax=3, buckets=128, lock="bucket",
                 hold=0, subs=["a", "b", "c"], _params=["cores", "dmin", "dmax", "buckets", "lock", "hold", "subs"],
                 **common),
            _rec("seed002", "pool 2c d0-0 b32 ka", "pool", rep, cores=2, dmin=0, dmax=0, buckets=32, lock="bucket",
                 hold=0, subs=["d"], _params=["cores", "dmin", "dmax", "buckets", "lock", "hold", "subs"], **common),
            _rec("seed002", "pool 1c open loop 300/s d1-3", "pool", rep, cores=1, dmin=1, dmax=3, buckets=128,
                 lock="bucket", hold=0, subs=["e"], _params=["cores", "dmin", "dmax", "buckets", "lock", "hold",
                                                              "subs"], **common)]
    titles = []
    orig = report._style
    report._style = lambda ax, title, *a, **kw: (titles.append(title), orig(ax, title, *a, **kw))
    try:
        rep = report.Report(SimpleNamespace(records=records, notes={}, server_memory=[]), tmp_path, {})
        rep.seed001()
        rep.seed002()
    finally:
        report._style = orig
    # the kind recorded with each cell, not a fixed word (a wall run says wall)
    headings = [ln for ln in rep.md if ln.startswith("\n**(") or ln.startswith("\n## Seed 00")]
    assert len(headings) >= 5
    for h in headings:
        assert "delay_kind = wall" in h, h
    assert titles and all("delay_kind = wall" in t for t in titles), titles
