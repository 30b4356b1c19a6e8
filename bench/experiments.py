"""The experiments, one per seed document plus one beyond them. Each builds
its cells (server x parameters), runs them interleaved and repeated through
lab.run_cells, and leaves records in lab.records; report.py turns those into
the report's sections."""
from __future__ import annotations

import json
import select
import subprocess
import sys
import time

from .lab import (ALL_CPUS, B100, HELLO, HOST, LOAD_CPUS, MB1, MB100, NOFILE, PAGE, REPO,
                  SERVER_CPUS, Cell, Lab, Server, ncpus_in, run_cells, server_key)

NGINX = server_key("nginx", "nginx")


def spindle(model: str, cpus: str = SERVER_CPUS, workers: int | None = None, **settings) -> tuple:
    return server_key("spindle", model, cpus, workers, **settings)


def fmt_ab(r: dict) -> str:
    return f"{r['rps']:8.0f} req/s  mean {r['mean_ms']:7.2f} ms  p99 {r.get('p99_ms', '?')} ms  failed {r['errors']}"


def fmt_wrk(r: dict) -> str:
    return f"{r['rps']:8.0f} req/s  mean {r['mean_ms']:7.2f} ms  p99 {r['p99_ms']:7.2f} ms  errors {r['errors']}"


def _ab(path, n, c, keepalive):
    return lambda lab, s: lab.ab(s, path, n, c, keepalive)


def _wrk(path, c, dur, **kw):
    return lambda lab, s: lab.wrk(s, path, c, dur, **kw)


# --------------------------------------------------------------------------
# Seed 000: ab -c 30 -n 1000 on the 4537-byte page; fork at higher concurrency
# --------------------------------------------------------------------------

def seed000(lab: Lab, models: list[str]) -> None:
    cells = []
    for m in models + ["nginx"]:
        key = NGINX if m == "nginx" else spindle(m)
        cells.append(Cell("seed000", f"{m} ab -c 30 -n 1000", key, {"conc": 30, "n": 1000, "part": "main"},
                          _ab(PAGE, 1000, 30, False)))
    # The seed's fork server failed beyond -c 30 ("Too many open files"); ours is
    # capped and ab gets NOFILE descriptors. epoll and nginx run alongside for scale.
    for c, n in ((100, 2000), (1000, 2000)):
        for m in ("fork", "epoll", "nginx"):
            key = NGINX if m == "nginx" else spindle(m)
            cells.append(Cell("seed000", f"{m} ab -c {c} -n {n}", key, {"conc": c, "n": n, "part": "high"},
                              _ab(PAGE, n, c, False)))
    lab.note("seed000", f"ab runs under `prlimit --nofile={NOFILE}:{NOFILE}` (the seed's fork failure at "
                        f"-c 1000 was ab/server running out of descriptors); ab -r counts receive errors "
                        f"as failed requests instead of aborting.")
    run_cells(lab, "seed000", cells, lab.repeats, [PAGE], fmt_ab)


# --------------------------------------------------------------------------
# Seed 001: 500 requests, 50 in parallel, response-time distribution
# --------------------------------------------------------------------------

def seed001(lab: Lab, models: list[str]) -> None:
    def run(lab: Lab, s: Server) -> dict:
        r = lab.client(["latency", HOST, str(s.port), PAGE, "500", "50", str(lab.sizes[PAGE])])
        if "failed_run" not in r:
            r["problems"] = [f"{r['errors']} failed: {r['error_samples'][:2]}"] if r["errors"] else []
            r["tool"] = "python-asyncio"
        return r

    cells = [Cell("seed001", f"{m} 500 req / 50 parallel", NGINX if m == "nginx" else spindle(m),
                  {"n": 500, "par": 50}, run) for m in models + ["nginx"]]
    lab.note("seed001", "Client: bench/client.py (Python asyncio, raw sockets, a new connection per request "
                        "with `Connection: close`, 50 in flight), timing connect() to the last body byte; "
                        "equivalent to the seed's `seq 500 | xargs -P 50 curl` without 500 curl process "
                        "start-ups inside the measurement. It runs on the load core; its own overhead is "
                        "in every number alike.")
    run_cells(lab, "seed001", cells, lab.repeats, [PAGE],
              lambda r: f"avg {r['avg_ms']:6.2f} ms  min {r['min_ms']:6.2f}  max {r['max_ms']:7.2f}  "
                        f"sd {r['std_ms']:6.2f}  failed {r['errors']}")


# --------------------------------------------------------------------------
# Seed 002: CPU delay + shared buckets (the workload endpoint)
# --------------------------------------------------------------------------

def seed002(lab: Lab, models: list[str]) -> None:
    dur = 5 if lab.full else 2
    conc = 50
    bucket_counts = [32, 128, 512, 2048] if lab.full else [32, 2048]
    lock_models = ["pool", "prefork"] if lab.full else ["pool"]
    cells: dict[tuple, Cell] = {}

    def add(sub: str, model: str, cpus: str, dmin: int, dmax: int, buckets: int, lock: str,
            keepalive: bool = False):
        key = spindle(model, cpus, workload="on", work_unit="1ms", buckets=buckets, bucket_lock=lock)
        params = {"cores": ncpus_in(cpus),
                  "dmin": dmin, "dmax": dmax, "buckets": buckets, "lock": lock, "conc": conc,
                  "keepalive": keepalive}
        ident = (key, tuple(sorted(params.items())))
        if ident in cells:
            cells[ident].params["subs"].append(sub)
            return
        args = [str(dmin), str(dmax), str(buckets)] + (["keepalive"] if keepalive else [])
        name = (f"{model} {params['cores']}c d{dmin}-{dmax} "
                f"{'global' if lock == 'global' else f'b{buckets}'}{' ka' if keepalive else ''}")
        cells[ident] = Cell("seed002", name, key, {**params, "subs": [sub]},
                            _wrk("/work", conc, dur, script="workload.lua", script_args=args,
                                 check_size=False, timeout="10s"))

    for m in ("pool", "epoll"):                         # (a) 1 vs 2 cores
        for cpus in (SERVER_CPUS, ALL_CPUS):
            add("a", m, cpus, 1, 3, 128, "bucket")
    for m in ("thread", "pool"):                        # (b) create per request vs pre-created
        add("b", m, SERVER_CPUS, 1, 3, 128, "bucket")
    for m in ("thread", "pool"):                        # (c) small vs large delay variance
        for dmin, dmax in ((1, 3), (1, 20)):
            add("c", m, SERVER_CPUS, dmin, dmax, 128, "bucket")
    for m in lock_models:                               # (d) lock contention, zero delay
        for b in bucket_counts:
            add("d", m, ALL_CPUS, 0, 0, b, "bucket", keepalive=True)
        add("d", m, ALL_CPUS, 0, 0, 128, "global", keepalive=True)

    lab.note("seed002", f"wrk -t 1 -c {conc} -d {dur}s with bench/lua/workload.lua: each request is "
                        f"GET /work?delay=D&bucket=B with D and B uniform at random; work_unit = 1ms "
                        f"(the seed used seconds), so 'delay 1-3' = 1-3 ms of busy-waiting per request.")
    lab.note("seed002", "(a)-(c) send `Connection: close` (a new connection per request, so the thread "
                        "model really creates a thread per request); (d) uses keep-alive and zero delay "
                        "so the bucket lock, not connection set-up, is what requests contend on.")
    lab.note("seed002", f"Server on CPU {SERVER_CPUS} (1 core, workers = 1) unless marked 2 cores: then "
                        f"on CPUs {ALL_CPUS} with workers = 2, and it SHARES CPU {LOAD_CPUS} with the load "
                        f"generator. (d) runs on 2 cores: lock contention needs threads running in parallel.")
    lab.note("seed002", "nginx has no CPU-work endpoint: this experiment compares spindle models only.")
    run_cells(lab, "seed002", list(cells.values()), lab.repeats, [PAGE], fmt_wrk)


# --------------------------------------------------------------------------
# Seed 003: ab -k / no -k, -c 200, 13- and 100-byte bodies, epoll vs nginx
# --------------------------------------------------------------------------

def seed003(lab: Lab, models: list[str]) -> None:
    n = 100000 if lab.full else 20000
    cells = []
    for path in (HELLO, B100):
        for ka in (True, False):
            for m in ("epoll", "nginx"):
                key = NGINX if m == "nginx" else spindle(m)
                cells.append(Cell("seed003", f"{m} {lab.sizes[path]}B {'-k' if ka else 'close'} -c 200 -n {n}",
                                  key, {"body": lab.sizes[path], "keepalive": ka, "conc": 200, "n": n},
                                  _ab(path, n, 200, ka)))
    lab.note("seed003", f"ab -c 200 -n {n} with and without -k on /bench/hello.txt (13 bytes) and "
                        f"/bench/100b.txt (100 bytes), as static files for both servers (the seed's nginx "
                        f"used `return 200`). Server on 1 core, workers = 1, nginx worker_processes 1.")
    run_cells(lab, "seed003", cells, lab.repeats, [HELLO, B100], fmt_ab)


def _iterative_keepalive(c: int, dur: float):
    """wrk at c connections, plus a direct check of what wrk cannot see: one
    keep-alive connection holds the iterative server, the others get nothing."""
    def run(lab: Lab, s: Server) -> dict:
        m = lab.wrk(s, PAGE, c, dur)
        if "failed_run" not in m and lab.starves_second_connection(s, PAGE):
            m["problems"].append(f"{c - 1} of {c} connections starved: one keep-alive connection holds "
                                 f"the server (probe: a 2nd connection got no response in 1 s); wrk 4.1 "
                                 f"does not count them, so req/s is ONE connection's")
            m["starved"] = c - 1
            m["errors"] = m.get("errors", 0) + c - 1
        return m
    return run


# --------------------------------------------------------------------------
# Seed 004: throughput and latency vs concurrency, keep-alive or not
# --------------------------------------------------------------------------

def seed004(lab: Lab, models: list[str]) -> None:
    concs = [10, 50, 100, 500, 1000] if lab.full else [10, 100, 1000]
    cells = []
    for c in concs:
        # quick: 1 s is plenty at low concurrency; 1000 connections need a moment to ramp
        dur = 3 if lab.full else (1 if c < 500 else 2)
        for ka in (True, False):
            for m in models + ["nginx"]:
                if m == "iterative" and c > 10:
                    continue
                key = NGINX if m == "nginx" else spindle(m)
                params = {"conc": c, "keepalive": ka}
                if ka and m == "iterative":
                    # wrk counts a request waiting longer than --timeout only in a check
                    # every 2 s: run long enough for the starved connections to show.
                    cells.append(Cell("seed004", f"{m} keep-alive c={c}", key, params,
                                      _iterative_keepalive(c, dur)))
                elif ka:
                    cells.append(Cell("seed004", f"{m} keep-alive c={c}", key, params,
                                      _wrk(PAGE, c, dur)))
                else:
                    n = max(2000, 2 * c) if not lab.full else max(10000, 10 * c)
                    cells.append(Cell("seed004", f"{m} close c={c} n={n}", key, {**params, "n": n},
                                      _ab(PAGE, n, c, False)))
    lab.note("seed004", f"Keep-alive: wrk -t 1 -c C -d {'3s' if lab.full else '1s (2s at c >= 500)'} (one connection per client, HTTP/1.1). "
                        f"Without keep-alive: ab -c C -n N (a new connection per request). Page: "
                        f"/bench/page.html (4537 bytes). Server on 1 core, workers = 1.")
    lab.note("seed004", "iterative runs only at c = 10: it serves one connection at a time, so with "
                        "keep-alive one client holds the server and the other c-1 get nothing for the whole "
                        "run (wrk 4.1 does not report them: the lab probes it and counts them as errors), "
                        "and without keep-alive clients queue in the listen backlog; higher concurrency "
                        "only measures that queue.")
    run_cells(lab, "seed004", cells, lab.repeats, [PAGE],
              lambda r: fmt_wrk(r) if r.get("tool") == "wrk" else fmt_ab(r))


# --------------------------------------------------------------------------
# Beyond the seeds: big downloads, memory under 10k idle keep-alive connections
# --------------------------------------------------------------------------

def downloads(lab: Lab, models: list[str]) -> None:
    dur = 5 if lab.full else 2
    dl_models = [m for m in models if m != "iterative"] if lab.full else ["epoll", "pool"]
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


def idle_rss(lab: Lab, models: list[str]) -> None:
    nconn = 10000
    rss_models = ["epoll", "uring", "pool", "prefork"] + (["thread"] if lab.full else [])
    rss_models = [m for m in rss_models if m in models]
    settings = {"max_connections": 16384, "keepalive_timeout": "120s"}

    def run(lab: Lab, s: Server) -> dict:
        base = s.memory()
        cmd = ["taskset", "-c", LOAD_CPUS, "timeout", "-k", "5", "180", "prlimit",
               f"--nofile={NOFILE}:{NOFILE}", sys.executable, "-m", "bench.client", "idle", HOST,
               str(s.port), HELLO, str(nconn), str(lab.sizes[HELLO])]
        p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, cwd=REPO)
        try:
            ready, _, _ = select.select([p.stdout], [], [], 150)
            if not ready:
                return {"failed_run": "idle client did not report within 150 s"}
            first = json.loads(p.stdout.readline() or "{}")
            time.sleep(1.0)   # let the server settle (parked connections, lazily touched pages)
            held = s.memory()
            p.stdin.close()
            last = json.loads(p.stdout.readline() or "{}")
        finally:
            if p.poll() is None:
                try:
                    p.wait(30)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        problems = []
        if first.get("errors"):
            problems.append(f"{first['errors']} connections failed: {first.get('error_samples', [])[:2]}")
        if first.get("open", 0) < nconn:
            problems.append(f"only {first.get('open', 0)} of {nconn} connections stayed open")
        return {"tool": "python-idle", "conns": nconn, "opened": first.get("opened", 0),
                "open": first.get("open", 0), "open_at_end": last.get("open_at_end"),
                "setup_s": first.get("setup_s"), "base_rss_mb": base["rss_mb"], "base_pss_mb": base["pss_mb"],
                "rss_mb": held["rss_mb"], "pss_mb": held["pss_mb"], "processes": held["processes"],
                "threads": held["threads"],
                "kb_per_conn": (held["pss_mb"] - base["pss_mb"]) * 1024 / max(1, first.get("open", 1)),
                "errors": first.get("errors", 0) + max(0, nconn - first.get("open", 0)),
                "problems": problems}

    cells = [Cell("idle_rss", f"{m} {nconn} idle keep-alive", NGINX if m == "nginx" else spindle(m, **settings),
                  {"conns": nconn}, run) for m in rss_models + ["nginx"]]
    reps = lab.repeats if lab.full else 1
    skipped = [m for m in models if m not in rss_models]
    lab.note("idle_rss", f"bench/client.py opens {nconn} connections (200 at a time), does one keep-alive "
                         f"request on each and holds them; memory is read from /proc while they are held: "
                         f"RSS summed over the server's processes (counts shared pages once per process) and "
                         f"PSS (shares them out; the fairer total for multi-process servers). Servers and "
                         f"client run under prlimit --nofile={NOFILE}; spindle with max_connections=16384, "
                         f"keepalive_timeout=120s.")
    why = {"iterative": "serves one connection at a time: the other 9,999 would wait in the backlog",
           "fork": "a process per connection: 10,000 processes (a fork bomb on this machine)",
           "thread": "a thread per connection: 10,000 threads (measured in FULL mode only)"}
    for m in skipped:
        lab.note("idle_rss", f"{m} skipped: {why.get(m, 'not in the list')}.")
    if reps == 1:
        lab.note("idle_rss", "quick: measured once per server (memory varies little between runs).")
    run_cells(lab, "idle_rss", cells, reps, [HELLO],
              lambda r: f"{r['open']} open  RSS {r['rss_mb']:7.1f} MB  PSS {r['pss_mb']:7.1f} MB "
                        f"(idle {r['base_pss_mb']:.1f})  {r['kb_per_conn']:.2f} kB/conn  procs {r['processes']} "
                        f"threads {r['threads']}")


# --------------------------------------------------------------------------
# Every model on the seeds' two headline loads (the table issue 3 asks for)
# --------------------------------------------------------------------------

def models(lab: Lab, models: list[str]) -> None:
    dur = 10 if lab.full else 3
    cells = []
    for m in models + ["nginx"]:
        key = NGINX if m == "nginx" else spindle(m)
        cells.append(Cell("models", f"{m} ab -c 30 -n 1000 page", key, {"tool": "ab"},
                          _ab(PAGE, 1000, 30, False)))
        # one keep-alive connection holds the iterative server: count the others as starved
        ka = _iterative_keepalive(200, dur) if m == "iterative" else None
        cells.append(Cell("models", f"{m} wrk -c 200 keep-alive hello", key, {"tool": "wrk"},
                          ka or (lambda lab_, s, d=dur: lab_.wrk(s, HELLO, 200, d))))
    lab.note("models", f"`ab -c 30 -n 1000` on the 4537-byte page (seed 000's test) and `wrk -t1 -c 200 "
                       f"-d {dur}s` with keep-alive on the 13-byte file, every model and nginx on one core "
                       f"(workers = 1, nginx worker_processes 1).")
    run_cells(lab, "models", cells, lab.repeats, [PAGE, HELLO], fmt_ab)


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
    dur = 10 if lab.full else 3
    cells = []
    for path in (PAGE, HELLO):
        for label, settings in OVERHEAD_VARIANTS:
            cells.append(Cell("overhead", f"epoll {label} {lab.sizes[path]}B", spindle("epoll", **settings),
                              {"variant": label, "body": lab.sizes[path]},
                              lambda lab_, s, p=path, d=dur: lab_.wrk(s, p, 100, d)))
    lab.note("overhead", f"epoll on one core, `wrk -t1 -c 100 -d {dur}s` with keep-alive, with the shared-"
                         f"memory statistics (`stats`) and the file cache (`cache_size = 0`) switched on and off.")
    run_cells(lab, "overhead", cells, lab.repeats, [PAGE, HELLO], fmt_wrk)


EXPERIMENTS = {
    "seed000": seed000,
    "seed001": seed001,
    "seed002": seed002,
    "seed003": seed003,
    "seed004": seed004,
    "downloads": downloads,
    "idle_rss": idle_rss,
    "models": models,
    "overhead": overhead,
}
