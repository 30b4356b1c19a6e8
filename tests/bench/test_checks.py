"""The lab's validity checks and verdicts (bench/checks.py) and the executor's
use of them (bench/lab.workload_checks, bench/lab.account)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench import checks, lab  # noqa: E402


def test_cpu_work_within_the_cores_is_valid():
    rate, why = checks.cpu_work_check(units=2900, unit_s=0.001, wall_s=3.0, cores=1, kind="cpu")
    assert rate == 2900 * 0.001 / 3.0 and why is None
    # 5% tolerance, not more
    assert checks.cpu_work_check(3150, 0.001, 3.0, 1, "cpu")[1] is None
    assert checks.cpu_work_check(3160, 0.001, 3.0, 1, "cpu")[1] is not None


def test_seed_report_figures_are_invalid_in_cpu_mode():
    # The old report: pool on 1 core served 3.0 CPU-seconds of "CPU work" per second.
    rate, why = checks.cpu_work_check(9000, 0.001, 3.0, 1, "cpu")
    assert rate == 3.0 and "cannot be CPU work" in why
    # Two cores allow twice as much.
    assert checks.cpu_work_check(5900, 0.001, 3.0, 2, "cpu")[1] is None


def test_cpu_work_credited_without_cpu_time_is_invalid():
    # delay_kind = wall (the old lab): 16 threads spinning on the clock on one core
    # are credited 0.64 s of "work" per second while the server used 0.39 CPU-s/s.
    rate, why = checks.cpu_work_check(1920, 0.001, 3.0, 1, "cpu", server_cpu_s=1.17)
    assert rate == 0.64 and "server used 1.17 CPU-s" in why
    assert checks.cpu_work_check(1920, 0.001, 3.0, 1, "cpu", server_cpu_s=1.90)[1] is None
    # sampling slack: a hair over is still valid
    assert checks.cpu_work_check(1920, 0.001, 3.0, 1, "cpu", server_cpu_s=1.80)[1] is None


def test_wall_and_sleep_kinds_may_overlap():
    assert checks.cpu_work_check(9000, 0.001, 3.0, 1, "wall")[1] is None
    assert checks.cpu_work_check(9000, 0.001, 3.0, 1, "sleep")[1] is None


def test_bucket_check():
    assert checks.bucket_check(1000, 1000, 50) is None
    assert checks.bucket_check(1040, 1000, 50) is None          # answered after the client stopped
    assert "lost updates" in checks.bucket_check(999, 1000, 50)
    assert "more than" in checks.bucket_check(1051, 1000, 50)


def test_client_bound():
    assert checks.client_bound(2.8, 3.0) is True
    assert checks.client_bound(2.6, 3.0) is False
    assert checks.generator_share(1.5, 3.0) == 0.5
    assert checks.generator_share(1.0, 0) == 0


def test_verdict_only_when_ranges_do_not_overlap():
    assert checks.verdict((10, 12), (7, 9)) == "ahead"
    assert checks.verdict((7, 9), (10, 12)) == "behind"
    assert checks.verdict((7, 10), (10, 12)) == "unsettled"
    assert checks.verdict((1, 2), (3, 4), higher_better=False) == "ahead"
    assert checks.verdict((3, 4), (1, 2), higher_better=False) == "behind"


def test_workload_checks_mark_an_impossible_cell_invalid():
    before = {"total": 100, "buckets": 128, "delay_units": 1000, "hold_units": 0}
    m = {"tool": "wrk", "requests": 1500, "non2xx": 0}
    ok_after = {"total": 1620, "buckets": 128, "delay_units": 1000 + 2900, "hold_units": 0}
    r = lab.workload_checks(m, before, ok_after, 3.0, {"unit_s": 0.001, "kind": "cpu", "cores": 1, "in_flight": 50})
    assert "invalid" not in r and r["bucket_delta"] == 1520
    too_much = dict(ok_after, delay_units=1000 + 9000)
    r = lab.workload_checks(m, before, too_much, 3.0, {"unit_s": 0.001, "kind": "cpu", "cores": 1, "in_flight": 50})
    assert "cannot be CPU work" in r["invalid"]
    lost = dict(ok_after, total=1000)
    r = lab.workload_checks(m, before, lost, 3.0, {"unit_s": 0.001, "kind": "cpu", "cores": 1, "in_flight": 50})
    assert "lost updates" in r["invalid"]
    r = lab.workload_checks(m, None, ok_after, 3.0, {"unit_s": 0.001, "kind": "cpu", "cores": 1, "in_flight": 50})
    assert "totals" in r["invalid"]


def test_account_cpu_figures():
    mach = {"cpu": {"busy_s": 9, "softirq_s": 0, "total_s": 6},
            "cpu0": {"busy_s": 3.0, "softirq_s": 0.2, "total_s": 3.0},
            "cpu1": {"busy_s": 2.9, "softirq_s": 0.1, "total_s": 3.0}}
    m = {"tool": "ab", "complete": 30000, "failed": 0, "non2xx": 0}
    a = lab.account(m, wall_s=3.0, server_cpu_s=2.4, gen_cpu_s=2.8, mach=mach, load_cpus=1)
    assert a["served"] == 30000
    assert a["server_us_per_req"] == 2.4e6 / 30000
    assert a["client_bound"] is True and round(a["gen_share"], 3) == 0.933
    # softirq run inside the server or the generator is in their own CPU time
    # already (tick accounting charges it to the task it interrupted): not
    # subtracted a second time
    assert round(a["other_cores"], 3) == round((5.9 - 2.4 - 2.8) / 3.0, 3)
    assert round(a["softirq_cores"], 3) == 0.1
    assert a["cpu0_busy"] == 1.0


def test_account_takes_the_meters_other_load_unclamped():
    mach = {"cpu0": {"busy_s": 3.0, "softirq_s": 0.2, "total_s": 3.0, "steal_s": 0.3},
            "cpu1": {"busy_s": 2.9, "softirq_s": 0.1, "total_s": 3.0, "steal_s": 0.0}}
    m = {"tool": "ab", "complete": 30000, "failed": 0, "non2xx": 0}
    meter = {"other_cpu_s": -0.006, "lab_cpu_s": 0.03, "other_cpu0_s": -0.004, "other_cpu1_s": -0.002,
             "window_s": 3.0, "method": "cgroup v1 cpuacct (ns)"}
    a = lab.account(m, wall_s=3.0, server_cpu_s=2.4, gen_cpu_s=2.8, mach=mach, load_cpus=1, meter=meter)
    assert a["other_cores"] == -0.002 and a["other_cpu_s"] == -0.006     # as measured, not clamped to 0
    assert a["other_cpu0_cores"] == pytest.approx(-0.004 / 3) and a["lab_cores"] == pytest.approx(0.01)
    assert a["steal_cores"] == pytest.approx(0.1) and a["cpu_meter"] == "cgroup v1 cpuacct (ns)"


def test_other_load_never_exceeds_the_machine():
    # Both CPUs busy the whole /proc/stat window, which ran 4.8 s of ticks
    # while the monotonic clock saw 3.7 s (a virtual machine's skew, seen in a
    # real run as 2.29 "other" cores on two CPUs): other load is a share of
    # the tick window, so it stays within the two CPUs.
    mach = {"cpu0": {"busy_s": 4.8, "softirq_s": 0.0, "total_s": 4.8},
            "cpu1": {"busy_s": 4.8, "softirq_s": 0.0, "total_s": 4.8}}
    m = {"tool": "ab", "complete": 1000, "failed": 0, "non2xx": 0}
    a = lab.account(m, wall_s=3.7, server_cpu_s=0.62, gen_cpu_s=0.57, mach=mach, load_cpus=1)
    assert a["other_cores"] <= 2.0
    assert round(a["other_cores"], 3) == round((9.6 - 0.62 - 0.57) / 4.8, 3)


# -- physics: what a cell's numbers must satisfy whatever the server --------

def test_server_cpu_above_its_cores_is_invalid():
    # Pinned to one core, a server cannot use 1.3 CPU-seconds per second.
    assert checks.server_cpu_check(3.9, 3.0, 1) is not None
    assert "CPU-seconds per second" in checks.server_cpu_check(3.9, 3.0, 1)
    assert checks.server_cpu_check(2.9, 3.0, 1) is None
    assert checks.server_cpu_check(5.9, 3.0, 2) is None       # two cores allow twice as much
    assert checks.server_cpu_check(1.0, 0.0, 1) is None       # nothing measured: nothing to say


def test_littles_law_closed_loop():
    # 10,000 req/s x 3 ms = 30 requests in flight on 30 connections: consistent.
    ratio, why = checks.littles_law(10_000, 3.0, 30)
    assert abs(ratio - 1.0) < 1e-9 and why is None
    # 40 in flight on 30 connections is impossible: the rate or the latency is wrong.
    ratio, why = checks.littles_law(10_000, 4.0, 30)
    assert why is not None and "more than" in why
    # 3 of 30 connections busy: the generator held them idle.
    ratio, why = checks.littles_law(1_000, 3.0, 30)
    assert abs(ratio - 0.1) < 1e-9 and "idle" in why
    # Nothing to check without a concurrency or a latency.
    assert checks.littles_law(1_000, None, 30) == (None, None)
    assert checks.littles_law(1_000, 3.0, 0) == (None, None)


def test_physics_on_a_cell(monkeypatch):
    # ab's latency is whole milliseconds: below 5 ms it is too coarse to check.
    ab = {"tool": "ab", "rps": 20_000, "total_mean_ms": 1, "complete": 60_000, "failed": 0, "non2xx": 0}
    assert lab.littles_law_for(ab, 30) == (None, None)
    ab = {"tool": "ab", "rps": 2_000, "total_mean_ms": 15, "complete": 6_000, "failed": 0, "non2xx": 0}
    assert lab.littles_law_for(ab, 30)[0] == 1.0
    wrk = {"tool": "wrk", "rps": 10_000, "mean_ms": 5.0}
    ratio, why = lab.littles_law_for(wrk, 50)
    assert ratio == 1.0 and why is None
    # Open-loop cells are not closed loops: no check.
    veg = {"tool": "vegeta", "rps": 300, "mean_ms": 2.0}
    assert lab.littles_law_for(veg, 0) == (None, None)


def test_saturation_of_an_open_loop_curve():
    pt = lambda rate, rps, errors=0, **kw: {"rate": rate, "rps": rps, "errors": errors, **kw}
    # Keeps up at 1000 and 4000, answers 60% of 8000: saturated at 8000.
    assert checks.saturation([pt(1000, 1000), pt(4000, 3990), pt(8000, 4800)]) == ("saturated", 8000)
    # Timeouts count as saturation even when the answered rate looks fine.
    assert checks.saturation([pt(1000, 1000), pt(4000, 3990, errors=12)]) == ("saturated", 4000)
    # Falling behind with CPU to spare: vegeta's workers were all waiting on the server.
    assert checks.saturation([pt(1000, 1000), pt(8000, 5000, fell_behind=True)]) == ("saturated", 8000)
    # A client-bound point says nothing about the server.
    assert checks.saturation([pt(1000, 1000), pt(8000, 7990), pt(16000, 9000, client_bound=True)]) == \
        ("not reached", 8000)
    assert checks.saturation([pt(16000, 9000, client_bound=True)]) == ("unknown", None)


def test_vegeta_decoding_is_not_generator_load():
    # 3 s of attack at 40% of a core, then 1 s of decoding at 100%: the cell's
    # generator share is the attack's, not (1.2 + 1.0) / 4.0 = 55%.
    m = {"tool": "vegeta", "_post_wall_s": 1.0, "_post_cpu_s": 1.0}
    wall, gen = lab.exclude_post_processing(m, 4.0, 2.2)
    assert (wall, round(gen, 6)) == (3.0, 1.2) and "_post_wall_s" not in m and "_post_cpu_s" not in m
    assert abs(checks.generator_share(gen, wall) - 0.4) < 1e-9
    # Tools without post-processing are unchanged.
    assert lab.exclude_post_processing({"tool": "wrk"}, 3.1, 0.5) == (3.1, 0.5)


def test_rps_ceiling_from_cpu_per_request_and_pinned_cores():
    from bench.checks import rps_ceiling
    assert rps_ceiling({"server_us_per_req_min": 50.0, "cpus": "0"}) == 20000
    assert rps_ceiling({"server_us_per_req_min": 50.0, "cpus": "0-1"}) == 40000
    assert rps_ceiling({"cpus": "0"}) is None


def test_where_littles_law_is_not_checked_the_cell_says_why():
    assert "open loop" in lab.little_unchecked({"tool": "vegeta"}, None)
    assert "no latency" in lab.little_unchecked({"tool": "s_time"}, 1)
    assert "under 5 ms" in lab.little_unchecked({"tool": "ab", "total_mean_ms": 1}, 200)
    assert lab.little_unchecked({"tool": "ab", "total_mean_ms": 12}, 200) is None
    assert "pipelined" in lab.little_unchecked({"tool": "wrk", "cmd": "wrk -s bench/lua/pipeline.lua"}, 50)
    assert lab.little_unchecked({"tool": "wrk", "mean_ms": 2.0}, 50) is None
    m = {"server_cpu_s": 0.5, "wall_s": 3.0, "tool": "ab", "total_mean_ms": 2, "rps": 50_000}
    lab.physics_checks(m, 1, 100)
    assert "little_ratio" not in m and "under 5 ms" in m["little_unchecked"]
    m = {"server_cpu_s": 0.5, "wall_s": 3.0, "tool": "ab", "total_mean_ms": 10, "rps": 10_000}
    lab.physics_checks(m, 1, 100)
    assert m["little_ratio"] == 1.0 and "little_unchecked" not in m
