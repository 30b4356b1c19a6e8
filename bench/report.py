"""Turns the lab's records into results.json, results.csv, PNG plots and
report.md: the headline (epoll, chosen in advance, against nginx), one section
per seed, the open-loop sweep, the seeds' claims checked (bench/claims.py),
per-cell CPU and machine load, and every failure or invalid cell."""
from __future__ import annotations

import csv
import json
import statistics
from collections import OrderedDict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from . import checks, claims
from .checks import client_bound_loser, verdict as range_verdict

MODEL_ORDER = ["iterative", "fork", "fork-nofile1024", "thread", "pool", "pool-5", "pool-15", "prefork",
               "prefork-4x10", "epoll", "uring", "nginx", "nginx-seed003", "lighttpd", "h2o"]
COLORS = {"iterative": "#8c564b", "fork": "#d62728", "fork-nofile1024": "#d62728", "thread": "#ff7f0e",
          "pool": "#2ca02c", "pool-5": "#2ca02c", "pool-15": "#98df8a", "prefork": "#17becf",
          "prefork-4x10": "#17becf", "epoll": "#1f77b4", "uring": "#9467bd", "nginx": "#000000",
          "nginx-seed003": "#000000", "lighttpd": "#bcbd22", "h2o": "#e377c2"}
SKIP = {"exp", "cell", "server", "kind", "model", "cpus", "workers", "rep", "cmd", "tool", "raw",
        "problems", "failed_run", "failed_detail", "status_counts", "error_samples", "subs", "invalid",
        "lat_ms", "cdf", "client_bound", "fell_behind", "skipped"}


# --------------------------------------------------------------------------
# Aggregation
# --------------------------------------------------------------------------

def aggregate(records: list[dict]) -> list[dict]:
    """One row per (exp, cell): params from the first repeat; for each numeric
    metric the median and the min/max over repeats (key, key_min, key_max);
    errors summed; problems collected."""
    groups: "OrderedDict[tuple, list[dict]]" = OrderedDict()
    for r in records:
        groups.setdefault((r["exp"], r["cell"]), []).append(r)
    rows = []
    for (exp, cell), rs in groups.items():
        ok = [r for r in rs if "failed_run" not in r and "skipped" not in r]
        first = rs[0]
        params = set(first.get("_params", []))
        row = {k: first[k] for k in ("exp", "cell", "server", "kind", "model", "cpus", "workers", "tool",
                                     "delay_kind", "reused_from") if k in first}
        row.update({k: first[k] for k in params})
        skip = SKIP | params | {"_params"}
        row["reps"] = len(rs)
        row["reps_ok"] = len(ok)
        nums = sorted({k for r in ok for k, v in r.items()
                       if k not in skip and isinstance(v, (int, float)) and not isinstance(v, bool)})
        for k in nums:
            vals = [r[k] for r in ok if isinstance(r.get(k), (int, float))]
            if vals:
                row[k] = statistics.median(vals)
                row[k + "_min"] = min(vals)
                row[k + "_max"] = max(vals)
        row["errors_total"] = sum(r.get("errors", 0) or 0 for r in ok)
        inv = sorted({r["invalid"] for r in ok if r.get("invalid")})
        if inv:
            row["invalid"] = "; ".join(inv)
        row["client_bound"] = any(r.get("client_bound") for r in ok)
        row["fell_behind"] = any(r.get("fell_behind") for r in ok)
        row["lat_ms"] = sorted(x for r in ok for x in r.get("lat_ms", []))
        cdfs = [r["cdf"] for r in ok if r.get("cdf")]
        if cdfs:
            row["cdf"] = cdfs[0]
        row["problems"] = sorted({p for r in rs for p in r.get("problems", [])})
        row["failed_runs"] = [r["failed_run"] for r in rs if "failed_run" in r]
        if any("skipped" in r for r in rs):
            row["skipped"] = next(r["skipped"] for r in rs if "skipped" in r)
        rows.append(row)
    return rows


def select(rows, exp, **match):
    out = []
    for r in rows:
        if r["exp"] != exp:
            continue
        if all(r.get(k) == v for k, v in match.items()):
            out.append(r)
    return out


def by_model(rows):
    return sorted(rows, key=lambda r: MODEL_ORDER.index(r["server"]) if r["server"] in MODEL_ORDER else 99)


# --------------------------------------------------------------------------
# Formatting
# --------------------------------------------------------------------------

def num(v, digits=0):
    if v is None:
        return "—"
    if digits == 0:
        return f"{v:,.0f}"
    return f"{v:,.{digits}f}"


def shown(r, v, digits=0):
    """A single figure of a row, or INVALID: an invalid cell's numbers appear
    in no column, not only in no median."""
    return "INVALID" if r and r.get("invalid") else num(v, digits)


def delay_kind(rows) -> str:
    """'delay_kind = cpu' (what the rows' workload cells used), for every
    workload table and plot. Runs before the kind was recorded per cell used
    cpu, the only kind the lab asks for."""
    kinds = sorted({r.get("delay_kind") or "cpu" for r in rows}) or ["cpu"]
    return "delay_kind = " + "/".join(kinds)


def spread(r, key, digits=0):
    """'median (min–max)' or a dash, and 'FAILED' when no repeat produced it."""
    if r is None:
        return "not run"
    if r.get("skipped"):
        return "skipped"
    if r.get("invalid"):
        return "INVALID"
    if key not in r:
        return "FAILED" if r.get("failed_runs") else "—"
    if r["reps_ok"] <= 1:
        return num(r[key], digits)
    return f"{num(r[key], digits)} ({num(r[key + '_min'], digits)}–{num(r[key + '_max'], digits)})"


def errs(r):
    if r is None:
        return "—"
    parts = []
    if r.get("failed_runs"):
        parts.append(f"{len(r['failed_runs'])} run(s) failed")
    if r.get("errors_total"):
        parts.append(f"{r['errors_total']:,}")
    return ", ".join(parts) or "0"


def table(header: list[str], rows: list[list]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    for row in rows:
        out.append("| " + " | ".join(str(c) for c in row) + " |")
    return "\n".join(out) + "\n"



def cpu_cols(r) -> list[str]:
    """Server CPU per request, the generator's share of its core, other load."""
    if r is None or r.get("invalid") or "server_cpu_s" not in r:
        return ["—", "—", "—"]
    us = r.get("server_us_per_req")
    gen = f"{r['gen_share']:.0%}" + (" **client-bound**" if r.get("client_bound") else "") \
        + (" **fell behind its rate**" if r.get("fell_behind") else "")
    return [num(us, 1) if us is not None else "—", gen, f"{r.get('other_cores', 0):.2f}"]


CPU_HEAD = ["server CPU µs/req", "generator core", "other load (cores)"]


# --------------------------------------------------------------------------
# Plots
# --------------------------------------------------------------------------

def _style(ax, title, ylabel, xlabel=None):
    ax.set_title(title, fontsize=10)
    ax.set_ylabel(ylabel)
    if xlabel:
        ax.set_xlabel(xlabel)
    ax.grid(alpha=0.3)
    ax.set_axisbelow(True)


def bars(ax, rows, key, title, ylabel, label=lambda r: r["server"], xlabel="server"):
    """Median bars with min–max whiskers; invalid/failed cells drawn as a red X."""
    xs = list(range(len(rows)))
    ok = lambda r: key in r and not r.get("invalid")
    vals = [r[key] if ok(r) else 0 for r in rows]
    lo = [max(0, r[key] - r.get(key + "_min", r[key])) if ok(r) else 0 for r in rows]
    hi = [max(0, r.get(key + "_max", r[key]) - r[key]) if ok(r) else 0 for r in rows]
    colors = [COLORS.get(r["server"], "#777777") for r in rows]
    ax.bar(xs, vals, color=colors, yerr=[lo, hi], capsize=3, ecolor="#444444", label="this run (median, min–max)")
    ax.set_xticks(xs)
    ax.set_xticklabels([label(r) for r in rows], rotation=30, ha="right", fontsize=8)
    for x, r in zip(xs, rows):
        if not ok(r):
            ax.text(x, 0, "X", ha="center", va="bottom", color="red")
    _style(ax, title, ylabel, xlabel)


def save(fig, out: Path, name: str) -> str:
    fig.tight_layout()
    fig.savefig(out / name, dpi=110)
    plt.close(fig)
    return name


def one_legend(fig, axes):
    """One legend per figure: the union of the axes' labelled artists."""
    seen = {}
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(lab, h)
    if seen:
        fig.legend(list(seen.values()), list(seen.keys()), loc="upper center", ncol=min(6, len(seen)),
                   fontsize=8, bbox_to_anchor=(0.5, 1.0))
        fig.tight_layout(rect=(0, 0, 1, 0.92))


# --------------------------------------------------------------------------
# The report
# --------------------------------------------------------------------------

class Report:
    def __init__(self, lab, out: Path, man: dict):
        self.lab, self.out, self.man = lab, out, man
        self.rows = aggregate(lab.records)
        self.md: list[str] = []
        self.headline: list[list] = []
        self.plots: list[str] = []

    def head(self, exp, title):
        self.md.append(f"\n## {title}\n")
        for n in self.lab.notes.get(exp, []):
            self.md.append(f"- {n}")
        self.md.append("")

    def img(self, name, alt):
        self.plots.append(name)
        self.md.append(f"\n![{alt}]({name})\n")

    def save_fig(self, fig, name, alt, axes=None):
        if axes is not None:
            one_legend(fig, axes)
            fig.savefig(self.out / name, dpi=110)
            plt.close(fig)
        else:
            save(fig, self.out, name)
        self.img(name, alt)

    def compare(self, label, metric, ep, ng, key, higher_better=True, digits=0):
        """A headline row: epoll (chosen in advance) against nginx. A verdict only
        where the repeats' ranges do not overlap."""
        if ep is None or ng is None:
            self.headline.append([label, metric, spread(ep, key, digits), spread(ng, key, digits), "—", "not run"])
            return
        if ep.get("invalid") or ng.get("invalid") or key not in ep or key not in ng:
            self.headline.append([label, metric, spread(ep, key, digits), spread(ng, key, digits), "—",
                                  "no verdict (invalid or failed cell)"])
            return
        ratio = ep[key] / ng[key] if ng[key] else float("inf")
        if ep["reps_ok"] < 2 or ng["reps_ok"] < 2:
            v = "unsettled (one run)"
        else:
            v = range_verdict((ep[key + "_min"], ep[key + "_max"]), (ng[key + "_min"], ng[key + "_max"]),
                              higher_better)
            # a client-bound cell measured the generator: it may win, never lose
            if v == "ahead" and client_bound_loser(ep, ng, key) or v == "behind" and client_bound_loser(ng, ep, key):
                v = "unsettled (the slower cell was client-bound)"
            v = {"ahead": "epoll ahead", "behind": "**epoll behind**"}.get(v, v if v.startswith("unsettled (")
                                                                         else "unsettled (ranges overlap)")
        if ep.get("client_bound") or ng.get("client_bound"):
            v += "; client-bound cell"
        if ep.get("fell_behind") or ng.get("fell_behind"):
            v += "; generator fell behind its rate"
        if ep.get("errors_total") or ng.get("errors_total"):
            v += "; errors, see section"
        self.headline.append([label, metric, spread(ep, key, digits), spread(ng, key, digits), f"{ratio:.2f}", v])

    # -- seed 000 -------------------------------------------------------------

    def seed000(self):
        rows = by_model(select(self.rows, "seed000", part="main"))
        fork = sorted(select(self.rows, "seed000", part="fork1024"), key=lambda r: r["conc"])
        if fork and not any(r["conc"] == 30 for r in fork):   # default run: c = 30 is the main fork cell
            fork = [r for r in rows if r["server"] == "fork"] + fork
        if not rows and not fork:
            return
        self.head("seed000", "Seed 000 — ab -c 30 on the 4537-byte page: the seed's models")
        self.md.append(table(["server", "req/s median (min–max)", "mean ms", "p50 ms", "p99 ms", "failed",
                              "seed's req/s"] + CPU_HEAD,
                             [[r["server"], spread(r, "rps"), spread(r, "mean_ms", 2), shown(r, r.get("p50_ms")),
                               shown(r, r.get("p99_ms")), errs(r),
                               num(claims.SEED000_RPS.get(r["server"])) if r["server"] in claims.SEED000_RPS else "—"]
                              + cpu_cols(r) for r in rows]))
        if fork:
            self.md.append("\n**fork under the seed's conditions** (1024 descriptors, no cap of spindle's "
                           "binding): does it survive where the seed's died?\n")
            self.md.append(table(["ab -c", "req/s", "mean ms", "failed requests", "aborted runs", "problems"],
                                 [[f"{r['conc']}{' (the main fork cell: the limit does not bind)' if r.get('part') == 'main' else ''}",
                                   spread(r, "rps"), spread(r, "mean_ms", 1), f"{r.get('errors_total', 0):,}",
                                   len(r.get("failed_runs", [])), "; ".join(r["problems"])[:200] or "none"]
                                  for r in fork]))
        fig, ax = plt.subplots(figsize=(9, 4.5))
        bars(ax, rows, "rps", "ab -c 30, new connection per request, 4537-byte page, 1 core", "requests/s")
        seeds = [(i, claims.SEED000_RPS[r["server"]]) for i, r in enumerate(rows) if r["server"] in claims.SEED000_RPS]
        if seeds:
            ax.scatter([i for i, _ in seeds], [v for _, v in seeds], marker="D", color="red", zorder=4,
                       label="seed 000's own result (its machine)")
        self.save_fig(fig, "seed000_throughput.png", "seed 000 throughput", [ax])
        self.compare("Seed 000", "req/s, ab -c 30, 4537 B", select(self.rows, "seed000", server="epoll", part="main")[0]
                     if select(self.rows, "seed000", server="epoll", part="main") else None,
                     self.nginx_row("seed000", part="main"), "rps")

    def nginx_row(self, exp, **match):
        r = select(self.rows, exp, server="nginx", **match)
        return r[0] if r else None

    # -- seed 001 -------------------------------------------------------------

    def seed001(self):
        rows = by_model(select(self.rows, "seed001"))
        if not rows:
            return
        kind = delay_kind(rows)
        self.head("seed001", f"Seed 001 — 500 requests, 50 in parallel, each doing 1–3 ms of CPU work ({kind})")
        self.md.append(table(["server", "avg ms", "p50 ms", "p90 ms", "p99 ms", "max ms", "std-dev ms", "failed",
                              "seed's avg (s)"] + CPU_HEAD,
                             [[r["server"], spread(r, "avg_ms", 1), shown(r, pct(r, 0.5), 1), shown(r, pct(r, 0.9), 1),
                               shown(r, pct(r, 0.99), 1), spread(r, "max_ms", 1), spread(r, "std_ms", 1), errs(r),
                               claims.SEED001_AVG_S.get(r["server"], "—")] + cpu_cols(r) for r in rows]))
        self.md.append("\nPercentiles are over every request of every repeat. The seed's times are seconds of "
                       "its own servers' work on its machine: compare the order of the models, not the values.\n")
        fig, ax = plt.subplots(figsize=(8, 4.8))
        for r in rows:
            lat = r.get("lat_ms") or []
            if lat and not r.get("invalid"):
                ax.plot(lat, [(i + 1) / len(lat) for i in range(len(lat))], color=COLORS.get(r["server"]),
                        label=r["server"], linewidth=1.6)
        # The seed's averages: seconds of its 1-3 s work units, drawn at the same
        # number of ms (our unit is 1 ms): the order of the models compares, the values do not
        first = True
        for r in rows:
            avg_s = claims.SEED001_AVG_S.get(r["server"])
            if avg_s is not None:
                ln = ax.axvline(avg_s, color=COLORS.get(r["server"]), linestyle=":", linewidth=1.4,
                                label="seed 001's averages (its 1 s units as our 1 ms)" if first else "_nolegend_")
                ln.set_gid(f"seed001-avg-{r['server']}")
                first = False
        ax.set_xscale("log")
        _style(ax, f"response time CDF: 500 requests, 50 in parallel, 1–3 ms CPU work each ({kind}), 1 core",
               "fraction of requests answered", "response time, ms (log)")
        self.save_fig(fig, "seed001_latency_cdf.png", "seed 001 latency CDF", [ax])

    # -- seed 002 -------------------------------------------------------------

    def seed002(self):
        rows = select(self.rows, "seed002")
        if not rows:
            return
        kind = delay_kind(rows)
        self.head("seed002", f"Seed 002 — CPU work ({kind}) and shared buckets")
        sub = lambda s: [r for r in rows if s in r.get("subs", [])]
        fig, axes = plt.subplots(1, 3, figsize=(15, 4.6))
        a = sub("a")
        conns = {"keep-alive" if r.get("keepalive") else "a new connection per request" for r in a}
        self.md.append(f"\n**(a) throughput against cores** (delay 1–3, {kind}, {' / '.join(sorted(conns))}, "
                       f"same workers and threads)\n")
        cores = sorted({r["cores"] for r in a})
        self.md.append(table(["model"] + [f"{c} core(s) req/s" for c in cores] + ["work-s served per s"] + CPU_HEAD[:1],
                             [[m] + [spread(next((r for r in a if r["server"] == m and r["cores"] == c), None), "rps")
                                     for c in cores]
                              + [" / ".join(f"{r.get('work_s_per_s', 0):.2f}" for r in a if r["server"] == m)]
                              + [" / ".join(cpu_cols(r)[0] for r in a if r["server"] == m)]
                              for m in sorted({r["server"] for r in a})]))
        asked = self.man.get("cores_asked", [])
        missing = [c for c in asked if c not in cores]
        if missing:
            self.md.append(f"\n{', '.join(map(str, missing))} core(s): **not run** — this machine has "
                           f"{self.man.get('cpus_online')} CPUs.\n")
        ax = axes[0]
        for m in sorted({r["server"] for r in a}):
            pts = sorted([r for r in a if r["server"] == m and "rps" in r and not r.get("invalid")],
                         key=lambda r: r["cores"])
            if pts:
                ax.errorbar([r["cores"] for r in pts], [r["rps"] for r in pts],
                            yerr=[[r["rps"] - r["rps_min"] for r in pts], [r["rps_max"] - r["rps"] for r in pts]],
                            marker="o", capsize=3, color=COLORS.get(m), label=m)
        ax.set_xticks(cores or [1])
        ax.set_ylim(bottom=0)
        _style(ax, f"(a) throughput against cores, delay 1–3 ms ({kind})", "requests/s", "server cores")
        bc = sub("b") + [r for r in sub("c") if r not in sub("b")]
        self.md.append(f"\n**(b) thread per request vs pre-created pool; (c) delay variance** ({kind}, 1 core, "
                       f"Connection: close)\n")
        self.md.append(table(["model", "delay units", "mean", "req/s", "mean ms", "p99 ms", "errors",
                              "work-s served per s"] + CPU_HEAD,
                             [[r["server"], f"{r['dmin']}–{r['dmax']}", f"{(r['dmin'] + r['dmax']) / 2:g}",
                               spread(r, "rps"), spread(r, "mean_ms", 1), spread(r, "p99_ms", 1), errs(r),
                               num(r.get("work_s_per_s"), 2)] + cpu_cols(r)
                              for r in sorted(bc, key=lambda r: (r["server"], r["dmax"], r["dmin"]))]))
        bars(axes[1], sorted(bc, key=lambda r: (r["dmax"] - r["dmin"], r["dmin"], r["server"])), "rps",
             f"(b)+(c) thread vs pool; delay variance ({kind}, 1 core)", "requests/s",
             label=lambda r: f"{r['server']} {r['dmin']}–{r['dmax']}", xlabel="model, delay units (1 unit = 1 ms CPU)")
        d = sub("d")
        self.md.append(f"\n**(d) buckets and locks** (pool, 2 cores, zero delay, hold in 1 ms units, {kind}, "
                       f"keep-alive)\n")
        self.md.append(table(["lock", "buckets", "hold (units in the lock)", "req/s", "p99 ms", "errors",
                              "bucket total grew by"] + CPU_HEAD,
                             [[r["lock"], r["buckets"] if r["lock"] == "bucket" else "(one lock)", r["hold"],
                               spread(r, "rps"), spread(r, "p99_ms", 2), errs(r), num(r.get("bucket_delta"))]
                              + cpu_cols(r) for r in sorted(d, key=lambda r: (r["hold"], r["lock"], r["buckets"]))]))
        ax = axes[2]
        for hold, style in ((0, "-"), (1, "--")):
            pts = sorted([r for r in d if r["hold"] == hold and r["lock"] == "bucket" and "rps" in r
                          and not r.get("invalid")], key=lambda r: r["buckets"])
            if pts:
                ax.errorbar([r["buckets"] for r in pts], [r["rps"] for r in pts],
                            yerr=[[r["rps"] - r["rps_min"] for r in pts], [r["rps_max"] - r["rps"] for r in pts]],
                            marker="o", capsize=3, linestyle=style, color="#2ca02c",
                            label=f"per-bucket locks, hold {hold}")
            g = next((r for r in d if r["hold"] == hold and r["lock"] == "global" and "rps" in r), None)
            if g and not g.get("invalid"):
                ax.axhline(g["rps"], color="#d62728", linestyle=style, label=f"one global lock, hold {hold}")
        ax.set_xscale("log", base=2)
        ax.set_ylim(bottom=0)
        _style(ax, f"(d) buckets: pool, 2 cores, zero delay,\nhold in 1 ms units ({kind})", "requests/s",
               "number of buckets (log)")
        self.save_fig(fig, "seed002_workload.png", "seed 002 workload", list(axes))
        e = sub("e")
        if e:
            self.md.append(f"\n**(e) the seed's fixed rate: 300 requests/s, open loop** (vegeta, delay 1–3, {kind}, "
                           f"1 core)\n")
            self.md.append(table(["model", "answered/s", "p50 ms", "p99 ms", "p99.9 ms", "errors",
                                  "work-s served per s"] + CPU_HEAD,
                                 [[r["server"], spread(r, "rps"), spread(r, "p50_ms", 2), spread(r, "p99_ms", 2),
                                   spread(r, "p999_ms", 2), errs(r), num(r.get("work_s_per_s"), 2)] + cpu_cols(r)
                                  for r in by_model(e)]))

    # -- seed 003 -------------------------------------------------------------

    def seed003(self):
        rows = select(self.rows, "seed003")
        if not rows:
            return
        self.head("seed003", "Seed 003 — ab -c 200 with and without keep-alive: epoll vs the seed's nginx")
        self.md.append(table(["server", "keep-alive", "req/s", "mean ms", "p99 ms", "failed", "seed's req/s"]
                             + CPU_HEAD,
                             [[r["server"], "-k" if r["keepalive"] else "close", spread(r, "rps"),
                               spread(r, "mean_ms", 2), shown(r, r.get("p99_ms")), errs(r),
                               num(claims.SEED003_RPS.get(("nginx" if r["server"].startswith("nginx") else "epoll",
                                                           r["keepalive"])))] + cpu_cols(r)
                              for r in sorted(rows, key=lambda r: (not r["keepalive"], r["server"]))]))
        fig, ax = plt.subplots(figsize=(8, 4.5))
        order = sorted(rows, key=lambda r: (not r["keepalive"], r["server"]))
        bars(ax, order, "rps", "ab -c 200, 13-byte body, 1 core", "requests/s",
             label=lambda r: f"{r['server']} {'-k' if r['keepalive'] else 'close'}")
        sv = [(i, claims.SEED003_RPS[("nginx" if r["server"].startswith("nginx") else "epoll", r["keepalive"])])
              for i, r in enumerate(order)]
        ax.scatter([i for i, _ in sv], [v for _, v in sv], marker="D", color="red", zorder=4,
                   label="seed 003's own result (its machine)")
        self.save_fig(fig, "seed003_smallbodies.png", "seed 003", [ax])
        for ka in (True, False):
            ep = next((r for r in rows if r["server"] == "epoll" and r["keepalive"] == ka), None)
            ng = next((r for r in rows if r["server"] == "nginx-seed003" and r["keepalive"] == ka), None)
            self.compare("Seed 003", f"req/s, ab {'-k ' if ka else ''}-c 200, 13 B", ep, ng, "rps")

    # -- seed 004 -------------------------------------------------------------

    def seed004(self):
        rows = select(self.rows, "seed004")
        if not rows:
            return
        beside = " and nginx" if any(r["server"] == "nginx" for r in rows) else ""
        self.head("seed004", f"Seed 004 — prefork 4 x 10{beside}, c = 10 … 1000, keep-alive and not")
        concs = sorted({r["conc"] for r in rows})
        servers = [m for m in MODEL_ORDER if any(r["server"] == m for r in rows)]
        for ka in (True, False):
            for what, key, digits in (("req/s", "rps", 0), ("p99 ms", "p99_ms", 0)):
                trs = []
                for m in servers:
                    cells = [next((r for r in rows if r["server"] == m and r["conc"] == c and r["keepalive"] == ka),
                                  None) for c in concs]
                    trs.append([m] + [spread(x, key, digits) if key != "p99_ms" else shown(x, x.get(key) if x else None)
                                      for x in cells] + [", ".join(errs(x) for x in cells if x)])
                if key == "rps":
                    trs.append(["seed 004's prefork"] + [num(claims.SEED004_RPS.get((c, ka))) for c in concs] + ["—"])
                self.md.append(f"\n**{'ab -k (keep-alive)' if ka else 'ab, new connection per request'}: {what}**\n")
                self.md.append(table(["server"] + [f"c={c}" for c in concs] + ["errors per c"], trs))
        self.md.append("\nServer CPU per request and generator load, per cell:\n")
        self.md.append(table(["server", "keep-alive", "c"] + CPU_HEAD,
                             [[r["server"], "-k" if r["keepalive"] else "close", r["conc"]] + cpu_cols(r)
                              for r in sorted(rows, key=lambda r: (r["server"], not r["keepalive"], r["conc"]))]))
        fig, axes = plt.subplots(1, 2, figsize=(13, 4.8))
        for ka, style in ((True, "-"), (False, "--")):
            for m in servers:
                pts = sorted([r for r in rows if r["server"] == m and r["keepalive"] == ka and "rps" in r
                              and not r.get("invalid")], key=lambda r: r["conc"])
                if not pts:
                    continue
                lab = f"{m} {'-k' if ka else 'close'}"
                axes[0].errorbar([r["conc"] for r in pts], [r["rps"] for r in pts],
                                 yerr=[[r["rps"] - r["rps_min"] for r in pts], [r["rps_max"] - r["rps"] for r in pts]],
                                 marker="o", capsize=2, color=COLORS.get(m), linestyle=style, label=lab)
                axes[1].plot([r["conc"] for r in pts], [r.get("p99_ms", 0) for r in pts], marker="o",
                             color=COLORS.get(m), linestyle=style, label=lab)
            axes[0].plot(concs, [claims.SEED004_RPS.get((c, ka)) for c in concs], marker="D", color="red",
                         linestyle=style, alpha=0.6, label=f"seed 004 {'-k' if ka else 'close'} (14 cores)")
        for ax in axes:
            ax.set_xscale("log")
            ax.set_xticks(concs)
            ax.set_xticklabels([str(c) for c in concs])
        axes[0].set_ylim(bottom=0)
        _style(axes[0], "throughput against concurrency (server on 1 core)", "requests/s", "concurrent clients (log)")
        axes[1].set_yscale("log")
        _style(axes[1], "p99 latency against concurrency (ab, 1 ms resolution)", "p99 latency, ms (log)",
               "concurrent clients (log)")
        self.save_fig(fig, "seed004_concurrency.png", "seed 004 concurrency sweep", list(axes))

    # -- open loop -------------------------------------------------------------

    def openloop(self):
        rows = select(self.rows, "openloop")
        if not rows:
            return
        self.head("openloop", "Latency against offered load (open loop), every model and nginx")
        rates = sorted({r["rate"] for r in rows})
        servers = [m for m in MODEL_ORDER if any(r["server"] == m for r in rows)]
        trs = []
        for m in servers:
            for rate in rates:
                r = next((x for x in rows if x["server"] == m and x["rate"] == rate), None)
                if r is None:
                    continue
                trs.append([m, f"{rate:,}", spread(r, "rps"), shown(r, r.get("p50_ms"), 2), shown(r, r.get("p99_ms"), 2),
                            shown(r, r.get("p999_ms"), 2), errs(r)] + cpu_cols(r))
        self.md.append(table(["server", "offered/s", "answered/s", "p50 ms", "p99 ms", "p99.9 ms", "errors"]
                             + CPU_HEAD, trs))
        # Where each server saturates, and where the curve stops at the generator instead.
        sat = []
        for m in servers:
            pts = [{"rate": r["rate"], "rps": r.get("rps", 0), "errors": r.get("errors_total", 0),
                    "fell_behind": r.get("fell_behind"), "client_bound": r.get("client_bound")}
                   for r in rows if r["server"] == m and "rps" in r]
            state, rate = checks.saturation(pts)
            if state == "saturated":
                text = f"saturated at {rate:,}/s"
            elif state == "not reached":
                text = (f"**not saturated** up to {rate:,}/s, the highest rate measured with the generator "
                        f"below 90% of its core: the curve stops at the lab's limit, not the server's")
            else:
                text = "unknown: not measured, or the generator was client-bound at every rate"
            sat.append([m, text])
        self.md.append("\nSaturation: the first rate the server did not keep up with (answered under 95% of it, "
                       "requests timed out, or vegeta fell behind its rate with CPU to spare, i.e. all its "
                       "workers were waiting on the server). A point where the generator used over 90% of its "
                       "core says nothing about the server and is not used.\n")
        self.md.append(table(["server", "saturation"], sat))
        fig, axes = plt.subplots(1, 3, figsize=(16, 4.8))
        for key, ax, title in (("p50_ms", axes[0], "p50"), ("p99_ms", axes[1], "p99"), ("p999_ms", axes[2], "p99.9")):
            for m in servers:
                pts = sorted([r for r in rows if r["server"] == m and key in r], key=lambda r: r["rate"])
                if not pts:
                    continue
                ax.plot([r["rate"] for r in pts], [r[key] for r in pts], marker="o", color=COLORS.get(m),
                        linestyle="--" if m == "nginx" else "-", label=m)
                bad = [r for r in pts if r.get("errors_total") or r.get("client_bound") or r.get("fell_behind")]
                ax.scatter([r["rate"] for r in bad], [r[key] for r in bad], marker="x", s=80, color="red", zorder=4,
                           label="errors, client-bound, or the generator fell behind its rate")
            ax.set_yscale("log")
            ax.set_xscale("log")
            ax.set_xticks(rates)
            ax.set_xticklabels([f"{x:,}" for x in rates])
            _style(ax, f"{title} latency against offered load (1 core)", f"{title} latency, ms (log)",
                   "offered load, requests/s (log)")
        self.save_fig(fig, "openloop_latency.png", "latency against offered load", list(axes))
        # Server CPU per request per model, at the lowest rate (every server keeps up there)
        low = [r for r in rows if r["rate"] == rates[0] and r.get("server_us_per_req")]
        if low:
            low = by_model(low)
            fig, ax = plt.subplots(figsize=(9, 4.5))
            bars(ax, low, "server_us_per_req", f"server CPU per request at {rates[0]:,} requests/s (open loop, "
                 f"keep-alive, 13 B)", "server CPU per request, µs")
            self.save_fig(fig, "cpu_per_request.png", "server CPU per request", [ax])
        for rate in rates:
            ep = next((r for r in rows if r["server"] == "epoll" and r["rate"] == rate), None)
            ng = next((r for r in rows if r["server"] == "nginx" and r["rate"] == rate), None)
            self.compare("Open loop", f"p99 ms at {rate:,}/s offered (lower is better)", ep, ng, "p99_ms",
                         higher_better=False, digits=2)

    # -- peers (issue 10) ---------------------------------------------------------

    def server_grid(self, exp: str, cell_key: str, order: list[str] | None = None):
        """An experiment laid out as servers x cells: (cells, servers, {(cell, server): row}),
        servers in `order` first, then MODEL_ORDER; None when the experiment did not run."""
        rows = select(self.rows, exp)
        if not rows:
            return None
        order = order or []
        servers = sorted(dict.fromkeys(r["server"] for r in by_model(rows)),
                         key=lambda s: order.index(s) if s in order else len(order))
        return (list(dict.fromkeys(r[cell_key] for r in rows)), servers,
                {(r[cell_key], r["server"]): r for r in rows})

    def peers(self):
        laid_out = self.server_grid("peers", "peer_cell", PEER_ROW_ORDER)
        if laid_out is None:
            return
        cells, servers, grid = laid_out
        # issue 10's column order, whatever order the records came in (a shared cell's come first)
        titles = list(PEER_CELL_TITLES)
        cells = sorted(cells, key=lambda c: titles.index(c) if c in titles else len(titles))
        self.head("peers", "Peers — nginx, lighttpd and h2o beside spindle (issue 10)")
        self.md.append("Median (min–max over repeats) · server CPU per request (1 MB file: per MB; the cores "
                       "it used are in the table below). "
                       "**CB** = client-bound in at least one repeat (the generator used over 90% of its core): "
                       "the rate there is the generator's, CPU per request still compares the servers.\n")
        self.md.append(table(["server"] + [PEER_CELL_TITLES.get(c, c) for c in cells],
                             [[srv] + [rate_and_cpu(grid.get((c, srv)), c == PEER_BYTES_CELL, c == PEER_LATENCY_CELL) for c in cells]
                              for srv in servers]))
        detail = []
        for c in cells:
            for srv in servers:
                r = grid.get((c, srv))
                if r is None:
                    continue
                if r.get("skipped"):
                    detail.append([PEER_CELL_TITLES.get(c, c), srv, f"skipped: {r['skipped']}"] + ["—"] * 6)
                    continue
                big = c == PEER_BYTES_CELL
                lat = ("max " + spread(r, "max_ms", 1)) if "p99_ms" not in r and "max_ms" in r \
                    else spread(r, "p99_ms", 1)
                detail.append([PEER_CELL_TITLES.get(c, c), srv,
                               spread_scaled(r, "mbps", 1e-3, 2, " GB/s") if big else spread(r, "rps"),
                               lat, spread(r, "server_us_per_mb" if big else "server_us_per_req", 1),
                               spread(r, "server_cores", 2)] + cpu_cols(r)[1:] + [errs(r)])
        self.md.append(table(["cell", "server", "rate", "p99 ms", "server CPU µs/req (1 MB: µs/MB)", "server cores",
                              "generator core", "other load (cores)", "errors"], detail))
        self.md.append("Which server wins each cell (only where its min–max range clears every other "
                       "server's; a rate lost by a client-bound cell does not count):\n")
        for c in cells:
            if c == PEER_LATENCY_CELL:
                by_srv = {srv: grid[(c, srv)] for srv in servers if (c, srv) in grid}
                self.md.append(f"- **{PEER_CELL_TITLES[c]}**: lowest p99: "
                               f"{checks.winner(by_srv, 'p99_ms', higher_better=False)[1]}.")
                continue
            by_srv = {srv: grid[(c, srv)] for srv in servers if (c, srv) in grid and not grid[(c, srv)].get("skipped")}
            rate_key = "mbps" if c == PEER_BYTES_CELL else "rps"
            cpu_key = "server_us_per_mb" if c == PEER_BYTES_CELL else "server_us_per_req"
            _, rate_why = checks.winner(by_srv, rate_key)
            _, cpu_why = checks.winner(by_srv, cpu_key, higher_better=False)
            self.md.append(f"- **{PEER_CELL_TITLES.get(c, c)}**: {'GB/s' if rate_key == 'mbps' else 'req/s'}: "
                           f"{rate_why}; least server CPU per {'byte' if rate_key == 'mbps' else 'request'}: "
                           f"{cpu_why}.")
            unit = "µs/MB" if c == PEER_BYTES_CELL else "µs"
            for m in ("epoll", "uring"):
                if m in by_srv:
                    self.md.append(f"  - {m} against the best peer: {against_best_peer(by_srv, m, cpu_key, unit)}")
        self.md.append("")

    # -- tls (issue 13) -----------------------------------------------------------

    def tls(self):
        laid_out = self.server_grid("tls", "tls_cell")
        if laid_out is None:
            return
        cells, servers, grid = laid_out
        self.head("tls", "TLS — handshakes per second and server CPU per handshake (issue 13)")
        self.md.append("Median (min–max over repeats) connections or requests per second · server CPU per "
                       "request (in the handshake cells: per handshake). **CB** = client-bound.\n")
        self.md.append(table(["server"] + [TLS_CELL_TITLES.get(c, c) for c in cells],
                             [[srv] + [rate_and_cpu(grid.get((c, srv))) for c in cells] for srv in servers]))
        self.md.append(negotiated_sentence([r for r in self.lab.records if r.get("exp") == "tls"]) + "\n")
        self.md.append(ranking_sentence({srv: grid.get(("plain", srv)) for srv in servers},
                                        {srv: grid.get(("full", srv)) for srv in servers}) + "\n")

    # -- beyond (outside the default run) -----------------------------------------

    def beyond(self):
        dl = select(self.rows, "downloads")
        rss = by_model(select(self.rows, "idle_rss"))
        ov = select(self.rows, "overhead")
        if not (dl or rss or ov):
            return
        self.md.append("\n## Beyond the seeds (run with --only)\n")
        if dl:
            self.md.append(table(["server", "file", "MB/s", "files completed", "errors"] + CPU_HEAD,
                                 [[r["server"], f"{r['file_mb']} MB", spread(r, "mbps"), spread(r, "requests"),
                                   errs(r)] + cpu_cols(r) for r in dl]))
        if rss:
            # plain and TLS of one server side by side (by_model's order is stable)
            rss = by_model(sorted(rss, key=lambda r: r.get("transport") != "plain"))
            self.md.append(table(["server", "transport", "connections held", "PSS MB", "PSS idle MB",
                                  "kB per connection (PSS)", "errors"],
                                 [[r["server"], r.get("transport", "plain"), num(r.get("open")),
                                   spread(r, "pss_mb", 1), spread(r, "base_pss_mb", 1),
                                   spread(r, "kb_per_conn", 2), errs(r)] for r in rss]))
            self.md += [f"- {n}" for n in self.lab.notes.get("idle_rss", [])] + [""]
        if ov:
            self.md.append(table(["variant", "body", "req/s", "p99 ms"] + CPU_HEAD,
                                 [[r["variant"], r["body"], spread(r, "rps"), shown(r, r.get("p99_ms"), 2)] + cpu_cols(r)
                                  for r in ov]))

    # -- claims, load, failures -------------------------------------------------------

    def claims_section(self):
        rows = claims.check_all(self.rows)
        self.claims = rows
        if not rows:
            return
        self.md.append("\n## The seeds' claims, checked\n")
        self.md.append("A comparison counts only when both cells are valid, ran at least twice and their "
                       "min–max ranges over repeats do not overlap; otherwise the claim is “unsettled”.\n")
        self.md.append(table(["seed", "claim", "this run measured", "verdict", "why"],
                             [[c["seed"], c["claim"], c["measured"], f"**{c['verdict']}**", c["why"]] for c in rows]))

    CHANGES = [
        ("000", "The pool runs with 5 and with 15 threads, as the seed; runs are time-based (ab -t) with a warm-up, "
                "because 1000 requests last a tenth of a second. The fork model also runs under the seed's "
                "conditions (1024 descriptors, no cap of ours binding) at c = 30, 100, 1000, so the report says "
                "whether it survives where the seed's died instead of raising the limit until it cannot fail."),
        ("001", "Every request does 1–3 ms of real CPU work on the workload endpoint, as the seed's servers did work "
                "per request; a static page would measure connection set-up only. The report plots the whole "
                "latency distribution (CDF), not four summary numbers."),
        ("002", "A unit of delay is the serving thread's own CPU time (delay_kind = cpu): the seed's loop on the "
                "clock let a preempted thread finish on time, so many threads on one core appeared to work at "
                "once. Cells whose CPU work per second exceeds the cores, or whose bucket totals do not match the "
                "requests served, are invalid. Core counts keep workers and threads fixed; a same-mean pair "
                "(10–11 vs 1–20) separates variance from the mean; hold = 1 puts work inside the lock so bucket "
                "counts can matter; the seed's fixed 300 requests/s is sent open loop."),
        ("003", "nginx runs exactly as the seed's configuration (worker_processes 1, worker_connections 768, default "
                "keepalive_requests and access log, a 13-byte return 200); spindle serves its 13-byte file from "
                "the cache, the closest equivalent. Elsewhere nginx serves files as a realistic configuration "
                "would (sendfile, open_file_cache) with as many workers as spindle."),
        ("004", "prefork runs with 4 workers x 10 threads and keep-alive is measured with ab -k, as the seed; "
                "concurrency 10–1000 in time-based runs, so each connection makes many requests rather than "
                "measuring the initial burst; nginx beside it (a full run only) has the same 4 workers."),
        ("all", "The headline compares epoll, chosen in advance, with nginx, and prints a verdict only where the "
                "repeats' ranges do not overlap; an open-loop sweep (vegeta) measures latency against offered "
                "load; every cell records the server's and the generator's CPU and what else ran, and flags a "
                "client-bound generator."),
    ]

    def changes_section(self):
        self.md.append("\n## What the lab does differently from the seeds, and why\n")
        self.md.append(table(["seed", "what changed and why"], [[a, b] for a, b in self.CHANGES]))

    def scaleout(self):
        """bench/scaleout.py: spindle direct, and behind HAProxy with 1 and 2 instances."""
        rows = select(self.rows, "scaleout")
        if not rows:
            return
        self.md.append("\n## Scale-out behind HAProxy (run with --only scaleout)\n")
        self.md.append(table(["set-up", "instances", "req/s", "p99 ms", "errors"] + CPU_HEAD,
                             [[r["setup"], r["instances"], spread(r, "rps"), shown(r, r.get("p99_ms"), 2), errs(r)]
                              + cpu_cols(r) for r in rows]))

    def load_section(self):
        rows = [r for r in self.rows if "other_cores" in r]
        if not rows:
            return
        self.md.append("\n## Machine load and the load generator, per experiment\n")
        self.md.append("Per cell, from /proc: the server's CPU (its process tree, with reaped children), the load "
                       "generator's CPU (getrusage of the child), and “other load”: CPU busy time (/proc/stat) not "
                       "used by either, nor by interrupts — what else ran on the machine. Every cell's figures are "
                       "in results.csv (`server_cpu_s`, `gen_cpu_s`, `gen_share`, `client_bound`, `other_cores`, "
                       "`softirq_cores`, `cpuN_busy`).\n")
        trs = []
        for exp in dict.fromkeys(r["exp"] for r in rows):
            e = [r for r in rows if r["exp"] == exp]
            other = [r["other_cores"] for r in e]
            trs.append([exp, len(e), f"{statistics.median(other):.2f}", f"{max(r.get('other_cores_max', 0) for r in e):.2f}",
                        sum(1 for r in e if r.get("client_bound")), sum(1 for r in e if r.get("invalid"))])
        self.md.append(table(["experiment", "cells", "other load, median (cores)", "other load, worst repeat",
                              "client-bound cells", "invalid cells"], trs))
        busy = [r for r in rows if r.get("other_cores_max", 0) > 0.25]
        if busy:
            self.md.append(f"\n**{len(busy)} cell(s) ran while something else used more than a quarter of a core**: "
                           f"their numbers are noisier (see `other_cores` in results.csv).\n")

    def failures(self):
        bad = [r for r in self.rows if r["problems"] or r["failed_runs"] or r.get("invalid")]
        self.md.append("\n## Failures, errors and invalid cells (every one)\n")
        if not bad:
            self.md.append("None.\n")
            return
        self.md.append(table(["experiment", "cell", "repeats", "invalid because", "problems"],
                             [[r["exp"], r["cell"], r["reps"], (r.get("invalid") or "—").replace("|", "/")[:300],
                               "; ".join(r["problems"] + r["failed_runs"]).replace("|", "/")[:300]] for r in bad]))

    def render(self) -> str:
        for f in (self.seed000, self.seed001, self.seed002, self.seed003, self.seed004, self.openloop,
                  self.peers, self.tls, self.beyond):
            f()
        self.scaleout()
        body_sections = self.md
        self.md = []
        self.claims_section()
        self.changes_section()
        claims_md = self.md
        self.md = []
        self.load_section()
        self.failures()
        tail_md = self.md
        man = self.man
        tools = man.get("tools", {})
        top = [f"# spindle lab report — {man['mode']} run, {man['started']}\n",
               f"{man['cpu_model']}, {man['cpus_online']} CPUs, Linux {man['kernel']}; spindle at "
               f"{man['spindle_revision']}; {tools.get('nginx', '?').replace('nginx version: ', '')}; "
               + "".join(f"{tools[k].split(' - ')[0]}; " for k in man.get("peer_confs", {}) if k in tools)
               + f"{tools.get('ab', '?')}; vegeta {tools.get('vegeta', '?')}. The run took "
               f"{man['elapsed_s'] / 60:.1f} min: {man['repeats']} repeat(s) per cell, {man.get('cell_s', '?')} s "
               f"per time-based cell after a {man.get('warmup_s', '?')} s warm-up"
               + (" (or, where the cell follows another on the same server, after that one)"
                  if any("warm_up" in r for r in self.lab.records) else "")
               + f"; tables give the median and "
               f"(min–max over repeats). {man['pinning']['note']}\n"]
        took = man.get("experiment_elapsed_s") or {}
        if took:
            est = man.get("experiment_estimate_s") or {}
            top.append("Time per experiment, in the order they ran (the plan's estimate beside it: "
                       "`python -m bench --plan`):\n")
            top.append(table(["experiment", "took (min)", "estimated (min)"],
                             [[n, f"{t / 60:.1f}", f"{est[n] / 60:.1f}" if n in est else "—"]
                              for n, t in took.items()]))
            top.append("")
        if man["mode"] == "full":
            top.append("**A full run**: the default run's cells plus those it leaves out to stay under 20 minutes "
                       "(bench/README.md lists them).\n")
        elif man["mode"] != "default":
            top.append(f"**This is a {man['mode']} run (tiny durations, one repeat): it checks the lab's pipeline; "
                       f"its numbers are not results.**\n")
        if man.get("interrupted"):
            top.append("**This run was interrupted: sections are incomplete.**\n")
        top.append("\n## Headline: epoll (spindle's default, chosen in advance) against nginx\n")
        top.append("Other models are in their own tables below. Ratio = epoll ÷ nginx. A verdict is printed only "
                   "where the repeats' min–max ranges do not overlap; otherwise “unsettled”.\n")
        top.append(table(["experiment", "metric", "epoll median (min–max)", "nginx median (min–max)", "ratio",
                          "verdict"], self.headline))
        setup = ["\n## Setup\n",
                 "nginx ran from these generated configurations (same docroot; `worker_processes` = spindle's "
                 "worker count in the same cell):\n"]
        for name, conf in man.get("nginx_confs", {}).items():
            setup += [f"`{name}`:\n", "```nginx", conf.rstrip(), "```\n"]
        for name, conf in man.get("peer_confs", {}).items():
            setup += [f"`{name}` (peers experiment):\n", "```", conf.rstrip(), "```\n"]
        setup.append(f"The file-serving nginx has `worker_connections {NGINX_CONNECTIONS_NOTE}` (room for c = 1000; "
                     f"seed 003's has 768): nginx preallocates a connection structure and its events for every slot "
                     f"at start, so its memory baseline grows with this limit. Each server's memory right after "
                     f"start (idle, summed over its processes) is below, so the total and the per-connection-slot "
                     f"cost can be read side by side; memory under 10,000 held connections is measured by "
                     f"`--only idle_rss`.\n")
        mem = getattr(self.lab, "server_memory", [])
        if mem:
            seen = {}
            for m in mem:
                seen.setdefault((m["server"], m["workers"]), m)
            rows = []
            for (name, workers), m in seen.items():
                slots = (NGINX_CONNECTIONS_NOTE if name == "nginx" else 768 if name == "nginx-seed003" else None)
                per = (f"{m['pss_mb'] * 1024 / (slots * workers):.2f}" if isinstance(slots, int) else "—")
                rows.append([name, workers, f"{m['rss_mb']:.1f}", f"{m['pss_mb']:.1f}", m["processes"], m["threads"],
                             f"{slots} x {workers}" if isinstance(slots, int) else "—", per])
            setup.append(table(["server", "workers", "idle RSS MB (sum)", "idle PSS MB (sum)", "processes", "threads",
                                "nginx connection slots", "idle PSS kB per slot (upper bound)"], rows))
        setup.append("spindle: the repository's `server.conf` plus `--set workers=N --set access_log=off` and the "
                     "experiment's settings. Exact commands are in results.csv (`cmd`); machine, versions and "
                     "sysctls in manifest.json.\n")
        return "\n".join(top + claims_md + body_sections + tail_md + setup) + "\n"


PEER_CELL_TITLES = {"keepalive": "wrk -c200 keep-alive, 13 B", "pipelined": "wrk -c50, 16 pipelined per write",
                    "pipelined_latency": "16 pipelined: batch p99 (Python client, c50)",
                    "close": "ab -c200, new connection per request", "file1m": "wrk -c50, 1 MB file"}
PEER_BYTES_CELL = "file1m"
PEER_LATENCY_CELL = "pipelined_latency"
PEER_ROW_ORDER = ["nginx", "lighttpd", "h2o", "epoll", "uring"]


def spread_scaled(r, key, scale, digits, unit=""):
    """spread() of key x scale (e.g. MB/s as GB/s), with a unit after the median."""
    if r is None or r.get("skipped") or r.get("invalid") or key not in r:
        return spread(r, key, digits)
    med, lo, hi = (num(r[k] * scale, digits) for k in (key, key + "_min", key + "_max"))
    return f"{med}{unit}" if r["reps_ok"] <= 1 else f"{med}{unit} ({lo}–{hi}{unit})"


def rate_and_cpu(r, per_byte: bool = False, latency: bool = False) -> str:
    """One entry of a server x cell table: the rate, then the server's CPU per
    request (per_byte: GB/s and CPU per MB moved; latency: only the p99), with
    ranges."""
    if r is None:
        return "not run"
    if r.get("skipped"):
        return "skipped"          # why: in the section's notes
    if latency:
        text = f"p99 {spread_scaled(r, 'p99_ms', 1, 1, ' ms')}"
    elif per_byte:
        text = f"{spread_scaled(r, 'mbps', 1e-3, 2, ' GB/s')} · {spread_scaled(r, 'server_us_per_mb', 1, 0, ' µs/MB')}"
    else:
        text = f"{spread_scaled(r, 'rps', 1e-3, 1, 'k')} · {spread_scaled(r, 'server_us_per_req', 1, 1, ' µs')}"
    return text + (" **CB**" if r.get("client_bound") else "")


PEERS = ("nginx", "lighttpd", "h2o")


def against_best_peer(cells: dict[str, dict], model: str, key: str, unit: str) -> str:
    """Issue 10's targets compare spindle's CPU per request (or per MB) with the
    best peer's: the ratio of medians, and a verdict only where ranges do not
    overlap."""
    peers = {n: c for n, c in cells.items() if n in PEERS and c.get(key) is not None and not c.get("invalid")}
    mine = cells.get(model)
    if not peers or mine is None or mine.get(key) is None or mine.get("invalid"):
        return "not measured"
    best = min(peers, key=lambda n: peers[n][key])
    b = peers[best]
    text = f"{num(mine[key], 1)} vs {best}'s {num(b[key], 1)} {unit} ({mine[key] / b[key]:.2f}x)"
    if min(mine.get("reps_ok", 0), b.get("reps_ok", 0)) < 2:
        return text + ", one run"
    v = range_verdict((mine[key + "_min"], mine[key + "_max"]), (b[key + "_min"], b[key + "_max"]),
                      higher_better=False)
    return text + {"ahead": ", less CPU (ranges clear)", "behind": ", **more CPU** (ranges clear)"}.get(
        v, ", ranges overlap")


TLS_CELL_TITLES = {"full": "https, new connection (full handshake)", "resumed": "https, resumed session",
                   "keepalive": "https keep-alive", "plain": "http, new connection"}


def negotiated_sentence(records: list[dict]) -> str:
    """What ab negotiated with each server over https (protocol, suite, bits):
    handshake costs compare only when every server chose the same."""
    seen = {}
    for r in records:
        if r.get("tls"):
            seen.setdefault(r["server"], set()).add(r["tls"])
    if not seen:
        return "Negotiated: not recorded."
    text = "Negotiated with ab: " + "; ".join(f"{srv} {', '.join(sorted(v))}" for srv, v in seen.items()) + "."
    if len(set().union(*seen.values())) > 1:
        text += " **The servers negotiated different suites: their handshake costs are not like for like.**"
    return text


def ranking_sentence(plain: dict, tls_full: dict) -> str:
    """Whether the servers' order by CPU per connection changes from plain HTTP
    to full TLS handshakes (medians; the why is for the person reading the
    profiles, not for this function)."""
    def order(cells):
        ok = {n: r["server_us_per_req"] for n, r in cells.items()
              if r and not r.get("skipped") and not r.get("invalid") and r.get("server_us_per_req")}
        return sorted(ok, key=ok.get)
    a, b = order(plain), order(tls_full)
    common = [n for n in a if n in b]
    if len(common) < 2:
        return "Ranking by server CPU per connection: fewer than two servers measured both ways."
    a, b = [n for n in a if n in common], [n for n in b if n in common]
    same = "the same" if a == b else "**different**"
    return (f"Ranking by server CPU per connection (least first, medians): plain HTTP {' < '.join(a)}; "
            f"full TLS handshakes {' < '.join(b)}: {same}.")


def pct(r, q):
    lat = r.get("lat_ms") if r else None
    if not lat or r.get("invalid"):
        return None
    return lat[min(len(lat) - 1, max(0, int(q * len(lat) + 0.999999) - 1))]


try:
    from .lab import NGINX_CONNECTIONS as NGINX_CONNECTIONS_NOTE
except ImportError:      # re-rendering without the lab's machinery
    NGINX_CONNECTIONS_NOTE = "(see the configuration)"


def write(lab, out: Path, man: dict) -> None:
    rep = Report(lab, out, man)
    text = rep.render()
    (out / "report.md").write_text(text)
    recs = []
    for r in lab.records:
        r = dict(r)
        if not r.get("problems") and "failed_run" not in r:
            r.pop("raw", None)
        recs.append(r)
    agg = [{k: v for k, v in row.items() if k not in ("lat_ms",)} for row in rep.rows]
    (out / "results.json").write_text(json.dumps({"manifest": man, "notes": lab.notes, "records": recs,
                                                  "aggregated": agg, "claims": getattr(rep, "claims", []),
                                                  "server_memory": getattr(lab, "server_memory", [])},
                                                 indent=1, default=str) + "\n")
    keys: list[str] = []
    for r in lab.records:
        for k in r:
            if k not in keys and k not in ("raw", "lat_ms", "cdf", "_params"):
                keys.append(k)
    with open(out / "results.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys, extrasaction="ignore")
        w.writeheader()
        for r in lab.records:
            w.writerow({k: (json.dumps(v) if isinstance(v, (list, dict)) else v) for k, v in r.items()})
