"""The claims table (bench/claims.py) from hand-made aggregated rows: each
verdict follows from the ranges, invalid cells never settle a claim."""
from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench import claims  # noqa: E402


def row(exp, server, key, lo, mid, hi, reps=3, **params):
    return {"exp": exp, "server": server, key: mid, f"{key}_min": lo, f"{key}_max": hi, "reps_ok": reps,
            "errors_total": 0, "failed_runs": [], "problems": [], **params}


def verdicts(rows, seed):
    return {c["claim"]: c["verdict"] for c in claims.check_all(rows) if c["seed"] == seed}


def seed000_rows(pool=(9, 10, 11), basic=(6, 7, 8), thread=(4, 5, 5.5), fork=(1, 2, 3)):
    return [row("seed000", "pool-5", "rps", *pool, part="main"), row("seed000", "iterative", "rps", *basic, part="main"),
            row("seed000", "thread", "rps", *thread, part="main"), row("seed000", "fork", "rps", *fork, part="main"),
            row("seed000", "pool-15", "rps", *pool, part="main")]


def test_seed000_order_holds_fails_or_is_unsettled():
    key = "pool > basic > thread > fork (req/s, ab -c 30)"
    assert verdicts(seed000_rows(), "000")[key] == "holds"
    assert verdicts(seed000_rows(fork=(6, 6.5, 7)), "000")[key] == "does not hold"   # fork ahead of thread
    assert verdicts(seed000_rows(thread=(5, 6.5, 7)), "000")[key] == "unsettled"     # thread overlaps basic


def test_one_repeat_never_settles_a_comparison():
    rows = [dict(r, reps_ok=1) for r in seed000_rows()]
    assert verdicts(rows, "000")["pool > basic > thread > fork (req/s, ab -c 30)"] == "unsettled"


def test_fork_failure_claim_reads_the_failed_requests():
    base = seed000_rows()
    clean = base + [row("seed000", "fork-nofile1024", "rps", 1, 2, 3, part="fork1024", conc=c) for c in (100, 1000)]
    assert verdicts(clean, "000")["fork dies above c = 30 (“Too many open files”)"] == "does not hold"
    dying = [dict(r) for r in clean]
    dying[-1]["errors_total"] = 17
    assert verdicts(dying, "000")["fork dies above c = 30 (“Too many open files”)"] == "holds"
    # No failed request, but it stopped answering (1 req/s where c = 30 got 2,000)
    stalled = clean + [row("seed000", "fork-nofile1024", "rps", 1900, 2000, 2100, part="fork1024", conc=30)]
    stalled[-2] = dict(stalled[-2], rps=1, rps_min=1, rps_max=1)
    assert verdicts(stalled, "000")["fork dies above c = 30 (“Too many open files”)"] == "holds"


def test_invalid_cells_leave_the_claim_unsettled():
    rows = [row("seed002", "pool", "rps", 900, 950, 1000, cores=1, subs=["a"]),
            row("seed002", "pool", "rps", 1800, 1900, 2000, cores=2, subs=["a"])]
    v = verdicts(rows, "002")
    assert v["more cores → more throughput (pool, workers and threads fixed)"] == "holds"
    rows[1]["invalid"] = "served 3.0 CPU-seconds of cpu work per second"
    v = verdicts(rows, "002")
    assert v["more cores → more throughput (pool, workers and threads fixed)"] == "unsettled"


def test_variance_claims_separate_the_mean_from_the_variance():
    rows = [row("seed002", "pool", "rps", 400, 420, 440, dmin=1, dmax=3, subs=["b", "c"]),
            row("seed002", "pool", "rps", 80, 85, 90, dmin=1, dmax=20, subs=["c"]),
            row("seed002", "pool", "rps", 82, 86, 91, dmin=10, dmax=11, subs=["c"])]
    v = verdicts(rows, "002")
    assert v["small delay variation (1–3) serves more requests than large (1–20) (pool)"] == "holds"
    assert v["…and at the same mean 10.5: 10–11 vs 1–20 (pool; the variance alone)"] == "unsettled"


def test_bucket_count_claim():
    def d(b, hold, lo, mid, hi):
        return row("seed002", "pool", "rps", lo, mid, hi, buckets=b, hold=hold, lock="bucket", subs=["d"])
    rows = [d(32, 0, 90, 100, 110), d(2048, 0, 95, 105, 115), d(32, 1, 300, 320, 340), d(2048, 1, 800, 850, 900)]
    v = verdicts(rows, "002")
    assert v["the bucket count makes no difference (hold = 0: lock held for the increment only, as the seed)"] == "holds"
    assert v["the bucket count makes no difference (hold = 1: 1 ms of work inside the lock)"] == "does not hold"


def test_seed003_and_seed004_claims():
    rows = [row("seed003", "epoll", "rps", 30000, 31000, 32000, keepalive=True),
            row("seed003", "nginx-seed003", "rps", 30500, 31500, 32500, keepalive=True),
            row("seed003", "epoll", "rps", 9000, 9500, 10000, keepalive=False),
            row("seed003", "nginx-seed003", "rps", 6000, 6500, 7000, keepalive=False)]
    v = verdicts(rows, "003")
    assert v["the reactor is on par with nginx with keep-alive (ab -k -c 200)"] == "holds"
    assert v["the reactor is ahead of nginx without keep-alive (ab -c 200)"] == "holds"
    rows4 = []
    for c in (10, 50, 100):
        rows4.append(row("seed004", "prefork-4x10", "rps", 20000, 21000, 22000, conc=c, keepalive=True))
        rows4.append(row("seed004", "prefork-4x10", "rps", 9000, 9500, 10000, conc=c, keepalive=False))
    v = verdicts(rows4, "004")
    assert v["keep-alive is slower than a new connection per request (prefork 4 x 10)"] == "does not hold"
    assert v["~32k req/s at c = 10…100 without keep-alive"] == "does not hold"


def test_no_difference_claims_need_repeats_too():
    rows = [row("seed003", "epoll", "rps", 2000, 2200, 2400, reps=1, keepalive=True),
            row("seed003", "nginx-seed003", "rps", 3000, 3200, 3400, reps=1, keepalive=True)]
    assert verdicts(rows, "003")["the reactor is on par with nginx with keep-alive (ab -k -c 200)"] == "unsettled"
    rows = [row("seed003", "epoll", "rps", 1500, 2200, 3300, keepalive=True),
            row("seed003", "nginx-seed003", "rps", 3000, 3200, 3400, keepalive=True)]
    # 30% apart but the ranges overlap: neither on par nor shown to differ
    assert verdicts(rows, "003")["the reactor is on par with nginx with keep-alive (ab -k -c 200)"] == "unsettled"
    rows = [row("seed003", "epoll", "rps", 2000, 2200, 2400, keepalive=True),
            row("seed003", "nginx-seed003", "rps", 3000, 3200, 3400, keepalive=True)]
    assert verdicts(rows, "003")["the reactor is on par with nginx with keep-alive (ab -k -c 200)"] == "does not hold"
    one = [dict(r, reps_ok=1) for r in seed000_rows()]
    assert verdicts(one, "000")["15 pool threads bring no significant gain over 5"] == "unsettled"


def why(rows, seed, claim_start):
    return next(c["why"] for c in claims.check_all(rows) if c["seed"] == seed and c["claim"].startswith(claim_start))


def test_equal_mean_row_says_why_it_is_unsettled():
    base = [row("seed002", "pool", "rps", 400, 420, 440, dmin=1, dmax=3, subs=["b", "c"]),
            row("seed002", "pool", "rps", 80, 85, 90, dmin=1, dmax=20, subs=["c"]),
            row("seed002", "pool", "rps", 82, 86, 91, dmin=10, dmax=11, subs=["c"])]
    # Overlapping valid ranges: the seed's difference came from the mean.
    assert "came from the mean" in why(base, "002", "…and at the same mean 10.5: 10–11 vs 1–20 (pool")
    # An invalid 1–20 cell says nothing about the mean: the row must not claim it does.
    base[1]["invalid"] = "bucket totals do not add up"
    w = why(base, "002", "…and at the same mean 10.5: 10–11 vs 1–20 (pool")
    assert "came from the mean" not in w and "invalid" in w


def test_single_threaded_struggles_means_behind_every_other_seed_model():
    def r(m, lo, mid, hi):
        return row("seed001", m, "avg_ms", lo, mid, hi)
    claim = "the single-threaded model struggles (highest avg)"
    # iterative slower than thread but faster than pool: it does not have the highest avg.
    rows = [r("iterative", 40, 42, 44), r("thread", 10, 11, 12), r("pool", 60, 62, 64)]
    assert verdicts(rows, "001")[claim] == "does not hold"
    rows = [r("iterative", 40, 42, 44), r("thread", 10, 11, 12), r("pool", 20, 22, 24)]
    assert verdicts(rows, "001")[claim] == "holds"


def test_a_client_bound_cell_may_win_a_comparison_but_never_lose_one():
    """A generator at its core's limit measured itself: the server behind it
    can do at least that much (so it may be 'ahead'), but a lower figure says
    nothing about the server (never 'behind'), and two such cells cannot show
    'no difference'."""
    key = "pool > basic > thread > fork (req/s, ab -c 30)"
    rows = seed000_rows()
    rows[0]["client_bound"] = True  # pool-5, the winner of its step
    assert verdicts(rows, "000")[key] == "holds"
    rows = seed000_rows(pool=(6, 6.5, 6.9), basic=(7, 7.5, 8))  # pool-5 behind iterative...
    rows[0]["client_bound"] = True                               # ...but its generator was saturated
    assert verdicts(rows, "000")[key] == "unsettled"
    rows[0]["client_bound"] = False
    assert verdicts(rows, "000")[key] == "does not hold"
    rows = seed000_rows()
    rows[4]["client_bound"] = True  # pool-15 equal to pool-5, but the generator set the pace
    assert verdicts(rows, "000")["15 pool threads bring no significant gain over 5"] == "unsettled"


def test_a_client_bound_loser_is_settled_by_its_servers_cpu_per_request():
    """Seed 004's close cells are client-bound, yet 55 us of server CPU per
    request caps a one-core server at ~18k req/s: below keep-alive's 63k, so
    'keep-alive is slower' is refuted, not left unsettled."""
    ka = row("seed004", "prefork-4x10", "rps", 63000, 81000, 85000, conc=100, keepalive=True, cpus="0")
    close = row("seed004", "prefork-4x10", "rps", 14000, 15000, 17000, conc=100, keepalive=False, cpus="0",
                client_bound=True, server_us_per_req_min=55.0)
    assert claims.compare(ka, close, "rps") == "ahead"
    close["server_us_per_req_min"] = 10.0  # could have done 100k: the generator held it back
    assert claims.compare(ka, close, "rps") == "unsettled"
    del close["server_us_per_req_min"]     # unknown CPU: no verdict against it
    assert claims.compare(ka, close, "rps") == "unsettled"


def test_fork_stall_baseline_is_the_main_fork_cell_when_c30_under_the_limit_did_not_run():
    """The default run measures fork under the 1024 limit at c = 100 and 1000
    only: c = 30 (where neither limit binds) is the main fork cell, and a fork
    that stops answering above it must still read as dying."""
    rows = seed000_rows(fork=(1900, 2000, 2100))
    rows += [row("seed000", "fork-nofile1024", "rps", 1, 1, 1, part="fork1024", conc=c) for c in (100, 1000)]
    assert verdicts(rows, "000")["fork dies above c = 30 (“Too many open files”)"] == "holds"


def test_claims_for_cells_the_default_run_leaves_out_are_not_rows():
    """epoll's cores and thread's variance run with --full only: no row saying
    'a cell is missing' in a default run's table; the pool's rows stay."""
    rows = [row("seed002", "pool", "rps", 900, 950, 1000, cores=1, dmin=1, dmax=3, subs=["a", "b", "c"]),
            row("seed002", "pool", "rps", 1800, 1900, 2000, cores=2, dmin=1, dmax=3, subs=["a"]),
            row("seed002", "pool", "rps", 90, 95, 100, cores=1, dmin=1, dmax=20, subs=["c"]),
            row("seed002", "pool", "rps", 90, 95, 100, cores=1, dmin=10, dmax=11, subs=["c"])]
    claims_ = list(verdicts(rows, "002"))
    assert not any("(epoll" in c for c in claims_) and not any("(thread" in c for c in claims_)
    assert "more cores → more throughput (pool, workers and threads fixed)" in claims_
    assert any("(pool)" in c and "1–20" in c for c in claims_)
