"""The report's plots (bench/plots.py and their use in bench/report.py):
error bars that are confidence intervals where the data has them (and say
min–max where it does not), client-bound bars marked, a log axis where one
result hides the others, no seed line in a unit the seed never used, and
plots for the peers and TLS experiments."""
from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench import plots, report  # noqa: E402


def row(server, rps, **kw):
    return {"server": server, "rps": rps, "rps_min": rps * 0.8, "rps_max": rps * 1.3, **kw}


def test_whiskers_are_the_ci_when_there_is_one_else_min_max_and_say_so():
    with_ci = row("epoll", 100.0, rps_ci95_low=95.0, rps_ci95_high=104.0)
    assert plots.interval(with_ci, "rps") == (95.0, 104.0, "95% CI")
    pair = row("epoll", 100.0, rps_ci95=[96.0, 103.0])
    assert plots.interval(pair, "rps") == (96.0, 103.0, "95% CI")
    main = row("epoll", 100.0, ci95_metric="rps", ci95_low=97.0, ci95_high=102.0)
    assert plots.interval(main, "rps") == (97.0, 102.0, "95% CI")
    assert plots.interval(main, "p99_ms") is None
    assert plots.interval(row("fork", 50.0), "rps") == (40.0, 65.0, "min–max over repeats")
    err, what = plots.yerr([with_ci, row("fork", 50.0)], "rps")
    assert err == [[5.0, 10.0], [4.0, 15.0]] and what == "95% CI / min–max over repeats"


def test_client_bound_bar_is_hatched_and_in_the_legend():
    fig, ax = plt.subplots()
    plots.bars(ax, [row("epoll", 100.0), row("nginx", 90.0, client_bound=True)], "rps", "t", "requests/s")
    patches = [p for p in ax.patches]
    assert patches[0].get_hatch() is None and patches[1].get_hatch() == plots.CB_HATCH
    labels = ax.get_legend_handles_labels()[1]
    assert plots.CB_LABEL in labels and any("min–max over repeats" in lb for lb in labels)
    plt.close(fig)


def test_a_log_axis_where_one_bar_would_flatten_the_others():
    fig, (a, b) = plt.subplots(1, 2)
    plots.bars(a, [row("epoll", 30000.0), row("pool", 400.0)], "rps", "t", "requests/s")
    plots.bars(b, [row("epoll", 30000.0), row("pool", 20000.0)], "rps", "t", "requests/s")
    assert a.get_yscale() == "log" and "(log)" in a.get_ylabel()
    assert b.get_yscale() == "linear"
    plt.close(fig)


class Capture:
    """Report.save_fig, keeping the figures' axes to inspect."""
    def __init__(self, monkeypatch):
        self.figs: dict[str, list] = {}
        orig = report.Report.save_fig

        def save_fig(rep, fig, name, alt, axes=None):
            self.figs[name] = list(fig.axes)
            orig(rep, fig, name, alt, axes)
        monkeypatch.setattr(report.Report, "save_fig", save_fig)


def _rec(exp, cell, server, rep, **m):
    base = {"exp": exp, "cell": cell, "server": server, "kind": "spindle", "model": server, "cpus": "0",
            "workers": 1, "rep": rep, "tool": "wrk", "rps": 1000.0 + rep, "mean_ms": 5.0, "p99_ms": 7.0,
            "errors": 0, "problems": [], "server_cpu_s": 1.0, "server_us_per_req": 10.0 + rep, "gen_share": 0.5,
            "client_bound": False, "other_cores": 0.0}
    return {**base, **m}


def test_seed001_cdf_draws_no_seed_line_in_milliseconds(tmp_path, monkeypatch):
    cap = Capture(monkeypatch)
    recs = [_rec("seed001", f"{m} 500", m, rep, n=500, par=50, avg_ms=3.0, max_ms=9.0, std_ms=1.0,
                 lat_ms=[1.0, 2.0, 3.0], _params=["n", "par"], delay_kind="cpu")
            for m in ("thread", "pool", "epoll") for rep in (1, 2)]
    rep = report.Report(SimpleNamespace(records=recs, notes={}, server_memory=[]), tmp_path, {})
    rep.seed001()
    ax = cap.figs["seed001_latency_cdf.png"][0]
    vertical = [ln for ln in ax.get_lines() if len(set(ln.get_xdata())) == 1 and len(ln.get_xdata()) == 2]
    assert vertical == [], "a seed 001 average (seconds of its units) drawn as milliseconds"
    assert "seed's avg (s)" in "\n".join(rep.md)     # the table still gives them, in their own unit


def test_seed002_d_goes_logarithmic_when_hold_1_is_a_hundredth_of_hold_0(tmp_path, monkeypatch):
    cap = Capture(monkeypatch)
    recs = []
    for rep in (1, 2):
        for hold, rps in ((0, 30000.0), (1, 300.0)):
            for b in (32, 128):
                recs.append(_rec("seed002", f"pool d h{hold} b{b}", "pool", rep, cores=2, dmin=0, dmax=0, buckets=b,
                                 lock="bucket", hold=hold, subs=["d"], rps=rps + rep, delay_kind="cpu",
                                 _params=["cores", "dmin", "dmax", "buckets", "lock", "hold", "subs"]))
    rep = report.Report(SimpleNamespace(records=recs, notes={}, server_memory=[]), tmp_path, {"cores_asked": []})
    rep.seed002()
    d_ax = cap.figs["seed002_workload.png"][2]
    assert d_ax.get_yscale() == "log"


def test_peers_and_tls_have_plots(tmp_path, monkeypatch):
    cap = Capture(monkeypatch)
    recs = []
    for rep in (1, 2):
        for srv in ("nginx", "epoll"):
            recs.append(_rec("peers", f"{srv} keepalive", srv, rep, peer_cell="keepalive", conc=200,
                             _params=["peer_cell", "conc"], client_bound=srv == "nginx"))
            recs.append(_rec("peers", f"{srv} file1m", srv, rep, peer_cell="file1m", conc=50, mbps=900.0 + rep,
                             server_us_per_mb=100.0 + rep, _params=["peer_cell", "conc"]))
            recs.append(_rec("tls", f"{srv} full", srv, rep, tls_cell="full", conc=50, tool="ab",
                             _params=["tls_cell", "conc"]))
    rep = report.Report(SimpleNamespace(records=recs, notes={}, server_memory=[]), tmp_path, {})
    rep.peers()
    rep.tls()
    assert (tmp_path / "peers.png").exists() and (tmp_path / "tls.png").exists()
    peers = cap.figs["peers.png"]
    assert len(peers) == 4          # rate and CPU, for each of the two cells
    hatched = [p for ax in peers for p in ax.patches if p.get_hatch()]
    assert len(hatched) == 2        # nginx's keep-alive bars: rate and CPU
    assert "server CPU, µs per MB" in [ax.get_ylabel() for ax in peers]
    assert any("handshake" in ax.get_ylabel() for ax in cap.figs["tls.png"])
