"""The claims table (bench/claims.py) from hand-made aggregated rows: each
verdict follows from ratios of medians whose intervals survive Holm's
correction; a client-bound loser is settled on CPU per request at matched
offered load; invalid cells never settle a claim; claims about the seeds' own
code are "not comparable" unless the mechanism is reproduced."""
from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench import claims, stats  # noqa: E402

TIGHT = (0.99, 0.995, 1.0, 1.005, 1.01)          # 5 repeats within ±1%
NOISY = (0.80, 0.90, 1.0, 1.10, 1.25)            # 5 repeats within -20%..+25%


def row(exp, server, key, mid, spread=TIGHT, reps=5, **params):
    """An aggregated row: `reps` repeats of key around mid (the spread's factors)."""
    vals = [mid * f for f in spread][:reps]
    return {"exp": exp, "server": server, key: mid, f"{key}_min": min(vals), f"{key}_max": max(vals),
            f"{key}_vals": vals, "reps_ok": reps, "errors_total": 0, "failed_runs": [], "problems": [], **params}


def with_cpu(r, us, spread=TIGHT):
    vals = [us * f for f in spread]
    r.update(server_us_per_req=us, server_us_per_req_vals=vals, server_us_per_req_min=min(vals),
             server_us_per_req_max=max(vals))
    return r


def verdicts(rows):
    return {c["id"]: c["verdict"] for c in claims.check_all(rows)}


def table(rows):
    return {c["id"]: c for c in claims.check_all(rows)}


def seed000_rows(pool=1000, basic=800, thread=600, fork=100, spread=TIGHT):
    return [row("seed000", "pool-5", "rps", pool, spread, part="main"),
            row("seed000", "iterative", "rps", basic, spread, part="main"),
            row("seed000", "thread", "rps", thread, spread, part="main"),
            row("seed000", "fork", "rps", fork, spread, part="main"),
            row("seed000", "pool-15", "rps", pool, spread, part="main")]


def matched(exp, server, us, rate=4000, **extra):
    return with_cpu(row(exp, server, "rps", rate * 0.999, part="matched", rate=rate, **extra), us)


def test_seed000_order_holds_fails_or_is_unsettled():
    assert verdicts(seed000_rows())["claim/000/order"] == "holds"
    assert verdicts(seed000_rows(fork=700))["claim/000/order"] == "does not hold"          # fork ahead of thread
    assert verdicts(seed000_rows(thread=790, spread=NOISY))["claim/000/order"] == "unsettled"  # 1% apart, noisy


def test_one_repeat_never_settles_a_comparison():
    rows = [row(r["exp"], r["server"], "rps", r["rps"], reps=1, part="main") for r in seed000_rows()]
    v = verdicts(rows)
    assert v["claim/000/order"] == "unsettled"
    assert v["claim/000/pool-15"] == "unsettled"
    assert "ran once" in table(rows)["claim/000/order"]["why"]


def test_no_difference_holds_only_inside_the_margin():
    rows = seed000_rows()
    assert verdicts(rows)["claim/000/pool-15"] == "holds"                     # equal, ±1% noise
    rows[4] = row("seed000", "pool-15", "rps", 1200, part="main")              # 20% ahead
    assert verdicts(rows)["claim/000/pool-15"] == "does not hold"
    noisy = seed000_rows(spread=NOISY)                                        # equal medians, ±20% noise
    t = table(noisy)["claim/000/pool-15"]
    assert t["verdict"] == "unsettled" and "interval ±" in t["why"]


def test_fork_dies_is_not_comparable_but_shows_what_was_measured():
    rows = seed000_rows() + [row("seed000", "fork-nofile1024", "rps", 90, part="fork1024", conc=c)
                             for c in (100, 1000)]
    rows[-1]["errors_total"] = 17
    t = table(rows)["claim/000/fork-dies"]
    assert t["verdict"] == claims.NOT_COMPARABLE
    assert "c=1000" in t["measured"] and "failed 17" in t["measured"] and "descriptors" in t["why"]


def test_invalid_cells_leave_the_claim_unsettled():
    rows = [row("seed002", "pool", "rps", 950, cores=1, subs=["a"]),
            row("seed002", "pool", "rps", 1900, cores=2, subs=["a"])]
    assert verdicts(rows)["claim/002/cores/pool"] == "holds"
    rows[1]["invalid"] = "served 3.0 CPU-seconds of cpu work per second"
    t = table(rows)["claim/002/cores/pool"]
    assert t["verdict"] == "unsettled" and "invalid" in t["why"]


def test_variance_claims_separate_the_mean_from_the_variance():
    rows = [row("seed002", "pool", "rps", 420, dmin=1, dmax=3, subs=["b", "c"]),
            row("seed002", "pool", "rps", 85, NOISY, dmin=1, dmax=20, subs=["c"]),
            row("seed002", "pool", "rps", 86, NOISY, dmin=10, dmax=11, subs=["c"])]
    v = table(rows)
    assert v["claim/002/variance/pool"]["verdict"] == "holds"
    assert v["claim/002/variance-same-mean/pool"]["verdict"] == "unsettled"
    assert "came from the mean" in v["claim/002/variance-same-mean/pool"]["why"]
    rows[1]["invalid"] = "bucket totals do not add up"
    w = table(rows)["claim/002/variance-same-mean/pool"]["why"]
    assert "came from the mean" not in w and "invalid" in w


def test_bucket_count_claim_and_the_seeds_own_locking():
    def d(b, hold, mid, spread=TIGHT):
        return row("seed002", "pool", "rps", mid, spread, buckets=b, hold=hold, lock="bucket", subs=["d"])
    rows = [d(32, 0, 100), d(2048, 0, 101), d(32, 1, 320), d(2048, 1, 850)]
    v = verdicts(rows)
    assert v["claim/002/buckets/hold0"] == "holds"
    assert v["claim/002/buckets/hold1"] == "does not hold"
    assert v["claim/002/asio-locking"] == claims.NOT_COMPARABLE
    rows[1] = d(2048, 0, 101, NOISY)
    assert verdicts(rows)["claim/002/buckets/hold0"] == "unsettled"


def test_seed001_is_judged_on_one_core_and_on_both():
    def r(m, avg, cores):
        return row("seed001", m, "avg_ms", avg, cores=cores)
    rows = [r("iterative", 42, 1), r("thread", 11, 1), r("pool", 62, 1),
            r("iterative", 40, 2), r("thread", 10, 2), r("pool", 20, 2)]
    v = verdicts(rows)
    assert v["claim/001/iterative-struggles/1c"] == "does not hold"     # pool has the highest avg on 1 core
    assert v["claim/001/iterative-struggles/2c"] == "holds"
    assert v["claim/001/thread-best/2c"] == "holds"


def test_a_client_bound_winner_still_wins():
    rows = seed000_rows()
    rows[0]["client_bound"] = True          # pool-5, the faster of its step: its server did at least that
    assert verdicts(rows)["claim/000/order"] == "holds"


def test_a_client_bound_loser_is_settled_on_cpu_per_request_at_matched_load():
    """Seed 003 without keep-alive: ab set nginx's rate (client-bound), so req/s
    cannot say epoll is ahead. At the same offered 4,000/s, epoll's server CPU
    per request is 20% lower: the claim holds on that, and says so; without a
    matched cell, or with one that fell behind its rate, it stays unsettled."""
    ep = row("seed003", "epoll", "rps", 20500, keepalive=False)
    ng = row("seed003", "nginx-seed003", "rps", 17500, keepalive=False, client_bound=True)
    ka = [row("seed003", "epoll", "rps", 140000, keepalive=True),
          row("seed003", "nginx-seed003", "rps", 103000, keepalive=True)]
    rows = [ep, ng] + ka
    t = table(rows)["claim/003/close-ahead"]
    assert t["verdict"] == "unsettled" and "client-bound" in t["why"] and "no matched-load cell" in t["why"]
    rows += [matched("seed003", "epoll", 40.0), matched("seed003", "nginx-seed003", 50.0)]
    t = table(rows)["claim/003/close-ahead"]
    assert t["verdict"] == "holds" and "CPU/req at 4,000/s" in t["basis"] and t["ratio"] < 1
    rows[-2] = matched("seed003", "epoll", 60.0)         # epoll costs more at the same load
    assert verdicts(rows)["claim/003/close-ahead"] == "does not hold"
    rows[-1]["fell_behind"] = True                      # the loads were not matched after all
    assert verdicts(rows)["claim/003/close-ahead"] == "unsettled"
    # keep-alive: 36% apart, tight: not on par
    assert verdicts(rows)["claim/003/keepalive-par"] == "does not hold"


def test_two_client_bound_cells_settle_no_difference_only_at_matched_load():
    rows = seed000_rows()
    rows[0]["client_bound"] = rows[4]["client_bound"] = True   # pool-5 and pool-15: the generator's pace
    assert verdicts(rows)["claim/000/pool-15"] == "unsettled"
    rows += [matched("seed000", "pool-5", 36.0), matched("seed000", "pool-15", 36.2)]
    t = table(rows)["claim/000/pool-15"]
    assert t["verdict"] == "holds" and "CPU/req at 4,000/s" in t["basis"]


def test_seed004_prefork_is_not_comparable_and_the_mechanism_is_judged():
    rows = []
    for c in (10, 50, 100):
        rows.append(with_cpu(row("seed004", "prefork-4x10", "rps", 81000, conc=c, keepalive=True, cpus="0"), 12.0))
        rows.append(with_cpu(row("seed004", "prefork-4x10", "rps", 20000, conc=c, keepalive=False, cpus="0",
                                 client_bound=True), 33.0))
    for c, ka_rps in ((10, 30000), (100, 9000)):
        rows.append(row("seed004", "thread-max40", "rps", ka_rps, conc=c, keepalive=True, part="mechanism"))
        rows.append(row("seed004", "thread-max40", "rps", 15000, conc=c, keepalive=False, part="mechanism"))
    t = table(rows)
    assert t["claim/004/keepalive-slower/prefork"]["verdict"] == claims.NOT_COMPARABLE
    mech = t["claim/004/keepalive-slower/mechanism"]
    assert mech["verdict"] == "does not hold"            # ahead at c = 10, behind at c = 100
    assert "c=10: ahead" in mech["why"] and "c=100: behind" in mech["why"]
    rows[-4]["rps"], rows[-4]["rps_vals"] = 9000, [9000 * f for f in TIGHT]
    assert verdicts(rows)["claim/004/keepalive-slower/mechanism"] == "holds"
    # ~32k: ab got 20k (client-bound), but 33 us per request on one core is a 30k ceiling
    k = t["claim/004/32k"]
    assert k["verdict"] == "holds" and "ceiling" in k["measured"] and 0.9 < k["ratio"] < 1.0
    for r in rows:
        if r["server"] == "prefork-4x10" and not r["keepalive"]:
            with_cpu(r, 15.0)                            # a 67k ceiling: far above ~32k
    assert verdicts(rows)["claim/004/32k"] == "does not hold"


def test_claims_for_cells_the_default_run_leaves_out_are_not_rows():
    """epoll's cores and thread's variance run with --full only: no row saying
    'a cell is missing' in a default run's table; the pool's rows stay."""
    rows = [row("seed002", "pool", "rps", 950, cores=1, dmin=1, dmax=3, subs=["a", "b", "c"]),
            row("seed002", "pool", "rps", 1900, cores=2, dmin=1, dmax=3, subs=["a"]),
            row("seed002", "pool", "rps", 95, cores=1, dmin=1, dmax=20, subs=["c"]),
            row("seed002", "pool", "rps", 95, cores=1, dmin=10, dmax=11, subs=["c"])]
    ids = list(verdicts(rows))
    assert not any("/epoll" in c for c in ids) and not any(c.endswith("/thread") for c in ids)
    assert "claim/002/cores/pool" in ids and "claim/002/variance/pool" in ids


def test_every_claim_has_a_unique_id_and_the_verdicts_schema():
    rows = seed000_rows() + [row("seed002", "pool", "rps", 950, cores=1, subs=["a"]),
                             row("seed002", "pool", "rps", 1900, cores=2, subs=["a"])]
    out = claims.check_all(rows)
    ids = [c["id"] for c in out]
    assert len(ids) == len(set(ids))
    for c in out:
        assert c["verdict"] in ("holds", "does not hold", "unsettled", "not comparable")
        assert c["ratio"] is None or (c["ci95"][0] <= c["ratio"] <= c["ci95"][1])


def test_the_claims_share_one_correction():
    """A 4% effect with ±1% noise is found alone, but not among many noisy
    comparisons: the correction is over the family, not per claim."""
    rows = [row("seed002", "pool", "rps", 1000, cores=1, subs=["a"]),
            row("seed002", "pool", "rps", 1040, (0.985, 0.99, 1.0, 1.01, 1.015), cores=2, subs=["a"])]
    alone = stats.Family()
    claims.check_all(rows, alone)
    alone.resolve()
    assert alone.items["seed002/a/pool/2c>1c"].verdict == "ahead"
    crowded = stats.Family()
    for i in range(200):
        crowded.difference(f"noise{i}", [1.0, 1.1, 0.9, 1.05, 0.95], [1.0, 1.1, 0.9, 1.05, 0.95])
    claims.check_all(rows, crowded)
    crowded.resolve()
    j = crowded.items["seed002/a/pool/2c>1c"]
    assert j.p < 0.05 and j.verdict == "unsettled"      # p ~ 0.007 > 0.05 / 201
    assert crowded.m == 201


def test_a_client_bound_loser_whose_server_was_saturated_still_loses():
    """The generator at 95% and the server at 98% of its core: the server set
    its own pace, so its lower rate counts without a matched-load cell."""
    ep = row("seed003", "epoll", "rps", 20500, keepalive=False)
    ng = row("seed003", "nginx-seed003", "rps", 17500, keepalive=False, client_bound=True, cpus="0",
             server_cores=0.98, server_cores_min=0.97)
    assert verdicts([ep, ng])["claim/003/close-ahead"] == "holds"
    ng["server_cores_min"] = 0.6                       # one repeat below the limit: the generator's pace
    assert verdicts([ep, ng])["claim/003/close-ahead"] == "unsettled"


def test_cpu_per_request_compares_only_at_about_the_same_load():
    a = {"rps": 150000, "client_bound": True, "cpus": "0", "server_cores": 0.6, "server_cores_min": 0.55}
    b = {"rps": 100000, "client_bound": False, "cpus": "0", "server_cores": 1.0, "server_cores_min": 0.99}
    assert "another load" in claims.cpu_comparable(a, b)
    assert claims.cpu_comparable(dict(a, server_cores_min=0.95), b) == ""     # both at their limit
    assert claims.cpu_comparable(dict(a, rps=105000), b) == ""                # within 10%: the same load
    # a generator that kept up is not enough: a server that stalled far below its
    # core (nginx's delayed-ACK stall on pipelined requests) paid a light load's CPU
    stalled = {"rps": 18500, "client_bound": False, "cpus": "0", "server_cores": 0.13, "server_cores_min": 0.12,
               "server_us_per_req": 7.0}
    fast = dict(a, client_bound=False, server_us_per_req=1.0)    # less per request, at 8x the load
    assert "another load" in claims.cpu_comparable(fast, stalled)
    # nor does it turn on which one spent less: that is what is being compared
    assert "another load" in claims.cpu_comparable(dict(fast, server_us_per_req=9.0), stalled)


def test_a_pair_measured_at_matched_load_is_judged_there_whatever_the_generator_did():
    """Where the plan measured both servers at matched load, that is the
    basis, decided in advance: the generator crossing 90% of its core in one
    run and not in the next must not switch the verdict from req/s to CPU
    per request (seed 000's iterative against thread did: 0.50, then 1.14)."""
    rows = seed000_rows()
    rows += [matched("seed000", s, us) for s, us in (("pool-5", 36.0), ("iterative", 25.0),
                                                       ("thread", 72.0), ("pool-15", 36.2))]
    before = table(rows)
    t = next(r for r in before.values() if r["id"] == "claim/000/order")
    assert "iterative vs thread: ahead" in t["why"] and "CPU/req at 4,000/s" in t["why"]
    for r in rows:                       # the closed-loop cells with a matched pair at the generator's limit
        if r.get("part") != "matched" and r["server"] != "fork":
            r["client_bound"] = True
    assert table(rows)["claim/000/order"]["why"] == t["why"]
    # fork has no matched cell (too slow for the rate): thread against fork stays on req/s
    assert "thread vs fork: ahead (" in t["why"] and t["why"].endswith("on rps)")


def test_a_matched_cell_whose_generator_passed_90_percent_leaves_the_pair_unsettled():
    """vegeta passes 90% of its core only when the server stalls (it opens
    connections for the requests that wait), and a server near saturation
    spends less CPU per request: such a repeat would flatter it."""
    rows = seed000_rows()
    rows += [matched("seed000", s, us) for s, us in (("pool-5", 36.0), ("iterative", 25.0),
                                                       ("thread", 72.0), ("pool-15", 36.2))]
    assert "iterative vs thread: ahead" in table(rows)["claim/000/order"]["why"]
    rows[-2]["client_bound"] = True                      # thread's matched cell: vegeta past 90%
    why = table(rows)["claim/000/order"]["why"]
    assert "iterative vs thread: unsettled" in why and "stall" in why, why
