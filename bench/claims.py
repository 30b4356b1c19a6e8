"""The seeds' claims, checked: one row per claim of each seed document, with
what this run measured and a verdict (holds / does not hold / unsettled) and
why. A pure function of the aggregated rows (report.aggregate), tested in
tests/bench/test_claims.py.

A comparison counts only when both cells are valid, ran at least twice, and
their min–max ranges over repeats do not overlap (bench/checks.verdict)."""
from __future__ import annotations

from .checks import client_bound_loser, verdict

HOLDS, FAILS, UNSETTLED = "holds", "does not hold", "unsettled"

# The seeds' own numbers, drawn on the plots and quoted in the claims.
SEED000_RPS = {"iterative": 5431.51, "fork": 2458.22, "thread": 4286.42, "pool-5": 6849.46, "pool-15": 6590.83}
SEED001_AVG_S = {"iterative": 4.745, "thread": 0.991, "pool": 1.001}
SEED003_RPS = {("epoll", True): 41204.08, ("epoll", False): 19749.97,
               ("nginx", True): 42013.96, ("nginx", False): 15069.64}
SEED004_RPS = {(10, False): 31948.41, (50, False): 31971.78, (100, False): 31735.84, (500, False): 26778.31,
               (1000, False): 21530.65, (10, True): 21994.49, (50, True): 20937.88, (100, True): 21391.65,
               (500, True): 19577.23, (1000, True): 19171.07}


def find(rows: list[dict], exp: str, **match) -> dict | None:
    for r in rows:
        if r.get("exp") == exp and all(r.get(k) == v for k, v in match.items()):
            return r
    return None


def usable(r: dict | None, key: str) -> bool:
    return r is not None and key in r and not r.get("invalid") and r.get("reps_ok", 0) >= 1


def compare(a: dict | None, b: dict | None, key: str, higher_better: bool = True) -> str:
    """'ahead' / 'behind' / 'unsettled' for a against b (see the module note).
    A cell whose generator was client-bound measured the generator's limit,
    not the server's: it may win a comparison (the server can do at least
    that), and lose one only when its server's CPU per request shows it could
    not have kept up anyway (checks.client_bound_loser)."""
    if not (usable(a, key) and usable(b, key)):
        return UNSETTLED
    if a["reps_ok"] < 2 or b["reps_ok"] < 2:
        return UNSETTLED
    v = verdict((a[key + "_min"], a[key + "_max"]), (b[key + "_min"], b[key + "_max"]), higher_better)
    if v == "ahead" and client_bound_loser(a, b, key) or v == "behind" and client_bound_loser(b, a, key):
        return UNSETTLED
    return v


def settled(a: dict | None, b: dict | None, key: str) -> bool:
    """Both cells valid, repeated and not client-bound: a comparison of them can
    settle a claim, including a claim of *no* difference (two client-bound
    cells look alike because the generator, not the servers, set the pace)."""
    return (usable(a, key) and usable(b, key) and a["reps_ok"] >= 2 and b["reps_ok"] >= 2
            and not a.get("client_bound") and not b.get("client_bound"))


def val(r: dict | None, key: str, digits: int = 0) -> str:
    if r is None:
        return "not run"
    if r.get("invalid"):
        return "invalid"
    if key not in r:
        return "failed"
    return f"{r[key]:,.{digits}f}"


def _row(seed, claim, measured, result, why):
    return {"seed": seed, "claim": claim, "measured": measured, "verdict": result, "why": why}


def seed000(rows):
    out = []
    get = lambda label: find(rows, "seed000", server=label, part="main")
    pool, basic, thread, fork = get("pool-5"), get("iterative"), get("thread"), get("fork")
    order = [("pool-5", "iterative", pool, basic), ("iterative", "thread", basic, thread),
             ("thread", "fork", thread, fork)]
    steps = [(a, b, compare(x, y, "rps")) for a, b, x, y in order]
    measured = ", ".join(f"{n} {val(r, 'rps')}" for n, r in (("pool-5", pool), ("basic (iterative)", basic),
                                                             ("thread", thread), ("fork", fork))) + " req/s"
    if all(v == "ahead" for _, _, v in steps):
        res, why = HOLDS, "each step of the order is separated by non-overlapping ranges"
    elif any(v == "behind" for _, _, v in steps):
        res = FAILS
        why = "; ".join(f"{a} is behind {b}" for a, b, v in steps if v == "behind")
    else:
        res = UNSETTLED
        why = "; ".join(f"{a} vs {b}: ranges overlap or the slower cell was client-bound"
                        for a, b, v in steps if v == "unsettled") or "missing cells"
    out.append(_row("000", "pool > basic > thread > fork (req/s, ab -c 30)", measured, res, why))

    p15 = get("pool-15")
    v = compare(p15, pool, "rps")
    out.append(_row("000", "15 pool threads bring no significant gain over 5",
                    f"pool-15 {val(p15, 'rps')} vs pool-5 {val(pool, 'rps')} req/s",
                    UNSETTLED if not settled(p15, pool, "rps") else (FAILS if v == "ahead" else HOLDS),
                    "15 threads ahead with non-overlapping ranges" if v == "ahead" else
                    ("no separation between the two ranges, or 15 behind" if settled(p15, pool, "rps")
                     else "a cell is missing, invalid, client-bound or ran once")))

    high = [find(rows, "seed000", part="fork1024", conc=c) for c in (100, 1000)]
    ran = [r for r in high if r is not None]
    # c = 30: under the 1024 limit when --full measured it, else the main fork
    # cell (30 connections: neither limit binds)
    base = find(rows, "seed000", part="fork1024", conc=30) or find(rows, "seed000", server="fork", part="main")
    # Dying shows as failed requests, an aborted ab run, or a server that stops
    # answering (under a tenth of its c = 30 rate: connections wait in the backlog).
    stalled = lambda r: (usable(base, "rps") and usable(r, "rps") and r["rps"] < 0.1 * base["rps"])
    failing = [r for r in ran if r.get("errors_total") or r.get("failed_runs") or stalled(r)]
    measured = "; ".join(f"c={r['conc']}: {val(r, 'rps')} req/s, failed {r.get('errors_total', 0):,}"
                         f"{', ' + str(len(r['failed_runs'])) + ' run(s) aborted' if r.get('failed_runs') else ''}"
                         f"{' (stalled: under a tenth of its c = 30 rate)' if stalled(r) else ''}"
                         for r in ran) or "not run"
    if not ran:
        res, why = UNSETTLED, "not run"
    elif failing:
        res, why = HOLDS, ("spindle's fork model also fails or stalls above c = 30 with 1024 descriptors "
                           "(see the seed 000 section for the failed-request counts)")
    else:
        res, why = FAILS, ("with the seed's 1024-descriptor limit, spindle's fork model served c = 100 and "
                           "1000 without a failed request (the parent closes each connection after fork)")
    out.append(_row("000", "fork dies above c = 30 (“Too many open files”)", measured, res, why))
    return out


def seed001(rows):
    rs = [r for r in rows if r.get("exp") == "seed001" and usable(r, "avg_ms")]
    thread, pool, it = (find(rows, "seed001", server=m) for m in ("thread", "pool", "iterative"))
    measured = ", ".join(f"{m} {val(r, 'avg_ms', 2)}" for m, r in (("thread", thread), ("pool", pool),
                                                                   ("iterative", it))) + " ms avg"
    if rs:
        best = min(rs, key=lambda r: r["avg_ms"])
        measured += f"; lowest avg of all models: {best['server']} {best['avg_ms']:.2f} ms"
    vs = [compare(thread, pool, "avg_ms", False), compare(thread, it, "avg_ms", False)]
    if all(v == "ahead" for v in vs):
        res, why = HOLDS, "thread's avg is below pool's and iterative's with non-overlapping ranges"
    elif "behind" in vs:
        res, why = FAILS, "thread's avg is above another of the seed's models with non-overlapping ranges"
    else:
        res, why = UNSETTLED, "thread and pool ranges overlap" if vs[0] == UNSETTLED else "ranges overlap"
    out = [_row("001", "the multi-threaded model has the best latency (avg)", measured, res, why)]
    # "Struggles": the highest avg of the seed's models, i.e. behind both thread and pool.
    vs = {m: compare(it, r, "avg_ms", False) for m, r in (("thread", thread), ("pool", pool))}
    if all(v == "behind" for v in vs.values()):
        res, why = HOLDS, "iterative's avg is above thread's and pool's, ranges apart"
    elif any(v == "ahead" for v in vs.values()):
        res = FAILS
        why = "iterative's avg is below " + " and ".join(f"{m}'s" for m, v in vs.items() if v == "ahead") + \
            ", ranges apart"
    else:
        res, why = UNSETTLED, "; ".join(f"vs {m}: {'ranges overlap, a cell is missing/invalid, or the slower cell was client-bound' if v == UNSETTLED else v}"
                                        for m, v in vs.items())
    out.append(_row("001", "the single-threaded model struggles (highest avg)",
                    f"iterative {val(it, 'avg_ms', 2)} vs thread {val(thread, 'avg_ms', 2)} and pool "
                    f"{val(pool, 'avg_ms', 2)} ms avg", res, why))
    return out


def seed002(rows):
    out = []
    sub = lambda s: [r for r in rows if r.get("exp") == "seed002" and s in r.get("subs", [])]
    a = sub("a")
    for m in ("pool", "epoll"):
        one = next((r for r in a if r["server"] == m and r["cores"] == 1), None)
        two = next((r for r in a if r["server"] == m and r["cores"] == 2), None)
        if one is None and two is None:
            continue           # not in this run (epoll: --full only)
        v = compare(two, one, "rps")
        out.append(_row("002", f"more cores → more throughput ({m}, workers and threads fixed)",
                        f"1 core {val(one, 'rps')}, 2 cores {val(two, 'rps')} req/s",
                        HOLDS if v == "ahead" else FAILS if v == "behind" else UNSETTLED,
                        {"ahead": "2 cores ahead, ranges apart", "behind": "2 cores behind, ranges apart"}
                        .get(v, "ranges overlap, a cell is missing/invalid, or the slower cell was client-bound")))
    b = sub("b")
    th = next((r for r in b if r["server"] == "thread"), None)
    po = next((r for r in b if r["server"] == "pool"), None)
    v = compare(po, th, "rps")
    out.append(_row("002", "pre-created threads (pool) are slower than a thread per request",
                    f"pool {val(po, 'rps')} vs thread {val(th, 'rps')} req/s (1 core, delay 1–3)",
                    HOLDS if v == "behind" else FAILS if v == "ahead" else UNSETTLED,
                    {"behind": "pool behind, ranges apart", "ahead": "pool ahead, ranges apart"}
                    .get(v, "ranges overlap, a cell is missing/invalid, or the slower cell was client-bound")))
    c = sub("c")
    for m in ("pool", "thread"):
        get = lambda lo, hi: next((r for r in c if r["server"] == m and (r["dmin"], r["dmax"]) == (lo, hi)), None)
        small, large, same = get(1, 3), get(1, 20), get(10, 11)
        if large is None and same is None:
            continue           # not in this run (thread: --full only)
        v = compare(small, large, "rps")
        out.append(_row("002", f"small delay variation (1–3) serves more requests than large (1–20) ({m})",
                        f"1–3: {val(small, 'rps')}, 1–20: {val(large, 'rps')} req/s",
                        HOLDS if v == "ahead" else FAILS if v == "behind" else UNSETTLED,
                        "but 1–20 also has a 5x larger mean: see the equal-mean row" if v == "ahead" else
                        "ranges overlap, a cell is missing/invalid, or the slower cell was client-bound"))
        v = compare(same, large, "rps")
        out.append(_row("002", f"…and at the same mean 10.5: 10–11 vs 1–20 ({m}; the variance alone)",
                        f"10–11: {val(same, 'rps')}, 1–20: {val(large, 'rps')} req/s",
                        HOLDS if v == "ahead" else FAILS if v == "behind" else UNSETTLED,
                        {"ahead": "low variance ahead at equal mean", "behind": "low variance behind at equal mean"}
                        .get(v, "no separation at equal mean: the seed's difference came from the mean"
                             if settled(same, large, "rps") else
                             "a cell is missing, invalid or ran once: nothing can be said about the variance")))
    d = sub("d")
    for hold in (0, 1):
        lo = next((r for r in d if r["hold"] == hold and r["lock"] == "bucket" and r["buckets"] == 32), None)
        hi = next((r for r in d if r["hold"] == hold and r["lock"] == "bucket" and r["buckets"] == 2048), None)
        v = compare(hi, lo, "rps")
        valid = settled(lo, hi, "rps")
        out.append(_row("002", f"the bucket count makes no difference (hold = {hold}: "
                               f"{'lock held for the increment only, as the seed' if not hold else '1 ms of work inside the lock'})",
                        f"32 buckets {val(lo, 'rps')}, 2048 buckets {val(hi, 'rps')} req/s",
                        UNSETTLED if not valid else (FAILS if v in ("ahead", "behind") else HOLDS),
                        "2048 and 32 buckets separated: contention shows" if v in ("ahead", "behind") else
                        ("no separation between 32 and 2048 buckets" if valid
                         else "a cell is missing, invalid or ran once")))
    return out


def seed003(rows):
    out = []
    for ka in (True, False):
        ep = find(rows, "seed003", server="epoll", keepalive=ka)
        ng = find(rows, "seed003", server="nginx-seed003", keepalive=ka)
        v = compare(ep, ng, "rps")
        ratio = (ep["rps"] / ng["rps"]) if usable(ep, "rps") and usable(ng, "rps") and ng["rps"] else None
        measured = (f"epoll {val(ep, 'rps')} vs nginx {val(ng, 'rps')} req/s"
                    + (f" (ratio {ratio:.2f}; seed: {SEED003_RPS[('epoll', ka)] / SEED003_RPS[('nginx', ka)]:.2f})"
                       if ratio else ""))
        if ka:
            repeated = ratio is not None and ep["reps_ok"] >= 2 and ng["reps_ok"] >= 2
            if not repeated:
                res, why = UNSETTLED, "a cell is missing, invalid or ran once"
            elif v != UNSETTLED and abs(ratio - 1) > 0.10:
                res, why = FAILS, f"epoll {v} nginx by more than 10%, ranges apart"
            elif abs(ratio - 1) <= 0.10 and settled(ep, ng, "rps"):
                res, why = HOLDS, "medians within 10% of each other"
            elif abs(ratio - 1) <= 0.10:
                res, why = UNSETTLED, "medians within 10%, but a client-bound generator may have set both"
            else:
                res, why = UNSETTLED, ("medians more than 10% apart, but the ranges overlap or the slower "
                                       "cell was client-bound")
            out.append(_row("003", "the reactor is on par with nginx with keep-alive (ab -k -c 200)", measured, res, why))
        else:
            out.append(_row("003", "the reactor is ahead of nginx without keep-alive (ab -c 200)", measured,
                            HOLDS if v == "ahead" else FAILS if v == "behind" else UNSETTLED,
                            {"ahead": "ranges apart", "behind": "epoll behind, ranges apart"}.get(v, "ranges overlap")))
    return out


def seed004(rows):
    out = []
    cs = sorted({r["conc"] for r in rows if r.get("exp") == "seed004"})
    res_by_c = {}
    for c in cs:
        ka = find(rows, "seed004", server="prefork-4x10", conc=c, keepalive=True)
        cl = find(rows, "seed004", server="prefork-4x10", conc=c, keepalive=False)
        res_by_c[c] = (compare(ka, cl, "rps"), ka, cl)
    measured = "; ".join(f"c={c}: -k {val(ka, 'rps')} / close {val(cl, 'rps')}" for c, (_, ka, cl) in res_by_c.items())
    vs = [v for v, _, _ in res_by_c.values()]
    if vs and all(v == "behind" for v in vs):
        res, why = HOLDS, "keep-alive behind at every concurrency, ranges apart"
    elif vs and all(v == "ahead" for v in vs):
        res, why = FAILS, "keep-alive ahead at every concurrency, ranges apart"
    else:
        res = UNSETTLED if vs else UNSETTLED
        why = (", ".join(f"c={c}: {v}" for c, (v, _, _) in res_by_c.items()) or "not run") + \
            " (keep-alive against close)"
    out.append(_row("004", "keep-alive is slower than a new connection per request (prefork 4 x 10)",
                    measured + " req/s", res, why))
    low = [find(rows, "seed004", server="prefork-4x10", conc=c, keepalive=False) for c in (10, 50, 100)]
    got = [r for r in low if usable(r, "rps")]
    measured = ", ".join(f"c={r['conc']}: {r['rps']:,.0f}" for r in got) + " req/s (seed: 31,736–31,972)"
    if len(got) < 3:
        res, why = UNSETTLED, "a cell is missing/invalid"
    elif all(0.75 * 32000 <= r["rps"] <= 1.25 * 32000 for r in got):
        res, why = HOLDS, "within 25% of 32k on one core of this machine (the seed had 14 cores)"
    else:
        res, why = FAILS, "not within 25% of 32k on ONE core of this machine; the seed had 14 cores, so " \
                          "this is a statement about this set-up, not a refutation of the seed's hardware"
    out.append(_row("004", "~32k req/s at c = 10…100 without keep-alive", measured, res, why))
    return out


def check_all(rows: list[dict]) -> list[dict]:
    out = []
    for f in (seed000, seed001, seed002, seed003, seed004):
        if any(r.get("exp") == "seed" + f.__name__[-3:] for r in rows):
            out.extend(f(rows))
    return out
