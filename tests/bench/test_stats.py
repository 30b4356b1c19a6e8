"""The lab's statistics (bench/stats.py): known distributions give the known
intervals, equal samples settle nothing, a 10% effect with tight samples is
found after the correction, Holm's procedure on a textbook example, and the
replication comparison of two runs' verdicts."""
from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench import stats  # noqa: E402


def test_student_t_matches_tables():
    assert stats.t_sf(2.776, 4) == pytest.approx(0.025, abs=2e-4)
    assert stats.t_sf(1.0, 1) == pytest.approx(0.25, abs=1e-9)         # Cauchy
    assert stats.t_ppf(0.975, 4) == pytest.approx(2.7764, abs=1e-3)
    assert stats.t_ppf(0.975, 1e6) == pytest.approx(1.95996, abs=1e-3)  # the normal limit
    assert stats.t_ppf(0.025, 10) == pytest.approx(-2.2281, abs=1e-3)


def test_median_and_its_interval_with_five_repeats_is_the_range():
    """With 5 values the bootstrap median is the minimum with probability
    5.8% (> 2.5%): the percentile interval is the sample's range, whose
    coverage of the true median is 1 - 2/2^5 for any continuous distribution."""
    xs = [10.0, 12.0, 11.0, 9.5, 30.0]
    assert stats.median(xs) == 11.0
    assert stats.median([1, 2, 3, 4]) == 2.5
    assert stats.median_ci(xs, key="t") == (9.5, 30.0)
    assert stats.median_ci([5.0]) is None


def test_the_exact_bootstrap_of_a_median_matches_the_binomial_and_resampling():
    """n = 5: the resampled median is the minimum when 3 or more of 5 draws
    are, 10(1/5)^3(4/5)^2 + 5(1/5)^4(4/5) + (1/5)^5 = 0.05792."""
    dist = stats.median_distribution([3.0, 1.0, 2.0, 5.0, 4.0])
    assert [v for v, _ in dist] == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert dist[0][1] == pytest.approx(0.05792, abs=1e-5) and dist[4][1] == pytest.approx(0.05792, abs=1e-5)
    assert sum(p for _, p in dist) == pytest.approx(1.0)
    mc = stats.boot_medians([3.0, 1.0, 2.0, 5.0, 4.0], 20000, random.Random(1))
    assert mc.count(1.0) / 20000 == pytest.approx(0.05792, abs=0.006)
    assert stats.median_distribution([1.0, 2.0]) is None       # even counts are resampled


def test_median_interval_covers_the_true_median_at_about_the_nominal_rate():
    rng = random.Random(7)
    for n, lo_ok, hi_ok in ((5, 0.90, 0.98), (15, 0.87, 0.99)):
        hits = 0
        for i in range(200):
            xs = [rng.gauss(50.0, 4.0) for _ in range(n)]
            lo, hi = stats.median_ci(xs, n_boot=600, key=f"{n}/{i}")
            hits += lo <= 50.0 <= hi
        assert lo_ok <= hits / 200 <= hi_ok, (n, hits / 200)


def test_ratio_interval_under_no_difference_keeps_its_level():
    """Two samples from one normal distribution: the 95% interval of the ratio
    covers 1 at least at the nominal rate (it errs conservative)."""
    rng = random.Random(3)
    covered = false = 0
    for i in range(200):
        a = [rng.gauss(100.0, 5.0) for _ in range(5)]
        b = [rng.gauss(100.0, 5.0) for _ in range(5)]
        r = stats.ratio_of_medians(a, b, n_boot=400, key=str(i))
        lo, hi = r.ci95
        covered += lo <= 1.0 <= hi
        false += r.p_differs() < 0.05
    assert covered / 200 >= 0.93
    assert false / 200 <= 0.07


def _family(pairs):
    fam = stats.Family()
    js = [fam.difference(f"c{i}", a, b) for i, (a, b) in enumerate(pairs)]
    fam.resolve()
    return fam, js


def test_equal_samples_are_unsettled():
    rng = random.Random(11)
    pairs = []
    for _ in range(20):
        a = [rng.gauss(1000.0, 60.0) for _ in range(5)]
        pairs.append((a, [rng.gauss(1000.0, 60.0) for _ in range(5)]))
    fam, js = _family(pairs)
    assert all(j.verdict == stats.UNSETTLED for j in js)
    # the same samples as a "no difference" claim: unsettled too (±6% noise cannot reach ±5%)
    fam2 = stats.Family()
    eq = fam2.equivalence("eq", *pairs[0])
    fam2.resolve()
    assert eq.verdict == stats.UNSETTLED and eq.width() > 0.05
    # identical samples: the ratio is exactly 1, no difference
    fam3 = stats.Family()
    same = fam3.difference("same", [5.0, 6.0, 7.0, 8.0, 9.0], [5.0, 6.0, 7.0, 8.0, 9.0])
    fam3.resolve()
    assert same.ratio == 1.0 and same.verdict == stats.UNSETTLED


def test_a_ten_percent_effect_with_tight_samples_is_found_among_many_comparisons():
    """±10% with 1% noise, in a family of 60 comparisons (59 of them null):
    Holm still finds it, in both directions, and calls no null one."""
    rng = random.Random(5)
    up = ([rng.gauss(110.0, 1.1) for _ in range(5)], [rng.gauss(100.0, 1.0) for _ in range(5)])
    down = ([rng.gauss(90.0, 0.9) for _ in range(5)], [rng.gauss(100.0, 1.0) for _ in range(5)])
    nulls = [([rng.gauss(100.0, 3.0) for _ in range(5)], [rng.gauss(100.0, 3.0) for _ in range(5)])
             for _ in range(58)]
    fam, js = _family([up, down] + nulls)
    assert js[0].verdict == stats.AHEAD and 1.07 < js[0].ratio < 1.13
    assert js[1].verdict == stats.BEHIND
    lo, hi = js[0].ci95
    assert 1.0 < lo < js[0].ratio < hi
    assert all(j.verdict == stats.UNSETTLED for j in js[2:])
    # lower is better (latency): a 10% lower median is ahead
    fam2 = stats.Family()
    lat = fam2.difference("lat", down[0], down[1], higher_better=False)
    fam2.resolve()
    assert lat.verdict == stats.AHEAD


def test_equivalence_holds_only_inside_the_margin():
    rng = random.Random(9)
    tight = ([rng.gauss(100.0, 0.5) for _ in range(5)], [rng.gauss(101.0, 0.5) for _ in range(5)])
    off = ([rng.gauss(100.0, 0.5) for _ in range(5)], [rng.gauss(112.0, 0.5) for _ in range(5)])
    fam = stats.Family()
    a, b = fam.equivalence("tight", *tight), fam.equivalence("off", *off)
    fam.resolve()
    assert a.verdict == stats.EQUIVALENT
    assert b.verdict == stats.DIFFERENT


def test_holm_on_the_textbook_example():
    """Holm (1979) as usually taught: p = 0.01, 0.04, 0.03, 0.005 at 0.05.
    Sorted: 0.005 <= 0.05/4, 0.01 <= 0.05/3, 0.03 > 0.05/2: stop. H4 and H1 are
    rejected; H3 and H2 are not, though 0.03 and 0.04 are below 0.05."""
    rej = stats.holm({"H1": 0.01, "H2": 0.04, "H3": 0.03, "H4": 0.005})
    assert rej == {"H1": True, "H2": False, "H3": False, "H4": True}
    # Bonferroni would reject only H4 (0.01 > 0.0125? no: 0.01 <= 0.0125): Holm at least as many
    assert stats.holm({"a": 0.001, "b": 0.9}) == {"a": True, "b": False}
    assert stats.holm({}) == {}


def test_the_family_counts_every_comparison_and_registers_an_id_once():
    fam = stats.Family()
    a = fam.difference("x", [1.0, 1.1, 1.2], [2.0, 2.1, 2.2])
    assert fam.difference("x", [9.0, 9.0], [1.0, 1.0]) is a
    fam.equivalence("y", [1.0, 1.1, 1.2], [1.0, 1.1, 1.2])
    fam.difference("z", [], [], why_not="a cell is missing")
    assert fam.m == 3                      # x's difference, y's difference and y's equivalence
    fam.resolve()
    assert fam.items["z"].verdict == stats.UNSETTLED and fam.items["z"].r is None


def test_replication_held_not_held_reversed():
    published = [{"id": "a", "verdict": "ahead", "ratio": 1.3, "ci95": [1.2, 1.4]},
                 {"id": "b", "verdict": "behind", "ratio": 0.8, "ci95": [0.7, 0.9]},
                 {"id": "c", "verdict": "holds", "ratio": 1.0, "ci95": [0.98, 1.02]},
                 {"id": "d", "verdict": "unsettled", "ratio": 1.1, "ci95": [0.9, 1.3]},
                 {"id": "e", "verdict": "ahead", "ratio": 1.5, "ci95": [1.4, 1.6]}]
    new = [{"id": "a", "verdict": "ahead", "ratio": 1.28, "ci95": [1.2, 1.35]},
           {"id": "b", "verdict": "ahead", "ratio": 1.2, "ci95": [1.1, 1.3]},
           {"id": "c", "verdict": "unsettled", "ratio": 1.04, "ci95": [0.9, 1.2]},
           {"id": "d", "verdict": "ahead", "ratio": 1.2, "ci95": [1.1, 1.3]}]
    rows = {r["id"]: r["status"] for r in stats.replication(published, new)}
    assert rows == {"a": stats.HELD, "b": stats.REVERSED, "c": stats.NOT_HELD, "d": stats.WAS_UNSETTLED,
                    "e": stats.MISSING}
    s = stats.replication_summary(stats.replication(published, new))
    assert {k: v for k, v in s.items() if not k.startswith("comparisons")} == {
        "published_settled": 4, "held": 1, "reversed": 1, "not_held": 1, "missing": 1, "held_share": 0.25,
        "reached": 4, "reached_held": 1, "reached_reversed": 1, "reached_share": 0.25}
    # a verdict the published run left unsettled is not "missing" when this run lacks it
    assert stats.replication([{"id": "x", "verdict": "unsettled"}], [])[0]["status"] == stats.WAS_UNSETTLED
    assert stats.settled_by_both("ahead", "ahead") and not stats.settled_by_both("unsettled", "unsettled")
    assert not stats.settled_by_both("ahead", "behind")


def test_replication_counts_as_settled_only_what_two_runs_reached():
    """A published verdict its own reference did not reach ("settled": false)
    is reported apart: it neither counts for nor against the settled figure,
    and the reached-once figure still says whether it was reprinted."""
    published = [{"id": "a", "verdict": "ahead", "settled": True},
                 {"id": "b", "verdict": "ahead", "settled": False},
                 {"id": "c", "verdict": "behind", "settled": False},
                 {"id": "d", "verdict": "holds", "settled": True}]
    new = [{"id": "a", "verdict": "ahead"}, {"id": "b", "verdict": "ahead"},
           {"id": "c", "verdict": "ahead"}, {"id": "d", "verdict": "unsettled"}]
    rows = stats.replication(published, new)
    assert [r["status"] for r in rows] == [stats.HELD, stats.REACHED_ONCE, stats.REACHED_ONCE, stats.NOT_HELD]
    assert [r["reprinted"] for r in rows] == [stats.HELD, stats.HELD, stats.REVERSED, stats.NOT_HELD]
    s = stats.replication_summary(rows)
    assert (s["published_settled"], s["held"], s["held_share"]) == (2, 1, 0.5)
    assert (s["reached"], s["reached_held"], s["reached_reversed"]) == (4, 2, 1)


def test_a_comparison_restated_or_read_both_ways_is_counted_once():
    """A claim that restates a comparison, a headline row on the same cells and
    a pair read both ways are one comparison: the replication's comparison
    count takes each once, so one noisy test cannot move it several times."""
    fast, slow, other = [20.0, 21.0, 20.5, 20.7, 20.2], [17.0, 17.5, 17.2, 17.1, 17.4], [9.0, 9.5, 9.2, 9.1, 9.3]
    fam = stats.Family()
    fam.difference("seed/a>b", fast, slow)
    fam.difference("seed/b<a", slow, fast, higher_better=False)        # the same pair, read the other way
    fam.difference("headline/a-b", fast, slow)                         # the same cells again
    fam.equivalence("seed/a=b", fast, slow)                            # another test on them: its own
    fam.difference("seed/a>c", fast, other)
    fam.resolve()
    published = [{**j.as_json(), "settled": True} for j in fam.items.values()] + [
        {"id": "claim/a-beats-b", "verdict": "holds", "kind": "claim", "settled": True}]
    assert [v.get("comparison") for v in published] == ["seed/a>b"] * 3 + ["seed/a=b", "seed/a>c", None]
    # this run loses the a/b difference in every verdict that restates it, and keeps a>c
    new = [{"id": v["id"], "verdict": stats.UNSETTLED if v["id"] != "seed/a>c" else v["verdict"]} for v in published]
    s = stats.replication_summary(stats.replication(published, new))
    assert (s["published_settled"], s["held"]) == (6, 1)   # "different" is settled too
    assert (s["comparisons_settled"], s["comparisons_held"], s["comparisons_share"]) == (3, 1, 1 / 3)
    # verdicts published before `comparison` existed are matched by their ratio and interval
    old = [{k: v for k, v in x.items() if k != "comparison"} for x in published]
    assert [stats.comparison_of(v) for v in old][:3] == [stats.comparison_of(old[0])] * 3
    assert len({stats.comparison_of(v) for v in old[:5]}) == 3


def test_verdicts_serialise_to_the_published_schema():
    fam = stats.Family()
    fam.difference("seed003/close/rps", [20.0, 21.0, 20.5, 20.7, 20.2], [17.0, 17.5, 17.2, 17.1, 17.4])
    fam.difference("none", [], [], why_not="not run")
    fam.resolve()
    out = json.loads(json.dumps([j.as_json() for j in fam.items.values()]))
    for v in out:
        assert set(v) >= {"id", "verdict", "ratio", "ci95"}
        assert isinstance(v["id"], str) and isinstance(v["verdict"], str)
        assert v["ratio"] is None or isinstance(v["ratio"], float)
        assert v["ci95"] is None or (len(v["ci95"]) == 2 and v["ci95"][0] <= v["ratio"] <= v["ci95"][1])
    assert out[0]["verdict"] == "ahead"


def test_a_comparison_registered_after_the_correction_changes_no_verdict_already_read():
    fam = stats.Family()
    a = fam.difference("a", [110.0, 111.0, 112.0, 110.5, 111.5], [100.0, 101.0, 102.0, 100.5, 101.5])
    fam.resolve()
    assert a.verdict == stats.AHEAD
    for i in range(50):   # strong effects joining late: judged at alpha / m, the others untouched
        fam.difference(f"late{i}", [1.0, 1.01, 0.99, 1.0, 1.0], [1.0, 1.01, 0.99, 1.0, 1.0])
    late = fam.difference("late-strong", [200.0, 201.0, 202.0, 200.5, 201.5], [100.0, 101.0, 102.0, 100.5, 101.5])
    assert a.verdict == stats.AHEAD and late.verdict == stats.AHEAD
    assert fam.items["late0"].verdict == stats.UNSETTLED


def test_the_report_says_how_many_tests_holm_ran_over_and_how_many_came_after():
    """A pair the published run judged, registered after the correction, is
    judged alone at Bonferroni's level: the report's count of Holm's family
    must not include it, and must say it is there."""
    a, b = [100.0, 101.0, 99.0, 100.5, 99.5], [120.0, 121.0, 119.0, 120.5, 119.5]
    fam, _ = _family([(a, b), (b, a), (a, a)])
    assert fam.correction_words() == "Holm's correction over the 3 tests of this report's verdicts"
    late = fam.difference("late", a, b)
    assert late.verdict != stats.UNSETTLED, "judged at once, at 5% / 4"
    words = fam.correction_words()
    assert "over the 3 tests" in words and "(and 1 more, pairs the published run judged" in words, words
    assert fam.m == 4
