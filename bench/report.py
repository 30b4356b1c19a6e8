"""Turns the lab's records into results.json, results.csv, PNG plots and
report.md: the headline (epoll, chosen in advance, against nginx), one section
per seed, the open-loop sweep, the seeds' claims checked (bench/claims.py),
per-cell CPU and machine load, and every failure or invalid cell."""
from __future__ import annotations

import csv
import json
import re
import statistics
from collections import OrderedDict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from . import checks, claims, plots, scale, stats, why
from . import lab as lab_mod
from .manifest import machine_markdown
from .plots import COLORS, bars

MODEL_ORDER = ["iterative", "fork", "fork-nofile1024", "thread", "thread-max40", "pool", "pool-5", "pool-15", "prefork",
               "prefork-4x10", "epoll", "uring", "nginx", "nginx-seed003", "lighttpd", "h2o"]
SKIP = {"exp", "cell", "server", "kind", "model", "cpus", "workers", "rep", "cmd", "tool", "raw",
        "problems", "failed_run", "failed_detail", "status_counts", "error_samples", "subs", "invalid",
        "lat_ms", "cdf", "client_bound", "fell_behind", "skipped"}


# --------------------------------------------------------------------------
# Aggregation
# --------------------------------------------------------------------------

# Metrics that get their repeats' values and a bootstrap 95% interval of the median
STAT_KEYS = ("rps", "mbps", "avg_ms", "mean_ms", "p50_ms", "p99_ms", "p999_ms", "server_us_per_req",
             "server_us_per_mb", "goodput_rate")


def main_metric(row: dict) -> str:
    """The figure a row is about (results.csv's ci95_low/ci95_high are its
    interval): latency where the experiment asks about latency, else the rate."""
    if row.get("exp") == "seed001":
        return "avg_ms"
    if row.get("exp") in ("openloop", "slow"):
        return "p99_ms"
    if row.get("exp") == "overload" and row.get("part") != "cost":
        return "goodput_rate"
    if row.get("exp") == "scale":
        return "kb_per_conn"
    if row.get("peer_cell") == "file1m":
        return "mbps"
    if row.get("peer_cell") == "pipelined_latency":
        return "p99_ms"
    return "rps" if "rps" in row else next((k for k in STAT_KEYS if k in row), "rps")

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
                if k in STAT_KEYS:
                    # the repeats themselves (for the comparisons' bootstrap) and the median's interval
                    row[k + "_vals"] = vals
                    ci = stats.median_ci(vals, key=f"{exp}/{cell}/{k}")
                    if ci:
                        row[k + "_ci95"] = list(ci)
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
    """'median (95% interval)' (the bootstrap interval of the median; min–max for
    rows aggregated without one) or a dash, and 'FAILED' when no repeat produced it."""
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
    lo, hi = r.get(key + "_ci95") or (r[key + "_min"], r[key + "_max"])
    return f"{num(r[key], digits)} ({num(lo, digits)}–{num(hi, digits)})"


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
    return [num(us, 1) if us is not None else "—", gen, f"{r.get('other_cores', 0):+.2f}"]


CPU_HEAD = ["server CPU µs/req", "generator core", "other load (cores)"]
# A repeat taken again, as the run's notes say it (lab.py, where it is retaken)
RETAKE_NOTE_RE = re.compile(r" repeat \d+: (.*); taken again at the end of the experiment$")


# --------------------------------------------------------------------------
# Plots
# --------------------------------------------------------------------------

_style = plots.style


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
    def __init__(self, lab, out: Path, man: dict, reference: list[dict] | None = None):
        self.lab, self.out, self.man = lab, out, man
        self.rows = aggregate(lab.records)
        self.md: list[str] = []
        self.headline: list[list] = []
        self.pending: list[tuple] = []        # headline comparisons, judged once the family is complete
        self.fam = stats.Family()             # every comparison of the report, corrected together (Holm)
        self.judge = claims.Judge(self.fam)
        self.reference = reference            # the published run's verdicts (docs/bench/verdicts.json) or None
        self.claims: list[dict] = []
        self.verdicts: list[dict] = []
        self.replication: list[dict] = []
        self.winners: dict[str, str] = {}     # peers: verdict id -> winner (or "unsettled")
        # a winner's candidates by id prefix: (servers' rows, metric, higher better, why a pair is not judged)
        self.pair_sources: dict[str, tuple] = {}
        self.plots: list[str] = []
        self.why: list[dict] = []             # the "which model wins, when, and why" regimes (bench/why.py)

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

    def headline_pairs(self, exp: str) -> list[tuple]:
        """The headline's comparisons of one experiment: (label, metric, epoll's
        row, nginx's row, key, higher_better, digits)."""
        out = []
        if exp == "seed000":
            ep = select(self.rows, "seed000", server="epoll", part="main")
            out.append(("Seed 000", "req/s, ab -c 30, 4537 B", ep[0] if ep else None,
                        self.nginx_row("seed000", part="main"), "rps", True, 0))
        elif exp == "seed003":
            rows = [r for r in select(self.rows, "seed003") if r.get("part") != "matched"]
            for ka in (True, False):
                ep = next((r for r in rows if r["server"] == "epoll" and r["keepalive"] == ka), None)
                ng = next((r for r in rows if r["server"] == "nginx-seed003" and r["keepalive"] == ka), None)
                out.append(("Seed 003", f"req/s, ab {'-k ' if ka else ''}-c 200, 13 B", ep, ng, "rps", True, 0))
        elif exp == "openloop":
            rows = [r for r in select(self.rows, "openloop") if "rate" in r]
            for rate in sorted({r["rate"] for r in rows}):
                ep = next((r for r in rows if r["server"] == "epoll" and r["rate"] == rate), None)
                ng = next((r for r in rows if r["server"] == "nginx" and r["rate"] == rate), None)
                if ep is None or ng is None:      # the sweeps share the ladder's lower rates only
                    continue
                out.append(("Open loop", f"p99 ms at {rate:,}/s offered (lower is better)", ep, ng, "p99_ms",
                            False, 2))
        return [p for p in out if p[2] is not None or p[3] is not None]

    def compare_pairs(self, exp: str) -> None:
        for label, metric, ep, ng, key, hb, digits in self.headline_pairs(exp):
            self.compare(label, metric, ep, ng, key, hb, digits)

    def preregister(self) -> None:
        """Every comparison the report will print, registered before any is
        printed, so Holm's correction sees the whole family at once."""
        claims.check_all(self.rows, self.fam)
        for exp in ("seed000", "seed003", "openloop"):
            for label, metric, ep, ng, key, hb, digits in self.headline_pairs(exp):
                self.headline_judgement(label, metric, ep, ng, key, hb)
        for cell, by_srv in self.peer_cells():
            self.peer_judgements(cell, by_srv)
        for _body, _shape, cell, by_srv, models in self.h2_cells():
            self.h2_winner(cell, models, "models")
            self.h2_winner(cell, by_srv, "servers")
        self.fam.resolve()

    def headline_judgement(self, label, metric, ep, ng, key, higher_better):
        jid = f"headline/{slug(label)}/{slug(metric)}"
        if ep is not None and ng is not None and key in claims.RATE_KEYS:
            m = lambda r: claims.find(self.rows, r["exp"], server=r["server"], part="matched")
            # the matched cells make a new connection per request: no basis for a keep-alive row
            matched = None if ep.get("keepalive") else (m(ep), m(ng))
            return self.judge.rate(jid, ep, ng, key, higher_better, matched=matched)
        why = claims.why_unusable(ep, ng, key)
        if not why and (ep.get("client_bound") or ng.get("client_bound") or ep.get("fell_behind")
                        or ng.get("fell_behind")):
            why = "a cell was client-bound or its generator fell behind its rate"
        return self.fam.difference(jid, claims.vals(ep, key), claims.vals(ng, key), higher_better, why_not=why), key

    def compare(self, label, metric, ep, ng, key, higher_better=True, digits=0):
        """A headline row: epoll (chosen in advance) against nginx, registered in
        the report's family now and printed once every comparison is in
        (headline_rows). A client-bound loser is settled on CPU per request at
        matched offered load, as in the claims."""
        j, basis = self.headline_judgement(label, metric, ep, ng, key, higher_better)
        self.pending.append((label, metric, ep, ng, key, digits, j, basis))

    def headline_rows(self) -> list[list]:
        out = []
        for label, metric, ep, ng, key, digits, j, basis in self.pending:
            v = {"ahead": "epoll ahead", "behind": "**epoll behind**"}.get(j.verdict, "unsettled")
            if j.verdict == "unsettled":
                v += f" ({j.why_not})" if not j.r else f" (interval ±{j.width():.0%} after correction)"
            elif basis != key:
                v += f" (on {basis})"
            extra = []
            if ep and ng and (ep.get("client_bound") or ng.get("client_bound")):
                extra.append("client-bound cell")
            if ep and ng and (ep.get("errors_total") or ng.get("errors_total")):
                extra.append("errors, see section")
            if extra:
                v += "; " + "; ".join(extra)
            out.append([label, metric, spread(ep, key, digits), spread(ng, key, digits), j.text() if j.r else "—",
                        v] + self.replicated(j.id, j.verdict))
        return out

    def replicated(self, jid: str, verdict: str) -> list[str]:
        """[the published run's verdict, settled?] for a table row."""
        if self.reference is None:
            return ["—", "no"]
        old = next((v for v in self.reference if v["id"] == jid), None)
        if old is None:
            return ["not in it", "no"]
        return [old["verdict"], "**yes**" if stats.settled_by_both(verdict, old["verdict"]) else "no"]

    # -- seed 000 -------------------------------------------------------------

    def seed000(self):
        rows = by_model(select(self.rows, "seed000", part="main"))
        fork = sorted(select(self.rows, "seed000", part="fork1024"), key=lambda r: r["conc"])
        if fork and not any(r["conc"] == 30 for r in fork):   # default run: c = 30 is the main fork cell
            fork = [r for r in rows if r["server"] == "fork"] + fork
        if not rows and not fork:
            return
        self.head("seed000", "Seed 000 — ab -c 30 on the 4537-byte page: the seed's models")
        self.md.append(table(["server", "req/s median (95% CI)", "mean ms (ab's measured Total, whole ms)", "p50 ms",
                              "p99 ms", "failed",
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
        self.matched_table("seed000")
        self.compare_pairs("seed000")

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
                             [[r["server"] + (f" ({r['cores']} cores)" if r.get("cores", 1) > 1 else ""),
                               spread(r, "avg_ms", 1), shown(r, pct(r, 0.5), 1), shown(r, pct(r, 0.9), 1),
                               shown(r, pct(r, 0.99), 1), spread(r, "max_ms", 1), spread(r, "std_ms", 1), errs(r),
                               claims.SEED001_AVG_S.get(r["server"], "—")] + cpu_cols(r) for r in rows]))
        self.md.append("\nPercentiles are over every request of every repeat. The seed's times are seconds of "
                       "its own servers' work on its machine: compare the order of the models, not the values.\n")
        fig, ax = plt.subplots(figsize=(8, 4.8))
        for r in rows:
            lat = r.get("lat_ms") or []
            if lat and not r.get("invalid"):
                two = r.get("cores", 1) > 1
                ax.plot(lat, [(i + 1) / len(lat) for i in range(len(lat))], color=COLORS.get(r["server"]),
                        label=r["server"] + (f" ({r['cores']} cores)" if two else ""), linewidth=1.6,
                        linestyle="--" if two else "-")
        # No line for the seed's averages: they are seconds of its own 1-3 s work
        # units, a unit this plot does not use (the table gives them as they were).
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
                plots.errorbar_line(ax, [r["cores"] for r in pts], pts, "rps", marker="o", color=COLORS.get(m),
                                    label=m)
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
                plots.errorbar_line(ax, [r["buckets"] for r in pts], pts, "rps", marker="o", linestyle=style,
                                    color="#2ca02c", label=f"per-bucket locks, hold {hold}")
            g = next((r for r in d if r["hold"] == hold and r["lock"] == "global" and "rps" in r), None)
            if g and not g.get("invalid"):
                ax.axhline(g["rps"], color="#d62728", linestyle=style, label=f"one global lock, hold {hold}")
        ax.set_xscale("log", base=2)
        # hold = 0 runs at tens of thousands of requests/s, hold = 1 at hundreds:
        # on a linear axis the hold = 1 curves lie flat on zero
        d_log = plots.wants_log([r["rps"] for r in d if "rps" in r and not r.get("invalid")])
        if d_log:
            ax.set_yscale("log")
        else:
            ax.set_ylim(bottom=0)
        _style(ax, f"(d) buckets: pool, 2 cores, zero delay,\nhold in 1 ms units ({kind})",
               "requests/s" + (" (log)" if d_log else ""), "number of buckets (log)")
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

    def matched_table(self, exp: str) -> None:
        """The matched-load cells of an experiment: every server at the same
        offered rate, so their CPU per request compares."""
        rows = by_model([r for r in select(self.rows, exp, part="matched")])
        if not rows:
            return
        self.md.append(f"\n**Matched offered load** ({self._matched_rate()} requests/s open loop, a new connection "
                       f"per request): server CPU per request at the same load, which settles a claim where the "
                       f"closed-loop cell was client-bound.\n")
        self.md.append(table(["server", "answered/s", "p99 ms", "server CPU µs/req (95% CI)", "errors",
                              "generator core", "fell behind"],
                             [[r["server"], spread(r, "rps"), shown(r, r.get("p99_ms"), 2),
                               spread(r, "server_us_per_req", 1), errs(r), f"{r.get('gen_share', 0):.0%}",
                               "yes" if r.get("fell_behind") else "no"] for r in rows]))

    def seed003(self):
        rows = [r for r in select(self.rows, "seed003") if r.get("part") != "matched"]
        if not rows:
            return
        self.head("seed003", "Seed 003 — ab -c 200 with and without keep-alive: epoll vs the seed's nginx")
        self.md.append(table(["server", "keep-alive", "req/s", "mean ms (ab's measured Total, whole ms)", "p99 ms",
                              "failed", "seed's req/s"]
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
        self.compare_pairs("seed003")
        self.matched_table("seed003")

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
                plots.errorbar_line(axes[0], [r["conc"] for r in pts], pts, "rps", marker="o",
                                    color=COLORS.get(m), linestyle=style, label=lab)
                axes[1].plot([r["conc"] for r in pts], [r.get("p99_ms", 0) for r in pts], marker="o",
                             color=COLORS.get(m), linestyle=style, label=lab)
            axes[0].plot(concs, [claims.SEED004_RPS.get((c, ka)) for c in concs], marker="D", color="red",
                         linestyle=style, alpha=0.6, label=f"seed 004 {'-k' if ka else 'close'} (14 cores)")
        for ax in axes:
            ax.set_xscale("log")
            ax.set_xticks(concs)
            ax.set_xticklabels([str(c) for c in concs])
        # the seed's 14-core figures can be tens of times ours on one core: a log
        # axis keeps our curves readable beside them
        shown_rps = [r["rps"] for r in rows if "rps" in r and not r.get("invalid")] \
            + [v for v in claims.SEED004_RPS.values() if v]
        rps_log = plots.wants_log(shown_rps)
        if rps_log:
            axes[0].set_yscale("log")
        else:
            axes[0].set_ylim(bottom=0)
        _style(axes[0], "throughput against concurrency (server on 1 core)",
               "requests/s" + (" (log)" if rps_log else ""), "concurrent clients (log)")
        axes[1].set_yscale("log")
        _style(axes[1], "p99 latency against concurrency (ab, 1 ms resolution)", "p99 latency, ms (log)",
               "concurrent clients (log)")
        self.save_fig(fig, "seed004_concurrency.png", "seed 004 concurrency sweep", list(axes))

    # -- open loop -------------------------------------------------------------

    def openloop(self):
        allrows = select(self.rows, "openloop")
        rows = [r for r in allrows if "rate" in r]
        if not rows:
            return
        self.head("openloop", "Latency against offered load (open loop), every model and nginx")
        # The generator's calibration: its latency floor and its highest clean rate
        cal = sorted([r for r in allrows if r.get("gen_cal_rate")], key=lambda r: r["gen_cal_rate"])
        clean = None
        if cal:
            floor_p50 = cal[0].get("p50_ms")
            for r in cal:
                ok = (not r.get("invalid") and not r.get("errors_total") and not r.get("fell_behind")
                      and r.get("rps", 0) >= 0.99 * r["gen_cal_rate"] and not r.get("client_bound")
                      and r.get("p99_ms") is not None and floor_p50 is not None
                      and r["p99_ms"] <= max(1.0, 10 * floor_p50))
                if not ok:
                    break
                clean = r["gen_cal_rate"]
            self.md.append("\n**The generator, calibrated** against tools/floor's epoll server (no HTTP work): "
                           "its latency at each rate is the floor under any server's. A rate is clean when every "
                           "request was answered, at ≥ 99% of the rate, with the generator under 90% of its core "
                           "and p99 within 10× the lowest rate's p50 (or 1 ms). "
                           + (f"Highest clean rate: **{clean:,}/s**; a server's point above it is marked "
                              f"generator-bound and is the generator's, not the server's.\n" if clean else
                              "No rate was clean: every point below is the generator's as much as the server's.\n"))
            self.md.append(table(["offered/s", "answered/s", "p50 ms", "p90 ms", "p99 ms", "max ms", "generator core"],
                                 [[f"{r['gen_cal_rate']:,}", spread(r, "rps"), shown(r, r.get("p50_ms"), 3),
                                   shown(r, r.get("p90_ms"), 3), shown(r, r.get("p99_ms"), 3),
                                   shown(r, r.get("max_ms"), 2), f"{r.get('gen_share', 0):.0%}"] for r in cal]))
        probes = {r["server"]: r.get("server_us_per_req") for r in allrows if r.get("probe_rate")}
        if probes:
            self.md.append("\nKnees (one core ÷ CPU per request at the probe rate): "
                           + "; ".join(f"{m} {1e6 / v:,.0f}/s ({v:.1f} µs per request)" if v else f"{m} not measured"
                                       for m, v in probes.items()) + ".\n")
        rates = sorted({r["rate"] for r in rows})
        servers = [m for m in MODEL_ORDER if any(r["server"] == m for r in rows)]
        self.md.append("\nA percentile is shown only where each repeat had at least 10 samples beyond it "
                       "(p99: 1,000 requests; p99.9: 10,000), else —.\n")

        def pct(r, key, q):
            n = r.get("scheduled") or 0
            return shown(r, r.get(key), 2) if n * (1 - q) >= 10 else "—"
        trs = []
        for m in servers:
            for rate in rates:
                r = next((x for x in rows if x["server"] == m and x["rate"] == rate), None)
                if r is None:
                    continue
                gb = " generator-bound" if clean and rate > clean else ""
                trs.append([m, f"{rate:,}{gb}", spread(r, "rps"), pct(r, "p50_ms", 0.5), pct(r, "p90_ms", 0.9),
                            pct(r, "p99_ms", 0.99), pct(r, "p999_ms", 0.999), errs(r)] + cpu_cols(r))
        self.md.append(table(["server", "offered/s", "answered/s", "p50 ms", "p90 ms", "p99 ms", "p99.9 ms",
                              "errors"] + CPU_HEAD, trs))
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
            _style(ax, f"{title} latency against offered load (1 core)", f"{title} latency, ms (log)",
                   "offered load, requests/s (log)")
        self.save_fig(fig, "openloop_latency.png", "latency against offered load", list(axes))
        # Server CPU per request per model, at the lowest rate (every server keeps up there)
        # the lowest rate every server was measured at: CPU per request compares at equal offered load
        common = [x for x in rates if all(any(r["server"] == m and r["rate"] == x for r in rows) for m in servers)]
        if common:
            self.md.append("\nServer CPU per request (µs) at the same offered rate, every rate all servers were "
                           "measured at (CPU per request falls as load rises, so it compares only across a row):\n")
            self.md.append(table(["offered/s"] + servers, [[f"{x:,}"] + [
                shown(r, r.get("server_us_per_req"), 1) if (r := next((y for y in rows if y["server"] == m
                                                                         and y["rate"] == x), None)) else "—"
                for m in servers] for x in common]))
        rates = common or rates
        low = [r for r in rows if r["rate"] == rates[0] and r.get("server_us_per_req")]
        if low:
            low = by_model(low)
            fig, ax = plt.subplots(figsize=(9, 4.5))
            bars(ax, low, "server_us_per_req", f"server CPU per request at {rates[0]:,} requests/s (open loop, "
                 f"keep-alive, 13 B)", "server CPU per request, µs")
            self.save_fig(fig, "cpu_per_request.png", "server CPU per request", [ax])
        self.compare_pairs("openloop")

    # -- past the knee ------------------------------------------------------------

    def overload(self):
        allrows = select(self.rows, "overload")
        rows = [r for r in allrows if r.get("load_x") is not None]
        if not allrows:
            return
        self.head("overload", "Past the knee: each overload policy at 0.5x to 3x capacity")
        probes = {r["model"]: r.get("server_us_per_req") for r in allrows if r.get("probe_rate")}
        if probes:
            self.md.append("Capacities (one core ÷ CPU per request at the probe rate, policy queue): "
                           + "; ".join(f"{m} {1e6 / v:,.0f}/s ({v:,.0f} µs per request)" if v else f"{m} not measured"
                                       for m, v in probes.items()) + ".\n")
        models = [m for m in MODEL_ORDER if any(r["model"] == m for r in rows)]
        policies = [p for p in ("queue", "shed", "reject") if any(r.get("policy") == p for r in rows)]
        if rows:
            trs = []
            for m in models:
                for p in policies:
                    for r in sorted((x for x in rows if x["model"] == m and x.get("policy") == p),
                                    key=lambda x: x["load_x"]):
                        q = r.get("queue_p99_us")
                        trs.append([m, p, f"{r['load_x']:g}x", f"{r['rate']:,}", spread(r, "goodput_rate"),
                                    shown(r, r.get("ok_p50_ms"), 1), shown(r, r.get("ok_p99_ms"), 1),
                                    shown(r, r.get("s503_rate")), shown(r, r.get("lost_rate")),
                                    "—" if q is None else shown(r, q / 1000, 1),
                                    shown(r, r.get("server_cores"), 2)])
            self.md.append(table(["model", "policy", "load", "offered/s", "goodput/s (range)", "200s p50 ms",
                                  "200s p99 ms", "503/s", "lost/s", "queue wait p99 ms",
                                  "server cores"], trs))
            self.md.append("\n" + overload_summary(rows) + "\n")
            for key, name, title, ylabel in (
                    ("goodput_rate", "overload_goodput.png", "goodput (200s within the deadline) against offered load",
                     "goodput, requests/s"),
                    ("ok_p99_ms", "overload_p99.png", "p99 latency of the 200s against offered load",
                     "p99 of the 200s, ms (log)")):
                fig, axes = plt.subplots(1, len(models), figsize=(5 * len(models), 4.4), squeeze=False)
                axes = list(axes[0])
                for ax, m in zip(axes, models):
                    for p, style in zip(policies, ("-", "--", ":")):
                        color = POLICY_COLORS.get(p)
                        pts = sorted([r for r in rows if r["model"] == m and r.get("policy") == p
                                      and r.get(key) is not None and not r.get("invalid")], key=lambda r: r["rate"])
                        if pts:
                            ax.plot([r["rate"] for r in pts], [r[key] for r in pts], marker="o", linestyle=style,
                                    color=color, label=f"overload = {p}")
                    if key == "goodput_rate":
                        offered = sorted({r["rate"] for r in rows if r["model"] == m})
                        ax.plot(offered, offered, color="#999999", linewidth=0.8, label="offered")
                    else:
                        ax.set_yscale("log")
                    _style(ax, f"{m}: {title.split(' against')[0]}", ylabel, "offered load, requests/s")
                self.save_fig(fig, name, title, axes)
        cost = [r for r in allrows if r.get("part") == "cost"]
        if cost:
            self.md.append("\nThe cost when not overloaded (`wrk -c200` keep-alive, 13 B, epoll under each policy; "
                           "the claim “an overload policy costs nothing measurable” is judged in the claims table):\n")
            self.md.append(table(["policy", "req/s", "server CPU µs/req", "generator core"],
                                 [[r.get("policy"), spread(r, "rps"), spread(r, "server_us_per_req", 2),
                                   f"{r.get('gen_share', 0):.0%}"] for r in cost]))

    # -- peers ----------------------------------------------------------------------

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
        # the cells in their fixed column order, whatever order the records came in (a shared cell's come first)
        titles = list(PEER_CELL_TITLES)
        cells = sorted(cells, key=lambda c: titles.index(c) if c in titles else len(titles))
        self.head("peers", "Peers — nginx, lighttpd and h2o beside spindle")
        self.md.append("Median (95% interval over the repeats) · server CPU per request (1 MB file: per MB; the cores "
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
        self.md.append("Which server wins each cell (only where its median is ahead of every other server's "
                       "after Holm's correction; a rate lost by a client-bound cell whose server used under 90% of "
                       "its core does not count; CPU per request compares only between cells at about the same "
                       "load: both servers at their own limit (not client-bound, or using 90% of their core), or "
                       "rates within 10%):\n")
        for c, by_srv in self.peer_cells():
            res = self.peer_judgements(c, by_srv)
            if c == PEER_LATENCY_CELL:
                self.md.append(f"- **{PEER_CELL_TITLES[c]}**: lowest p99: {res['p99_ms'][1]}.")
                continue
            rate_key = "mbps" if c == PEER_BYTES_CELL else "rps"
            cpu_key = "server_us_per_mb" if c == PEER_BYTES_CELL else "server_us_per_req"
            self.md.append(f"- **{PEER_CELL_TITLES.get(c, c)}**: {'GB/s' if rate_key == 'mbps' else 'req/s'}: "
                           f"{res[rate_key][1]}; least server CPU per {'byte' if rate_key == 'mbps' else 'request'}: "
                           f"{res[cpu_key][1]}.")
            for m in ("epoll", "uring"):
                if m in res["against"]:
                    self.md.append(f"  - {m} against each peer: {res['against'][m]}")
        self.md.append("")
        rate = {PEER_BYTES_CELL: ("mbps", "MB/s"), PEER_LATENCY_CELL: ("p99_ms", "batch p99, ms")}
        fig, axes = plots.grid_figure(
            cells, servers, grid,
            [(lambda c: rate.get(c, ("rps",))[0], lambda c: rate.get(c, (None, "requests/s"))[1]),
             (lambda c: "server_us_per_mb" if c == PEER_BYTES_CELL else "server_us_per_req",
              lambda c: "server CPU, µs per MB" if c == PEER_BYTES_CELL else "server CPU, µs per request")],
            PEER_CELL_TITLES)
        self.save_fig(fig, "peers.png", "peers: rate and server CPU per request, per cell", axes)

    def peer_cells(self):
        """(cell, {server: row}) of the peers experiment, skipped rows left out."""
        laid_out = self.server_grid("peers", "peer_cell", PEER_ROW_ORDER)
        if laid_out is None:
            return []
        cells, servers, grid = laid_out
        titles = list(PEER_CELL_TITLES)
        cells = sorted(cells, key=lambda c: titles.index(c) if c in titles else len(titles))
        return [(c, {srv: grid[(c, srv)] for srv in servers
                     if (c, srv) in grid and not grid[(c, srv)].get("skipped")}) for c in cells]

    def peer_judgements(self, cell: str, by_srv: dict) -> dict:
        """The peers' verdicts of one cell: the winner on each metric and
        spindle against each peer on CPU, each from the report's family."""
        if cell == PEER_LATENCY_CELL:
            return {"p99_ms": self.peer_winner(cell, by_srv, "p99_ms", False, rate=False)}
        rate_key = "mbps" if cell == PEER_BYTES_CELL else "rps"
        cpu_key = "server_us_per_mb" if cell == PEER_BYTES_CELL else "server_us_per_req"
        unit = "µs/MB" if cell == PEER_BYTES_CELL else "µs"
        out = {rate_key: self.peer_winner(cell, by_srv, rate_key, True, rate=True),
               cpu_key: self.peer_winner(cell, by_srv, cpu_key, False, rate=False), "against": {}}
        peers = {n: r for n, r in by_srv.items() if n in PEERS and r.get(cpu_key) is not None and not r.get("invalid")}
        # spindle against each peer, one verdict per pair: choosing "the best
        # peer" first (lowest median, or lowest among those comparable) makes
        # the verdict's subject depend on the noise between peers' figures and
        # on which peers a rule lets in
        for m in ("epoll", "uring"):
            mine = by_srv.get(m)
            if mine is None:
                continue
            if not peers or mine.get(cpu_key) is None or mine.get("invalid"):
                out["against"][m] = "not measured"
                continue
            parts = []
            for p in sorted(peers, key=lambda n: peers[n][cpu_key]):
                b = peers[p]
                why = claims.why_unusable(mine, b, cpu_key) or claims.cpu_comparable(mine, b, cpu_rate(cell))
                j = self.fam.difference(f"peers/{cell}/{cpu_key}/{m}-vs-{p}", claims.vals(mine, cpu_key),
                                        claims.vals(b, cpu_key), higher_better=False, why_not=why)
                text = f"{p} {num(b[cpu_key], 1)} {unit}: {mine[cpu_key] / b[cpu_key]:.2f}x"
                text += f" [{j.ci95[0]:.2f}–{j.ci95[1]:.2f}]" if j.r else ""
                text += {"ahead": ", less CPU (after correction)",
                         "behind": ", **more CPU** (after correction)"}.get(
                    j.verdict, f", unsettled ({j.why_not})" if not j.r else ", unsettled")
                parts.append(text)
            out["against"][m] = f"{num(mine[cpu_key], 1)} {unit} against " + "; ".join(parts)
        return out

    def peer_winner(self, cell: str, by_srv: dict, key: str, higher_better: bool, rate: bool) -> tuple:
        """(winner or None, why): the best median, and a verdict only where it is
        ahead of every other server after the correction."""
        usable = {n: r for n, r in by_srv.items() if not r.get("invalid") and r.get(key) is not None}

        def why(a: str, b: str) -> str:
            slower = (min if higher_better else max)((a, b), key=lambda n: usable[n][key])
            out = claims.why_unusable(usable[a], usable[b], key)
            if not out and rate and usable[slower].get("client_bound") and not claims.saturated(usable[slower]):
                out = f"{slower} was client-bound below its server's limit"
            if not out and not rate and key != "p99_ms":
                out = claims.cpu_comparable(usable[a], usable[b], cpu_rate(cell))
            return out
        best, text = self.winner_of(f"peers/{cell}/{key}", usable, key, higher_better, why)
        return best, text if best is None else f"{best} (ahead of every other server after correction)"

    def winner_of(self, prefix: str, usable: dict, key: str, higher_better: bool, why) -> tuple:
        """(winner or None, why): the best median, a winner only where it is
        ahead of every other after the report's correction. The leader's pairs
        are registered (under the two names in alphabetical order, so an id
        never depends on who led); every other pair would only weaken the
        correction (all pairs of the 2026-11-26 18:13 run: 104 tests instead
        of 63, and settled verdicts lost to it). A pair the published run
        judged and this run's leader does not need is judged again after the
        correction (published_pairs)."""
        self.pair_sources[prefix] = (usable, key, higher_better, why)
        if len(usable) < 2:
            self.winners[f"{prefix}/winner"] = stats.UNSETTLED
            return None, "fewer than two measured"
        best = (max if higher_better else min)(usable, key=lambda n: usable[n][key])
        pairs = {}
        for n in sorted(usable, key=lambda n: usable[n][key], reverse=higher_better):
            if n == best:
                continue
            a, b = sorted((best, n))
            pairs[(a, b)] = self.fam.difference(f"{prefix}/{a}-vs-{b}", claims.vals(usable[a], key),
                                                claims.vals(usable[b], key), higher_better, why_not=why(a, b))
        for n in sorted(usable, key=lambda n: usable[n][key], reverse=higher_better):
            if n == best:
                continue
            a, b = sorted((best, n))
            j = pairs[(a, b)]
            if j.verdict != (stats.AHEAD if a == best else stats.BEHIND):
                detail = j.why_not if not j.r else f"{best} ÷ {n} {j.text() if a == best else _inverse(j)}"
                self.winners[f"{prefix}/winner"] = stats.UNSETTLED
                return None, f"unsettled ({best} vs {n}: {detail})"
        self.winners[f"{prefix}/winner"] = best
        return best, best

    # -- HTTP/2: the models under multiplexing (experiments.h2) ---------------------

    def h2(self):
        rows = select(self.rows, "h2")
        if not rows:
            return
        self.head("h2", "HTTP/2 — the models under multiplexing (h2load), HTTP/1.1 beside it")
        servers = sorted(dict.fromkeys(r["server"] for r in rows), key=h2_server_rank)
        grid = {(r["h2_cell"], r["server"]): r for r in rows}
        bodies = [b for b in H2_BODY_ORDER if any(r.get("body") == b for r in rows)]
        shapes = [s for s in H2_SHAPE_ORDER if any(h2_shape(r) == s for r in rows)]
        self.md.append("Median (95% interval over the repeats) requests/s · server CPU per request. h2: HTTP/2 by "
                       "prior knowledge; h1: HTTP/1.1 with h2load's M requests pipelined on each connection. "
                       "**CB** = client-bound in at least one repeat.\n")
        for body in bodies:
            cols = [(s, p) for s in shapes for p in ("h2", "h1") if any((f"{p} {s} {body}", srv) in grid
                                                                        for srv in servers)]
            self.md.append(f"**{body}**:\n")
            self.md.append(table(["server"] + [f"{s.replace('x', '×')} {H2_PROTO_TITLES[p]}" for s, p in cols],
                                 [[srv] + [rate_and_cpu(grid.get((f"{p} {s} {body}", srv))) for s, p in cols]
                                  for srv in servers]))
        detail = []
        for body in bodies:
            for s in shapes:
                for p in ("h2", "h1"):
                    for srv in servers:
                        r = grid.get((f"{p} {s} {body}", srv))
                        if r is None:
                            continue
                        if r.get("skipped"):
                            detail.append([f"{p} {s} {body}", srv, f"skipped: {r['skipped']}"] + ["—"] * 9)
                            continue
                        detail.append(h2_detail_row(r))
        # the target's cell at one offered rate
        matched = [r for r in rows if " at " in r["h2_cell"] and not r.get("skipped")]
        detail += [h2_detail_row(r) for r in sorted(matched, key=lambda r: h2_server_rank(r["server"]))]
        self.md.append(table(["cell", "server", "req/s", "mean request ms", "server CPU µs/req", "server cores",
                              "voluntary switches/req", "system calls/req (untimed run)", "header bytes saved %",
                              "generator core", "errors"], detail))
        self.h2_findings = []
        for body, s, cell, by_srv, models in self.h2_cells():
            best_model, why_model = self.h2_winner(cell, models, "models")
            _best_any, why_any = self.h2_winner(cell, by_srv, "servers")
            line = (f"- **HTTP/2 {s.replace('x', '×')}, {body}**: most requests/s among spindle's models: "
                    f"{why_model}; among every server: {why_any}.")
            because = h2_because(best_model, models)
            if because:
                line += " " + because
            self.md.append(line)
            self.h2_findings.append(f"{s.replace('x', '×')} {body}: {best_model or 'no model ahead'}")
        self.md.append("")
        self.md.append(h2_shape_sentence(grid, servers, shapes, bodies) + "\n")
        self.md.append(h2_protocol_sentence(grid, servers, shapes, bodies) + "\n")
        self.md.append(self.h2_target(grid) + "\n")
        for body in bodies:
            cols = [s for s in shapes if any((f"h2 {s} {body}", srv) in grid for srv in servers)]
            fig, axes = plots.paired_grid(
                cols, servers, lambda col, i, srv, b=body: grid.get((f"{('h2', 'h1')[i]} {col} {b}", srv)),
                [("rps", "requests/s"), ("server_us_per_req", "server CPU, µs per request")],
                ("HTTP/2 (h2c)", "HTTP/1.1 (pipelined)"),
                {c: f"{c.replace('x', ' connection(s) × ')} in flight, {body}" for c in cols})
            name = "h2.png" if body == H2_BODY_ORDER[0] else f"h2-{slug(body)}.png"
            self.save_fig(fig, name, f"h2: requests/s and server CPU per request, HTTP/2 against HTTP/1.1, {body}",
                          axes)

    def h2_cells(self) -> list[tuple]:
        """(body, shape, cell, {server: row}, {model: row}) of the HTTP/2 cells, skipped rows left out."""
        rows = select(self.rows, "h2")
        grid = {(r["h2_cell"], r["server"]): r for r in rows if not r.get("skipped")}
        servers = sorted(dict.fromkeys(r["server"] for r in rows), key=h2_server_rank)
        out = []
        for body in H2_BODY_ORDER:
            for s in H2_SHAPE_ORDER:
                cell = f"h2 {s} {body}"
                by_srv = {srv: grid[(cell, srv)] for srv in servers if (cell, srv) in grid}
                if by_srv:
                    out.append((body, s, cell, by_srv, {n: r for n, r in by_srv.items() if n not in H2_PEERS}))
        return out

    def h2_winner(self, cell: str, by_srv: dict, among: str) -> tuple:
        """(winner or None, why) on requests/s: the best median, and a winner
        only where it is ahead of every other after the report's correction
        (as the peers' cells; a rate lost by a client-bound cell whose server
        used under 90% of its core does not count)."""
        usable = {n: r for n, r in by_srv.items() if not r.get("invalid") and r.get("rps") is not None}

        def why(a: str, b: str) -> str:
            slower = min((a, b), key=lambda n: usable[n]["rps"])
            out = claims.why_unusable(usable[a], usable[b], "rps")
            if not out and usable[slower].get("client_bound") and not claims.saturated(usable[slower]):
                out = f"{slower} was client-bound below its server's limit"
            return out
        prefix = f"h2/{slug(cell)}/rps"
        best, text = self.winner_of(prefix, usable, "rps", True, why)
        # the winner's id names what it was chosen among (models, or servers), its pairs' ids do not
        self.winners[f"h2/{slug(cell)}/{among}/winner"] = self.winners.pop(f"{prefix}/winner")
        return best, text if best is None else f"**{best}** (ahead of every other after correction)"

    def h2_target(self, grid: dict) -> str:
        """The CPU target: spindle's server CPU per request over HTTP/2, 10
        connections x 10 streams on 13 B, at most H2_TARGET x h2o's (the
        ratio of medians and its 95% interval; met where the interval's top is
        at or below the target, missed where its bottom is above it, and
        unsettled either way where the two servers carried different loads)."""
        cell = f"h2 10x10 {H2_BODY_ORDER[0]}"
        matched = next((c for c, srv in grid if srv == "h2o" and c.startswith(cell + " at ")), None)
        if matched is None:
            return self.h2_target_at(grid, cell)
        return (self.h2_target_at(grid, matched) + " "
                + self.h2_target_at(grid, cell, prefix="At each server's own pace (the closed-loop cell), ")
                + "\n\n" + self.h2_target_at(grid, matched, H2_PROMISE, H2_PROMISED_MODELS,
                                              prefix="**Promised instead** (docs/http.md, \"CPU per request "
                                                     "against h2o\": the target is out of reach on nghttp2), at "
                                                     "the same offered rate, "))

    def h2_target_at(self, grid: dict, cell: str, bound: float = 0.0, models: tuple = (), prefix: str = "") -> str:
        """The target's sentence on one cell (the closed-loop one, or the one
        at an offered rate, where the servers carry the same load), against
        bound (H2_TARGET unless given) for models (every spindle model unless
        given), after prefix (the target's own unless given)."""
        bound = bound or H2_TARGET
        where = cell[len(f"h2 10x10 {H2_BODY_ORDER[0]}"):].strip()
        prefix = prefix or ("**Target** — server CPU per request over HTTP/2, 10 connections × 10 streams, 13 B"
                            + (f", {where} offered to each server" if where else "") + ", ")
        h2o = grid.get((cell, "h2o"))
        if h2o is None or h2o.get("skipped") or h2o.get("server_us_per_req") is None or h2o.get("invalid"):
            return prefix + f"at most {bound:g}× h2o's: h2o not measured."
        parts = []
        for m in [m for m in MODEL_ORDER if (cell, m) in grid and m not in H2_PEERS and (not models or m in models)]:
            r = grid[(cell, m)]
            if r.get("invalid") or r.get("server_us_per_req") is None:
                parts.append(f"{m} not measured")
                continue
            ratio = stats.ratio_of_medians(claims.vals(r, "server_us_per_req"), claims.vals(h2o, "server_us_per_req"),
                                           key=f"h2/target/{m}")
            if ratio is None:
                parts.append(f"{m} {r['server_us_per_req'] / h2o['server_us_per_req']:.2f}× (one repeat: no interval)")
                continue
            lo, hi = ratio.ci95
            # CPU per request falls with load: two servers at different loads give a ratio that says neither
            load = claims.cpu_comparable(r, h2o)
            verdict = ("unsettled" if load else "met" if hi <= bound else "missed" if lo > bound
                       else "unsettled")
            parts.append(f"{m} {ratio.ratio:.2f}× [{lo:.2f}–{hi:.2f}]: **{verdict}**"
                         + (f" ({load}: {m} {num(r['rps'])} req/s, h2o {num(h2o['rps'])})" if load else ""))
        return (prefix + f"at most {bound:g}× h2o's ({num(h2o['server_us_per_req'], 1)} µs): "
                + ("; ".join(parts) or "no spindle model measured") + ".")

    # -- tls ------------------------------------------------------------------------

    def tls(self):
        laid_out = self.server_grid("tls", "tls_cell")
        if laid_out is None:
            return
        cells, servers, grid = laid_out
        self.head("tls", "TLS — handshakes per second and server CPU per handshake")
        self.md.append("Median (95% interval over the repeats) connections or requests per second · server CPU per "
                       "request (in the handshake cells: per handshake). **CB** = client-bound.\n")
        self.md.append(table(["server"] + [TLS_CELL_TITLES.get(c, c) for c in cells],
                             [[srv] + [rate_and_cpu(grid.get((c, srv))) for c in cells] for srv in servers]))
        self.md.append(negotiated_sentence([r for r in self.lab.records if r.get("exp") == "tls"]) + "\n")
        if "plain" in cells:        # the plain-HTTP ranking cells run with --full
            self.md.append(ranking_sentence({srv: grid.get(("plain", srv)) for srv in servers},
                                            {srv: grid.get(("full", srv)) for srv in servers}) + "\n")
        fig, axes = plots.grid_figure(
            cells, servers, grid,
            [(lambda c: "rps", lambda c: "handshakes/s" if c in ("full", "resumed") else "requests/s"),
             (lambda c: "server_us_per_req",
              lambda c: "server CPU, µs per handshake" if c in ("full", "resumed") else "server CPU, µs per request")],
            TLS_CELL_TITLES)
        self.save_fig(fig, "tls.png", "tls: handshakes per second and server CPU per handshake", axes)

    # -- slow clients ---------------------------------------------------------------

    def slow(self):
        """A fresh client's latency beside slow clients (experiments.slow)."""
        rows = by_model(select(self.rows, "slow"))
        if not rows:
            return
        self.head("slow", "Slow clients — a fresh client's latency beside 100 slow ones")
        self.md.append("Median (95% interval over the repeats). The fresh client's latency runs from each "
                       "request's intended send time; *answered*: its requests answered before they timed out (bench/experiments.py SLOW_TIMEOUT_MS after they were due); "
                       "threads and processes: the server's, read while the slow clients were held; queue wait and "
                       "service: the fresh requests' mean inside spindle (bench/reqtimes.py).\n")
        self.md.append(table(["server", "answered/s", "p50 ms", "p99 ms", "max ms", "answered", "threads held",
                              "processes", "queue wait µs", "service µs", "voluntary switches/req"] + CPU_HEAD,
                             [[r["server"], spread(r, "rps"), spread(r, "p50_ms", 2),
                               spread(r, "p99_ms", 2) + (f" (≥ the {r.get('timeout_ms', 2000) / 1000:g} s timeout)"
                                                         if (r.get("p99_censored") or 0) >= 0.5
                                                         else ""),
                               spread(r, "max_ms", 1),
                               f"{r['answered_share']:.0%}" if r.get("answered_share") is not None else "—",
                               spread(r, "held_threads"), spread(r, "held_processes"),
                               num(r.get("queue_mean_us"), 1), num(r.get("service_mean_us"), 1),
                               num(r.get("ctx_vol_per_req"), 2)] + cpu_cols(r) for r in rows]))

    # -- cost against connections ---------------------------------------------------

    def scale(self):
        """Memory and a fresh client's latency beside N idle keep-alive
        connections (bench/scale.py): a table, the words, two plots."""
        rows = select(self.rows, "scale")
        if not rows:
            return
        self.head("scale", "Cost against connections — memory and a fresh client's latency beside idle "
                           "keep-alive connections")
        order = [m for m in MODEL_ORDER if m in ("fork", "thread", "pool", "prefork", "epoll", "uring", "nginx")]
        rank = lambda r: (r.get("transport") != "plain", order.index(r["server"]) if r["server"] in order
                          else len(order), r.get("conns", 0))
        mb = lambda r, k: num(r.get(k), 1)
        self.md.append("Each point measured once. PSS before → after: the server's processes, summed; kB per "
                       "connection = growth ÷ connections held; anonymous: PSS's heap-and-stack part alone. The "
                       "fresh client: one request at a time, each on a new connection (over TLS a full handshake), "
                       "connect() to the last byte. Server CPU per connection: while they opened (handshake and "
                       "first request).\n")
        self.md.append(table(["server", "transport", "connections", "held", "PSS before → after MB",
                              "kB per connection", "anonymous kB per conn.", "processes", "threads",
                              "fresh p50 ms", "fresh p99 ms", "server CPU µs per connection", "other load (cores)",
                              "errors"],
                             [[r["server"], r.get("transport", "plain"), f"{r['conns']:,}", num(r.get("open")),
                               f"{mb(r, 'base_pss_mb')} → {mb(r, 'pss_mb')}", num(r.get("kb_per_conn"), 2),
                               num(r.get("anon_kb_per_conn"), 2), num(r.get("processes")), num(r.get("threads")),
                               num(r.get("p50_ms"), 2), num(r.get("p99_ms"), 2), num(r.get("setup_us_per_conn")),
                               "—" if r.get("other_cores") is None else f"{r['other_cores']:+.2f}",
                               errs(r)] for r in sorted(rows, key=rank)]))
        self.md.append("\n**How cost grows with connections**\n")
        self.md += scale.cost_text(rows, order) + [""]
        cs = scale.curves(rows)
        if cs:
            fig, axes = plots.against_connections(cs, "kb_per_conn", "PSS per idle connection", "kB per connection",
                                                  order)
            self.save_fig(fig, "scale_memory.png", "scale: memory per idle connection against connections held",
                          axes)
            busy = lambda r: (r.get("other_cores") or 0) > lab_mod.RETAKE_OTHER_CORES
            fig, axes = plots.against_connections(cs, "p99_ms", "A fresh client's p99", "ms", order,
                                                  dashed_key="p50_ms", dashed_label="p50 (dashed)", flagged=busy,
                                                  flag_label=f"other load > +{lab_mod.RETAKE_OTHER_CORES} cores")
            self.save_fig(fig, "scale_latency.png", "scale: a fresh client's p99 (and p50) against connections held",
                          axes)

    def nodelay(self):
        """The delayed-ACK experiment (experiments.nodelay, run with --only nodelay)."""
        rows = select(self.rows, "nodelay")
        if not rows:
            return
        self.head("nodelay", "The pipelined stall and TCP_NODELAY, tested: off in spindle, on in nginx "
                             "(run with --only nodelay)")
        def batch(r):
            if r.get("invalid") or not r.get("rps"):
                return "—"
            return f"{r['conc'] * r['pipeline_depth'] / r['rps'] * 1000:.2f}"
        self.md.append(table(["server", "TCP_NODELAY", "depth", "req/s", "time per batch ms (Little)",
                              "slowest batch ms", "system calls/req", "server cores"] + CPU_HEAD[:1],
                             [[r["server"], r.get("variant", "—"), r.get("pipeline_depth"), spread(r, "rps"),
                               batch(r), spread(r, "max_ms", 1), num(r.get("syscalls_per_req"), 2),
                               num(r.get("server_cores"), 2), num(r.get("server_us_per_req"), 2)]
                              for r in sorted(rows, key=lambda r: (r.get("pipeline_depth") or 0, r["server"]))]))

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

    def published_pairs(self) -> None:
        """The published run's winner pairs that this run did not register
        (its leader was another server): judged again now, after the
        correction, at its strictest level (Family: Bonferroni over the whole
        family), so the replication reads a verdict for each instead of "not
        in this run", and no verdict already read changes."""
        for v in self.reference or []:
            prefix, _, pair = v["id"].rpartition("/")
            src = self.pair_sources.get(prefix)
            if src is None or v["id"] in self.fam.items or "-vs-" not in pair:
                continue
            usable, key, higher_better, why = src
            a, _, b = pair.partition("-vs-")
            if a in usable and b in usable:
                self.fam.difference(v["id"], claims.vals(usable[a], key), claims.vals(usable[b], key),
                                    higher_better, why_not=why(a, b))

    def judge_all(self) -> None:
        """Reads the claims' verdicts from the corrected family (preregister),
        and the run's verdicts against the reference."""
        self.published_pairs()
        self.claims = claims.check_all(self.rows, self.fam)
        self.verdicts = [j.as_json() for j in self.fam.items.values()] + [
            {"id": c["id"], "verdict": c["verdict"],
             "ratio": None if c["ratio"] is None else round(c["ratio"], 4),
             "ci95": None if c["ci95"] is None else [round(x, 4) for x in c["ci95"]], "kind": "claim"}
            for c in self.claims] + [
            {"id": wid, "verdict": w, "ratio": None, "ci95": None, "kind": "winner"} for wid, w in self.winners.items()]
        # settled: this run and the published one reached the same verdict (the
        # next run's replication counts only those; see stats.replication)
        ref = {v["id"]: v.get("verdict") for v in self.reference or []}
        for v in self.verdicts:
            v["settled"] = stats.settled_by_both(v["verdict"], ref.get(v["id"]))
        if self.reference is not None:
            self.replication = stats.replication(self.reference, self.verdicts)

    def claims_section(self):
        rows = self.claims
        if not rows:
            return
        self.md.append("\n## The seeds' claims, checked\n")
        self.md.append(f"Each claim rests on ratios of medians over the repeats, with a 95% interval (bench/stats.py). "
                       f"A verdict only where the ratio's interval excludes 1 after "
                       f"{self.fam.correction_words()}; a claim of no difference holds only where the ratio is "
                       f"shown within ±{stats.MARGIN:.0%}; otherwise “unsettled”, with the width reached. A pair the "
                       f"plan measures at matched offered load (the `matched` cells) is judged on server CPU per "
                       f"request there, whatever its closed-loop cells showed; another pair, where its slower cell "
                       f"was client-bound, stays unsettled (see “How verdicts are reached”). “Settled” = this run's "
                       f"verdict and the published run's (docs/bench/verdicts.json) agree.\n")
        self.md.append(table(["seed", "claim", "this run measured", "ratio [95% CI]", "verdict", "published run",
                              "settled", "why"],
                             [[c["seed"], c["claim"], c["measured"],
                               (f"{c['ratio']:.2f} [{c['ci95'][0]:.2f}–{c['ci95'][1]:.2f}]"
                                + (f" ({c['basis']})" if c.get("basis") and c["basis"] != "rps" else ""))
                               if c["ratio"] is not None else "—",
                               f"**{c['verdict']}**", *self.replicated(c["id"], c["verdict"]),
                               c["why"].replace("|", "/")] for c in rows]))

    def replication_section(self):
        self.md.append("\n## Replication: the published run's verdicts, again\n")
        if self.reference is None:
            self.md.append("No published verdicts to compare with (docs/bench/verdicts.json is missing): this run's "
                           "verdicts are written to verdicts.json, and become the reference once published. Until "
                           "a second run agrees, no verdict of this report is settled.\n")
            return
        s = stats.replication_summary(self.replication)
        pct = {k: f"{v:.0%}" if v is not None else "—" for k, v in s.items() if k.endswith("share")}
        self.md.append(f"Of the published run's {s['published_settled']} settled verdicts (reached by it and by the "
                       f"run before it), **{s['held']} held ({pct['held_share']})**, {s['reversed']} reversed (settled to the "
                       f"opposite), {s['not_held']} not held (unsettled now, or another verdict), {s['missing']} not "
                       f"in this run (a cell it did not measure). Over every verdict the published run reached, "
                       f"settled or not: {s['reached_held']} of {s['reached']} reprinted ({pct['reached_share']}), "
                       f"{s['reached_reversed']} reversed. Verdicts the published run left unsettled are listed "
                       f"too, for what this run found.\n")
        self.md.append(f"Counting each comparison once (a claim or headline row that restates a comparison, a pair "
                       f"read both ways and a winner, which restates its pairs, add nothing; `comparison` in "
                       f"verdicts.json names the one each verdict rests on): of {s['comparisons_settled']} settled "
                       f"comparisons **{s['comparisons_held']} held ({pct['comparisons_share']})**, {s['comparisons_reversed']} "
                       f"reversed; of {s['comparisons_reached']} the published run reached, "
                       f"{s['comparisons_reached_held']} reprinted ({pct['comparisons_reached_share']}).\n")
        fmt = lambda r, c: (f"{r:.2f} [{c[0]:.2f}–{c[1]:.2f}]" if r is not None and c else "—")
        self.md.append(table(["id", "published", "ratio [95% CI]", "this run", "ratio [95% CI]", "held?"],
                             [[r["id"], r["published"], fmt(r["published_ratio"], r["published_ci95"]),
                               r["now"] or "—", fmt(r["now_ratio"], r["now_ci95"]),
                               f"**{r['status']}**" if r["status"] in (stats.REVERSED,) else
                               f"reached once; {r['reprinted']} now" if r["status"] == stats.REACHED_ONCE else
                               r["status"]]
                              for r in self.replication]))

    def why_section(self):
        """Which model wins, when, and why (bench/why.py), with the queue wait and
        service time of spindle's models against offered load."""
        text, self.why = why.section(self.rows)
        self.md.append(text)
        rows = [r for r in why.sweep(self.rows) if r.get("queue_mean_us") is not None]
        if not rows:
            return
        fig, ax = plt.subplots(figsize=(9, 4.8))
        for m in [m for m in MODEL_ORDER if any(r["server"] == m for r in rows)]:
            pts = sorted([r for r in rows if r["server"] == m and not r.get("invalid")], key=lambda r: r["rate"])
            for key, style, what in (("service_mean_us", "-", "service"), ("queue_mean_us", "--", "queue wait")):
                ax.plot([r["rate"] for r in pts], [max(r[key], 0.1) for r in pts], marker="o", linestyle=style,
                        color=COLORS.get(m), label=f"{m} {what}")
        ax.set_xscale("log")
        ax.set_yscale("log")
        _style(ax, "queue wait and service time inside spindle against offered load (open loop, keep-alive, 13 B)",
               "mean per request, µs (log)", "offered load, requests/s (log)")
        self.save_fig(fig, "queue_service.png", "queue wait and service time against offered load", [ax])

    def method_section(self):
        """How verdicts are reached, and the choices a reader should know."""
        man = self.man
        self.md.append("\n## How verdicts are reached\n")
        self.md.append(
            f"- **Repeats and order.** {man.get('repeats', '?')} repeats per cell, in rounds (every cell once per "
            f"round), the servers' order and each server's cells shuffled every round with `random.Random` "
            f"seeded by {man.get('order_seed', '—')}/experiment (recorded in manifest.json as `order_seed`; "
            f"`python -m bench --seed N` changes it), so a drift of the host lands on every server alike. A "
            f"repeat that read more than +{lab_mod.RETAKE_OTHER_CORES} cores of load from outside the lab (a quiet "
            f"run's worst cell reads about +0.10) is taken again at the end of its experiment, at most "
            f"{lab_mod.MAX_RETAKES} times; the last reading is then kept, with its other load in results.csv "
            f"(`retakes` counts them).\n"
            f"- **Figures.** Every figure is the median of its repeats; the interval beside it is the percentile-"
            f"bootstrap 95% interval of that median (with 5 repeats it is their range, whose coverage is 94% "
            f"whatever the distribution: the nominal 95% is not reachable with 5 values). results.csv gives each "
            f"row's main metric's interval (`ci95_low`, `ci95_high`, `ci95_metric`) and `repeats`.\n"
            f"- **Comparisons.** A ratio of two medians, its 95% interval from the bootstrap standard error of "
            f"each log-median with Student's t on Welch's degrees of freedom. The tests of this "
            f"report (headline, claims, peers' winners) form one family at 5%, under "
            f"{self.fam.correction_words()}: a verdict (ahead, behind, holds, does not hold) only where a test "
            f"survives it. A claim of no difference needs both one-sided "
            f"tests against ±{stats.MARGIN:.0%} to survive (TOST); otherwise it is unsettled and the table gives "
            f"the interval reached. The peers' per-cell winners are in the same family.\n"
            f"- **Client-bound cells and matched load.** A closed-loop rate measured while the generator used "
            f"over 90% of its core is the generator's. Where the plan measures a pair at **matched offered "
            f"load** (seed 000's servers, seed 003's epoll and nginx without keep-alive: the `matched` cells "
            f"offer every compared server the same {self._matched_rate()} requests/s open loop, vegeta, a new "
            f"connection per request, at most 500 outstanding), the pair is judged on server CPU per request "
            f"there, always: a basis chosen by whether the generator crossed 90% in a repeat switched between "
            f"runs. Elsewhere a client-bound rate may win a comparison, and where it is the slower cell the "
            f"claim stays unsettled. CPU per request falls several-fold from light load to saturation, so it "
            f"compares only at the same load; a matched cell that fell behind its rate, failed requests or "
            f"whose generator passed 90% of its core in a repeat (vegeta does only when the server stalls) "
            f"leaves the pair unsettled. The rate is below the ab cells' operating point (15–20k/s), where "
            f"vegeta cannot open connections fast enough: the comparison is the servers' cost per request at a "
            f"moderate load, not their capacity, and the rows say which basis each rests on.\n"
            f"- **Claims about the seeds' own code** (Boost.asio's locking, the fork server's descriptors, a pool "
            f"holding a thread per idle connection) are “not comparable” unless the lab reproduces the mechanism "
            f"(seed 004: the thread model capped at 40 connections).\n")

    def _matched_rate(self) -> str:
        r = next((r.get("rate") for r in self.rows if r.get("part") == "matched" and r.get("exp") != "h2"), None)
        return f"{r:,}" if r else "4,000"

    def calibration_lines(self) -> list[str]:
        """The run's drift (calibration cell, end against start) and the host's
        steal time: for the top of the report."""
        out = []
        st = next((r for r in self.rows if r["exp"] == "calibration_start"), None)
        en = next((r for r in self.rows if r["exp"] == "calibration_end"), None)
        if st and en:
            j = stats.Family().difference("calibration", claims.vals(en, "rps"), claims.vals(st, "rps"))
            if j.r:
                drift = j.ratio - 1
                lo, hi = j.ci95
                flag = abs(drift) > stats.MARGIN
                out.append(("**CALIBRATION DRIFTED: " if flag else "Calibration: ")
                           + f"the floor server's rate at the end of the run ÷ at the start = {j.ratio:.3f} "
                           f"[{lo:.3f}–{hi:.3f}] ({drift:+.1%}; margin ±{stats.MARGIN:.0%})"
                           + (": the host changed during the run by more than the margin the verdicts are held to; "
                              "treat its verdicts with that much suspicion.**" if flag else ".")
                           + (" The calibration cell was client-bound: its drift is the host's as a whole "
                              "(server and generator)." if st.get("client_bound") or en.get("client_bound") else ""))
            else:
                out.append(f"Calibration: no drift figure ({j.why_not}).")
        else:
            out.append("Calibration: not run (`--no-calibration`, or the run was interrupted).")
        steal = self.man.get("steal")
        if steal:
            out.append(f"Host steal time over the run: {steal['share']:.2%} of the CPUs' time "
                       f"({steal['steal_s']:.1f} CPU-s).")
        return out

    CHANGES = [
        ("000", "The pool runs with 5 and with 15 threads, as the seed; runs are time-based (ab -t) with a warm-up, "
                "because 1000 requests last a tenth of a second. The fork model also runs under the seed's "
                "conditions (1024 descriptors, no cap of ours binding) at c = 100 and 1000, so the report says "
                "whether it survives where the seed's died instead of raising the limit until it cannot fail. "
                "Over loopback on one machine, not a LAN: no network round trip in a connection's set-up, and "
                "the generator shares the machine (hence the client-bound flags and the matched-load cells)."),
        ("001", "Every request does 1–3 ms of real CPU work on the workload endpoint (the seed: 1–3 s), invented "
                "to give the servers work; a static page would measure connection set-up only. On one core "
                "“threaded is not fastest” holds by construction (threads cannot run the work in parallel), so "
                "the seed's three models also run on both cores and the claims are judged on each. The report "
                "plots the whole latency distribution (CDF), not four summary numbers."),
        ("002", "A unit of delay is the serving thread's own CPU time (delay_kind = cpu): the seed's loop on the "
                "clock let a preempted thread finish on time, so many threads on one core appeared to work at "
                "once. Cells whose CPU work per second exceeds the cores, or whose bucket totals do not match the "
                "requests served, are invalid. Core counts keep workers and threads fixed; a same-mean pair "
                "(10–11 vs 1–20) separates variance from the mean; hold = 1 puts work inside the lock so bucket "
                "counts can matter; the seed's fixed 300 requests/s is sent open loop."),
        ("003", "nginx runs as the seed's configuration (worker_processes 1, worker_connections 768, default "
                "access log, a 13-byte return 200) with `keepalive_requests 100`, the default of the seed's "
                "nginx 1.18 (Debian's 1.22 defaults to 1000: without it ab -k would reconnect 10x less often); spindle serves its 13-byte file from "
                "the cache, the closest equivalent. Elsewhere nginx serves files as a realistic configuration "
                "would (sendfile, open_file_cache) with as many workers as spindle."),
        ("004", "prefork runs with 4 workers x 10 threads and keep-alive is measured with ab -k, as the seed; "
                "concurrency 10–1000 in time-based runs, so each connection makes many requests rather than "
                "measuring the initial burst; nginx beside it (a full run only) has the same 4 workers. The seed's "
                "pool held a thread per open keep-alive connection: spindle's prefork does not, so its keep-alive "
                "row is “not comparable”, and the thread model capped at 40 connections reproduces the mechanism. "
                "“~32k req/s” is judged on the server's ceiling (1 core ÷ CPU per request): ab limited the rates."),
        ("all", "The headline compares epoll, chosen in advance, with nginx, and prints a verdict only where the "
                "ratio's interval survives Holm's correction over the report's comparisons; an open-loop sweep (vegeta) measures latency against offered "
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

    KERNEL_COLS = (("user_us_per_req", "user µs", 1), ("sys_us_per_req", "system µs", 1),
                   ("ctx_vol_per_req", "vol. switches", 2), ("ctx_invol_per_req", "invol. switches", 3),
                   ("ctx_per_req", "switches (perf)", 2), ("runq_us_per_req", "run-queue µs", 1),
                   ("minflt_per_req", "minor faults", 3), ("syscalls_per_req", "syscalls", 1),
                   ("softirq_us_per_req", "softirq µs (machine)", 1), ("queue_mean_us", "queue wait µs", 1),
                   ("service_mean_us", "service µs", 1))

    def kernel_section(self):
        """What each request cost the kernel, per cell and server: medians over the repeats."""
        recs = [r for r in self.lab.records if "failed_run" not in r and not r.get("invalid")
                and r.get("user_us_per_req") is not None]
        if not recs:
            return
        hw = (self.man.get("machine", {}).get("perf_counters", {}).get("hardware_counters") or "unknown")
        self.md.append("\n## What each request costs the kernel\n")
        self.md.append(
            "Per request served, the server's processes and threads (bench/kcounters.py, whose first comment "
            "says where each figure comes from): user and system CPU from the server's cgroup (exited tasks "
            "included; the kernel samples the split at its timer tick, so it is scaled to the exact total); voluntary and involuntary context switches and run-queue wait per thread "
            "(/proc/PID/task/TID/status and schedstat: a thread that exits during the cell takes its own with "
            "it, so for fork and thread with a new connection per request they are lower bounds, and "
            "`switches (perf)`, perf's context-switches inherited by every thread and child and summed at exit, "
            "is the complete count; ≥ marks them for thread and fork, whose connection threads and children "
            "end within a cell: measured here, the thread model under `ab -k -c 10` read 0.00 switches per "
            "request from /proc and 1.13 from perf, its 10 connection threads having exited when the "
            "cell's last reading was taken); minor faults from /proc/PID/stat with the reaped children's; system calls "
            "from `perf stat -e raw_syscalls:sys_enter` on the server's threads (counting only, "
            "but the tracepoint costs every system call ~0.2 µs on this VM, so perf is never attached to a timed "
            "repeat of the default run: "
            + ("this run had --syscalls, so every repeat was counted and its CPU figures include that cost"
               if any(r.get("syscalls_per_req") is not None and not r.get("count_syscalls")
                      and not r.get("calls_from") for r in recs)
               else "each cell the “why” section compares ran once more after its repeats, untimed, for at most "
                    "1 s with perf attached, and its counts per request stand for the cell (`calls_from` in "
                    "results.csv; results.json's `call_calibration` keeps each such run), as do the open loop's "
                    "knee probes; `switches (perf)` comes from the same runs; other cells —") + "); "
            "softirq time from /proc/stat, the whole machine's; for spindle, the mean queue wait and service "
            "time of the cell's requests from its own histograms, read from /metrics before and after the cell "
            "(bench/reqtimes.py). Hardware counters on this machine: "
            f"**{hw}**" + ("" if hw.startswith("yes") else " — so no cycles, instructions, IPC or cache misses "
                          "here") + "; `python -m bench --pmu` adds cycles and instructions per request where "
            "perf has them (it implies --syscalls). Medians over the repeats; every repeat's figures are in results.csv.\n")
        groups: dict[tuple, list[dict]] = {}
        for r in recs:
            groups.setdefault((r["exp"], r["cell"], r["server"]), []).append(r)
        rows = []
        lower = ("ctx_vol_per_req", "ctx_invol_per_req", "runq_us_per_req")
        for (exp, cell, server), rs in groups.items():
            row = [exp, cell, server]
            # threads or processes that end within the cell (a connection's thread, fork's child)
            # take their switches and run-queue wait with them: these read as lower bounds
            exits = rs[0].get("model", server).startswith(("thread", "fork"))
            for k, _, nd in self.KERNEL_COLS:
                v = [r[k] for r in rs if r.get(k) is not None]
                row.append(("≥ " if exits and k in lower else "") + f"{statistics.median(v):.{nd}f}" if v else "—")
            rows.append(row)
        self.md.append(table(["experiment", "cell", "server"] + [h for _, h, _ in self.KERNEL_COLS], rows))

    def load_section(self):
        rows = [r for r in self.rows if "other_cores" in r]
        if not rows:
            return
        meters = sorted({r.get("cpu_meter") for r in self.lab.records if r.get("cpu_meter")})
        self.md.append("\n## Machine load and the load generator, per experiment\n")
        self.md.append(
            "Per cell: the server's CPU, the load generator's, the lab's own and “other load”, what else ran on "
            "the machine, measured by " + (", ".join(f"**{m}**" for m in meters) or "the meter of its day")
            + ". With cgroups (bench/cpumeter.py) the server (every process and thread it starts, those that "
            "exit during the cell included), the generators and the lab's own process each run in a cgroup, "
            "and other load is the machine's task time minus the lab's cgroups: measured, not a remainder of "
            "subtractions, and shown as measured (a small negative figure is the readings' skew, up to a "
            "scheduler tick per running task). Interrupt work is not subtracted from it: the kernel charges a "
            "softirq to the task it interrupted, so the loopback receive path inside the server's send is in the "
            "server's CPU; softirq work the kernel defers to ksoftirqd is a kernel thread's, so the kernel's "
            "own threads are read apart (`kthread_cores`, schedstat): that part of other load may be the cell's. "
            "`softirq_cores` and `steal_cores` (/proc/stat, 10 ms ticks) say how much interrupt "
            "work and hypervisor steal there was; `server_runq_wait_s` (schedstat) is how long the server's "
            "threads waited for a CPU, summed over threads. Every cell's figures are in results.csv "
            "(`server_cpu_s`, `gen_cpu_s`, `gen_share`, `client_bound`, `other_cores`, `other_cpuN_cores`, "
            "`lab_cores`, `kthread_cores`, `softirq_cores`, `steal_cores`, `server_runq_wait_s`, `cpuN_busy`, "
            "`cpu_meter`).\n")
        trs = []
        for exp in dict.fromkeys(r["exp"] for r in rows):
            e = [r for r in rows if r["exp"] == exp]
            other = [r["other_cores"] for r in e]
            steal = [r.get("steal_cores", 0) for r in e]
            kth = [r["kthread_cores"] for r in e if r.get("kthread_cores") is not None]
            trs.append([exp, len(e), f"{statistics.median(other):+.3f}",
                        f"{statistics.median(kth):.3f}" if kth else "—",
                        f"{min(r.get('other_cores_min', r['other_cores']) for r in e):+.3f} to "
                        f"{max(r.get('other_cores_max', r['other_cores']) for r in e):+.3f}",
                        f"{statistics.median(steal):.3f}",
                        sum(1 for r in e if r.get("client_bound")), sum(1 for r in e if r.get("invalid"))])
        self.md.append(table(["experiment", "cells", "other load, median (cores)",
                              "of which kernel threads, median", "other load, every repeat",
                              "steal, median (cores)", "client-bound cells", "invalid cells"], trs))
        busy = [r for r in rows if r.get("other_cores_max", r["other_cores"]) > 0.25]
        if busy:
            self.md.append(f"\n**{len(busy)} cell(s) ran while something else used more than a quarter of a core**: "
                           f"their numbers are noisier (see `other_cores` in results.csv).\n")
        else:
            self.md.append("\nNo cell ran while something else used more than a quarter of a core.\n")

    def littles_law_section(self):
        """Where Little's law (req/s x mean latency = requests in flight, at most
        the connections) was checked, and where it could not be, with why."""
        recs = [r for r in self.lab.records if "little_ratio" in r or r.get("little_unchecked")]
        if not recs:
            return
        checked = sum(1 for r in recs if "little_ratio" in r)
        self.md.append("\n## Little's law: where it was checked and where it was not\n")
        self.md.append(f"On every closed-loop measurement the lab checks req/s × the tool's measured mean latency "
                       f"against the connections held (0.5–1.2 × c; outside it the cell lists a problem): "
                       f"{checked} of {len(recs)} measurements were checked. ab's “Time per request” is "
                       f"c ÷ req/s by construction and is never used for it (nor shown as a latency). "
                       f"Not checked:\n")
        why: dict[tuple, list[str]] = {}
        for r in recs:
            if r.get("little_unchecked"):
                why.setdefault((r["exp"], r["little_unchecked"]), [])
                if r["cell"] not in why[(r["exp"], r["little_unchecked"])]:
                    why[(r["exp"], r["little_unchecked"])].append(r["cell"])
        every = {exp: {r["cell"] for r in recs if r["exp"] == exp} for exp, _ in why}
        self.md.append(table(["experiment", "why not", "cells"],
                             [[exp, w, f"all {len(cells)}" if set(cells) == every[exp] else ", ".join(cells)[:400]]
                              for (exp, w), cells in why.items()])
                       if why else "None.\n")

    def summary_section(self) -> str:
        """The findings up front: the verdicts the run reached (headline and
        claims, as their own sections state them), what stayed unsettled, and
        how far the run's numbers can be trusted (invalid and client-bound
        cells, other load, steal, the machine)."""
        out = ["\n## Summary of findings\n"]
        verdict = lambda v: re.sub(r"[*]", "", str(v))
        # a headline row: experiment, metric, epoll, nginx, ratio, verdict[, published run, settled by both]
        settled = [h for h in self.headline if len(h) > 5
                   and not verdict(h[5]).startswith(("unsettled", "not run", "no verdict"))]
        both = [h for h in settled if len(h) > 7 and verdict(h[7]) == "yes"]
        out.append(f"- **Headline (epoll against nginx)**: {len(settled)} of {len(self.headline)} comparisons "
                   f"reached a verdict" + (": " + "; ".join(f"{h[0]} {h[1]}: {verdict(h[5])} (ratio {h[4]})"
                                                            for h in settled) if settled else "")
                   + (f"; {len(both)} of them settled by this run and the published one alike" if both else "")
                   + ".")
        cl = getattr(self, "claims", []) or []
        if cl:
            counts: dict[str, int] = {}
            for c in cl:
                counts[verdict(c["verdict"]).split(" (")[0]] = counts.get(verdict(c["verdict"]).split(" (")[0], 0) + 1
            out.append(f"- **The seeds' claims**: {len(cl)} checked: "
                       + ", ".join(f"{n} {v}" for v, n in sorted(counts.items(), key=lambda kv: -kv[1])) + ".")
            for c in cl:
                if verdict(c["verdict"]).startswith(("holds", "does not hold")):
                    out.append(f"  - seed {c['seed']}: {c['claim']}: **{verdict(c['verdict'])}**")
        line = scale.summary_line(select(self.rows, "scale"))
        if line:
            out.append(line)
        if getattr(self, "h2_findings", None):
            out.append("- **HTTP/2 (h2load), most requests/s among spindle's models**: "
                       + "; ".join(self.h2_findings) + " (the HTTP/2 section says why, and gives the CPU target).")
        ok = [r for r in self.rows if "other_cores" in r]
        inv = sum(1 for r in self.rows if r.get("invalid"))
        cb = sum(1 for r in self.rows if r.get("client_bound"))
        if ok:
            other = statistics.median(r["other_cores"] for r in ok)
            worst = max(r.get("other_cores_max", r["other_cores"]) for r in ok)
            steal = statistics.median(r.get("steal_cores", 0) for r in ok)
            out.append(f"- **How far to trust the numbers**: {inv} invalid cell(s), {cb} client-bound; other load "
                       f"on the machine {other:+.2f} cores (median cell), {worst:+.2f} at worst; steal "
                       f"{steal:.3f} cores (median).")
            retaken = getattr(self.lab, "retaken", None)   # None: a report rendered again from results
            if retaken is None:   # the run's notes name each repeat taken again, and why
                retaken = [{"retaken_because": m.group(1)} for notes in self.lab.notes.values() for n in notes
                           if (m := RETAKE_NOTE_RE.search(n))] or None
            if retaken is not None:
                stalls = sum(1 for r in retaken if str(r.get("retaken_because", "")).startswith("did not run"))
                out.append(f"- **Disturbed repeats**: {len(retaken) - stalls} repeat(s) read more than "
                           f"+{lab_mod.RETAKE_OTHER_CORES} cores of other load, and {stalls} repeat(s) of a "
                           f"matched-load cell did not run at the matched rate (a failed request, the generator "
                           f"behind or past 90% of its core, under 95% answered); each was taken again at the end "
                           f"of its experiment (at most {lab_mod.MAX_RETAKES} times; which ones: each "
                           f"experiment's notes); the figures above are the retakes'.")
        m = self.man.get("machine") or {}
        if m:
            c = m["cpu"]
            out.append(f"- **Machine**: {m['virtualization']['kind']}, {c['model']}, {c['smt']['threads_per_core']} "
                       f"thread(s) per core, frequency policy: "
                       f"{'none exposed' if isinstance(c['frequency_policy'], str) else 'cpufreq'}; hardware "
                       f"counters: {m['perf_counters']['hardware_counters'].split(':')[0]} (the Machine section).")
        return "\n".join(out) + "\n"

    def machine_section(self):
        self.md.append("\n## Machine\n")
        self.md.append(machine_markdown(self.man.get("machine") or {}))
        tools = self.man.get("tools", {})
        if tools:
            self.md.append("\nTools:\n")
            self.md.append(table(["tool", "version"], [[k, str(v).replace("|", "/")[:160]] for k, v in tools.items()]))

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
        self.preregister()
        for f in (self.seed000, self.seed001, self.seed002, self.seed003, self.seed004, self.openloop,
                  self.overload, self.peers, self.h2, self.slow, self.tls, self.scale, self.nodelay, self.beyond):
            f()
        self.scaleout()
        body_sections = self.md
        self.md = []
        self.judge_all()
        self.headline = self.headline_rows()
        self.claims_section()
        self.replication_section()
        self.why_section()
        self.method_section()
        self.changes_section()
        claims_md = self.md
        self.md = []
        self.load_section()
        self.kernel_section()
        self.littles_law_section()
        self.failures()
        self.machine_section()
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
               f"(its 95% interval over the repeats). {man['pinning']['note']}\n"]
        if man.get("rendered_by"):
            top.append(f"Measured at {man['spindle_revision']}; this report was rendered again from the run's "
                       f"results.json by the lab at {man['rendered_by']} (its rules for verdicts; the "
                       f"measurements are the run's own).\n")
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
        top.extend(line + "\n" for line in self.calibration_lines())
        if self.reference is not None and self.replication:
            s = stats.replication_summary(self.replication)
            top.append(f"Replication against the published run: {s['held']} of its {s['published_settled']} settled "
                       f"verdicts held, {s['reversed']} reversed; {s['reached_held']} of the {s['reached']} it "
                       f"reached, settled or not (see “Replication”).\n")
        top.append(self.summary_section())
        top.append("\n## Headline: epoll (spindle's default, chosen in advance) against nginx\n")
        top.append("Other models are in their own tables below. Figures: median (95% interval) over the repeats. "
                   "Ratio = epoll ÷ nginx with its 95% interval; a verdict only where it survives Holm's "
                   "correction over the report's comparisons (see “How verdicts are reached”).\n")
        top.append(table(["experiment", "metric", "epoll median (95% CI)", "nginx median (95% CI)",
                          "ratio [95% CI]", "verdict", "published run", "settled"], self.headline))
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
                     f"cost can be read side by side; memory under thousands of held connections is the scale "
                     f"experiment's.\n")
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


def cpu_rate(cell: str) -> str:
    return "mbps" if cell == PEER_BYTES_CELL else "rps"


def _inverse(j) -> str:
    lo, hi = j.ci95
    return f"{1 / j.ratio:.2f} [{1 / hi:.2f}–{1 / lo:.2f}]"


def slug(text: str) -> str:
    """A verdict id's part: lower case, runs of anything but letters and
    digits as one '-'."""
    out, dash = [], False
    for ch in text.lower():
        if ch.isalnum():
            out.append(ch)
            dash = False
        elif not dash:
            out.append("-")
            dash = True
    return "".join(out).strip("-")


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
    lo_v, hi_v = r.get(key + "_ci95") or (r[key + "_min"], r[key + "_max"])
    med, lo, hi = (num(v * scale, digits) for v in (r[key], lo_v, hi_v))
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


# -- HTTP/2 (experiments.h2) ----------------------------------------------------------

H2_PEERS = ("h2o", "nginx")
H2_BODY_ORDER = ["13 B", "100 KiB"]
H2_SHAPE_ORDER = ["1x100", "10x10", "100x1"]
H2_PROTO_TITLES = {"h2": "h2", "h1": "h1 (pipelined)"}
H2_TARGET = 0.8       # spindle's server CPU per request against h2o's, 10 x 10 on 13 B
# What spindle promises in its place (the target is out of reach on nghttp2: docs/http.md), at the
# matched rate, for its event loops: the interval's top at most this. pool, which hands a connection's
# requests to a thread, is not promised.
H2_PROMISE = 2.5
H2_PROMISED_MODELS = ("epoll", "uring")


def h2_detail_row(r: dict) -> list:
    """One row of the HTTP/2 section's detail table."""
    return [r["h2_cell"], r["server"], spread(r, "rps"), spread(r, "mean_ms", 2), spread(r, "server_us_per_req", 1),
            spread(r, "server_cores", 2), num(r.get("ctx_vol_per_req"), 3), num(r.get("syscalls_per_req"), 2),
            num(r.get("header_savings_pct"), 0)] + cpu_cols(r)[1:2] + [errs(r)]


def h2_shape(r: dict) -> str:
    return f"{r.get('conns')}x{r.get('streams')}"


def h2_server_rank(name: str) -> tuple:
    """spindle's models in MODEL_ORDER, then h2o and nginx."""
    return (name in H2_PEERS, MODEL_ORDER.index(name) if name in MODEL_ORDER else 99, name)


def _ratio_text(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}×" if a and b else "—"


def h2_because(best: str | None, models: dict) -> str:
    """Why the winning model wins, in its own figures against the runner-up
    (by median requests/s): server CPU per request, voluntary context switches
    and system calls per request where they were counted."""
    if not best or len(models) < 2:
        return ""
    others = sorted((n for n in models if n != best), key=lambda n: -(models[n].get("rps") or 0))
    w, o = models[best], models[others[0]]
    parts = []
    if w.get("server_us_per_req") and o.get("server_us_per_req"):
        parts.append(f"{num(w['server_us_per_req'], 1)} µs of server CPU per request against {others[0]}'s "
                     f"{num(o['server_us_per_req'], 1)}")
    if w.get("ctx_vol_per_req") is not None and o.get("ctx_vol_per_req") is not None:
        parts.append(f"{w['ctx_vol_per_req']:.3f} voluntary context switches per request against "
                     f"{o['ctx_vol_per_req']:.3f}")
    if w.get("syscalls_per_req") is not None and o.get("syscalls_per_req") is not None:
        parts.append(f"{w['syscalls_per_req']:.2f} system calls per request against {o['syscalls_per_req']:.2f}")
    if not parts:
        return ""
    cores = (f" Both used {num(w.get('server_cores'), 2)} and {num(o.get('server_cores'), 2)} of their core, so "
             f"the rate follows the CPU each request costs." if claims.saturated(w) and claims.saturated(o) else "")
    return f"Why: {best} spent " + "; ".join(parts) + "." + cores


def h2_shape_sentence(grid: dict, servers: list[str], shapes: list[str], bodies: list[str]) -> str:
    """How much the models differ at each shape over HTTP/2: the spread of
    their median CPU per request (highest ÷ lowest), from one connection
    carrying all 100 streams to a connection per stream."""
    out = []
    models = [s for s in servers if s not in H2_PEERS]
    for body in bodies:
        parts = []
        for s in shapes:
            vals = {m: grid[(f"h2 {s} {body}", m)].get("server_us_per_req") for m in models
                    if (f"h2 {s} {body}", m) in grid and not grid[(f"h2 {s} {body}", m)].get("invalid")}
            vals = {m: v for m, v in vals.items() if v}
            if len(vals) >= 2:
                lo, hi = min(vals, key=vals.get), max(vals, key=vals.get)
                parts.append(f"{s.replace('x', '×')}: {lo} {num(vals[lo], 1)} µs to {hi} {num(vals[hi], 1)} µs "
                             f"({vals[hi] / vals[lo]:.2f}×)")
        if parts:
            out.append(f"{body}: " + "; ".join(parts))
    if not out:
        return "Spread between the models: fewer than two models measured."
    return ("Spread of server CPU per request between spindle's models over HTTP/2 (medians, least to most), by "
            "connections × streams: " + " · ".join(out) + ".")


def h2_protocol_sentence(grid: dict, servers: list[str], shapes: list[str], bodies: list[str]) -> str:
    """What HTTP/2 changes for each server: its CPU per request over HTTP/2 ÷
    over HTTP/1.1 in the same cell (ratio of medians with its 95% interval;
    descriptive, no verdict)."""
    out = []
    for body in bodies:
        for srv in servers:
            parts = []
            for s in shapes:
                a, b = grid.get((f"h2 {s} {body}", srv)), grid.get((f"h1 {s} {body}", srv))
                if not a or not b or a.get("invalid") or b.get("invalid") or a.get("skipped") or b.get("skipped"):
                    continue
                r = stats.ratio_of_medians(claims.vals(a, "server_us_per_req"), claims.vals(b, "server_us_per_req"),
                                           key=f"h2/proto/{srv}/{s}/{body}")
                if r is None:
                    if a.get("server_us_per_req") and b.get("server_us_per_req"):
                        parts.append(f"{s.replace('x', '×')} {_ratio_text(a['server_us_per_req'], b['server_us_per_req'])}")
                    continue
                lo, hi = r.ci95
                parts.append(f"{s.replace('x', '×')} {r.ratio:.2f}× [{lo:.2f}–{hi:.2f}]")
            if parts:
                out.append(f"{srv} ({body}): " + ", ".join(parts))
    if not out:
        return "What HTTP/2 changes: no server measured over both protocols."
    return ("What HTTP/2 changes, per server: server CPU per request over HTTP/2 ÷ over HTTP/1.1 (pipelined) in "
            "the same cell, ratio of medians [95% interval]: " + "; ".join(out) + ".")


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


POLICY_COLORS = {"queue": "#d62728", "shed": "#2ca02c", "reject": "#1f77b4"}   # one per policy, every panel


def overload_summary(rows: list[dict]) -> str:
    """The goodput curves in words: at the highest load each model was
    offered, each policy's goodput and its share of the model's measured
    capacity (the offered rate / its multiple), and the policy with the most
    (by median: the curves are descriptive)."""
    parts = []
    for m in [m for m in MODEL_ORDER if any(r["model"] == m for r in rows)]:
        mine = [r for r in rows if r["model"] == m and r.get("goodput_rate") is not None and not r.get("invalid")]
        if not mine:
            continue
        top = max(r["load_x"] for r in mine)
        at = {r["policy"]: r for r in mine if r["load_x"] == top}
        best = max(at.values(), key=lambda r: r["goodput_rate"])
        share = lambda r: f" ({r['goodput_rate'] * r['load_x'] / r['rate']:.0%} of capacity)" if r.get("rate") else ""
        parts.append(f"{m} at {top:g}x: " + ", ".join(f"{p} {r['goodput_rate']:,.0f}/s{share(r)}"
                                                      for p, r in at.items())
                     + f"; most goodput: {best['policy']}")
    if not parts:
        return "No overload point was measured."
    return "Goodput at the highest offered load, per model and policy: " + "; ".join(parts) + "."


REFERENCE = Path(__file__).resolve().parents[1] / "docs" / "bench" / "verdicts.json"


def load_reference(path: Path | None = REFERENCE) -> list[dict] | None:
    """The published run's verdicts, or None when there are none."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError, TypeError):
        return None
    return data if isinstance(data, list) else None


def csv_interval(rows: list[dict]) -> dict[tuple, dict]:
    """(exp, cell) -> results.csv's statistics columns for its records."""
    out = {}
    for row in rows:
        k = main_metric(row)
        ci = row.get(k + "_ci95")
        out[(row["exp"], row["cell"])] = {"ci95_metric": k, "ci95_low": ci[0] if ci else None,
                                          "ci95_high": ci[1] if ci else None, "repeats": row.get("reps_ok", 0)}
    return out


def write(lab, out: Path, man: dict, reference: list[dict] | None = None) -> None:
    rep = Report(lab, out, man, reference)
    text = rep.render()
    (out / "report.md").write_text(text)
    (out / "verdicts.json").write_text(json.dumps(rep.verdicts, indent=1) + "\n")
    recs = []
    for r in lab.records:
        r = dict(r)
        if not r.get("problems") and "failed_run" not in r:
            r.pop("raw", None)
        recs.append(r)
    agg = [{k: v for k, v in row.items() if k not in ("lat_ms",)} for row in rep.rows]
    (out / "results.json").write_text(json.dumps({"manifest": man, "notes": lab.notes, "records": recs,
                                                  "aggregated": agg, "claims": rep.claims,
                                                  "verdicts": rep.verdicts, "reference_verdicts": reference,
                                                  "replication": rep.replication,
                                                  "server_memory": getattr(lab, "server_memory", []),
                                                  "call_calibration": getattr(lab, "call_calibration", [])},
                                                 indent=1, default=str) + "\n")
    cis = csv_interval(rep.rows)
    keys: list[str] = []
    for r in lab.records:
        for k in r:
            if k not in keys and k not in ("raw", "lat_ms", "cdf", "_params"):
                keys.append(k)
    keys += ["ci95_metric", "ci95_low", "ci95_high", "repeats"]
    with open(out / "results.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys, extrasaction="ignore")
        w.writeheader()
        for r in lab.records:
            row = {k: (json.dumps(v) if isinstance(v, (list, dict)) else v) for k, v in r.items()}
            row.update(cis.get((r["exp"], r["cell"]), {}))
            w.writerow(row)
    try:         # last: a missing renderer must not cost the run its data
        from . import htmlreport
        htmlreport.write(out)
    except ImportError as e:
        print(f"index.html not written ({e}): pip install -r bench/requirements.txt, then "
              f"python -m bench --report-only {out}", flush=True)
