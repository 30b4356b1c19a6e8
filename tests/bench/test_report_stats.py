"""What a run writes about its statistics (bench/report.py): verdicts.json in
the published schema, results.csv's interval columns, the Replication section
against a reference run's verdicts, and the calibration drift and steal time
at the top of the report. Synthetic records, no servers."""
from __future__ import annotations

import csv
import json
import sys
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench import report  # noqa: E402

SPREAD = (0.99, 0.995, 1.0, 1.005, 1.01)
MAN = {"mode": "default", "started": "2026-11-26T00:00:00+00:00", "cpu_model": "test CPU", "cpus_online": 2,
       "kernel": "6.1", "spindle_revision": "abc", "tools": {}, "elapsed_s": 60.0, "repeats": 5,
       "pinning": {"note": ""}, "order_seed": 7, "steal": {"steal_s": 1.5, "share": 0.0123}}


def _rec(exp, cell, server, rep, rps, **extra):
    return {"exp": exp, "cell": cell, "server": server, "kind": "spindle", "model": server, "cpus": "0",
            "workers": 1, "rep": rep, "tool": "ab", "rps": rps, "mean_ms": 5.0, "p99_ms": 9.0, "errors": 0,
            "problems": [], "server_cpu_s": 1.0, "server_us_per_req": 30.0, "gen_share": 0.5,
            "client_bound": False, "other_cores": 0.0, **extra}


def _records(drift=1.0):
    recs = []
    for i, f in enumerate(SPREAD, 1):
        for ka, ep, ng in ((True, 140000, 100000), (False, 20000, 20100)):
            p = {"body": 13, "keepalive": ka, "conc": 200, "_params": ["body", "keepalive", "conc"]}
            recs.append(_rec("seed003", f"epoll {ka}", "epoll", i, ep * f, **p))
            recs.append(_rec("seed003", f"nginx {ka}", "nginx-seed003", i, ng * f, **p))
        cal = {"tool": "wrk", "conc": 50, "_params": ["calibration", "conc"]}
        recs.append(_rec("calibration_start", "floor (start)", "floor-epoll", i, 50000 * f, calibration="start", **cal))
        recs.append(_rec("calibration_end", "floor (end)", "floor-epoll", i, 50000 * drift * f, calibration="end",
                         **cal))
    return recs


def _write(tmp_path, reference=None, drift=1.0):
    lab = SimpleNamespace(records=_records(drift), notes={}, server_memory=[])
    report.write(lab, tmp_path, dict(MAN), reference)
    return (tmp_path / "report.md").read_text(), json.loads((tmp_path / "verdicts.json").read_text())


def test_verdicts_json_lists_every_verdict_in_the_published_schema(tmp_path):
    _, verdicts = _write(tmp_path)
    ids = [v["id"] for v in verdicts]
    assert len(ids) == len(set(ids))
    assert {"claim/003/keepalive-par", "claim/003/close-ahead"} <= set(ids)
    for v in verdicts:
        assert isinstance(v["id"], str) and isinstance(v["verdict"], str)
        assert v["ratio"] is None or v["ci95"][0] <= v["ratio"] <= v["ci95"][1]
    ka = next(v for v in verdicts if v["id"] == "claim/003/keepalive-par")
    assert ka["verdict"] == "does not hold" and abs(ka["ratio"] - 1.4) < 0.01


def test_results_csv_has_each_rows_interval_and_repeats(tmp_path):
    _write(tmp_path)
    with open(tmp_path / "results.csv") as f:
        rows = list(csv.DictReader(f))
    r = next(r for r in rows if r["cell"] == "epoll True")
    assert r["ci95_metric"] == "rps" and r["repeats"] == "5"
    # 5 repeats: the exact bootstrap interval of the median is their range
    assert float(r["ci95_low"]) == 140000 * 0.99 and float(r["ci95_high"]) == 140000 * 1.01


def test_replication_section_against_a_reference(tmp_path):
    reference = [{"id": "claim/003/keepalive-par", "verdict": "does not hold", "ratio": 1.3, "ci95": [1.2, 1.4]},
                 {"id": "claim/003/close-ahead", "verdict": "holds", "ratio": 1.2, "ci95": [1.1, 1.3]},
                 {"id": "claim/gone", "verdict": "holds", "ratio": 1.2, "ci95": [1.1, 1.3]}]
    md, _ = _write(tmp_path, reference)
    rep = md[md.index("## Replication"):]
    rep = rep[:rep.index("\n## ", 5)]
    assert "Of the published run's 3 settled verdicts (reached by it and by the run before it), **1 held (33%)**" in rep
    assert "| claim/003/keepalive-par | does not hold |" in rep and "| held |" in rep
    assert "| claim/gone | holds |" in rep and "not in this run" in rep
    # the claims table marks as settled only what both runs reached
    line = next(ln for ln in md.splitlines() if "on par with nginx" in ln and ln.startswith("| 003"))
    assert "| **yes** |" in line
    line = next(ln for ln in md.splitlines() if "ahead of nginx without" in ln and ln.startswith("| 003"))
    assert "| **yes** |" not in line
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["reference_verdicts"] == reference and len(saved["replication"]) == 3
    # verdicts.json marks as settled what both runs reached: the next run counts only those
    mine = {v["id"]: v for v in json.loads((tmp_path / "verdicts.json").read_text())}
    assert mine["claim/003/keepalive-par"]["settled"] is True
    assert mine["claim/003/close-ahead"]["settled"] is False


def test_no_reference_settles_nothing(tmp_path):
    md, _ = _write(tmp_path, None)
    assert "No published verdicts to compare with" in md
    assert "| **yes** |" not in md


def test_calibration_drift_and_steal_at_the_top(tmp_path):
    md, _ = _write(tmp_path, drift=1.0)
    top = md[:md.index("## Headline")]
    assert "Calibration: the floor server's rate" in top and "DRIFTED" not in top
    assert "Host steal time over the run: 1.23%" in top
    md, _ = _write(tmp_path, drift=0.9)
    top = md[:md.index("## Headline")]
    assert "**CALIBRATION DRIFTED" in top and "-10.0%" in top


def test_matched_cells_judge_only_the_rows_whose_workload_they_share(tmp_path):
    """seed 003's matched cells make a new connection per request: the
    no-keep-alive headline row is judged on their CPU per request, the
    keep-alive row on its own req/s (it read the matched cells' ratio once)."""
    recs = _records()
    for i, f in enumerate(SPREAD, 1):
        p = {"rate": 4000, "keepalive": False, "part": "matched", "_params": ["part", "rate"]}
        recs.append(_rec("seed003", "epoll matched", "epoll", i, 3999 * f, **dict(p, server_us_per_req=40.0 * f)))
        recs.append(_rec("seed003", "nginx matched", "nginx-seed003", i, 3999 * f,
                         **dict(p, server_us_per_req=60.0 * f)))
    lab = SimpleNamespace(records=recs, notes={}, server_memory=[])
    report.write(lab, tmp_path, dict(MAN), None)
    v = {x["id"]: x for x in json.loads((tmp_path / "verdicts.json").read_text())}
    ka = next(x for k, x in v.items() if k.startswith("headline/seed-003/") and "-k-" in k)
    close = next(x for k, x in v.items() if k.startswith("headline/seed-003/") and "-k-" not in k)
    assert abs(ka["ratio"] - 1.4) < 0.02 and "basis" not in ka, ka
    assert abs(close["ratio"] - 40 / 60) < 0.02 and "CPU/req" in close["basis"], close
