"""The experiments: one per seed document, the open-loop latency sweep, and
(outside the default run) a few beyond the seeds. Each builds its cells
(server x parameters), runs them interleaved and repeated through
lab.run_cells, and leaves records in lab.records; report.py turns those into
the report's sections and claims.py checks the seeds' claims against them.

Every server runs on CPU 0 (one core) unless a cell says otherwise; every load
generator on CPU 1. Durations come from lab.cell_s (3 s by default)."""
from __future__ import annotations

import json
import random
import select
import subprocess
import sys
import time

from . import openloop as openloop_gen
from .lab import (ALL_CPUS, B100, HELLO, HOST, KB100, LOAD_CPUS, MB1, MB100, NCPU, NGINX_CONNECTIONS, NOFILE, PAGE,
                  REPO, SERVER_CPUS, Cell, Lab, Server, missing_peer, ncpus_in, run_cells, server_key, skip_cells)

NGINX = server_key("nginx", "nginx")                         # realistic file server
NGINX_SEED003 = server_key("nginx", "nginx-seed003")         # seed 003's return 200
AB_CEILING = 10_000_000     # ab -t S -n CEILING: time-based; the ceiling is never reached
UNIT = "1ms"                # one workload unit (the seed used seconds)
UNIT_S = 0.001


def spindle(model: str, cpus: str = SERVER_CPUS, workers: int | None = None, **settings) -> tuple:
    return server_key("spindle", model, cpus, workers, **settings)


def nginx(workers: int = 1) -> tuple:
    return server_key("nginx", "nginx", SERVER_CPUS, workers)


def fmt_ab(r: dict) -> str:
    mean = f"{r['mean_ms']:7.2f}" if "mean_ms" in r else "      —"
    return f"{r['rps']:8.0f} req/s  mean {mean} ms  p99 {r.get('p99_ms', '?')} ms  failed {r['errors']}"


def fmt_wrk(r: dict) -> str:
    return f"{r['rps']:8.0f} req/s  mean {r['mean_ms']:7.2f} ms  p99 {r['p99_ms']:7.2f} ms  errors {r['errors']}"


def fmt_vegeta(r: dict) -> str:
    return (f"{r['target_rate']:6.0f}/s asked, {r['rps']:8.0f} ok/s  p50 {r['p50_ms']:7.2f}  p99 {r['p99_ms']:8.2f}  "
            f"p99.9 {r['p999_ms']:8.2f} ms  errors {r['errors']}")


def fmt_any(r: dict) -> str:
    return {"ab": fmt_ab, "wrk": fmt_wrk, "vegeta": fmt_vegeta}.get(r.get("tool"), fmt_ab)(r)


def _ab(path, c, keepalive, seconds):
    return lambda lab, s: lab.ab(s, path, AB_CEILING, c, keepalive, seconds=seconds)


def ab_command(path, c, keepalive, seconds) -> str:
    """What _ab runs, as Cell.same_as: two experiments asking for it on the same
    server share one measurement."""
    return f"ab -t {seconds:g} -c {c}{' -k' if keepalive else ''} {path}"


def _wrk(path, c, dur, **kw):
    return lambda lab, s: lab.wrk(s, path, c, dur, **kw)


SEED001_CLAIMED = ("iterative", "thread", "pool")   # the models the seed's claims name (by default: these)
# req/s every compared server sustains with a new connection each, and vegeta
# sends on its one core with room to spare (it fell behind at ~3,500/s with 1.5
# cores of other load; a quiet core gives it ~6,000/s)
MATCHED_RATE = 4000
MATCHED_WORKERS = 500                 # below seed 003's nginx worker_connections (768)
MATCHED_SEED000 = ("pool-5", "iterative", "thread", "pool-15", "epoll", "nginx")


def _matched(path, rate, dur):
    """Open loop at a fixed rate, a new connection per request: the servers
    compared see the same offered load (their CPU per request compares)."""
    return lambda lab, s: lab.vegeta(s, [path], rate, dur, timeout="2s", max_workers=MATCHED_WORKERS,
                                     keepalive=False)


def workload_settings(**extra) -> dict:
    return {"workload": "on", "work_unit": UNIT, "delay_kind": "cpu", **extra}


# --------------------------------------------------------------------------
# Seed 000: ab -c 30 on the 4537-byte page; pool 5 and 15; fork as the seed ran it
# --------------------------------------------------------------------------

def seed000(lab: Lab, models: list[str]) -> None:
    dur = lab.cell_s
    servers = [("iterative", spindle("iterative")), ("fork", spindle("fork")), ("thread", spindle("thread")),
               ("pool", spindle("pool", threads=5, _label="pool-5")),
               ("pool", spindle("pool", threads=15, _label="pool-15")),
               ("epoll", spindle("epoll")), ("nginx", NGINX)]
    cells = []
    for m, key in servers:
        if m != "nginx" and m not in models:
            continue
        label = dict(key[4]).get("_label", m)
        cells.append(Cell("seed000", f"{label} ab -c 30", key, {"conc": 30, "part": "main"},
                          _ab(PAGE, 30, False, dur), warm_path=PAGE))
    # The seed's fork server died beyond -c 30 with "Too many open files". Its
    # conditions: the default descriptor limit (1024) and no cap of ours binding.
    fork1024 = spindle("fork", _nofile=1024, _label="fork-nofile1024", max_connections=100000)
    if "fork" in models:
        # At c = 30 neither limit binds: the main fork cell above is that
        # measurement, and the baseline the claims compare c = 100 and 1000 with
        # (the same cell under the 1024 limit runs with --full).
        for c in (30, 100, 1000) if lab.full else (100, 1000):
            cells.append(Cell("seed000", f"fork nofile=1024 ab -c {c}", fork1024, {"conc": c, "part": "fork1024"},
                              _ab(PAGE, c, False, dur), warm_path=PAGE))
    # Matched offered load: where ab itself limited a cell (client-bound), its
    # req/s says nothing about the server; CPU per request does, but only
    # between servers at the same load (it falls ~5x from 1,000/s to
    # saturation). So the models whose ab cells reach the generator's pace
    # also run open loop at one rate every one of them sustains.
    for m, key in servers:
        label = dict(key[4]).get("_label", m)
        if label in MATCHED_SEED000 and (m in models or m == "nginx"):
            cells.append(Cell("seed000", f"{label} matched {MATCHED_RATE}/s close", key,
                              {"rate": MATCHED_RATE, "part": "matched"},
                              _matched(PAGE, MATCHED_RATE, dur), warm_path=PAGE, count_calls=True))
    lab.note("seed000", f"`ab -t {dur:g} -c 30` (time-based, a new connection per request, as the seed's ab "
                        f"without -k) on the 4537-byte page; the seed's models: iterative (its basic server), "
                        f"fork, thread, pool with 5 and with 15 threads; epoll (spindle's default) and nginx "
                        f"(worker_processes 1, sendfile, open_file_cache) beside them.")
    lab.note("seed000", "fork under the seed's conditions: the server's RLIMIT_NOFILE is 1024 (the default soft "
                        "limit; the lab gives every other server 20000) and max_connections = 100000, so no cap "
                        "of spindle's binds before the descriptor limit does; ab -c 100 and 1000 (c = 30, "
                        "where 30 connections are far below either limit, is the main fork cell; --full "
                        "measures it under the 1024 limit too).")
    lab.note("seed000", f"Matched offered load ({', '.join(MATCHED_SEED000)}): vegeta sends {MATCHED_RATE:,} "
                        f"requests/s, a new connection each (-keepalive=false), whatever the server does; every "
                        f"one of these servers answers that rate, so their server CPU per request is compared at "
                        f"the same load. The claims use it where an ab cell was client-bound.")
    lab.note("seed000", "Departure from the seed, disclosed: the seed ran ab across a LAN; here client and server "
                        "share one machine over loopback (each on its own core), so connection set-up costs no "
                        "network round trip and the generator's CPU is part of the picture (client-bound flags).")
    run_cells(lab, "seed000", cells, lab.repeats, [PAGE], fmt_any)


# --------------------------------------------------------------------------
# Seed 001: 500 requests, 50 in parallel, each doing real work: latency CDF
# --------------------------------------------------------------------------

def seed001(lab: Lab, models: list[str]) -> None:
    n, par, dmin, dmax, nb = 500, 50, 1, 3, 128

    def run(lab: Lab, s: Server) -> dict:
        r = lab.client(["latency", HOST, str(s.port), "/work?delay={d}&bucket={b}", str(n), str(par),
                        f"any:{dmin}:{dmax}:{nb}"])
        if "failed_run" not in r:
            r["problems"] = [f"{r['errors']} failed: {r['error_samples'][:2]}"] if r["errors"] else []
            r["tool"] = "python-asyncio"
            r["requests"] = r["ok"] + r["errors"]
        return r

    key = lambda m, cpus: spindle(m, cpus, **workload_settings(threads=16, buckets=nb))
    # One core, as the seed's set-up forces every model to share it; both cores
    # too, where "threaded is not fastest" is no longer true by construction
    # (the server shares CPU 1 with the client there).
    cells = [Cell("seed001", f"{m} 500 req / 50 parallel" + ("" if cores == 1 else f" {cores} cores"),
                  key(m, cpus_for(cores)), {"n": n, "par": par, "cores": cores}, run,
                  warm_path="/work?delay=0&bucket=0",
                  workload={"unit_s": UNIT_S, "kind": "cpu", "cores": cores, "in_flight": par}, count_calls=True)
             for cores in dict.fromkeys((1, min(2, NCPU))) for m in models
             if lab.full or m in SEED001_CLAIMED]
    lab.note("seed001", f"Each request is `GET /work?delay=D&bucket=B` with D uniform in {dmin}–{dmax} units of "
                        f"{UNIT} CPU work (delay_kind = cpu), so every request does real work as the seed's "
                        f"servers did. Client: bench/client.py (Python asyncio, a new connection per request "
                        f"with `Connection: close`, {par} in flight, {n} requests), timing connect() to the last "
                        f"body byte, like the seed's `seq 500 | xargs -P 50 curl` without 500 curl start-ups. "
                        f"nginx has no work endpoint: spindle models only.")
    lab.note("seed001", "Departure from the seed, disclosed: the seed measured its servers with 1–3 s of work "
                        "on its own machine; here 1–3 ms of CPU work, every model pinned to ONE core, so "
                        "“threaded is not fastest” holds by construction there (threads cannot run the work in "
                        "parallel on one core). Every model runs on both cores too (workers = 2 where the model "
                        "has workers; the server shares CPU 1 with the client): the claims are judged on both.")
    if not lab.full:
        lab.note("seed001", f"The default run measures the models the seed's claims name ({', '.join(SEED001_CLAIMED)}) "
                            f"on one core and on two; every other model with `python -m bench --full` (no claim rests "
                            f"on them).")
    run_cells(lab, "seed001", cells, lab.repeats, ["/work?delay=0&bucket=0"],
              lambda r: f"avg {r['avg_ms']:6.2f} ms  p50 {r['p50_ms']:6.2f}  max {r['max_ms']:7.2f}  "
                        f"failed {r['errors']}")


# --------------------------------------------------------------------------
# Seed 002: CPU work and shared buckets (the workload endpoint)
# --------------------------------------------------------------------------

def cpus_for(n: int) -> str:
    return "0" if n == 1 else f"0-{n - 1}"


def seed002(lab: Lab, models: list[str]) -> None:
    dur = lab.cell_s
    conc = 50
    cells: dict[tuple, Cell] = {}

    def add(sub: str, model: str, cores: int, dmin: int, dmax: int, buckets: int, lock: str,
            keepalive: bool = False, hold: int = 0, workers: int = 1):
        key = spindle(model, cpus_for(cores), workers,
                      **workload_settings(buckets=buckets, bucket_lock=lock, threads=16))
        params = {"cores": cores, "dmin": dmin, "dmax": dmax, "buckets": buckets, "lock": lock,
                  "conc": conc, "keepalive": keepalive, "hold": hold, "open_loop": False}
        ident = (key, tuple(sorted(params.items())))
        if ident in cells:
            cells[ident].params["subs"].append(sub)
            return
        args = [str(dmin), str(dmax), str(buckets), "keepalive" if keepalive else "close", str(hold)]
        name = (f"{model} {cores}c d{dmin}-{dmax} {'global' if lock == 'global' else f'b{buckets}'}"
                f"{f' hold{hold}' if hold else ''}{' ka' if keepalive else ''}")
        cells[ident] = Cell("seed002", name, key, {**params, "subs": [sub]},
                            _wrk("/work", conc, dur, script="workload.lua", script_args=args,
                                 check_size=False, timeout="10s"),
                            warm_path="/work?delay=0&bucket=0",
                            workload={"unit_s": UNIT_S, "kind": "cpu", "cores": cores, "in_flight": conc},
                            count_calls=hold > 0)

    run_cores = [n for n in lab.cores if n <= NCPU]
    skipped = [n for n in lab.cores if n > NCPU]
    # (a) cores, workers and threads fixed. The seed's server was a thread pool;
    # epoll's event loops answer the same question again (--full only).
    for m, workers in (("pool", 1), ("epoll", 2)) if lab.full else (("pool", 1),):
        if m in models:
            for n in run_cores:
                add("a", m, n, 1, 3, 128, "bucket", workers=workers)
    for m in ("thread", "pool"):                        # (b) per request vs pre-created, (c) variance
        if m in models:
            for dmin, dmax in ((1, 3), (1, 20), (10, 11)):
                if m == "thread" and (dmin, dmax) != (1, 3) and not lab.full:
                    continue       # the variance question is answered on the pool (thread: --full)
                add("b" if (dmin, dmax) == (1, 3) else "c", m, 1, dmin, dmax, 128, "bucket")
                if (dmin, dmax) == (1, 3):
                    add("c", m, 1, dmin, dmax, 128, "bucket")
    if "pool" in models:                                # (d) buckets and locks, 2 cores
        for hold in (0, 1):
            # the claim compares the ends (32, 2048); the points between: --full
            for b in (32, 128, 512, 2048) if lab.full else (32, 2048):
                add("d", "pool", NCPU, 0, 0, b, "bucket", keepalive=True, hold=hold)
            add("d", "pool", NCPU, 0, 0, 128, "global", keepalive=True, hold=hold)
    cell_list = list(cells.values())
    # (e) the seed's fixed rate: 300 requests/s, open loop (vegeta)
    rng = random.Random(2)
    targets = [f"/work?delay={rng.randint(1, 3)}&bucket={rng.randrange(128)}" for _ in range(2000)]
    for m in ("thread", "pool") if lab.full else ():     # no claim rests on (e): --full
        if m in models:
            key = spindle(m, SERVER_CPUS, 1, **workload_settings(buckets=128, bucket_lock="bucket", threads=16))
            cell_list.append(Cell("seed002", f"{m} 1c open loop 300/s d1-3", key,
                                  {"cores": 1, "dmin": 1, "dmax": 3, "buckets": 128, "lock": "bucket",
                                   "conc": 0, "keepalive": True, "hold": 0, "open_loop": True, "subs": ["e"]},
                                  lambda lab_, s, t=targets: lab_.vegeta(s, t, 300, dur),
                                  warm_path="/work?delay=0&bucket=0",
                                  workload={"unit_s": UNIT_S, "kind": "cpu", "cores": 1, "in_flight": 300 * 5}))
    if not lab.full:
        lab.note("seed002", "Left out of the default run to keep it under 20 minutes (`python -m bench --full` "
                            "runs them): (a) for epoll (the pool answers the seed's cores question: its server "
                            "was a pool), (c) for thread (the variance question is answered on the pool), and (e), "
                            "the seed's fixed rate (no claim rests on it: at 300/s every model keeps up).")
    lab.note("seed002", f"Every request: `GET /work?delay=D&bucket=B&hold=H`, D uniform at random, one unit = "
                        f"{UNIT} of the serving thread's own CPU time (delay_kind = cpu; the seed's unit was a "
                        f"second of wall-clock spinning), H units more inside the bucket lock. Closed loop: "
                        f"`wrk -t 1 -c {conc} -d {dur:g}s` with bench/lua/workload.lua.")
    lab.note("seed002", "(a) the same workers and threads on every core count (pool: 1 process x 16 threads; "
                        "epoll: 2 event loops), so only the cores change; a new connection per request, as (b), "
                        "so the 1-core pool cell of (a) is (b)'s (1-3 ms of CPU per request dwarfs the connection "
                        "set-up). On 2 cores the server "
                        f"shares CPU {LOAD_CPUS} with the load generator (this machine has {NCPU} CPUs).")
    if skipped:
        lab.note("seed002", f"(a) {', '.join(map(str, skipped))} core(s) NOT RUN: this machine has {NCPU} CPUs.")
    lab.note("seed002", "(b) thread (a thread per request, Connection: close) vs pool (pre-created), 1 core, "
                        "delay 1–3; (c) delay 1–3 (mean 2) vs 1–20 (mean 10.5) as the seed, plus 10–11 (the "
                        "same mean 10.5, almost no variance), which separates variance from the larger mean.")
    lab.note("seed002", "(d) pool on 2 cores, zero delay, keep-alive, 32/128/512/2048 buckets with a lock each, "
                        "and one global lock; hold = 0 (the seed's set-up: the lock is held for an increment) "
                        "and hold = 1 (1 ms of CPU work inside the lock, which makes contention visible).")
    lab.note("seed002", "(e) the seed's fixed rate: vegeta sends 300 requests/s whatever the server does "
                        "(open loop), delay 1–3, 1 core.")
    lab.note("seed002", "Checks after every cell: the cpu work served per wall second (from the server's "
                        "/work?totals) must not exceed the cores by more than 5%, and the buckets must have grown "
                        "by the requests the client saw answered (plus at most those in flight when it stopped). "
                        "A cell that fails either is marked INVALID and not reported. nginx has no work endpoint.")
    run_cells(lab, "seed002", cell_list, lab.repeats, ["/work?delay=0&bucket=0"], fmt_any)


# --------------------------------------------------------------------------
# Seed 003: ab -c 200 with and without -k, 13 bytes: epoll vs seed 003's nginx
# --------------------------------------------------------------------------

def seed003(lab: Lab, models: list[str]) -> None:
    dur = lab.cell_s
    cells = []
    for ka in (True, False):
        for m, key in (("epoll", spindle("epoll")), ("nginx", NGINX_SEED003)):
            if m != "nginx" and m not in models:
                continue
            cells.append(Cell("seed003", f"{m} 13B {'-k' if ka else 'close'} -c 200", key,
                              {"body": 13, "keepalive": ka, "conc": 200}, _ab(HELLO, 200, ka, dur),
                              warm_path=HELLO, same_as=ab_command(HELLO, 200, ka, dur), count_calls=not ka))
    for m, key in (("epoll", spindle("epoll")), ("nginx", NGINX_SEED003)):
        if m == "nginx" or m in models:      # matched offered load, new connection per request
            cells.append(Cell("seed003", f"{m} 13B matched {MATCHED_RATE}/s close", key,
                              {"body": 13, "keepalive": False, "rate": MATCHED_RATE, "part": "matched"},
                              _matched(HELLO, MATCHED_RATE, dur), warm_path=HELLO))
    lab.note("seed003", f"`ab -t {dur:g} -c 200` with and without -k. nginx exactly as the seed's "
                        f"configuration: worker_processes 1, worker_connections 768, `keepalive_requests 100` "
                        f"(the default of the seed's nginx 1.18; 1.19.10 and later default to 1000: a departure "
                        f"from today's default, to match the seed's server), no access_log directive "
                        f"(so nginx logs every request, its default), `return 200 'Hello, World!'` (13 bytes, no "
                        f"file). spindle epoll (1 worker, access log off as in spindle's default) serves a 13-byte "
                        f"file from its cache, the closest equivalent it has. Both on one core.")
    lab.note("seed003", f"Matched offered load: vegeta at {MATCHED_RATE:,} requests/s, a new connection each, to "
                        f"both servers: server CPU per request at the same load settles the close claim where ab "
                        f"was client-bound.")
    run_cells(lab, "seed003", cells, lab.repeats, [HELLO], fmt_any)


# --------------------------------------------------------------------------
# Seed 004: prefork 4 x 10 threads, ab -k and close, c = 10 ... 1000
# --------------------------------------------------------------------------

SEED004_CONCS = (10, 50, 100, 500, 1000)
SEED004_THREADS = 40                  # the seed's pool: 4 processes x 10 threads
SEED004_MECHANISM_CONCS = (10, 100)   # below and above its 40 threads


def seed004(lab: Lab, models: list[str]) -> None:
    dur = lab.cell_s
    cells = []
    pre = spindle("prefork", SERVER_CPUS, 4, threads=10, _label="prefork-4x10")
    for c in SEED004_CONCS:
        for ka in (True, False):
            for m, key in (("prefork", pre), ("nginx", nginx(4))):
                if m == "nginx" and not lab.full:
                    continue       # no seed 004 claim involves nginx: --full only
                if m != "nginx" and m not in models:
                    continue
                label = "prefork-4x10" if m == "prefork" else "nginx"
                cells.append(Cell("seed004", f"{label} {'ab -k' if ka else 'ab close'} c={c}", key,
                                  {"conc": c, "keepalive": ka}, _ab(PAGE, c, ka, dur), warm_path=PAGE))
    # The seed's pool held a thread per idle keep-alive connection, 40 threads:
    # spindle's thread model with max_connections = 40 has that mechanism (a
    # thread per open connection, the 41st waits in the backlog).
    if "thread" in models:
        cap = spindle("thread", SERVER_CPUS, 1, max_connections=SEED004_THREADS, _label=f"thread-max{SEED004_THREADS}")
        for c in SEED004_MECHANISM_CONCS:
            for ka in (True, False):
                cells.append(Cell("seed004", f"thread-max{SEED004_THREADS} {'ab -k' if ka else 'ab close'} c={c}",
                                  cap, {"conc": c, "keepalive": ka, "part": "mechanism"}, _ab(PAGE, c, ka, dur),
                                  warm_path=PAGE))
    lab.note("seed004", f"The seed's mechanism, reproduced: its pool gave every open keep-alive connection one of "
                        f"its {SEED004_THREADS} threads, idle or not. spindle's thread model with max_connections = "
                        f"{SEED004_THREADS} does the same (a thread per open connection; connection "
                        f"{SEED004_THREADS + 1} waits in the listen backlog until one closes): ab -k and close at "
                        f"c = {' and '.join(map(str, SEED004_MECHANISM_CONCS))} (below and above the "
                        f"{SEED004_THREADS} threads).")
    lab.note("seed004", f"`ab -t {dur:g} -c C` with -k (keep-alive, as the seed) and without, C = "
                        f"{', '.join(map(str, SEED004_CONCS))}, on the 4537-byte page: time-based, so each "
                        f"connection slot makes many requests, not just the initial burst (a check flags a cell "
                        f"with fewer than 10 per slot). spindle prefork with 4 worker processes x 10 threads as the seed; nginx "
                        f"with worker_processes 4 (equal workers); both on ONE core (the seed had 14).")
    if not lab.full:
        lab.note("seed004", "nginx with 4 workers is left out of the default run (`python -m bench --full` runs it): "
                            "no seed 004 claim involves it, and the headline compares epoll with nginx elsewhere. "
                            "30 measurements, ~2 minutes, to keep `make bench` under 20 minutes.")
    run_cells(lab, "seed004", cells, lab.repeats, [PAGE], fmt_ab)


# --------------------------------------------------------------------------
# Open loop: latency against offered load, every model and nginx
# --------------------------------------------------------------------------

# The open-loop sweep (bench/openloop.py: latency from each request's intended
# send time). Rates sit on one geometric ladder (2^(1/2) apart) so servers share
# rates below their knees and compare CPU per request at the same offered load.
OPEN_LADDER = tuple(int(round(250 * 2 ** (k / 2), -1)) for k in range(0, 17))   # 250 ... 64,000/s
OPEN_POINTS, OPEN_POINTS_FULL = 8, 10
OPEN_PAST_KNEE = 1.3            # the top rate: a little past the knee
OPEN_PROBE_RATE = 2000          # the knee probe: CPU per request at a rate every server keeps up with
OPEN_PROBE_S = 0.5              # 1,000 requests: enough for a CPU-per-request figure
OPEN_CELL_S = 1.0               # per point; a percentile is shown only with 10 samples beyond it (report)
GEN_CAL_REPEATS = 3             # the generator's calibration is no verdict: 3 repeats, a median with its range
OPEN_ARRIVALS = "poisson"
# the generator's own calibration against tools/floor's epoll server
GEN_CAL_RATES = (2000, 8000, 32000, 64000)
OPEN_MODELS = ("epoll",)              # with nginx (the headline's pair); --full: every model but OPEN_FULL_ONLY's
# A connection per process or one at a time: on keep-alive their curve is a
# wall, not a question the default run asks (--full runs them).
OPEN_FULL_ONLY = ("iterative", "fork")


def knee_rates(us_per_req: float | None, points: int) -> list[int]:
    """`points` rungs of the ladder ending at the first at or above
    OPEN_PAST_KNEE x the knee, the knee being one core / CPU per request
    (measured at the probe rate: CPU per request falls as load rises, so this
    knee is a lower bound and the top rung goes past it)."""
    knee = 1e6 / us_per_req if us_per_req else 8000
    top = next((i for i, r in enumerate(OPEN_LADDER) if r >= knee * OPEN_PAST_KNEE), len(OPEN_LADDER) - 1)
    lo = max(0, top - points + 1)
    return list(OPEN_LADDER[lo:lo + points])


def openloop(lab: Lab, models: list[str]) -> None:
    dur = min(OPEN_CELL_S, lab.cell_s)
    short = dur - lab.cell_s          # for the plan's estimate (Cell.extra_s)
    points = OPEN_POINTS_FULL if lab.full else OPEN_POINTS
    curve = [m for m in models if (m in OPEN_MODELS or lab.full) and (lab.full or m not in OPEN_FULL_ONLY)]
    keys = {m: spindle(m, threads=64) for m in curve}
    keys["nginx"] = NGINX
    run = lambda r, d=dur: (lambda lab_, s: lab_.openloop(s, HELLO, r, d, OPEN_ARRIVALS))
    # 1. the generator against the floor server: its latency floor and its highest clean rate
    cal = [Cell("openloop", f"generator {r}/s", FLOOR, {"gen_cal_rate": r, "open_loop": True}, run(r),
                warm_path=HELLO, extra_s=short, drains=False) for r in GEN_CAL_RATES]
    # 2. each server's knee: CPU per request at the probe rate, one repeat
    probes = [Cell("openloop", f"{m} knee probe", k, {"probe_rate": OPEN_PROBE_RATE, "open_loop": True,
                                                                 "count_syscalls": True},
                   run(OPEN_PROBE_RATE, min(OPEN_PROBE_S, dur)), warm_path=HELLO,
                   extra_s=min(OPEN_PROBE_S, dur) - lab.cell_s, drains=False) for m, k in keys.items()]
    run_cells(lab, "openloop", cal, min(GEN_CAL_REPEATS, lab.repeats), [HELLO], fmt_openloop)
    run_cells(lab, "openloop", probes, 1, [HELLO], fmt_openloop)
    cost = {}
    for r in lab.records:
        if r.get("exp") == "openloop" and r.get("probe_rate") and r.get("server_us_per_req"):
            cost[r["server"]] = r["server_us_per_req"]
    cells, grid = [], {}
    for m in keys:
        grid[m] = knee_rates(cost.get(m), points)
    # the "why" section compares servers at two rates every server runs (bench/why.py): the one nearest
    # the matched rate, and the highest (near the knee; if a server falls behind there, a lower one is
    # used, which then has no system-call count)
    shared = sorted(set.intersection(*(set(g) for g in grid.values()))) if grid else []
    shared = {min(shared, key=lambda x: abs(x - MATCHED_RATE)), shared[-1]} if shared else set()
    for m, key in keys.items():
        for rate in grid[m]:
            cells.append(Cell("openloop", f"{m} {rate}/s", key, {"rate": rate}, run(rate), warm_path=HELLO,
                              extra_s=short, count_calls=rate in shared, drains=False))
    lab.note("openloop", f"tools/openloop (bench/openloop.py: every latency from the request's intended send "
                         f"time, so a stall or a queue counts in full), {OPEN_ARRIVALS} arrivals, keep-alive, "
                         f"at most 1000 connections, a request unanswered 2 s after it was due an error; "
                         f"{dur:g} s per point on the 13-byte file; {', '.join(keys)} on one core (threads = 64 "
                         f"for the pools). The generator is calibrated first against tools/floor's epoll server "
                         f"at {', '.join(f'{r:,}' for r in GEN_CAL_RATES)}/s ({min(GEN_CAL_REPEATS, lab.repeats)} repeat(s)): its latency floor and the highest "
                         f"rate it sends cleanly; a server's point above that rate is the generator's, not the "
                         f"server's. Each server's knee is found, not guessed: one core ÷ its CPU per request at "
                         f"{OPEN_PROBE_RATE:,}/s (one probe of {min(OPEN_PROBE_S, dur):g} s); {points} rates from a √2 ladder end at the first "
                         f"≥ {OPEN_PAST_KNEE:g} × the knee: "
                         + "; ".join(f"{m} {', '.join(f'{x:,}' for x in g)}/s" for m, g in grid.items())
                         + f". {lab.repeats} repeat(s) per point; raw/openloop keeps every point's latency "
                           f"histogram" + ("" if lab.full else f"; every other model with --full") + ".")
    run_cells(lab, "openloop", cells, lab.repeats, [HELLO], fmt_openloop)


def fmt_openloop(r: dict) -> str:
    return (f"{r['rps']:8.0f}/s of {r.get('rate') or r.get('probe_rate') or r.get('gen_cal_rate')}  "
            f"p50 {r['p50_ms']:7.2f} ms  p99 {r['p99_ms']:7.2f} ms  errors {r['errors']}")


# --------------------------------------------------------------------------
# Past the knee: each overload policy, CPU work offered at 0.5x to 3x capacity
# --------------------------------------------------------------------------

OVERLOAD_POLICIES = ("queue", "shed", "reject")
OVERLOAD_MODELS = ("epoll",)             # each policy on the default model; --full: every model
OVERLOAD_TAIL_S = 0.4     # the generator waits for what is in flight after its schedule: below 1x, or refused
# ...but from 1x under queue and shed, for requests waiting in the backlog up to its timeout (1 s);
# measured 3.0 s per 1 s cell with the 2 s timeout first tried, against 1.0-2.2 s under reject
OVERLOAD_QUEUE_TAIL_S = 1.0
OVERLOAD_LOADS = (0.5, 1.5, 3.0)     # x each model's measured capacity: below, past and far past the knee
OVERLOAD_LOADS_FULL = (0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 2.5, 3.0)
OVERLOAD_REPEATS = 3       # descriptive curves, no verdict: a median and its range (as the generator's calibration)
OVERLOAD_WORK_MS = 2       # CPU work per request: capacity ~500/s on one core, so 3x is 1,500/s
OVERLOAD_PATH = f"/work?delay={OVERLOAD_WORK_MS}&bucket=0"
OVERLOAD_DEADLINE_MS = 1000    # a 200 later than this after its due time is no use to its client
OVERLOAD_TIMEOUT_MS = 1000     # ...which gives up on it there (closes its connection), as clients with a deadline do
OVERLOAD_CONNS = 1000          # the generator's connections at most (as the open loop's)
OVERLOAD_MAX_CONNS = 64        # spindle's cap: 64 requests of 2 ms are 128 ms of work, well within the deadline
OVERLOAD_PROBE_RATE = 100      # capacity probe: CPU per request where every model keeps up
OVERLOAD_PROBE_S = 1.0
OVERLOAD_CELL_S = 1.0
# "It costs nothing when not overloaded": the peers' keep-alive cell on epoll under each policy
OVERLOAD_COST_CONNS = 200


def overload_settings(model: str, policy: str) -> dict:
    """A model set up for the experiment: CPU work on one core, overload =
    policy with its default target, and a connection cap the reject policy
    can act on (a pool's own queue is its 2 x threads)."""
    s = workload_settings(overload=policy, overload_target="20ms", max_connections=OVERLOAD_MAX_CONNS, threads=4)
    if model == "prefork":
        s["threads"] = 2
    return s


def overload_rates(us_per_req: float | None, loads: tuple) -> list[int]:
    """Offered rates at each multiple of the capacity, the capacity being one
    core / CPU per request at the probe rate (a lower bound: a request costs
    a little less at saturation, so 1x is at or just below the knee)."""
    cap = 1e6 / us_per_req if us_per_req else 1e3 / OVERLOAD_WORK_MS
    return [max(10, int(round(x * cap, -1))) for x in loads]


def overload(lab: Lab, models: list[str]) -> None:
    loads = OVERLOAD_LOADS_FULL if lab.full else OVERLOAD_LOADS
    chosen = [m for m in models if lab.full or m in OVERLOAD_MODELS]
    workers = {"prefork": 2}
    key = lambda m, p: spindle(m, SERVER_CPUS, workers.get(m, 1), _label=f"{m}-{p}", **overload_settings(m, p))
    dur = min(OVERLOAD_CELL_S, lab.cell_s)
    short = dur - lab.cell_s
    warm = "/work?delay=0&bucket=0"

    def point(rate: int, d: float):
        def run(lab_: Lab, s: Server) -> dict:
            m = lab_.openloop(s, OVERLOAD_PATH, rate, d, OPEN_ARRIVALS, timeout_ms=OVERLOAD_TIMEOUT_MS,
                              max_conns=OVERLOAD_CONNS, deadline_ms=OVERLOAD_DEADLINE_MS)
            if "failed_run" not in m:
                m.update(openloop_gen.goodput_fields(m))
                # past the knee, 503s, timeouts and falling behind are the result, not a fault
                m["problems"] = [p for p in m.get("problems", []) if "requests failed" not in p
                                 and "did not keep up" not in p]
            return m
        return run

    # 1. capacity: CPU per request at a rate every model keeps up with (policy queue)
    probes = [Cell("overload", f"{m} capacity probe", key(m, "queue"),
                   {"probe_rate": OVERLOAD_PROBE_RATE, "open_loop": True, "policy": "queue"},
                   point(OVERLOAD_PROBE_RATE, min(OVERLOAD_PROBE_S, lab.cell_s)), warm_path=warm,
                   extra_s=min(OVERLOAD_PROBE_S, lab.cell_s) - lab.cell_s, drains=False) for m in chosen]
    run_cells(lab, "overload", probes, 1, [warm], fmt_overload)
    cost = {r["model"]: r["server_us_per_req"] for r in lab.records
            if r.get("exp") == "overload" and r.get("probe_rate") and r.get("server_us_per_req")}
    cells, grid = [], {}
    for m in chosen:
        grid[m] = overload_rates(cost.get(m), loads)
        for p in OVERLOAD_POLICIES:
            for x, rate in zip(loads, grid[m]):
                tail = OVERLOAD_QUEUE_TAIL_S if p != "reject" and x >= 1 else OVERLOAD_TAIL_S
                cells.append(Cell("overload", f"{m} {p} {x:g}x {rate}/s", key(m, p),
                                  {"rate": rate, "load_x": x, "policy": p, "open_loop": True},
                                  point(rate, dur), warm_path=warm, extra_s=short + tail, drains=False))
    # 2. the cost below saturation: the peers' keep-alive cell on epoll under each policy
    cost_cells = []
    if "epoll" in models:
        for p in OVERLOAD_POLICIES:
            cost_cells.append(Cell("overload", f"epoll {p} wrk -c{OVERLOAD_COST_CONNS} keep-alive 13 B",
                                   spindle("epoll", _label=f"epoll-ka-{p}", overload=p),
                                   {"policy": p, "part": "cost", "conc": OVERLOAD_COST_CONNS},
                                   _wrk(HELLO, OVERLOAD_COST_CONNS, lab.cell_s), warm_path=HELLO))
    lab.note("overload", f"Past the knee: tools/openloop ({OPEN_ARRIVALS} arrivals, keep-alive, at most "
                         f"{OVERLOAD_CONNS} connections, every latency from the request's intended send time) on "
                         f"`{OVERLOAD_PATH}`: {OVERLOAD_WORK_MS} ms of the serving thread's CPU per request "
                         f"(delay_kind = cpu, as seeds 001 and 002), each model on one core under `overload = "
                         f"queue`, `shed` (overload_target 20 ms) and `reject`, with max_connections = "
                         f"{OVERLOAD_MAX_CONNS} (the cap `reject` and `shed` refuse at; a pool's own queue is 2 x its 4 "
                         f"threads{'; prefork 2 workers x 2 threads' if 'prefork' in chosen else ''}; under queue the "
                         f"connections past the cap wait in the kernel's backlog, where no policy sees them, and their "
                         f"requests are lost when the generator gives up). Capacity "
                         f"found, not guessed: one core ÷ CPU per request at {OVERLOAD_PROBE_RATE}/s (policy "
                         f"queue); then {dur:g} s points at "
                         + ", ".join(f"{x:g}x" for x in loads) + " of it: "
                         + "; ".join(f"{m} {', '.join(f'{r:,}' for r in g)}/s" for m, g in grid.items())
                         + f". {min(OVERLOAD_REPEATS, lab.repeats)} repeat(s) per point: the curves describe, "
                           f"no verdict rests on them.")
    lab.note("overload", f"Per point: goodput = 200s answered within {OVERLOAD_DEADLINE_MS} ms of their due time "
                         f"and before the schedule ended, per second of schedule (those answered in the tail after "
                         f"it had server time no steady state has: counted, they read up to 118% of a measured "
                         f"capacity in the first published run); the 200s' p50 and p99; 503s per second (reject's refusals and "
                         f"shed's answers); requests lost (no answer within {OVERLOAD_TIMEOUT_MS} ms, when the "
                         f"generator gives up and closes the connection); and the queue wait inside spindle from its /metrics "
                         f"(the requests served: shed ones are left out of its histograms). The workload checks "
                         f"(bucket totals against the answers seen) are not applied: past the knee the server "
                         f"finishes requests whose client has given up, which those checks count as a fault.")
    if not lab.full:
        lab.note("overload", f"The default run: {', '.join(OVERLOAD_MODELS)} under each policy; every other model "
                             f"(the pool among them) with `python -m bench --full` (the curves are descriptive: no "
                             f"verdict rests on them).")
    lab.note("overload", "nginx is not in this experiment: it has no endpoint that does CPU work (nginx-light has "
                         "no scripting module), and on its static file its capacity on one core (~20,000/s and "
                         "more, the peers experiment) times 3 is past the open-loop generator's highest clean "
                         "rate (the openloop experiment's calibration), so its curve past the knee would be the "
                         "generator's. nginx's own answer to overload is `queue`: requests wait in its accept "
                         "queue and event loop (limit_req limits per client key, not by the server's load).")
    if cost_cells:
        lab.note("overload", f"The cost when not overloaded: the peers' keep-alive cell (`wrk -t1 "
                             f"-c{OVERLOAD_COST_CONNS} -d{lab.cell_s:g}s`, 13 B) on epoll under each policy, "
                             f"{lab.repeats} repeats, interleaved: server CPU per request, shed and reject against "
                             f"queue, is a “no difference” claim (±5%).")
    run_cells(lab, "overload", cells, min(OVERLOAD_REPEATS, lab.repeats), [warm], fmt_overload)
    if cost_cells:
        run_cells(lab, "overload", cost_cells, lab.repeats, [HELLO], fmt_wrk)


def fmt_overload(r: dict) -> str:
    return (f"{r.get('rate') or r.get('probe_rate'):6}/s offered  goodput {r['goodput_rate']:7.0f}/s  "
            f"503 {r['s503_rate']:6.0f}/s  lost {r['lost_rate']:6.0f}/s  200s p50 "
            f"{r['ok_p50_ms'] if r['ok_p50_ms'] is not None else float('nan'):7.1f} p99 "
            f"{r['ok_p99_ms'] if r['ok_p99_ms'] is not None else float('nan'):7.1f} ms")


# --------------------------------------------------------------------------
# Beyond the seeds: big downloads, memory under 10k idle keep-alive connections
# --------------------------------------------------------------------------

def downloads(lab: Lab, models: list[str]) -> None:
    dur = lab.cell_s
    dl_models = ["epoll", "pool"]
    cells = []
    for path in (MB1, MB100):
        for m in dl_models + ["nginx"]:
            key = NGINX if m == "nginx" else spindle(m)
            cells.append(Cell("downloads", f"{m} {lab.sizes[path] >> 20} MB wrk -c 4", key,
                              {"file_mb": lab.sizes[path] >> 20, "conc": 4}, _wrk(path, 4, dur)))
    lab.note("downloads", f"wrk -t 1 -c 4 -d {dur}s on a 1 MB and a 100 MB file (random bytes, generated "
                          f"in the temporary docroot); MB/s = bytes read / duration (1 MB = 10^6 bytes). "
                          f"iterative is left out: with 4 keep-alive connections it serves one.")
    run_cells(lab, "downloads", cells, lab.repeats, [MB1, MB100],
              lambda r: f"{r['mbps']:8.1f} MB/s  {r['requests']} files  errors {r['errors']}")


IDLE_CONNS = 10000
IDLE_SETTLE_S = 2.0       # memory is read this long after the last response
IDLE_SOURCES = 4          # client addresses 127.0.0.1-4: ephemeral ports to spare
IDLE_KEEPALIVE = "300s"   # longer than it takes to open 10,000 TLS connections from Python


def idle_rss(lab: Lab, models: list[str]) -> None:
    """Memory per idle keep-alive connection, plain and TLS, spindle's
    event-driven models beside nginx: PSS of the server's processes before
    the connections open and IDLE_SETTLE_S after the last one's response."""
    nconn = IDLE_CONNS if not lab.smoke else 200
    rss_models = [m for m in ("epoll", "uring", "pool", "prefork") if m in models]
    # header_timeout 60s as nginx's client_header_timeout (which also bounds its
    # handshakes): with spindle's 10 s, two runs on a loaded machine lost 266 and
    # 60 of 10,000 TLS connections, closed between the handshake and the request.
    settings = {"max_connections": 16384, "keepalive_timeout": IDLE_KEEPALIVE, "header_timeout": "60s"}
    nginx_room = {"_nginx_connections": 16384, "_nginx_keepalive_timeout": IDLE_KEEPALIVE}
    cert, key = ("cert.pem", "key.pem") if lab.plan is not None else lab.tls_files()
    refusal = None if lab.plan is not None else lab.spindle_tls_refusal(cert, key)
    keys = {"tls_certificate": str(cert), "tls_certificate_key": str(key)}

    def run(tls: bool):
        def measure(lab: Lab, s: Server) -> dict:
            base = s.memory()
            cmd = ["taskset", "-c", LOAD_CPUS, "timeout", "-k", "5", "600", "prlimit",
                   f"--nofile={NOFILE}:{NOFILE}", sys.executable, "-m", "bench.client", "idle", HOST,
                   str(s.port), HELLO, str(nconn), str(lab.sizes[HELLO]), "https" if tls else "http",
                   str(IDLE_SOURCES)]
            p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True, cwd=REPO)
            try:
                ready, _, _ = select.select([p.stdout], [], [], 540)
                if not ready:
                    return {"failed_run": "idle client did not report within 540 s"}
                first = json.loads(p.stdout.readline() or "{}")
                # parked connections released, pages settled; no malloc_trim or anything else from outside
                last = first.get("last_response_mono") or time.monotonic()
                time.sleep(max(0.0, last + IDLE_SETTLE_S - time.monotonic()))
                held = s.memory()
                p.stdin.close()
                end = json.loads(p.stdout.readline() or "{}")
            finally:
                if p.poll() is None:
                    try:
                        p.wait(60)
                    except subprocess.TimeoutExpired:
                        p.kill()
                        p.wait()
            problems = []
            if first.get("errors"):
                problems.append(f"{first['errors']} connections failed: {first.get('error_samples', [])[:2]}")
            if first.get("open", 0) < nconn:
                problems.append(f"only {first.get('open', 0)} of {nconn} connections stayed open")
            if end.get("open_at_end") is not None and end["open_at_end"] < first.get("open", 0):
                problems.append(f"{first.get('open', 0) - end['open_at_end']} connections closed while held")
            return {"tool": "python-idle", "conns": nconn, "opened": first.get("opened", 0),
                    "open": first.get("open", 0), "open_at_end": end.get("open_at_end"),
                    "setup_s": first.get("setup_s"), "base_rss_mb": base["rss_mb"], "base_pss_mb": base["pss_mb"],
                    "rss_mb": held["rss_mb"], "pss_mb": held["pss_mb"], "processes": held["processes"],
                    "threads": held["threads"],
                    "kb_per_conn": (held["pss_mb"] - base["pss_mb"]) * 1024 / max(1, first.get("open", 1)),
                    "rss_kb_per_conn": (held["rss_mb"] - base["rss_mb"]) * 1024 / max(1, first.get("open", 1)),
                    # a failed connection is also one not open: count it once
                    "errors": max(first.get("errors", 0), nconn - first.get("open", 0)),
                    "problems": problems}
        return measure

    cells, skipped = [], []
    for m in rss_models + ["nginx"]:
        for tls in (False, True):
            if m == "nginx":
                key_ = (server_key("nginx", "nginx-tls", _label="nginx", **keys, **nginx_room) if tls
                        else server_key("nginx", "nginx", **nginx_room))
            else:
                key_ = spindle(m, **settings, **({"tls": "on", **keys} if tls else {}))
            # opening 10,000 connections from Python: ~15 s plain, ~80 s TLS (the run of 2026-11-26)
            cell = Cell("idle_rss", f"{m} {'https' if tls else 'http'} {nconn} idle keep-alive", key_,
                        {"conns": nconn, "transport": "TLS" if tls else "plain"}, run(tls),
                        extra_s=(90.0 if tls else 20.0) * nconn / IDLE_CONNS, retake=False)
            (skipped if tls and refusal and m != "nginx" else cells).append(cell)
    if skipped:
        skip_cells(lab, "idle_rss", skipped, refusal)
    lab.note("idle_rss", f"bench/client.py opens {nconn:,} connections (200 at a time, from {IDLE_SOURCES} "
                         f"loopback addresses), plain HTTP or TLS (Python's ssl, TLS 1.3), does one keep-alive "
                         f"request on each and holds them. Memory is read from /proc before they open and "
                         f"{IDLE_SETTLE_S:g} s after the last response, nothing done to the server in between "
                         f"(no malloc_trim): PSS summed over all the server's processes (shares shared pages "
                         f"out; the fair total for multi-process servers) and RSS. kB per connection = PSS "
                         f"growth / connections held (1 kB = 1024 bytes). Servers on CPU {SERVER_CPUS}, the "
                         f"client on CPU {LOAD_CPUS}, both under prlimit --nofile={NOFILE}. spindle: "
                         f"max_connections=16384, keepalive_timeout={IDLE_KEEPALIVE}, header_timeout=60s (nginx's "
                         f"client_header_timeout, which bounds its handshakes too); nginx: worker_processes 1, "
                         f"worker_connections 16384, keepalive_timeout {IDLE_KEEPALIVE}, the tls experiment's "
                         f"certificate (self-signed ECDSA P-256) and suites.")
    why = {"iterative": "serves one connection at a time: the others would wait in the backlog",
           "fork": "a process per connection: 10,000 processes (a fork bomb on this machine)",
           "thread": "a thread per connection: 10,000 threads"}
    for m in [m for m in models if m not in rss_models]:
        lab.note("idle_rss", f"{m} skipped: {why.get(m, 'not in the list')}.")
    lab.note("idle_rss", "measured once per server and transport; docs/bench/idle-memory.md says how much the "
                         "figures moved between runs (epoll's and uring's plain ones most: how much memory that "
                         "connections free when they go idle stays resident depends on how fast they arrive).")
    run_cells(lab, "idle_rss", cells, 1, [HELLO],
              lambda r: f"{r['transport']:<5} {r['open']} open  RSS {r['rss_mb']:7.1f} MB  PSS {r['pss_mb']:7.1f} MB "
                        f"(idle {r['base_pss_mb']:.1f})  {r['kb_per_conn']:.2f} kB/conn  procs {r['processes']} "
                        f"threads {r['threads']}")


# --------------------------------------------------------------------------
# What the statistics and the file cache cost (or save)
# --------------------------------------------------------------------------

OVERHEAD_VARIANTS = (
    ("stats on, cache on", {}),
    ("stats off, cache on", {"stats": "off"}),
    ("stats on, cache off", {"cache_size": "0"}),
    ("stats off, cache off", {"stats": "off", "cache_size": "0"}),
)


def overhead(lab: Lab, models: list[str]) -> None:
    dur = lab.cell_s
    cells = []
    for path in (PAGE, HELLO):
        for label, settings in OVERHEAD_VARIANTS:
            cells.append(Cell("overhead", f"epoll {label} {lab.sizes[path]}B", spindle("epoll", **settings),
                              {"variant": label, "body": lab.sizes[path]},
                              lambda lab_, s, p=path, d=dur: lab_.wrk(s, p, 100, d)))
    lab.note("overhead", f"epoll on one core, `wrk -t1 -c 100 -d {dur}s` with keep-alive, with the shared-"
                         f"memory statistics (`stats`) and the file cache (`cache_size = 0`) switched on and off.")
    run_cells(lab, "overhead", cells, lab.repeats, [PAGE, HELLO], fmt_wrk)


# --------------------------------------------------------------------------
# Peers: nginx, lighttpd and h2o beside spindle's epoll and uring
# --------------------------------------------------------------------------

PIPELINE_DEPTH = 16
PYTHON_CLIENT_START_S = 0.3   # bench/client.py's interpreter start-up (the plan's estimate)
# (key, label, connections, path, how): the issue's four cells, and the pipelined
# one again from a client that can time batches
PEER_CELLS = (("keepalive", "wrk -c200 keep-alive 13 B", 200, HELLO, "wrk"),
              ("pipelined", f"wrk -c50 {PIPELINE_DEPTH} pipelined 13 B", 50, HELLO, "pipeline"),
              ("pipelined_latency", f"python -c50 {PIPELINE_DEPTH} pipelined 13 B", 50, HELLO, "pipeline latency"),
              ("close", "ab -c200 new connection 13 B", 200, HELLO, "ab"),
              ("file1m", "wrk -c50 1 MB file", 50, MB1, "wrk"))
PEER_SERVERS = ("nginx", "lighttpd", "h2o")
PEER_MODELS = ("epoll", "uring")


# wrk's latency figures under pipelining that cannot be reported (see the note in peers())
WRK_PIPELINED_LATENCY = ("mean_ms", "stdev_ms", "p50_ms", "p90_ms", "p99_ms")


def wrk_pipelined(lab: Lab, s: Server, path: str, conns: int, dur: float, depth: int = PIPELINE_DEPTH) -> dict:
    """wrk with `depth` requests per write. Keeps max_ms (the slowest batch
    really took that long) and drops the rest of wrk's latency figures."""
    m = lab.wrk(s, path, conns, dur, script="pipeline.lua", script_args=[path, str(depth)])
    for k in WRK_PIPELINED_LATENCY:
        m.pop(k, None)
    return m


def _peer_cell_run(how: str, path: str, conns: int, dur: float):
    if how == "ab":
        return _ab(path, conns, False, dur)
    if how == "pipeline":
        return lambda lab, s: wrk_pipelined(lab, s, path, conns, dur)
    if how == "pipeline latency":
        return lambda lab, s: lab.pipeline_latency(s, path, conns, PIPELINE_DEPTH, dur)
    return _wrk(path, conns, dur)


def peers(lab: Lab, models: list[str]) -> None:
    dur = lab.cell_s
    servers = [(kind, server_key(kind, kind)) for kind in PEER_SERVERS]
    servers += [(m, spindle(m)) for m in PEER_MODELS if m in models]
    missing = {name: missing_peer(name) for name in PEER_SERVERS}
    cells, skipped = [], {name: [] for name, why in missing.items() if why}
    for key, label, conns, path, how in PEER_CELLS:
        if key == "pipelined_latency" and not lab.full:
            continue           # a second pipelining cell, for its p99 only: --full
        for name, server in servers:
            # Little's law counts requests in flight: DEPTH per connection when pipelining
            in_flight = conns * (PIPELINE_DEPTH if how == "pipeline latency" else 1)
            params = {"peer_cell": key, "conc": in_flight}
            if how == "pipeline":       # wrk: conc connections, each with a batch of DEPTH in flight
                params["pipeline_depth"] = PIPELINE_DEPTH
            cell = Cell("peers", f"{name} {label}", server, params,
                        _peer_cell_run(how, path, conns, dur), warm_path=path,
                        extra_s=PYTHON_CLIENT_START_S if how == "pipeline latency" else 0.0,
                        same_as=ab_command(path, conns, False, dur) if how == "ab" else "", count_calls=True)
            skipped.get(name, cells).append(cell)
    for name, mine in skipped.items():
        skip_cells(lab, "peers", mine, missing[name])
    lab.note("peers", f"Side by side: every server with one worker on CPU {SERVER_CPUS}, every "
                      f"generator on CPU {LOAD_CPUS}, the same docroot. Cells: `wrk -t1 -c200 -d{dur:g}s` "
                      f"keep-alive on the 13-byte file; `wrk -t1 -c50` with {PIPELINE_DEPTH} requests pipelined "
                      f"per write (bench/lua/pipeline.lua); `ab -c200` with a new connection per request; "
                      f"`wrk -t1 -c50` on a 1 MB file (GB/s = 10^9 bytes/s read by wrk, server CPU in cores and "
                      f"µs per MB).")
    lab.note("peers", "nginx: the lab's file-serving configuration (sendfile, tcp_nopush, open_file_cache, "
                      "worker_processes 1); lighttpd: server.max-worker 0 (one process), sendfile, "
                      "server.stat-cache-engine simple (its stat cache, as its wiki recommends); h2o: num-threads 1, file.dir (h2o 2.2 has no "
                      "sendfile, and its open-file cache is always on with no directive). No access logs. "
                      "The exact configurations are in the Setup section.")
    if not lab.full:
        lab.note("peers", "The default run measures pipelining once, with wrk (req/s and its slowest batch, where "
                          "a delayed-ACK stall shows as ~40 ms); the per-batch p99 from bench/client.py is a second "
                          "pipelining cell per server (15 measurements, ~1 minute) and runs with "
                          "`python -m bench --full`. The pipelining stall itself has a regression test in make test.")
    lab.note("peers", f"Pipelined latency comes from its own cell (--full): wrk times a batch of {PIPELINE_DEPTH} as one "
                      f"sample, then 'corrects' its histogram for coordinated omission with a per-request "
                      f"interval, which adds synthetic samples below the real ones, so its mean and percentiles "
                      f"read too low (often 0 ms); the wrk cell reports only its slowest batch. The latency cell "
                      f"runs bench/client.py (Python asyncio, 50 connections, {PIPELINE_DEPTH} requests per write, "
                      f"each batch timed from the write to its last response byte). That client is slower than "
                      f"wrk and usually client-bound, so its p99 is at the client's pace, the same for every "
                      f"server; a delayed-ACK stall (~40 ms) shows in it whatever the pace.")
    run_cells(lab, "peers", cells, lab.repeats, [HELLO, MB1],
              lambda r: (fmt_any(r) if r.get("tool") in ("ab", "wrk") and "p99_ms" in r else
                         f"{r['rps']:8.0f} req/s  batch p99 {r['p99_ms']:7.2f} ms" if "p99_ms" in r else
                         f"{r['rps']:8.0f} req/s  slowest batch {r['max_ms']:7.2f} ms  errors {r['errors']}"))


# --------------------------------------------------------------------------
# HTTP/2: the models under multiplexing (h2load), the same cells over HTTP/1.1 beside them
# --------------------------------------------------------------------------

# connections x requests in flight on each: always 100 in flight, from one connection to a hundred
H2_SHAPES = ((1, 100), (10, 10), (100, 1))
H2_BODIES = {HELLO: "13 B", KB100: "100 KiB"}
H2_DEFAULT_BODIES = (HELLO,)              # --full: the 100 KiB file too
H2_MODELS = ("epoll", "uring", "pool")    # two event loops and a pool; --full: every model
H2_CELL_S = 1.0          # h2load -D: 1 s is 30,000 and more answers of the 13-byte file
H2LOAD_START_S = 0.05    # h2load's start, connections and stop beyond -D (the plan's estimate)
H2_COUNTED = (10, 10)    # the shape whose system calls are counted (untimed) and the CPU target's
H2_PROTOS = ("h2", "h1")
# The CPU target's cell again at one offered rate for spindle's models and h2o (h2load --rps, per
# connection): CPU per request falls several-fold from light load to saturation, so the target's ratio
# compares only where both servers carry the same load. Under every server's rate at 10x10 on one core
# in the published runs (epoll 194,000/s at the least, h2o 319,000/s); nginx (61,000/s) is left out.
H2_MATCHED_RATE = 100_000
H2_NGINX_KEEPALIVE_REQUESTS = "1000000"   # more than a cell's requests on one connection


def h2_cell(proto: str, conns: int, streams: int, path: str) -> str:
    """The report's column for a cell: protocol, shape and body."""
    return f"{proto} {conns}x{streams} {H2_BODIES[path]}"


def h2_matched_cell() -> str:
    """The report's column for the CPU target's cell at H2_MATCHED_RATE."""
    return f"{h2_cell('h2', *H2_COUNTED, HELLO)} at {H2_MATCHED_RATE:,}/s"


def h2(lab: Lab, models: list[str]) -> None:
    """h2load with connections x streams per connection 1x100, 10x10 and
    100x1 over HTTP/2 by prior knowledge, and the same cells over HTTP/1.1
    (h2load --h1, which pipelines the streams), on every chosen model, h2o
    and nginx. With 100 requests always in flight, what changes is how many
    connections carry them: a model that gives a connection one thread or
    process serves that connection's streams in it, an event loop serves
    every connection in one."""
    dur = min(H2_CELL_S, lab.cell_s)
    bodies = list(H2_BODIES) if lab.full else list(H2_DEFAULT_BODIES)
    chosen = [m for m in models if lab.full or m in H2_MODELS]
    # (name, server for the HTTP/2 cells, server for the HTTP/1.1 cells)
    servers = [(m, spindle(m), spindle(m)) for m in chosen]
    # nginx ends a connection after keepalive_requests (1000 by default), and h2load never opens it again:
    # a 10x10 cell would stop at 10,000 requests (10,000/s in a 1 s cell)
    nk = {"_label": "nginx", "_nginx_keepalive_requests": H2_NGINX_KEEPALIVE_REQUESTS}
    servers += [("h2o", server_key("h2o", "h2o"), server_key("h2o", "h2o")),
                ("nginx", server_key("nginx", "nginx-h2c", **nk), server_key("nginx", "nginx", **nk))]
    missing = {name: missing_peer(name) for name in ("h2o", "nginx")}
    cells, skipped = [], {name: [] for name, why in missing.items() if why}
    for path in bodies:
        for conns, streams in H2_SHAPES:
            for proto in H2_PROTOS:
                for name, key2, key1 in servers:
                    # one connection at a time: the others would wait in the backlog for the whole cell
                    if name == "iterative" and conns > 1:
                        continue
                    counted = (conns, streams) == H2_COUNTED and path == HELLO
                    cell = Cell("h2", f"{name} {h2_cell(proto, conns, streams, path)}",
                                key2 if proto == "h2" else key1,
                                {"h2_cell": h2_cell(proto, conns, streams, path), "proto": proto,
                                 "conns": conns, "streams": streams, "body": H2_BODIES[path],
                                 "conc": conns * streams},
                                lambda lab_, s, p=path, c=conns, m=streams, h1=proto == "h1":
                                    lab_.h2load(s, p, c, m, dur, h1=h1),
                                warm_path=path, extra_s=dur - lab.cell_s + H2LOAD_START_S, count_calls=counted)
                    skipped.get(name, cells).append(cell)
    if HELLO in bodies:
        conns, streams = H2_COUNTED
        for name, key2, _ in servers:
            if name in ("nginx", "iterative"):  # nginx: too slow for the rate; iterative: one connection at a time
                continue
            cell = Cell("h2", f"{name} {h2_matched_cell()}", key2,
                        {"h2_cell": h2_matched_cell(), "proto": "h2", "conns": conns, "streams": streams,
                         "body": H2_BODIES[HELLO], "conc": conns * streams, "rate": H2_MATCHED_RATE,
                         "part": "matched"},
                        lambda lab_, s, c=conns, m=streams: lab_.h2load(s, HELLO, c, m, dur,
                                                                        rate=H2_MATCHED_RATE),
                        warm_path=HELLO, extra_s=dur - lab.cell_s + H2LOAD_START_S)
            skipped.get(name, cells).append(cell)
    for name, mine in skipped.items():
        skip_cells(lab, "h2", mine, missing[name])
    lab.note("h2", f"`h2load -t 1 -c C -m M -D {dur * 1000:g}ms` with C connections x M requests in flight on "
                   f"each: 1x100, 10x10 and 100x1 (always 100 in flight), on the "
                   + " and ".join(H2_BODIES[p] for p in bodies) + " file"
                   + ("s" if len(bodies) > 1 else "") + ": over HTTP/2 by prior knowledge (h2c) and over "
                   "HTTP/1.1 (`--h1`, where h2load pipelines the M requests on each connection: HTTP/1.1's "
                   f"only way to have several in flight on one). Every server on CPU {SERVER_CPUS} with one "
                   f"worker, h2load on CPU {LOAD_CPUS}; {lab.repeats} repeat(s), interleaved. rate = 2xx "
                   f"answers / the measured duration; server CPU per request from the same meter as every "
                   f"other cell; system calls per request counted (untimed) in the "
                   f"{H2_COUNTED[0]}x{H2_COUNTED[1]} cells on 13 B. The CPU target's cell (HTTP/2 "
                   f"{H2_COUNTED[0]}x{H2_COUNTED[1]}, 13 B) runs again for spindle's models and h2o at one offered "
                   f"rate, {H2_MATCHED_RATE:,} requests/s (`--rps` {H2_MATCHED_RATE // H2_COUNTED[0]:,} on each "
                   f"connection), so that their CPU per request is compared at the same load; a repeat under "
                   f"95% of it answered is taken again.")
    lab.note("h2", "HTTP/2 without TLS (h2c), as a choice: the question is the models' and the servers' HTTP/2 "
                   "work (framing, HPACK, streams), which TLS would bury under the same record encryption in "
                   "every server (the tls experiment measures that cost apart), and every other cell of the "
                   "lab is plain HTTP. All three servers document h2c by prior knowledge: h2o speaks it on "
                   "every plain listener (its file-serving configuration from the peers cells, unchanged); "
                   "nginx 1.22 needs `listen ... http2` without ssl (its documentation: \"nginx can also be "
                   "configured to accept HTTP/2 connections without SSL\"), and such a port speaks HTTP/2 "
                   "only, so nginx's HTTP/1.1 cells run on the ordinary file-serving nginx and its HTTP/2 cells "
                   "on the same configuration with `http2` on the listen line (both in the Setup section); "
                   "HTTP/2 settings are each server's defaults. Browsers speak HTTP/2 over TLS only.")
    lab.note("h2", f"nginx here with `keepalive_requests {H2_NGINX_KEEPALIVE_REQUESTS}` (its default: 1000): it "
                   f"ends a connection after that many requests (GOAWAY over HTTP/2, a close over HTTP/1.1), and "
                   f"h2load, unlike wrk or a browser, never opens it again, so with the default a 1x100 cell "
                   f"ended after 1,000 requests. spindle and h2o set no such cap.")
    if not lab.full:
        lab.note("h2", f"The default run measures {', '.join(H2_MODELS)}, h2o and nginx on the 13-byte file; "
                       f"every model and the 100 KiB file run with `python -m bench --full` (iterative there "
                       f"in the 1x100 cells only: it serves one connection at a time).")
    run_cells(lab, "h2", cells, lab.repeats, list(bodies), fmt_h2)


def fmt_h2(r: dict) -> str:
    return (f"{r['rps']:8.0f} req/s  mean {r.get('mean_ms', float('nan')):7.2f} ms  {r.get('protocol')}  "
            f"errors {r['errors']}")


# --------------------------------------------------------------------------
# Slow clients: a fresh client's latency beside slow ones, every model and nginx
# --------------------------------------------------------------------------

SLOW_WRITERS = 50        # trickle a request head, a byte every 0.25 s (bench/client.py slow)
SLOW_READERS = 50        # read the 1 MB file 32 bytes every 0.25 s through a 4 KiB receive buffer
SLOW_RATE = 1000         # the fresh client's open loop: 1,000 requests a second, keep-alive
SLOW_CELL_S = 1.0        # 1,000 samples per repeat: enough for a p99 (the report's rule: 10 beyond it)
SLOW_SETUP_S = 0.3       # the slow clients' start (Python) and connections, for the plan's estimate (0.27 s measured)
SLOW_THREADS = 64        # the pools' threads: fewer than the 100 slow clients
SLOW_TIMEOUT_MS = 1000   # a fresh request unanswered this long after it was due is an error
# iterative never takes the slow clients all up: they wait 1.5 s for it (bench/client.py SLOW_READY_S), and
# every fresh request times out
SLOW_HELD_S = 1.5 + SLOW_TIMEOUT_MS / 1000
# ...which it shows in every repeat alike (no verdict rests on the slow clients): --full
SLOW_FULL_ONLY = ("iterative",)


def slow(lab: Lab, models: list[str]) -> None:
    """100 slow clients held open while a fresh client's open loop measures
    what they cost it: a model that gives each connection a thread or a
    process for its life pays one per slow client; one that serves a
    connection only while it has bytes to move does not; one that serves one
    connection at a time is held by the first."""
    dur = min(SLOW_CELL_S, lab.cell_s)
    keys = {m: spindle(m, threads=SLOW_THREADS) for m in models if lab.full or m not in SLOW_FULL_ONLY}
    keys["nginx"] = NGINX
    n = SLOW_WRITERS + SLOW_READERS
    run = lambda lab_, s: lab_.beside_slow_clients(s, HELLO, SLOW_RATE, dur, SLOW_WRITERS, SLOW_READERS,
                                                   timeout_ms=SLOW_TIMEOUT_MS)
    cells = [Cell("slow", f"{m} fresh {SLOW_RATE}/s beside {n} slow", key,
                  # no warm-up: the slow clients' own start (a few tenths of a second of requests) is one
                  {"slow_clients": n, "rate": SLOW_RATE, "open_loop": True}, run,
                  extra_s=dur - lab.cell_s + SLOW_SETUP_S + (SLOW_HELD_S if m == "iterative" else 0.0),
                  # iterative answers no fresh request here: no system calls per request to count
                  count_calls=m != "iterative", drains=False) for m, key in keys.items()]
    lab.note("slow", f"{SLOW_WRITERS} clients send a request head one byte every 0.25 s (never its last byte) "
                     f"and {SLOW_READERS} ask for the 1 MB file and read it 32 bytes every 0.25 s through a "
                     f"4 KiB receive buffer (bench/client.py slow); once the server holds them all (every "
                     f"reader has had bytes, or 1.5 s have passed), a fresh client "
                     f"sends {SLOW_RATE:,} requests/s for {dur:g} s, keep-alive, on the 13-byte file "
                     f"(tools/openloop: latency from each request's intended send time; a request unanswered "
                     f"{SLOW_TIMEOUT_MS / 1000:g} s after it was due is an error, and where more than 1% were, p99 "
                     f"is at least that). The "
                     f"server's threads and processes are read while the slow clients are held. spindle with "
                     f"threads = {SLOW_THREADS} for the pools (fewer than the {n} slow clients), "
                     f"max_connections 10240 (the default); nginx as in the peers cells. Every server on one "
                     f"core; the slow clients and the fresh one on CPU {LOAD_CPUS}.")
    if not lab.full and any(m in SLOW_FULL_ONLY for m in models):
        lab.note("slow", f"{', '.join(m for m in models if m in SLOW_FULL_ONLY)} runs with `python -m bench --full`: "
                         f"serving one connection at a time, it is held by the first slow client, and no fresh "
                         f"request is answered (every repeat of the published runs alike).")
    run_cells(lab, "slow", cells, lab.repeats, [HELLO], fmt_slow)


def fmt_slow(r: dict) -> str:
    ms = lambda v: f"{v:7.2f}" if v is not None else "      —"
    return (f"{r['rps']:8.0f}/s of {r['rate']}  p50 {ms(r.get('p50_ms'))} ms  p99 {ms(r.get('p99_ms'))} ms"
            f"{' (censored)' if r.get('p99_censored') else ''}  timeouts {r.get('timeouts', 0)}  "
            f"threads {r.get('held_threads')} procs {r.get('held_processes')}")


# --------------------------------------------------------------------------
# The pipelined stall and TCP_NODELAY: off in spindle, on in nginx (outside the default run)
# --------------------------------------------------------------------------

# 16 pipelined answers fit one gathered write (CONN_IOV_MAX = 32 iovecs, src/conn.h); 40 need more than one
NODELAY_DEPTHS = (16, 40)
NODELAY_CONNS = 50


def nodelay(lab: Lab, models: list[str]) -> None:
    """The explanation the lab gives for nginx's pipelined stall (and
    docs/http.md for spindle's TCP_NODELAY), put to a test that could refute
    it: Nagle holds a small write while an earlier one is unacknowledged, and
    the client delays its ACK while it waits for the rest of its batch, so a
    server that answers a batch in more than one write waits ~40 ms a batch.
    If so, spindle with TCP_NODELAY off stalls exactly where a batch needs
    more than one write (40 deep, not 16), and nginx stops stalling once it
    neither corks nor runs Nagle. tools/nodelay's LD_PRELOAD shim turns
    TCP_NODELAY off in spindle and on at accept in nginx, without touching
    either server's code; nginx with `tcp_nopush on` (the lab's file-serving
    configuration) clears TCP_NODELAY itself to cork a sendfile response, so
    its variants turn tcp_nopush off, then also set TCP_NODELAY at accept."""
    dur = lab.cell_s
    variants = [("epoll", spindle("epoll"), "as shipped")]
    if "epoll" in models:
        variants.append(("epoll TCP_NODELAY off", spindle("epoll", _nodelay="off", _label="epoll-nodelay-off"),
                         "TCP_NODELAY off"))
    else:
        variants = []
    variants += [("nginx", NGINX, "as shipped (tcp_nopush on)"),
                 ("nginx tcp_nopush off", server_key("nginx", "nginx", _nginx_tcp_nopush="off",
                                                     _label="nginx-nopush-off"), "tcp_nopush off"),
                 ("nginx tcp_nopush off, TCP_NODELAY on",
                  server_key("nginx", "nginx", _nginx_tcp_nopush="off", _nodelay="on", _label="nginx-nodelay-on"),
                  "tcp_nopush off, TCP_NODELAY on at accept")]
    cells = []
    for depth in NODELAY_DEPTHS:
        for name, key, variant in variants:
            cells.append(Cell("nodelay", f"{name} wrk -c{NODELAY_CONNS} {depth} pipelined", key,
                              {"pipeline_depth": depth, "conc": NODELAY_CONNS, "variant": variant},
                              lambda lab_, s, d=depth: wrk_pipelined(lab_, s, HELLO, NODELAY_CONNS, dur, d),
                              warm_path=HELLO, count_calls=True))
    lab.note("nodelay", f"`wrk -t1 -c{NODELAY_CONNS} -d{dur:g}s` with {' and '.join(map(str, NODELAY_DEPTHS))} "
                        f"requests pipelined per write (bench/lua/pipeline.lua) on the 13-byte file: spindle epoll "
                        f"and nginx as the peers cells run them, and each with tools/nodelay/nodelay_shim.c "
                        f"preloaded (LD_PRELOAD): NODELAY_SHIM=off makes spindle's setsockopt(TCP_NODELAY, 1) on "
                        f"its listeners set 0, so every accepted socket runs with Nagle on; nginx with "
                        f"`tcp_nopush off` (as shipped, `tcp_nopush on` makes it clear TCP_NODELAY and cork each "
                        f"sendfile response until the connection goes idle), and with it NODELAY_SHIM=on, which "
                        f"sets TCP_NODELAY on every socket nginx accepts (nginx sets it itself only when a "
                        f"connection goes idle in keep-alive). Time per batch = connections × depth ÷ req/s (Little's law: "
                        f"wrk keeps one batch in flight per connection). A gathered write holds up to 32 iovecs "
                        f"(src/conn.h CONN_IOV_MAX): 16 answers fit one write, 40 do not.")
    run_cells(lab, "nodelay", cells, lab.repeats, [HELLO],
              lambda r: f"{r['rps']:8.0f} req/s  slowest batch {r['max_ms']:7.2f} ms  "
                        f"batch {NODELAY_CONNS * r['pipeline_depth'] / r['rps'] * 1000 if r['rps'] else 0:6.2f} ms")


# --------------------------------------------------------------------------
# TLS: handshakes/s and server CPU per handshake, every model and nginx
# --------------------------------------------------------------------------

TLS_CONNS = 50
# openssl s_time -time N loops until the whole-second clock has passed N: it
# runs N to N + 1 s (4.06 s on average for -time 3 in the lab's runs)
S_TIME_EXTRA_S = 1.0
# (key, label, how): full handshakes, resumed ones, keep-alive over TLS, and the
# same servers over plain HTTP with a new connection per request, to compare rankings
TLS_CELLS = (("full", f"https ab -c{TLS_CONNS} new connection", "ab"),
             ("resumed", "https s_time -reuse", "s_time"),
             ("keepalive", f"https ab -k -c{TLS_CONNS}", "ab -k"),
             ("plain", f"http ab -c{TLS_CONNS} new connection", "ab"))


# Resumed handshakes and the plain-HTTP ranking feed no verdict and no "why" row: 3 repeats, and s_time
# for 1 s (-time 1 runs 1-2 s), to keep the default run within its budget
TLS_FEW_REPEATS = 3
TLS_RESUMED_S = 1.0
# The default run's TLS cells: full handshakes, every model and nginx (the "why" section's TLS row). Resumed
# sessions, keep-alive over TLS and the plain-HTTP ranking rest on no verdict and no "why" row: --full
TLS_DEFAULT_CELLS = ("full",)
TLS_FULL_ONLY = ("iterative",)     # one handshake at a time: its rate is the round trip's, every model's the same


def _tls_cell_run(how: str, dur: float):
    if how == "s_time":
        return lambda lab, s: lab.s_time(s, HELLO, min(dur, TLS_RESUMED_S))
    return _ab(HELLO, TLS_CONNS, how == "ab -k", dur)


def tls(lab: Lab, models: list[str]) -> None:
    dur = lab.cell_s
    cert, key = ("cert.pem", "key.pem") if lab.plan is not None else lab.tls_files()
    refusal = None if lab.plan is not None else lab.spindle_tls_refusal(cert, key)
    keys = {"tls_certificate": str(cert), "tls_certificate_key": str(key)}
    servers = [("nginx", server_key("nginx", "nginx-tls", _label="nginx", **keys), NGINX)]
    servers += [(m, spindle(m, threads=64, tls="on", **keys), spindle(m, threads=64)) for m in models
                if lab.full or m not in TLS_FULL_ONLY]
    cells, skipped = [], []
    for ckey, label, how in TLS_CELLS:
        for name, tls_server, plain_server in servers:
            if ckey == "plain" and name == "nginx" and not lab.full:
                continue       # the ranking is the models'; nginx's plain cost is the peers' close cell
            if ckey not in TLS_DEFAULT_CELLS and not lab.full:
                continue
            cell = Cell("tls", f"{name} {label}", plain_server if ckey == "plain" else tls_server,
                        {"tls_cell": ckey, "conc": 1 if how == "s_time" else TLS_CONNS},
                        _tls_cell_run(how, dur), warm_path=HELLO,
                        extra_s=S_TIME_EXTRA_S + min(dur, TLS_RESUMED_S) - dur if how == "s_time" else 0.0,
                        count_calls=ckey == "full")
            (skipped if refusal and name != "nginx" else cells).append(cell)
    skip_cells(lab, "tls", skipped, refusal)
    lab.note("tls", f"HTTPS with a self-signed ECDSA P-256 certificate made by openssl for the run; TLS 1.2 "
                    f"and 1.3 with Mozilla's intermediate ECDHE suites; nginx with the same certificate and "
                    f"suites, its session cache and tickets on. Cells on the 13-byte file: `ab -c{TLS_CONNS}` "
                    f"over https (a full handshake per request), `openssl s_time -reuse` (one connection at a "
                    f"time, each resuming the first one's session: resumed handshakes/s is bound by round trips, "
                    f"CPU per handshake is not), `ab -k -c{TLS_CONNS}` over https, and `ab -c{TLS_CONNS}` over "
                    f"plain HTTP for the ranking without TLS. Server CPU per request = per handshake in the "
                    f"first two cells.")
    if not lab.full:
        lab.note("tls", f"The default run measures full handshakes (every model but {', '.join(TLS_FULL_ONLY)}, and "
                        f"nginx); the resumed-session, keep-alive and plain-HTTP ranking cells and "
                        f"{', '.join(TLS_FULL_ONLY)} run with `python -m bench --full` (no verdict rests on them).")
    few = [c for c in cells if c.params["tls_cell"] in ("plain", "resumed")]
    if few and lab.repeats > TLS_FEW_REPEATS:
        lab.note("tls", f"The resumed-session cells (`s_time -time {TLS_RESUMED_S:g}`) and the plain-HTTP ranking "
                        f"cells run {TLS_FEW_REPEATS} repeats, in rounds of their own: no verdict and no row of "
                        f"“Which model wins” rests on them.")
    fmt = lambda r: (f"{r['rps']:8.0f} handshakes/s  {r['resumed']} of {r['connections']} resumed"
                     if r.get("tool") == "s_time" else fmt_ab(r))
    plain = [c for c in few if c.params["tls_cell"] == "plain"]
    resumed = [c for c in few if c.params["tls_cell"] == "resumed"]
    main = [c for c in cells if c not in few]
    # plain first (its servers are the slow clients' experiment's, kept up), then the TLS servers,
    # kept up from the 5-repeat cells into the resumed ones
    run_cells(lab, "tls", plain, min(TLS_FEW_REPEATS, lab.repeats), [HELLO], fmt)
    saved = lab.carry_keys
    lab.carry_keys = saved | {c.server for c in resumed}
    try:
        run_cells(lab, "tls", main, lab.repeats, [HELLO], fmt)
    finally:
        lab.carry_keys = saved
    run_cells(lab, "tls", resumed, min(TLS_FEW_REPEATS, lab.repeats), [HELLO], fmt)


# --------------------------------------------------------------------------
# Calibration: the same cell at the start and at the end of a run
# --------------------------------------------------------------------------

FLOOR = server_key("floor", "floor-epoll")
CALIBRATION_CONNS = 50


def calibration(lab: Lab, part: str) -> None:
    """tools/floor's epoll server (no HTTP work: the same 13-byte answer to
    every request) under `wrk -c 50` keep-alive: its rate moves only with the
    host (frequency, steal, a neighbour), so the end of a run against its
    start is the run's drift."""
    exp = f"calibration_{part}"
    cells = [Cell(exp, f"floor-epoll wrk -c{CALIBRATION_CONNS} keep-alive ({part})", FLOOR,
                  {"calibration": part, "conc": CALIBRATION_CONNS}, _wrk(HELLO, CALIBRATION_CONNS, lab.cell_s),
                  warm_path=HELLO)]
    lab.note(exp, f"tools/floor/floor_epoll.c under `wrk -t1 -c{CALIBRATION_CONNS} -d{lab.cell_s:g}s` keep-alive, "
                  f"{lab.repeats} repeat(s), at the {part} of the run.")
    run_cells(lab, exp, cells, lab.repeats, [HELLO], fmt_wrk)


def calibration_start(lab: Lab, models: list[str]) -> None:
    calibration(lab, "start")


def calibration_end(lab: Lab, models: list[str]) -> None:
    calibration(lab, "end")


EXPERIMENTS = {
    "calibration_start": calibration_start,
    "calibration_end": calibration_end,
    "seed000": seed000,
    "seed001": seed001,
    "seed002": seed002,
    "seed003": seed003,
    "seed004": seed004,
    "openloop": openloop,
    "peers": peers,
    "h2": h2,            # HTTP/2 under every model: h2load, connections x streams, HTTP/1.1 beside it
    "slow": slow,        # a fresh client beside 100 slow ones, every model and nginx
    # outside the default run (python -m bench --only ...)
    "nodelay": nodelay,  # the pipelined stall and TCP_NODELAY: off in spindle, on in nginx
    "downloads": downloads,
    "idle_rss": idle_rss,
    "overhead": overhead,
    "tls": tls,          # HTTPS handshakes and keep-alive, every model and nginx
    "overload": overload,   # past the knee: each overload policy, CPU work at 0.5x-3x capacity
}
# In this order, consecutive experiments share servers (run_cells keeps them up):
# seed003 -> peers (epoll), peers -> h2 (epoll, uring, h2o, nginx) -> seed000 (epoll, nginx), seed000 -> openloop
# (nginx), openloop -> slow (epoll and pool with 64 threads, nginx), slow -> tls (every model with 64
# threads: tls's plain-HTTP cells).
# peers after seed003 reuses its `ab -c 200` epoll cell (Cell.same_as).
DEFAULT = ["seed001", "seed002", "seed004", "seed003", "peers", "h2", "seed000", "openloop", "slow", "tls",
           "overload", "scale"]
# Every run (but --plan without it, and --no-calibration) starts and ends with
# the calibration cell: its drift is printed at the top of the report.
CALIBRATION = ("calibration_start", "calibration_end")


def with_calibration(names: list[str]) -> list[str]:
    core = [n for n in names if n not in CALIBRATION]
    return [CALIBRATION[0], *core, CALIBRATION[1]]

# 1 vs 2 instances behind HAProxy, in its own module (outside the default run)
from .scaleout import scaleout  # noqa: E402  (scaleout.py needs only lab.py)
EXPERIMENTS["scaleout"] = scaleout
# cost against connections: memory and a fresh client's latency under idle keep-alive connections
from .scale import scale  # noqa: E402  (scale.py needs only lab.py)
EXPERIMENTS["scale"] = scale
