"""The `scale` experiment: what idle keep-alive connections cost a server,
against how many there are. For every spindle model that can hold thousands
of connections and for nginx, plain HTTP and TLS: N connections (1,000,
5,000, 10,000; 15,000 with --full), each after one request, held open by one
client process (bench/client.py hold: non-blocking sockets on one epoll);
the proportional set size of all the server's processes before they connect
and SETTLE_S after the last one's answer; then a fresh client's latency
while they are open (PROBES requests, one at a time, each on a new
connection, from connect() to the last body byte).

Each point runs on a server started for it (nothing an earlier point left
behind is in its baseline), and the holding client starts, maps its
libraries and warms the server up (its lazily made state) SETTLE_S before
the baseline is read: a process mapping libcrypto or libc halves or doubles
the server's share of those pages (PSS), megabytes that would otherwise be
read as connections' cost, and what the warm-up's requests used is given
back by then (read at once, the baseline held it, and the growth came out
below zero: -0.7 kB per connection for pool at 1,000 in a trial run).

A model that gives every connection a process (fork) or a thread (thread)
runs to a lower point: its cost per connection is that process or thread,
whatever else it saves, and thousands of processes on two cores measure the
machine. iterative serves one connection at a time: the second keep-alive
client waits in the listen backlog unanswered, so there is no point with N
idle connections each after one request to measure; the report says so.

The figures are measured once per server, transport and point: a curve, no
verdict rests on it (docs/bench/idle-memory.md says how much such figures
moved between runs)."""
from __future__ import annotations

import json
import select
import subprocess
import sys
import time
from pathlib import Path

from . import cpumeter
from .lab import (HELLO, HOST, LOAD_CPUS, NOFILE, REPO, RETAKE_OTHER_CORES, Cell, Lab, Server, run_cells, server_key,
                  skip_cells)

POINTS = (1000, 10000)              # the default run's points: the ends
POINTS_FULL = (1000, 5000, 10000, 15000)
MODELS = ("epoll", "uring", "pool", "prefork")
# A process or a thread per connection: one point by default, 5,000 with --full
FLOOR_MODELS = ("fork", "thread")
FLOOR_POINTS = (1000,)
FLOOR_POINTS_FULL = (1000, 5000)
SETTLE_S = 2.0            # memory is read this long after the last response (spindle's sweep releases at 1 s)
PROBES = 300              # the fresh client's requests per point
SOURCES = 4               # client addresses 127.0.0.1-4: ephemeral ports to spare at 15,000
MAX_CONNECTIONS = 16384   # spindle's max_connections and nginx's worker_connections: room for 15,000
# No held connection times out during a point, however slowly it opens: longer than the client's own limit
# (a trial run beside 1.8 cores of other load took 161 s to open 15,000 TLS connections, and a 120 s
# timeout closed the first 5,589 of them)
KEEPALIVE = "600s"
REPEATS = 1
SMOKE_SHARE = 50          # --smoke: a fiftieth of each point

# The plan's estimate of one point (python -m bench --plan), from the trial runs of 2026-11-26 (their
# points with the least other load on the machine): 10,000 connections opened in 0.85 s plain and
# 7.3-7.5 s over TLS (server ~0.45 ms a handshake, the client ~0.45 ms, on the two cores); fork
# 0.9 ms a connection plain and 2.8 ms over TLS, thread 0.9 ms over TLS. Per point: the client's start,
# warm-up and close and the server's start (a fresh server each point), two settles, the connections,
# the probes.
EST_FIXED_S = 0.6
EST_CONNECT_S = {"plain": 0.0001, "TLS": 0.00075}
EST_MODEL_S = {("fork", "plain"): 0.0008, ("fork", "TLS"): 0.002, ("thread", "TLS"): 0.00015}
EST_PROBE_S = {"plain": 0.0004, "TLS": 0.0015}


def points_for(model: str, tls: bool, full: bool) -> tuple[int, ...]:
    if model in FLOOR_MODELS:
        return FLOOR_POINTS_FULL if full else FLOOR_POINTS
    return POINTS_FULL if full else POINTS


def estimate_s(model: str, n: int, tls: bool) -> float:
    transport = "TLS" if tls else "plain"
    more = EST_MODEL_S.get((model, transport), 0.0)
    return EST_FIXED_S + 2 * SETTLE_S + n * (EST_CONNECT_S[transport] + more) + PROBES * (EST_PROBE_S[transport]
                                                                                          + more)


def memory(pids: list[int]) -> dict:
    """PSS (and its anonymous part: heap, stacks; no library pages), RSS and
    counts, summed over the processes, in kB (1 kB = 1024 bytes, as /proc)."""
    out = {"pss_kb": 0, "pss_anon_kb": 0, "rss_kb": 0, "processes": 0, "threads": 0}
    fields = {"Pss:": "pss_kb", "Pss_Anon:": "pss_anon_kb", "Rss:": "rss_kb"}
    for p in pids:
        try:
            rollup = Path(f"/proc/{p}/smaps_rollup").read_text()
            status = Path(f"/proc/{p}/status").read_text()
        except OSError:
            continue          # a process that exited between the listing and the reading
        out["processes"] += 1
        for ln in rollup.splitlines():
            k = fields.get(ln.split(" ", 1)[0])
            if k:
                out[k] += int(ln.split()[1])
        for ln in status.splitlines():
            if ln.startswith("Threads:"):
                out["threads"] += int(ln.split()[1])
    return out


def _line(p: subprocess.Popen, timeout: float) -> dict:
    """The client's next JSON line, or {} if none came within timeout."""
    ready, _, _ = select.select([p.stdout], [], [], timeout)
    if not ready:
        return {}
    try:
        return json.loads(p.stdout.readline() or "{}")
    except json.JSONDecodeError:
        return {}


def _tell(p: subprocess.Popen, cmd: str) -> None:
    p.stdin.write(cmd + "\n")
    p.stdin.flush()


def measure(lab: Lab, s: Server, n: int, tls: bool, settle_s: float = SETTLE_S, probes: int = PROBES) -> dict:
    """One point: baseline, N held connections, memory, the fresh client, close."""
    limit = 60 + n * (0.01 if tls else 0.002)       # the client's own bound; `timeout` kills it later still
    cmd = [sys.executable, "-m", "bench.client", "hold", HOST, str(s.port), HELLO, str(lab.sizes[HELLO]),
           "https" if tls else "http", str(n), str(SOURCES), str(probes), f"{limit:g}"]
    full = ["taskset", "-c", LOAD_CPUS, "timeout", "-k", "5", str(int(limit + 30)), "prlimit",
            f"--nofile={NOFILE}:{NOFILE}", *cmd]
    err_path = lab.tmp / f"hold-{s.port}-{n}.stderr"
    with open(err_path, "w") as err:
        p = subprocess.Popen(lab.meter.enter_argv(getattr(lab.meter, "gen", None), full), stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=err, text=True, cwd=REPO)
    lines = []
    try:
        ready = _line(p, 30)
        lines.append(ready)
        if not ready.get("ready"):
            return {"failed_run": f"the holding client did not start: {err_path.read_text()[-400:]}"}
        # as long after the warm-up's last answer as the second reading after the connections': what those
        # requests used is given back (spindle's sweep) before the baseline, not counted against the connections
        time.sleep(settle_s)
        base = memory(s.pids())
        cpu0 = lab.meter.snapshot(s.cg_key, s.pids())
        _tell(p, "open")
        opened = _line(p, limit + 5)
        lines.append(opened)
        if "open" not in opened:
            return {"failed_run": f"the holding client did not report its connections: {err_path.read_text()[-400:]}"}
        cpu1 = lab.meter.snapshot(s.cg_key, s.pids())
        # the connections' parked buffers released, pages settled; nothing done to the server meanwhile
        last = opened.get("last_response_mono") or time.monotonic()
        time.sleep(max(0.0, last + settle_s - time.monotonic()))
        held = memory(s.pids())
        _tell(p, "probe")
        probe = _line(p, 30 + probes * 5.5)
        lines.append(probe)
        _tell(p, "close")
        end = _line(p, 30)
        lines.append(end)
    finally:
        if p.stdin and not p.stdin.closed:
            try:
                p.stdin.close()       # the client closes its connections and exits
            except BrokenPipeError:
                pass
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    nopen = opened.get("open", 0)
    per = lambda after, before: (after - before) / nopen if nopen else None
    problems = []
    if ready.get("warm_errors"):
        problems.append(f"{ready['warm_errors']} warm-up requests failed: {ready.get('warm_error_samples', [])[:2]}")
    if opened.get("errors"):
        problems.append(f"{opened['errors']} of {n} connections failed: {opened.get('error_samples', [])[:2]}")
    if nopen < n:
        problems.append(f"only {nopen} of {n} connections were open when memory was read")
    if probe.get("probe_errors"):
        problems.append(f"{probe['probe_errors']} of {probes} fresh requests failed: "
                        f"{probe.get('probe_error_samples', [])[:2]}")
    if end.get("open_at_end") is not None and end["open_at_end"] < nopen:
        problems.append(f"{nopen - end['open_at_end']} held connections were closed by the server")
    setup_cpu = cpumeter.cell_figures(cpu0, cpu1, 0.0)["server_cpu_s"]
    m = {"tool": "python-hold", "cmd": " ".join(cmd), "opened": opened.get("opened", 0), "open": nopen,
         "open_at_end": end.get("open_at_end"), "setup_s": opened.get("setup_s"),
         "base_pss_mb": base["pss_kb"] / 1024, "pss_mb": held["pss_kb"] / 1024,
         "base_rss_mb": base["rss_kb"] / 1024, "rss_mb": held["rss_kb"] / 1024,
         "base_processes": base["processes"], "processes": held["processes"],
         "base_threads": base["threads"], "threads": held["threads"],
         "kb_per_conn": per(held["pss_kb"], base["pss_kb"]),
         "anon_kb_per_conn": per(held["pss_anon_kb"], base["pss_anon_kb"]),
         "rss_kb_per_conn": per(held["rss_kb"], base["rss_kb"]),
         "setup_us_per_conn": setup_cpu * 1e6 / nopen if nopen else None,
         "probes": probes, "probe_ok": probe.get("probe_ok", 0),
         # a connection not held and a fresh request not answered are both errors
         "errors": max(opened.get("errors", 0), n - nopen) + probe.get("probe_errors", probes),
         "problems": problems,
         "_raw_full": "\n".join(json.dumps({k: v for k, v in ln.items() if k != "lat_ms"}) for ln in lines)
         + "\n--- the fresh client's latencies, ms\n" + json.dumps(probe.get("lat_ms", [])) + "\n"}
    for k in ("p50_ms", "p99_ms", "max_ms"):
        if probe.get(k) is not None:
            m[k] = probe[k]
    if probe.get("mean_ms") is not None:
        m["probe_mean_ms"] = probe["mean_ms"]    # not mean_ms: no closed loop of `conns` for Little's law
    return m


def fmt(r: dict) -> str:
    kb = lambda k: f"{r[k]:.2f}" if r.get(k) is not None else "—"
    ms = lambda k: f"{r[k]:.2f}" if r.get(k) is not None else "—"
    return (f"{r['transport']:<5} {r['open']:>6} held  PSS {r['base_pss_mb']:.1f} -> {r['pss_mb']:.1f} MB  "
            f"{kb('kb_per_conn')} kB/conn (anon {kb('anon_kb_per_conn')})  fresh p50 {ms('p50_ms')} "
            f"p99 {ms('p99_ms')} ms  procs {r['processes']} threads {r['threads']}")


NOT_RUN = {"iterative": "serves one connection at a time: the second keep-alive client waits in the listen backlog "
                        "unanswered until the first leaves, so no point has N idle connections each after one "
                        "request (what holding them costs is the kernel's backlog, not the server's memory)"}
FLOOR_WHY = {"fork": "a process per connection", "thread": "a thread per connection"}


def scale(lab: Lab, models: list[str]) -> None:
    full = lab.full
    cert, key = ("cert.pem", "key.pem") if lab.plan is not None else lab.tls_files()
    refusal = None if lab.plan is not None else lab.spindle_tls_refusal(cert, key)
    keys = {"tls_certificate": str(cert), "tls_certificate_key": str(key)}
    settings = {"max_connections": MAX_CONNECTIONS, "keepalive_timeout": KEEPALIVE, "header_timeout": "60s"}
    nginx_room = {"_nginx_connections": MAX_CONNECTIONS, "_nginx_keepalive_timeout": KEEPALIVE}
    servers = []         # (name, plain key, TLS key)
    for m in [m for m in models if m in MODELS + FLOOR_MODELS]:
        servers.append((m, server_key("spindle", m, **settings),
                        server_key("spindle", m, **settings, tls="on", **keys)))
    servers.append(("nginx", server_key("nginx", "nginx", **nginx_room),
                    server_key("nginx", "nginx-tls", _label="nginx", **keys, **nginx_room)))
    settle = SETTLE_S if not lab.smoke else 0.5
    probes = PROBES if not lab.smoke else 50
    by_point: dict[int, list[Cell]] = {}
    skipped = []
    for name, plain_key, tls_key in servers:
        for tls in (False, True):
            for n in points_for(name, tls, full):
                conns = n if not lab.smoke else max(10, n // SMOKE_SHARE)
                run = (lambda lab_, s, n_=conns, t_=tls: measure(lab_, s, n_, t_, settle, probes))
                c = Cell("scale", f"{name} {'https' if tls else 'http'} {n} idle", tls_key if tls else plain_key,
                         {"conns": n, "transport": "TLS" if tls else "plain"}, run,
                         extra_s=estimate_s(name, conns, tls) - lab.cell_s, retake=False)
                (skipped if tls and refusal and name != "nginx" else by_point.setdefault(n, [])).append(c)
    skip_cells(lab, "scale", skipped, refusal)
    pts = POINTS_FULL if full else POINTS
    lab.note("scale", f"{', '.join(f'{n:,}' for n in pts)} idle keep-alive connections, each after one request "
                      f"(`GET {HELLO}`, 13 bytes), held by one client process (bench/client.py hold: non-blocking "
                      f"sockets on one epoll, {SOURCES} loopback source addresses, TLS 1.3 from Python's ssl over "
                      f"https) on CPU {LOAD_CPUS}; each point on a server started for it, on one core. Memory: "
                      f"PSS summed over all the server's processes (a fair share of pages shared between "
                      f"processes), read {settle:g} s after the client has started and made 20 warm-up requests, "
                      f"and again {settle:g} s after the last connection's answer, nothing done to the server in between "
                      f"(no malloc_trim); kB per connection = growth ÷ connections held (1 kB = 1024 bytes); "
                      f"*anonymous*: the same for PSS's anonymous part (heap and stacks, no library pages). Then a "
                      f"fresh client: {probes} requests one at a time, each on a new connection (over TLS: a full "
                      f"handshake each), timed from connect() to the last body byte (p50, p99 of the {probes}). "
                      f"Server CPU per connection opened: the server's CPU while the connections opened (their "
                      f"handshakes and first requests) ÷ connections.")
    lab.note("scale", f"spindle: max_connections {MAX_CONNECTIONS}, keepalive_timeout {KEEPALIVE}, header_timeout 60s "
                      f"(nginx's client_header_timeout, which bounds its handshakes too), one worker; nginx: "
                      f"worker_processes 1, worker_connections {MAX_CONNECTIONS}, keepalive_timeout {KEEPALIVE}, the "
                      f"tls experiment's certificate (self-signed ECDSA P-256) and suites. nginx allocates the "
                      f"structures of all its worker_connections when it starts: they are in its baseline, and its "
                      f"figure is what a connection adds beyond them.")
    floor = [m for m in models if m in FLOOR_MODELS]
    if floor:
        fp = FLOOR_POINTS_FULL if full else FLOOR_POINTS
        lab.note("scale", "; ".join(f"{m}: {FLOOR_WHY[m]}" for m in floor)
                 + f": measured at {', '.join(f'{n:,}' for n in fp)} connections only "
                 + ("" if full else "(5,000 with --full) ")
                 + "— their cost per connection is that process or thread, whatever else they hold, and "
                   "thousands of processes on two cores would measure the machine.")
    for m in [m for m in models if m in NOT_RUN]:
        lab.note("scale", f"{m} not run: it {NOT_RUN[m]}.")
    if not full:
        lab.note("scale", f"The default run measures {' and '.join(f'{n:,}' for n in POINTS)} connections; "
                          f"`python -m bench --full` adds "
                          f"{' and '.join(f'{n:,}' for n in POINTS_FULL if n not in POINTS)}.")
    lab.note("scale", "Measured once per server, transport and point: a curve, no verdict rests on it.")
    saved = lab.carry_keys
    lab.carry_keys = set()       # every point on a fresh server: nothing an earlier point left is in its baseline
    try:
        for n in sorted(by_point):
            run_cells(lab, "scale", by_point[n], REPEATS, [HELLO], fmt)
    finally:
        lab.carry_keys = saved


# --------------------------------------------------------------------------
# The report's words (bench/report.py draws the table and the plots)
# --------------------------------------------------------------------------

def usable(r: dict) -> bool:
    return (r.get("kb_per_conn") is not None and not r.get("invalid") and not r.get("skipped")
            and not r.get("failed_runs"))


def curves(rows: list[dict]) -> dict[tuple[str, str], list[dict]]:
    """(server, transport) -> its points, fewest connections first."""
    out: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        if usable(r):
            out.setdefault((r["server"], r.get("transport", "plain")), []).append(r)
    return {k: sorted(v, key=lambda r: r["conns"]) for k, v in out.items()}


def marginal(lo: dict, hi: dict) -> float | None:
    """kB for each connection more, from the fewer to the more: the held
    PSS's difference over the connections' (each point's server is a fresh
    one with the same settings, so what differs between them is the
    connections)."""
    if hi["conns"] <= lo["conns"] or lo.get("pss_mb") is None or hi.get("pss_mb") is None:
        return None
    return (hi["pss_mb"] - lo["pss_mb"]) * 1024 / (hi["open"] - lo["open"]) if hi["open"] > lo["open"] else None


def _trend(lo: float, hi: float) -> str:
    if lo <= 0:
        return ("below zero at the fewest: the server held less with them than before them, so the cost shows "
                "at the most and from one point to the next")
    if hi <= 0:
        return "about zero"
    ratio = hi / lo
    if ratio < 0.8:
        return "falls as connections grow (part of it is fixed, spread over more of them)"
    if ratio > 1.25:
        return "**grows faster than the connections**"
    return "flat: a fixed cost per connection"


def cost_text(rows: list[dict], order: list[str]) -> list[str]:
    """How cost grows with connections, in words, from the rows alone."""
    cs = curves(rows)
    if not cs:
        return ["No point of the scale experiment was measured."]
    rank = lambda srv: order.index(srv) if srv in order else len(order)
    out = []
    for transport in ("plain", "TLS"):
        mine = {srv: pts for (srv, t), pts in cs.items() if t == transport}
        if not mine:
            continue
        parts = []
        for srv in sorted(mine, key=rank):
            pts = mine[srv]
            lo, hi = pts[0], pts[-1]
            if len(pts) == 1:
                parts.append(f"{srv} {lo['kb_per_conn']:.2f} kB at {lo['conns']:,}")
            else:
                m = marginal(lo, hi)
                parts.append(f"{srv} {lo['kb_per_conn']:.2f} kB at {lo['conns']:,} → {hi['kb_per_conn']:.2f} at "
                             f"{hi['conns']:,} ({_trend(lo['kb_per_conn'], hi['kb_per_conn'])}"
                             + (f"; {m:.2f} kB for each connection from {lo['conns']:,} to {hi['conns']:,}"
                                if m is not None else "") + ")")
        out.append(f"- **Memory per idle connection, {'plain HTTP' if transport == 'plain' else 'TLS'}** (PSS): "
                   + "; ".join(parts) + ".")
        top = max(p["conns"] for pts in mine.values() for p in pts)
        at = {srv: next(p for p in pts if p["conns"] == top) for srv, pts in mine.items()
              if any(p["conns"] == top for p in pts)}
        if len(at) >= 2:
            least = min(at, key=lambda s: at[s]["kb_per_conn"])
            most = max(at, key=lambda s: at[s]["kb_per_conn"])
            total = lambda s: (at[s]["pss_mb"] - at[s]["base_pss_mb"])
            out.append(f"  At {top:,} connections the least is {least}'s {at[least]['kb_per_conn']:.2f} kB "
                       f"({total(least):.1f} MB for all of them), the most {most}'s "
                       f"{at[most]['kb_per_conn']:.2f} kB ({total(most):.1f} MB)"
                       + (f": {at[most]['kb_per_conn'] / at[least]['kb_per_conn']:.1f} times as much."
                          if at[least]["kb_per_conn"] > 0 else "."))
    for srv in [s for s in FLOOR_MODELS if any(k[0] == s for k in cs)]:
        pts = [p for (s, t), ps in cs.items() if s == srv for p in ps if t == "plain"] or \
              [p for (s, t), ps in cs.items() if s == srv for p in ps]
        p = pts[-1]
        what, key = ("processes", "processes") if srv == "fork" else ("threads", "threads")
        base = p.get(f"base_{key}")
        out.append(f"- **{srv}** ({FLOOR_WHY[srv]}): {p['kb_per_conn']:.1f} kB per connection at {p['conns']:,} "
                   f"({'plain HTTP' if p.get('transport', 'plain') == 'plain' else 'TLS'}), {p.get(key, 0):,} "
                   f"{what} held" + (f" (from {base:,} idle)" if base is not None else "") + ": its floor is "
                   + ("the process each connection keeps (the pages it has written since the fork: its stack, "
                      "its heap, what it changed of its parent's)" if srv == "fork" else
                      "the thread each connection keeps (the pages its stack has touched; the kernel's task and "
                      "stack are not in PSS)") + ", not its buffers.")
    lat = []
    for (srv, transport), pts in sorted(cs.items(), key=lambda kv: (kv[0][1] != "plain", rank(kv[0][0]))):
        ok = [p for p in pts if p.get("p99_ms") is not None]
        if len(ok) >= 2:
            lo, hi = ok[0], ok[-1]
            lat.append((hi["p99_ms"] / lo["p99_ms"] if lo["p99_ms"] else 0.0, srv, transport, lo, hi))
    if lat:
        busy = lambda r: (r.get("other_cores") or 0) > RETAKE_OTHER_CORES
        mark = lambda r: "†" if busy(r) else ""
        out.append("- **A fresh client's p99** from the fewest connections to the most: "
                   + "; ".join(f"{srv} {t} {lo['p99_ms']:.2f}{mark(lo)} → {hi['p99_ms']:.2f}{mark(hi)} ms"
                               for _, srv, t, lo, hi in lat) + ".")
        quiet = [x for x in lat if not busy(x[3]) and not busy(x[4])]
        if any(busy(x[3]) or busy(x[4]) for x in lat):
            out.append(f"  † a point that shared the machine with more than +{RETAKE_OTHER_CORES} cores of other load "
                       f"(measured once: its tail is the machine's as much as the server's); "
                       + (f"the curves without one: {len(quiet)} of {len(lat)}." if quiet else "every curve has one."))
        if quiet:
            worst = max(quiet, key=lambda x: x[0])
            out.append(f"  The most growth{' among those' if len(quiet) < len(lat) else ''}: {worst[1]} {worst[2]}, "
                       f"{worst[0]:.1f} times its p99 at {worst[3]['conns']:,}"
                       + (" (under 1.5 times: holding idle connections cost a fresh client little there)"
                          if worst[0] < 1.5 else "") + ".")
    return out


def summary_line(rows: list[dict]) -> str | None:
    """The summary's bullet: per transport, at the most connections the
    event-driven servers held, the least and the most memory per connection."""
    cs = curves(rows)
    parts = []
    for transport in ("plain", "TLS"):
        mine = {srv: pts for (srv, t), pts in cs.items() if t == transport and srv not in FLOOR_MODELS}
        if not mine:
            continue
        top = max(p["conns"] for pts in mine.values() for p in pts)
        at = {srv: p for srv, pts in mine.items() for p in pts if p["conns"] == top}
        if not at:
            continue
        least = min(at, key=lambda s: at[s]["kb_per_conn"])
        most = max(at, key=lambda s: at[s]["kb_per_conn"])
        parts.append(f"{'plain HTTP' if transport == 'plain' else 'TLS'} at {top:,}: from {least}'s "
                     f"{at[least]['kb_per_conn']:.2f} kB to {most}'s {at[most]['kb_per_conn']:.2f} kB")
    if not parts:
        return None
    return ("- **Cost against connections**: PSS per idle keep-alive connection, " + "; ".join(parts)
            + " (“Cost against connections”).")
