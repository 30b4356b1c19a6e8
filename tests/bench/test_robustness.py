"""The executor survives a server that cannot start: its cells are recorded as
failed runs, the other servers' cells are still measured, and nothing is left
running (bench/lab.run_cells). A run must never die half-way and lose the
report because of one broken cell."""
from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench import lab, report  # noqa: E402


def _lab(tmp_path: Path) -> lab.Lab:
    # /bin/false as "spindle": every start attempt exits at once.
    return lab.Lab(tmp_path / "out", smoke=True, repeats=2, spindle_bin=Path("/bin/false"),
                   cell_s=0.1, warmup_s=0, cores=[1])


def test_a_server_that_cannot_start_is_recorded_not_fatal(tmp_path):
    lb = _lab(tmp_path)
    ran = []

    def fake_run(lab_, s):
        ran.append(s.label)
        return {"tool": "fake", "ok": 1}

    broken = lab.server_key("spindle", "pool", _label="pool-5")
    cells = [lab.Cell("t", "broken cell", broken, {"conc": 1, "part": "matched"}, fake_run)]
    try:
        lab.run_cells(lb, "t", cells, 2, [], lambda r: "")
    finally:
        lb.cleanup()
    assert ran == []
    assert len(lb.records) == 2                       # one per repeat
    assert all("cannot start" in r["failed_run"] for r in lb.records)
    # under the label it would have run under: a pair the plan measured at matched load finds it
    assert {(r["server"], r["part"]) for r in lb.records} == {("pool-5", "matched")}
    assert lb.servers == []


def test_one_broken_experiment_does_not_stop_the_run(tmp_path, monkeypatch):
    from bench import __main__ as entry
    calls = []

    def boom(lab_, models):
        calls.append("boom")
        raise RuntimeError("nginx missing")

    def fine(lab_, models):
        calls.append("fine")

    lb = _lab(tmp_path)
    try:
        entry.run_experiments(lb, ["boom", "fine"], [], {"boom": boom, "fine": fine})
    finally:
        lb.cleanup()
    assert calls == ["boom", "fine"]
    assert any("nginx missing" in n for n in lb.notes["boom"])


def test_the_report_is_written_when_every_cell_failed(tmp_path):
    """Plan every default experiment with a spindle that cannot start: every
    record is a failed run, and report.md, results.csv/json still come out."""
    from bench import experiments, report
    from bench.manifest import manifest
    lb = _lab(tmp_path)
    lb.repeats = 1
    models = ["iterative", "fork", "thread", "pool", "prefork", "epoll", "uring"]
    lb.sizes = {lab.PAGE: 4537, lab.HELLO: 13, lab.B100: 100, lab.MB1: 1 << 20, lab.MB100: 100 << 20}
    # No server can start: replace start() so nothing runs (nginx included).
    def no_start(*a, **kw):
        raise RuntimeError("cannot start: test")
    lb.start = no_start
    try:
        for n in experiments.DEFAULT:
            experiments.EXPERIMENTS[n](lb, models)
    finally:
        lb.cleanup()
    # every cell failed to run, or was skipped before it ran (tls: no certificate was made)
    assert lb.records and all("failed_run" in r or "skipped" in r for r in lb.records)
    assert any("failed_run" in r for r in lb.records)
    man = manifest(lb, models, "smoke", 1, "now", 1.0, experiments.DEFAULT)
    out = tmp_path / "out"
    report.write(lb, out, man)
    text = (out / "report.md").read_text()
    assert "The seeds' claims, checked" in text
    assert (out / "results.csv").read_text().count("\n") == len(lb.records) + 1


def test_report_renders_an_ab_run_that_answered_nothing(tmp_path):
    """seed 000's fork at 1024 descriptors may answer nothing at c = 1000: ab then
    prints no rate or latency, and the report must still render it."""
    from bench import parsers, report
    from bench.manifest import manifest
    text = (REPO / "tests/bench/samples/ab_closed_without_response.txt").read_text()
    text = text.replace("Complete requests:      13439", "Complete requests:      0")
    text = "\n".join(ln for ln in text.splitlines()
                     if not ln.startswith(("Requests per second", "Time per request", "Transfer rate")))
    m = {"tool": "ab", **parsers.parse_ab(text)}
    lb = _lab(tmp_path)
    for rep in (1, 2):
        lb.records.append({"exp": "seed000", "cell": "fork nofile=1024 ab -c 1000", "server": "fork-nofile1024",
                           "kind": "spindle", "model": "fork", "cpus": "0", "workers": 1, "rep": rep,
                           "conc": 1000, "part": "fork1024", **m, "problems": ["no request completed"],
                           "_params": ["conc", "part"]})
    lb.cleanup()
    man = manifest(lb, ["fork"], "smoke", 2, "now", 1.0, ["seed000"])
    report.write(lb, tmp_path / "out", man)
    assert "fork" in (tmp_path / "out" / "report.md").read_text()


def test_a_run_without_vegeta_stops_before_measuring(tmp_path):
    from bench import __main__ as entry
    assert any("vegeta" in m for m in entry.missing_tools(tmp_path / "no-vegeta"))
    real = tmp_path / "vegeta"
    real.write_text("")
    assert not any("vegeta" in m for m in entry.missing_tools(real))



def test_a_repeat_disturbed_by_other_load_is_taken_again_later(tmp_path, monkeypatch):
    """A repeat that read more than RETAKE_OTHER_CORES of other load is not a
    result: it is measured again after the experiment's other repeats, at
    most MAX_RETAKES times (the last reading is then kept, with its other
    load), and each retake is noted."""
    spindle = REPO / "spindle"
    assert spindle.exists(), "make all builds ./spindle before tests/bench"
    assert lab.RETAKE_OTHER_CORES == 0.15 and lab.MAX_RETAKES == 2
    lb = lab.Lab(tmp_path / "out", smoke=True, repeats=2, spindle_bin=spindle, cell_s=0.1, warmup_s=0,
                 cores=[1])
    lb.make_docroot()
    # the other-load reading of each measurement, in the order they are taken
    readings = iter([0.01, 0.90,   # calm 1; busy 1: disturbed
                     0.02, 0.50,   # calm 2; busy 2: disturbed
                     0.40, 0.30,   # busy 1, busy 2 again: both still disturbed
                     0.05, 0.60])  # busy 1 quiet at last; busy 2 kept after two retakes
    real_account = lab.account

    def account(*a, **kw):
        return {**real_account(*a, **kw), "other_cores": next(readings)}

    monkeypatch.setattr(lab, "account", account)
    monkeypatch.setattr(lab, "measurement_order",
                        lambda cells, repeats, seed=None: [(1, cells[0], False), (1, cells[1], False),
                                                           (2, cells[0], False), (2, cells[1], False)])
    taken = []

    def fake_run(name):
        def run(lab_, s):
            taken.append(name)
            return {"tool": "fake", "requests": 1, "served": 1, "rps": 1.0, "duration_s": 0.1}
        return run

    key = lab.server_key("spindle", "epoll")
    cells = [lab.Cell("t", "calm", key, {"conc": 1}, fake_run("calm")),
             lab.Cell("t", "busy", key, {"conc": 1}, fake_run("busy"))]
    try:
        lab.run_cells(lb, "t", cells, 2, [], lambda r: "")
    finally:
        lb.cleanup()
    assert taken == ["calm", "busy", "calm", "busy", "busy", "busy", "busy", "busy"]
    assert [(r["cell"], r["rep"], r["other_cores"], r["retakes"]) for r in lb.records] == [
        ("calm", 1, 0.01, 0), ("calm", 2, 0.02, 0), ("busy", 1, 0.05, 2), ("busy", 2, 0.60, 2)]
    assert [(r["cell"], r["rep"], r["other_cores"]) for r in lb.retaken] == [
        ("busy", 1, 0.90), ("busy", 2, 0.50), ("busy", 1, 0.40), ("busy", 2, 0.30)]
    assert sum("taken again" in n for n in lb.notes["t"]) == 4


def test_a_cell_that_reads_what_the_last_left_behind_is_not_retaken(tmp_path, monkeypatch):
    """idle_rss measures memory on a server that already held the first
    attempt's connections: a retake there would read a wrong baseline, so
    such a cell keeps its disturbed reading (flagged by its other load)."""
    from bench import experiments
    monkeypatch.setattr(experiments, "run_cells", lambda lab_, exp, cells, *a, **kw: seen.extend(cells))
    seen = []
    lb = lab.Lab(tmp_path / "out", smoke=True, repeats=1, spindle_bin=Path("/bin/false"), cell_s=0.1,
                 warmup_s=0, cores=[1])
    try:
        experiments.idle_rss(lb, ["epoll"])
    finally:
        lb.cleanup()
    assert seen and all(not c.retake for c in seen)



def test_a_matched_load_repeat_that_stalled_is_taken_again():
    """The rule is fixed before the run, per repeat: a matched-load cell's
    repeat that failed a request, whose generator fell behind or passed 90%
    of its core, or that answered under 95% of the rate, is retaken; a
    repeat of any other cell never is for that, and a failed run is not."""
    matched = {"rate": 4000, "part": "matched"}
    ok = {"errors": 0, "fell_behind": False, "client_bound": False, "rps": 3990.0, "mean_ms": 0.9}
    assert lab.stalled(matched, ok) == ""
    assert "failed" in lab.stalled(matched, {**ok, "errors": 3})
    assert "behind" in lab.stalled(matched, {**ok, "fell_behind": True})
    assert "90%" in lab.stalled(matched, {**ok, "client_bound": True, "mean_ms": 40.0})
    assert "3700/s answered" in lab.stalled(matched, {**ok, "rps": 3700.0})
    assert lab.stalled({"rate": 4000}, {**ok, "client_bound": True}) == ""      # not a matched cell
    assert lab.stalled({"conc": 30}, {**ok, "rps": 10.0}) == ""
    assert lab.stalled(matched, {"failed_run": "vegeta exited 1"}) == ""


def test_run_cells_retakes_a_stalled_matched_repeat(tmp_path, monkeypatch):
    spindle = REPO / "spindle"
    lb = lab.Lab(tmp_path / "out", smoke=True, repeats=1, spindle_bin=spindle, cell_s=0.1, warmup_s=0,
                 cores=[1])
    lb.make_docroot()
    stalls = iter([True, False])      # the generator passed 90% of its core in the first reading only
    real_account = lab.account
    monkeypatch.setattr(lab, "account", lambda *a, **kw: {**real_account(*a, **kw), "other_cores": 0.01,
                                                          "client_bound": next(stalls)})
    monkeypatch.setattr(lab, "measurement_order", lambda cells, repeats, seed=None: [(1, cells[0], False)])
    cell = lab.Cell("t", "epoll matched", lab.server_key("spindle", "epoll"), {"rate": 100, "part": "matched"},
                    lambda lab_, s: {"tool": "fake", "requests": 10, "served": 10, "rps": 100.0, "errors": 0,
                                     "fell_behind": False, "duration_s": 0.1})
    try:
        lab.run_cells(lb, "t", [cell], 1, [], lambda r: "")
    finally:
        lb.cleanup()
    assert [(r["rep"], r["client_bound"], r["retakes"]) for r in lb.records] == [(1, False, 1)]
    assert [r["retaken_because"] for r in lb.retaken] == ["did not run at its rate (the generator passed 90% "
                                                          "of its core (mean latency 0.0 ms))"]
    # a report rendered again from results.json counts the retakes from the notes, which say the same
    said = [m.group(1) for ns in lb.notes.values() for n in ns if (m := report.RETAKE_NOTE_RE.search(n))]
    assert said == [r["retaken_because"] for r in lb.retaken]
