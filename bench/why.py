"""The report's "Which model wins, when, and why": for each regime (a kind of
load the lab measures), which server wins on the regime's figure, by how
much (a ratio of medians with its 95% interval), what limited each cell, and
the counters that differ between the winner and each other server.

Everything said here is read from the run's rows: the rules below decide
which words a figure earns, and where no counter was recorded or none
differs enough, the text says "not measured" instead of naming a mechanism.

- Limiter of a cell: the load generator when it used over 90% of its core
  (client-bound); the server's CPU when the server used at least 90% of its
  pinned cores; the offered rate when an open loop was kept up with; else
  neither CPU was the limit: a wait, named only as far as the counters go
  (wait_evidence: the server's threads blocking, a run queue, the time the
  requests spent inside spindle against the client's, Little's law's time
  per round trip against the server's CPU), else "not measured".
- Queue wait against service time (spindle's own histograms, read from
  /metrics before and after each cell: bench/reqtimes.py): queueing where
  the mean queue wait is at least 60% of queue + service; processor sharing
  where service takes at least 3x the request's CPU (the request was picked
  up and then shared the core with others, whose run-queue wait is shown);
  otherwise service time.
- A cost difference (CPU per request): the counters of the two cells side by
  side (context switches, system calls, page faults, run-queue wait, kernel
  threads' CPU beside the server, kernel against user CPU) where they differ
  by at least the thresholds in MATERIAL. A counter that differs is evidence,
  not proof, that its mechanism accounts for the gap: the text says how much
  CPU per request differs and which counters move with it.
- Margins: the ratio of medians over the repeats with its 95% interval
  (bench/stats.py), not corrected for the report's other comparisons: the
  verdicts are the earlier sections'; this section explains the differences.
  A winner is named only where the interval excludes 1.
- A rate measured while a generator was client-bound is the generator's: such
  a regime is judged on CPU per request where the cells ran at comparable load
  (bench/claims.py cpu_comparable), else not at all."""
from __future__ import annotations

import statistics

from . import claims, stats

CLIENT = "client"
SERVER_CPU = "server CPU"
OFFERED = "offered load"
WAITING = "not CPU"

MOSTLY = 0.75               # a server busy 75-90% of its cores: mostly CPU-bound (a count-based cell's ramps)
QUEUEING_SHARE = 0.6        # mean queue wait >= 60% of queue + service: the request mostly waited
SHARING_STRETCH = 3.0       # service >= 3x the request's CPU: it shared the core while served
# a counter differs materially when the difference reaches this (per request, or cores)
MATERIAL = {"switches": 0.25, "syscalls": 0.5, "minflt": 1.0, "runq_us": 10.0, "kthread_cores": 0.02}
MATCHED_RATE = 4000          # the open loop's rate compared across servers where every one ran it
WAIT_BLOCKS = 0.5            # voluntary switches per request that name a cell's wait as blocking
OUTSIDE_SHARE = 0.5          # spindle's queue + service under half the client's latency: the time went elsewhere


def fmt(v: float | None, unit: str = "", digits: int | None = None) -> str:
    if v is None:
        return "—"
    if digits is None:
        digits = 0 if abs(v) >= 100 else 1 if abs(v) >= 10 else 2
    return f"{v:,.{digits}f}{unit}"


def us(v: float | None) -> str:
    """A time in µs, shown in the unit that reads best."""
    if v is None:
        return "—"
    if v >= 10_000:
        return f"{v / 1000:,.0f} ms"
    if v >= 1000:
        return f"{v / 1000:.1f} ms"
    return f"{v:.0f} µs" if v >= 10 else f"{v:.1f} µs"


# --------------------------------------------------------------------------
# One cell
# --------------------------------------------------------------------------

def cpu_list(r: dict) -> list[int]:
    """The CPUs a cell's server was pinned to ("0", "0-1", "0,2")."""
    out = []
    for part in str(r.get("cpus") or "0").split(","):
        a, _, b = part.partition("-")
        out += list(range(int(a), int(b) + 1)) if b else [int(a)]
    return out


def cores_of(r: dict) -> int:
    return len(cpu_list(r)) or 1


def limiter(r: dict) -> tuple[str, str]:
    """(kind, text): what set this cell's pace."""
    if r.get("client_bound"):
        return CLIENT, f"the client (generator at {r.get('gen_share', 0):.0%} of its core)"
    srv, n = r.get("server_cores"), cores_of(r)
    cores = f"{n} core{'s' if n > 1 else ''}"
    if srv is not None and srv >= claims.SATURATED * n:
        return SERVER_CPU, f"the server's CPU ({srv:.2f} of {cores})"
    busy = {i: r.get(f"cpu{i}_busy") for i in cpu_list(r)}
    if n > 1 and srv is not None and all(b is not None and b >= MOSTLY for b in busy.values()):
        # the server's CPUs were busy, but not all with the server: it shares one with the generator
        most = "" if all(b >= claims.SATURATED for b in busy.values()) else "mostly "
        return SERVER_CPU, (f"{most}the CPUs it runs on (" + ", ".join(f"CPU {i} {b:.0%}" for i, b in busy.items())
                            + f" busy; the server itself {srv:.2f} of {cores}, the rest the generator and "
                              f"other load)")
    rate = r.get("rate")
    if rate and r.get("rps", 0) >= 0.95 * rate and not r.get("fell_behind"):
        return OFFERED, (f"the offered rate (kept up with, server at {srv:.2f} cores)" if srv is not None
                         else "the offered rate (kept up with)")
    if srv is not None and n > 1 and MOSTLY <= srv <= 1.1:
        ev = wait_evidence(r)
        return WAITING, (f"one core's worth of the server's CPU ({srv:.2f} of its {cores}): its work ran about "
                         f"one at a time; " + ("; ".join(ev) if ev else "what serialised it is not measured"))
    if srv is not None and srv >= MOSTLY * n:
        return SERVER_CPU, (f"mostly the server's CPU ({srv:.2f} of {cores}; the rest of the time idle or "
                            f"waiting: starting, draining, or blocked, not measured which)")
    gen = r.get("gen_share")
    ev = wait_evidence(r)
    return WAITING, ("neither CPU (server " + (f"{srv:.2f} cores" if srv is not None else "—") + ", generator "
                     + (f"{gen:.0%}" if gen is not None else "—") + "): a wait"
                     + (": " + "; ".join(ev) if ev else ", for what is not measured"))


def wait_evidence(r: dict) -> list[str]:
    """What the counters say about a cell whose server was not busy: phrases,
    none where nothing was recorded. Each names a kind of wait, not its
    object: a voluntary switch is a thread blocking on a socket, a lock or a
    timer alike."""
    out = []
    vol = r.get("ctx_vol_per_req")
    if vol is not None and vol >= WAIT_BLOCKS:
        out.append(f"its threads blocked {vol:.1f} times per request (voluntary switches: each a wait for a "
                   f"socket, a lock or a timer)")
    runq = r.get("runq_us_per_req")
    if runq is not None and runq >= MATERIAL["runq_us"]:
        out.append(f"run-queue wait {us(runq)} per request (threads ready to run, waiting for a core)")
    t, c = time_split(r), client_mean_us(r)
    if t and c and t["queue"] + t["service"] < OUTSIDE_SHARE * c:
        inside = t["queue"] + t["service"]
        out.append(f"inside spindle {us(inside)} of the client's {us(c)} per request ({inside / c:.0%}): the "
                   f"rest outside it (the listen backlog, the kernel's network path, a timer, the client)")
    conc, rate, cpu = r.get("conc"), r.get("rps"), r.get("server_us_per_req")
    if conc and rate and cpu and not r.get("rate") and not (t and c):
        # a closed loop: Little's law gives the time each request spent in the loop
        depth = r.get("pipeline_depth") or 1
        trip = conc * depth / rate * 1e6
        what = f"each batch of {depth}" if depth > 1 else "each request"
        if trip >= 10 * cpu * depth:
            out.append(f"{what} took {us(trip)} from send to answer (Little's law: {conc} connections ÷ "
                       f"{rate / depth:,.0f}/s), the server's CPU {us(cpu * depth)} of it")
    return out


def switches(r: dict) -> tuple[float | None, str]:
    """Context switches per request and how complete the figure is: perf's
    count (every thread, exited ones too) where it ran, else /proc's
    voluntary + involuntary, a lower bound for models whose threads or
    children exit within a cell."""
    if r.get("ctx_per_req") is not None:
        return r["ctx_per_req"], ""
    vol, inv = r.get("ctx_vol_per_req"), r.get("ctx_invol_per_req")
    if vol is None and inv is None:
        return None, ""
    exits = str(r.get("model") or r.get("server", "")).startswith(("thread", "fork"))
    return (vol or 0) + (inv or 0), "≥ " if exits else ""


def client_mean_us(r: dict) -> float | None:
    """The client's own mean latency per request (connect or send to the last
    byte), where its tool reports one: every request's queue wait + service
    inside the server is part of it."""
    for k in ("avg_ms", "total_mean_ms" if r.get("tool") == "ab" else "mean_ms"):
        if r.get(k) is not None:
            return r[k] * 1000
    return None


def stamps_inconsistent(r: dict) -> str:
    """Why the server's histograms cannot be this cell's truth ('' when they
    can): a mean queue wait + service longer than the client's whole mean
    latency (beyond 10% and 1 ms: ab rounds to whole milliseconds) is time the
    requests cannot have spent inside the server."""
    q, s, c = r.get("queue_mean_us"), r.get("service_mean_us"), client_mean_us(r)
    if q is None or s is None or c is None:
        return ""
    if q + s > 1.1 * c + 1000:
        return (f"the server's queue wait + service ({us(q + s)}) exceed the client's mean latency ({us(c)}): "
                f"its stamps overstate this cell, so they are not used")
    return ""


def time_split(r: dict) -> dict | None:
    """Queue wait against service time from spindle's histograms: None where
    the cell has none (another server, or not read) or where they cannot be
    true (stamps_inconsistent)."""
    q, s = r.get("queue_mean_us"), r.get("service_mean_us")
    if q is None or s is None or q + s <= 0 or stamps_inconsistent(r):
        return None
    cpu = r.get("server_us_per_req")
    stretch = s / cpu if cpu else None
    share = q / (q + s)
    if share >= QUEUEING_SHARE:
        kind = "queueing"
    elif stretch is not None and stretch >= SHARING_STRETCH:
        kind = "processor sharing"
    else:
        kind = "service"
    return {"queue": q, "service": s, "share": share, "stretch": stretch, "kind": kind,
            "queue_p99": r.get("queue_p99_us"), "service_p99": r.get("service_p99_us"),
            "queue_p50": r.get("queue_p50_us"), "service_p50": r.get("service_p50_us")}


def split_text(r: dict) -> str:
    t = time_split(r)
    if t is None:
        bad = stamps_inconsistent(r)
        return (f"queue wait and service time: **not usable**: {bad}" if bad else
                "queue wait and service time: not measured (no spindle histograms in this cell)")
    head = (f"mean queue wait {us(t['queue'])} + service {us(t['service'])}"
            f" (p99 {us(t['queue_p99'])} / {us(t['service_p99'])})")
    if t["kind"] == "queueing":
        return (f"{head}: **queueing** ({t['share']:.0%} of the time before pick-up"
                + (f"; served in {t['stretch']:.1f}x its CPU" if t["stretch"] is not None else "") + ")")
    if t["kind"] == "processor sharing":
        runq = r.get("runq_us_per_req")
        return (f"{head}: **processor sharing** (service {t['stretch']:.0f}x the request's "
                f"{us(r.get('server_us_per_req'))} of CPU: picked up at once, then sharing the core"
                + (f"; run-queue wait {us(runq)} per request" if runq is not None else "") + ")")
    return f"{head}: service time ({t['share']:.0%} queue wait)"


def cost_evidence(w: dict, l: dict) -> list[str]:
    """The counters that differ materially between a winner w and another cell
    l, as phrases (l's figure against w's)."""
    out = []
    cw, cl = w.get("server_us_per_req"), l.get("server_us_per_req")
    if cw and cl:
        du = (l.get("user_us_per_req") or 0) - (w.get("user_us_per_req") or 0)
        ds = (l.get("sys_us_per_req") or 0) - (w.get("sys_us_per_req") or 0)
        line = f"CPU per request {fmt(cl)} against {fmt(cw)} µs ({cl - cw:+.1f})"
        if l.get("sys_us_per_req") is not None and w.get("sys_us_per_req") is not None:
            line += f", of which kernel {ds:+.1f} and user {du:+.1f}"
        out.append(line)
    sl, bl = switches(l)
    sw, bw = switches(w)
    # a lower bound ("≥") below the other figure says nothing about which is larger
    unknown = sl is not None and sw is not None and ((bl and sl < sw) or (bw and sw < sl))
    if sl is not None and sw is not None and abs(sl - sw) >= MATERIAL["switches"] and not unknown:
        out.append(f"context switches per request {bl}{sl:.2f} against {bw}{sw:.2f} ({sl - sw:+.2f}: each a "
                   f"thread blocking and being woken: a hand-off between threads, or a wait on a lock or a socket)")
    yl, yw = l.get("syscalls_per_req"), w.get("syscalls_per_req")
    # and 10% apart: a CPU-bound request's ~2,700 calls (the workload reads its thread's CPU clock as it
    # spins) differ by tens between cells without saying anything about the model
    if yl is not None and yw is not None and abs(yl - yw) >= max(MATERIAL["syscalls"], 0.1 * min(yl, yw)):
        out.append(f"system calls per request {yl:.1f} against {yw:.1f} ({yl - yw:+.1f})")
    fl, fw = l.get("minflt_per_req"), w.get("minflt_per_req")
    if fl is not None and fw is not None and abs(fl - fw) >= MATERIAL["minflt"]:
        out.append(f"minor page faults per request {fl:.1f} against {fw:.1f} ({fl - fw:+.1f}: pages of a fresh "
                   f"address space or stack touched per request)")
    ql, qw = l.get("runq_us_per_req"), w.get("runq_us_per_req")
    if ql is not None and qw is not None and ql - qw >= MATERIAL["runq_us"] and ql >= 2 * qw:
        out.append(f"run-queue wait per request {us(ql)} against {us(qw)} (+{us(ql - qw)}: threads ready to run, "
                   f"waiting for a core)")
    kl, kw = l.get("kthread_cores"), w.get("kthread_cores")
    if kl is not None and kw is not None and abs(kl - kw) >= MATERIAL["kthread_cores"]:
        out.append(f"kernel threads busy {kl:.2f} cores beside it against {kw:.2f} ({kl - kw:+.2f}: CPU the "
                   f"kernel spends outside the server's threads, in no server's CPU per request)")
    return out


def not_measured(w: dict, l: dict) -> list[str]:
    """Counters this comparison could have used but the run did not record."""
    miss = []
    if l.get("syscalls_per_req") is None or w.get("syscalls_per_req") is None:
        miss.append("system calls (perf could not count them here, or the cell had no untimed counting run)")
    if time_split(l) is None or time_split(w) is None:
        miss.append("queue wait and service time (spindle only)")
    return miss


# --------------------------------------------------------------------------
# Regimes
# --------------------------------------------------------------------------

def _who(r: dict) -> str:
    name = r.get("server", "?")
    if r.get("cores", 1) and r.get("cores", 1) > 1:
        name += f" ({r['cores']} cores)"
    return name


def _lock_who(r: dict) -> str:
    return "one global lock" if r.get("lock") == "global" else f"a lock per bucket ({r.get('buckets')} buckets)"


def _common_rate(rows: list[dict]) -> int | None:
    servers = {r["server"] for r in rows}
    rates = sorted({r["rate"] for r in rows if all(any(x["server"] == s and x["rate"] == r["rate"] for x in rows)
                                                   for s in servers)})
    if not rates:
        return None
    return min(rates, key=lambda x: abs(x - MATCHED_RATE))


def _top_common_rate(rows: list[dict]) -> int | None:
    """The highest rate every server ran at without falling behind: the open
    loop nearest the knee that all of them reached."""
    servers = {r["server"] for r in rows}
    ok = lambda x, s: any(y["server"] == s and y["rate"] == x and not y.get("fell_behind")
                          and not y.get("errors_total") for y in rows)
    rates = [x for x in sorted({r["rate"] for r in rows}) if all(ok(x, s) for s in servers)]
    return rates[-1] if rates else None


def _policy_who(r: dict) -> str:
    return f"{r.get('model', r.get('server', '?'))} {r.get('policy', '')}".strip()


def past_the_knee(rows):
    """The overload experiment at the highest multiple of capacity every
    model was offered (3x by default)."""
    pts = [r for r in rows if r.get("exp") == "overload" and r.get("load_x") is not None]
    if not pts:
        return []
    top = max(r["load_x"] for r in pts)
    return [r for r in pts if r["load_x"] == top]


def sweep(rows):
    """The open loop's sweep points (not the generator's calibration nor the knee probes)."""
    return [r for r in rows if r.get("exp") == "openloop" and "rate" in r and not r.get("gen_cal_rate")
            and not r.get("probe_rate")]


REGIMES = [
    # (id, when, selector, metric, higher_better, who)
    ("keepalive-matched", "keep-alive, small file, the same offered rate (open loop)",
     lambda rows: (lambda ol, x: [r for r in ol if r["rate"] == x])(sweep(rows), _common_rate(sweep(rows))),
     "server_us_per_req", False, _who),
    ("keepalive", "keep-alive, small file, each server at its own pace (wrk -c200)",
     lambda rows: claims_select(rows, "peers", peer_cell="keepalive"), "rps", True, _who),
    ("close-matched", "a new connection per request, the same offered rate (4537 B page)",
     lambda rows: claims_select(rows, "seed000", part="matched"), "server_us_per_req", False, _who),
    ("close", "a new connection per request, each server at its own pace (ab -c200, 13 B)",
     lambda rows: claims_select(rows, "peers", peer_cell="close"), "rps", True, _who),
    ("cpu-1core", "CPU-bound work (1-3 ms per request), 50 in parallel, one core",
     lambda rows: [r for r in claims_select(rows, "seed001") if r.get("cores", 1) == 1], "avg_ms", False, _who),
    ("cpu-2core", "CPU-bound work (1-3 ms per request), 50 in parallel, two cores",
     lambda rows: [r for r in claims_select(rows, "seed001") if r.get("cores", 1) == 2], "avg_ms", False, _who),
    ("lock", "a lock with 1 ms of work inside it (pool, two cores)",
     lambda rows: [r for r in claims_select(rows, "seed002") if "d" in r.get("subs", []) and r.get("hold") == 1],
     "rps", True, _lock_who),
    ("slow", "slow clients: a fresh client's p99 beside 100 slow ones (open loop, 1,000/s)",
     lambda rows: claims_select(rows, "slow"), "p99_ms", False, _who),
    ("tls-full", "full TLS handshakes (a new https connection per request)",
     lambda rows: claims_select(rows, "tls", tls_cell="full"), "rps", True, _who),
    ("pipelined", "16 requests pipelined per write", lambda rows: claims_select(rows, "peers", peer_cell="pipelined"),
     "rps", True, _who),
    ("file1m", "a 1 MB file", lambda rows: claims_select(rows, "peers", peer_cell="file1m"), "mbps", True, _who),
    ("knee", "open loop near the knee: p99 at the highest rate every server kept up with",
     lambda rows: (lambda ol, x: [r for r in ol if r["rate"] == x])(sweep(rows), _top_common_rate(sweep(rows))),
     "p99_ms", False, _who),
    ("overload", "past the knee: 2 ms of CPU work offered at 3x each model's capacity, per overload policy "
                 "(goodput: 200s within 1 s)",
     past_the_knee, "goodput_rate", True, _policy_who),
]

CPU_KEY = {"rps": "server_us_per_req", "mbps": "server_us_per_mb"}
METRIC_NAME = {"rps": "requests/s", "mbps": "MB/s", "server_us_per_req": "server CPU per request",
               "server_us_per_mb": "server CPU per MB", "avg_ms": "mean latency", "p99_ms": "p99 latency",
               "goodput_rate": "goodput"}


def claims_select(rows, exp, **match):
    return [r for r in rows if r.get("exp") == exp and all(r.get(k) == v for k, v in match.items())]


def usable(r: dict, key: str) -> bool:
    return (not r.get("invalid") and not r.get("skipped") and r.get(key) is not None
            and r.get("reps_ok", 1) >= 1)


def margin(win: dict, other: dict, key: str, higher_better: bool, rid: str) -> tuple[float, tuple, bool] | None:
    """(ratio, 95% interval, settled): how far win is ahead of other, > 1 =
    ahead, settled where the interval excludes 1."""
    a, b = claims.vals(win, key), claims.vals(other, key)
    if not higher_better:
        a, b = b, a
    r = stats.ratio_of_medians(a, b, key=f"why/{rid}/{win.get('cell')}/{other.get('cell')}/{key}")
    if r is None:
        return None
    lo, hi = r.ci95
    return r.ratio, (lo, hi), lo > 1


def judge_regime(rid: str, when: str, rows: list[dict], key: str, higher_better: bool, who) -> dict:
    """One regime: its basis (the figure compared), the ranking, the winner and
    its margin over the runner-up, each cell's limiter, and the evidence
    against the winner for every other cell."""
    out = {"id": rid, "when": when, "cells": [], "basis": key, "note": "", "winner": None}
    cells = [r for r in rows if usable(r, key)]
    if len(cells) < 2:
        out["note"] = ("not measured in this run" if not rows else
                       "fewer than two usable cells (invalid, failed or skipped)")
        return out
    basis = key
    if key in CPU_KEY and any(r.get("client_bound") for r in cells):
        # a client-bound rate is the generator's: compare CPU per unit of work, where the load was comparable
        basis = CPU_KEY[key]
        higher_better = False
        cells = [r for r in cells if usable(r, basis)]
        out["note"] = (f"a cell was client-bound, so the rates are the generator's: compared on "
                       f"{METRIC_NAME[basis]} instead")
    out["basis"] = basis
    cells.sort(key=lambda r: r[basis], reverse=higher_better)
    if len(cells) < 2:
        out["note"] += "; fewer than two cells measured it"
        return out
    best = cells[0]
    for r in cells:
        why_not = claims.cpu_comparable(best, r, key) if basis != key and r is not best else ""
        m = None if why_not or r is best else margin(best, r, basis, higher_better, rid)
        out["cells"].append({"who": who(r), "row": r, "limiter": limiter(r), "margin": m,
                             "comparable": why_not, "evidence": [] if r is best else cost_evidence(best, r),
                             "missing": [] if r is best else not_measured(best, r), "split": split_text(r)})
    runner = next((c for c in out["cells"][1:] if c["margin"] is not None), None)
    if runner and runner["margin"][2]:
        out["winner"] = out["cells"][0]
        out["runner"] = runner
    elif runner:
        out["runner"] = runner
    return out


def judge_all(rows: list[dict]) -> list[dict]:
    return [judge_regime(rid, when, sel(rows), key, hb, who) for rid, when, sel, key, hb, who in REGIMES]


# --------------------------------------------------------------------------
# Text
# --------------------------------------------------------------------------

def value(r: dict, key: str) -> str:
    v = r.get(key)
    if key == "server_us_per_req":
        return f"{fmt(v)} µs"
    if key == "server_us_per_mb":
        return f"{fmt(v)} µs/MB"
    if key in ("avg_ms", "p99_ms"):
        return f"{fmt(v)} ms"
    if key == "mbps":
        return f"{fmt(v)} MB/s"
    return f"{fmt(v, digits=0)}/s"


def latency_shape(cells: list[dict]) -> str:
    """Best median and worst tail, where every compared cell carries its
    requests' latencies (seed 001's client keeps each one)."""
    pts = {}
    for c in cells:
        lat = c["row"].get("lat_ms") or []
        if len(lat) >= 100:
            pts[c["who"]] = (lat[len(lat) // 2], lat[min(len(lat) - 1, int(0.99 * len(lat)))])
    if len(pts) < 2:
        return ""
    best50 = min(pts, key=lambda k: pts[k][0])
    worst99 = max(pts, key=lambda k: pts[k][1])
    text = (f"Over every request of every repeat: best median {best50} ({pts[best50][0]:.1f} ms; the others "
            f"{', '.join(f'{k} {v[0]:.1f}' for k, v in pts.items() if k != best50)}), worst p99 {worst99} "
            f"({pts[worst99][1]:.1f} ms; the others {', '.join(f'{k} {v[1]:.1f}' for k, v in pts.items() if k != worst99)}).")
    if best50 == worst99:
        text += f" {best50} has both the best median and the worst tail."
    return text


def regime_row(j: dict) -> list[str]:
    if not j["cells"]:
        return [j["when"], "—", "—", "—", j["note"] or "not measured", "—"]
    first = j["cells"][0]
    compared = ", ".join(c["who"] for c in j["cells"])
    basis = METRIC_NAME.get(j["basis"], j["basis"])
    if j["winner"]:
        r, (lo, hi), _ = j["runner"]["margin"]
        win = f"**{first['who']}** ({value(first['row'], j['basis'])})"
        mar = f"{r:.2f}x [{lo:.2f}–{hi:.2f}] over {j['runner']['who']} ({basis})"
    elif j.get("runner"):
        r, (lo, hi), _ = j["runner"]["margin"]
        win = "no clear winner"
        mar = (f"{first['who']} {r:.2f}x [{lo:.2f}–{hi:.2f}] {j['runner']['who']} ({basis}): the interval "
               f"includes 1")
    else:
        win, mar = "no clear winner", "not comparable: " + (j["cells"][1]["comparable"] or "no interval")
    kinds = {c["limiter"][0] for c in j["cells"]}
    lim = first["limiter"][1] if len(kinds) == 1 else "; ".join(f"{c['who']}: {c['limiter'][1]}"
                                                              for c in j["cells"][:3])
    if len(kinds) > 1 and len(j["cells"]) > 3:
        lim += "; …"
    why = mechanism_summary(j)
    return [j["when"], compared, win, mar, lim, why]


def slow_text(r: dict) -> str:
    """Beside slow clients: what the server held for them and what the fresh
    client got ('' for a cell without slow clients)."""
    if r.get("slow_clients") is None or r.get("held_threads") is None:
        return ""
    share = r.get("answered_share")
    n, p = round(r["held_threads"]), round(r.get("held_processes") or 0)
    return (f"{r['slow_clients']} slow clients held {n} thread{'s' if n != 1 else ''} in "
            f"{p} process{'es' if p != 1 else ''}"
            + (f"; the fresh client's requests answered {share:.0%}" if share is not None else "")
            + (f" ({r.get('timeouts', 0):.0f} timed out: p99 is at least the {r.get('timeout_ms', 2000) / 1000:g} s "
               f"timeout)"
               if (r.get("p99_censored") or 0) >= 0.5 else ""))


def mechanism_summary(j: dict) -> str:
    """One line: what differs between the winner (or the leader) and the
    cell furthest behind, from the counters; "not measured" where none do."""
    if len(j["cells"]) < 2:
        return "—"
    first, last = j["cells"][0], next((c for c in reversed(j["cells"]) if not c["comparable"]), j["cells"][-1])
    parts = []
    if j["id"] == "slow":
        held = [f"{c['who']}: {slow_text(c['row'])}" for c in (first, last) if slow_text(c["row"])]
        if held:
            parts.append("; ".join(held))
    if j["basis"] in ("avg_ms", "p99_ms", "goodput_rate"):
        kinds = [(c["who"], time_split(c["row"])) for c in (first, last)]
        known = [(w, t) for w, t in kinds if t]
        if known:
            parts.append("; ".join(f"{w}: {t['kind']} (queue {us(t['queue'])}, service {us(t['service'])})"
                                   for w, t in known))
    # what costs the cell behind more: the counters that are higher there (a lower one explains no loss)
    ev = [e for e in last["evidence"] if not e.startswith("CPU per request") and _delta(e).startswith(" (+")]
    if ev:
        parts.append(f"{last['who']} against {first['who']}: " + "; ".join(e.split(" (")[0] + _delta(e) for e in ev))
    if not parts:
        return "not measured: no recorded counter differs enough to name a mechanism"
    return ". ".join(parts)


def _delta(phrase: str) -> str:
    """The signed difference a phrase carries, '(+1.60)' -> ' (+1.60)'."""
    if " (" in phrase:
        inner = phrase.split(" (", 1)[1].split(")")[0].split(":")[0]
        if inner[:1] in "+-":
            return f" ({inner})"
    return ""


def details(j: dict) -> list[str]:
    out = [f"\n**{j['when'][0].upper() + j['when'][1:]}**"
           + (f" (on {METRIC_NAME.get(j['basis'], j['basis'])})" if j["cells"] else "") + "\n"]
    if j["note"]:
        out.append(f"- {j['note'][0].upper() + j['note'][1:]}.")
    if not j["cells"]:
        return out
    first = j["cells"][0]
    out.append(f"- **{first['who']}** {value(first['row'], j['basis'])}; limited by {first['limiter'][1]}; "
               f"{first['split']}.")
    if slow_text(first["row"]):
        out.append(f"  {slow_text(first['row'])[0].upper()}{slow_text(first['row'])[1:]}.")
    for c in j["cells"][1:]:
        if c["comparable"]:
            out.append(f"- {c['who']} {value(c['row'], j['basis'])}: not compared ({c['comparable']}); limited by "
                       f"{c['limiter'][1]}; {c['split']}.")
            if slow_text(c["row"]):
                out.append(f"  {slow_text(c['row'])[0].upper()}{slow_text(c['row'])[1:]}.")
            continue
        r = c["margin"]
        head = (f"- {c['who']} {value(c['row'], j['basis'])}"
                + (f": {first['who']} ahead {r[0]:.2f}x [{r[1][0]:.2f}–{r[1][1]:.2f}]"
                   + ("" if r[2] else " (the interval includes 1)") if r else "")
                + f"; limited by {c['limiter'][1]}; {c['split']}.")
        out.append(head)
        if slow_text(c["row"]):
            out.append(f"  {slow_text(c['row'])[0].upper()}{slow_text(c['row'])[1:]}.")
        if c["evidence"]:
            out.append("  Against " + first["who"] + ": " + "; ".join(c["evidence"]) + ".")
        if len(c["evidence"]) <= 1 and c["row"].get("server_us_per_req") and first["row"].get("server_us_per_req"):
            out.append("  No other recorded counter differs enough to name a mechanism: not measured"
                       + (f" ({', '.join(c['missing'])} not recorded)" if c["missing"] else "") + ".")
    shape = latency_shape(j["cells"]) if j["basis"] in ("avg_ms", "p99_ms") else ""
    if shape:
        out.append(f"- {shape}")
    return out


def section(rows: list[dict]) -> tuple[str, list[dict]]:
    """The Markdown section and the judged regimes."""
    js = judge_all(rows)
    md = ["\n## Which model wins, when, and why\n",
          "One row per kind of load. The winner is the best median on the row's figure where the ratio to the "
          "runner-up has a 95% interval above 1 (ratio of medians over the repeats, **not corrected** for the "
          "report's other comparisons: the verdicts are the sections above; this one explains). The limiter is "
          "what set each cell's pace: the client (generator over 90% of its core), the server's CPU (90% of its "
          "cores), the offered rate (an open loop kept up with), or neither CPU, a wait that is not measured. "
          "Why: the counters that differ between the leader and the server furthest behind (bench/why.py's "
          "first comment gives the rules): context switches, system calls, page faults, run-queue wait and "
          "kernel threads' CPU per request (bench/kcounters.py), and for spindle the queue wait and service "
          "time its own histograms gave for the cell (bench/reqtimes.py). Where no counter differs enough, or "
          "none was recorded, it says **not measured**.\n",
          "Queue wait is not the same queue in every model (docs/operations.md, “Where a request's time goes”). "
          "In `pool` and `prefork` it is the **work queue**: a request waits there while every thread is busy, "
          "and any free thread takes the next one, so it grows only when all threads are taken (2 threads, 20 "
          "requests of 20 ms sent at once: each pair waits for the pairs before it). In `epoll` and `uring` it "
          "is the **loop's turn**: the connections a loop found ready are served one after another, so a "
          "request waits for those ahead of it in the same turn, even while another loop or core is idle "
          "(one loop, the same 20 requests: the k-th waits about k × 20 ms). In `thread`, `fork` and "
          "`iterative` it is accept to first read: a thread or process starting. "
          "tests/integration/test_request_time.py measures both bursts. A queueing row therefore reads "
          "differently by model: a pool's queue says its threads were all busy; a loop's says its turn was "
          "long.\n"]
    from .report import table   # the report's Markdown table (imported late: report imports this module)
    md.append(table(["when", "compared", "winner", "margin [95% CI]", "limiter", "why (measured)"],
                    [[x.replace("|", "/") for x in regime_row(j)] for j in js]))
    md.append("\nIn detail, each cell against the regime's leader:\n")
    for j in js:
        md.extend(details(j))
    return "\n".join(md) + "\n", js


def median_of(rows: list[dict], key: str) -> float | None:
    v = [r[key] for r in rows if r.get(key) is not None]
    return statistics.median(v) if v else None
