"""Turns the lab's records into results.json, results.csv, PNG plots and
report.md: a headline table (spindle's best model vs nginx per experiment),
then one section per seed, then every failure."""
from __future__ import annotations

import csv
import json
import statistics
from collections import OrderedDict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

MODEL_ORDER = ["iterative", "fork", "thread", "pool", "prefork", "epoll", "uring", "nginx"]
COLORS = {"iterative": "#8c564b", "fork": "#d62728", "thread": "#ff7f0e", "pool": "#2ca02c",
          "prefork": "#17becf", "epoll": "#1f77b4", "uring": "#9467bd", "nginx": "#000000"}
SKIP = {"exp", "cell", "server", "kind", "model", "cpus", "workers", "rep", "cmd", "tool", "raw",
        "problems", "failed_run", "failed_detail", "status_counts", "error_samples", "subs"}


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
        ok = [r for r in rs if "failed_run" not in r]
        first = rs[0]
        params = set(first.get("_params", []))
        row = {k: first[k] for k in ("exp", "cell", "server", "kind", "model", "cpus", "workers", "tool")
               if k in first}
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
        row["problems"] = sorted({p for r in rs for p in r.get("problems", [])})
        row["failed_runs"] = [r["failed_run"] for r in rs if "failed_run" in r]
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


def spread(r, key, digits=0):
    """'median (min–max)' or a dash, and 'FAILED' when no repeat produced it."""
    if r is None:
        return "—"
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


# --------------------------------------------------------------------------
# Plots
# --------------------------------------------------------------------------

def _style(ax, title, ylabel):
    ax.set_title(title, fontsize=10)
    ax.set_ylabel(ylabel)
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)


def bars(ax, rows, key, title, ylabel, label=lambda r: r["server"]):
    """Median bars with min–max whiskers; failed cells drawn as an empty 'X'."""
    xs = list(range(len(rows)))
    vals = [r.get(key, 0) or 0 for r in rows]
    lo = [max(0, (r.get(key, 0) or 0) - r.get(key + "_min", r.get(key, 0) or 0)) for r in rows]
    hi = [max(0, r.get(key + "_max", r.get(key, 0) or 0) - (r.get(key, 0) or 0)) for r in rows]
    colors = [COLORS.get(r["server"], "#777777") for r in rows]
    ax.bar(xs, vals, color=colors, yerr=[lo, hi], capsize=3, ecolor="#444444")
    ax.set_xticks(xs)
    ax.set_xticklabels([label(r) for r in rows], rotation=30, ha="right", fontsize=8)
    top = max(vals + [0])
    for x, r, v in zip(xs, rows, vals):
        if key not in r:
            ax.text(x, 0, "X", ha="center", va="bottom", color="red")
        elif r.get("errors_total") or r.get("failed_runs"):
            ax.text(x, v + top * 0.02, "errors", ha="center", fontsize=7, color="red", rotation=90)
    _style(ax, title, ylabel)


def save(fig, out: Path, name: str, rect=(0, 0, 1, 1)) -> str:
    fig.tight_layout(rect=rect)
    fig.savefig(out / name, dpi=110)
    plt.close(fig)
    return name


# --------------------------------------------------------------------------
# Sections
# --------------------------------------------------------------------------

class Report:
    def __init__(self, lab, out: Path, man: dict):
        self.lab, self.out, self.man = lab, out, man
        self.rows = aggregate(lab.records)
        self.quick = man["mode"] == "quick"
        self.md: list[str] = []
        self.headline: list[list] = []
        self.plots: list[str] = []

    def head(self, exp, title):
        q = " (quick: reduced grid)" if self.quick else ""
        self.md.append(f"\n## {title}{q}\n")
        for n in self.lab.notes.get(exp, []):
            self.md.append(f"- {n}")
        self.md.append("")

    def img(self, name, alt):
        self.plots.append(name)
        self.md.append(f"\n![{alt}]({name})\n")

    def compare(self, exp_label, metric, best_row, nginx_row, key, higher_better=True, digits=0, unit=""):
        """One headline row: spindle's best vs nginx, ratio spindle/nginx."""
        if best_row is None or key not in best_row:
            self.headline.append([exp_label, metric, "—", "—", "—", "no data"])
            return
        who = best_row["cell"] if best_row["exp"] == "seed002" else best_row["server"]
        sb = f"{who}: {num(best_row[key], digits)}{unit}"
        if nginx_row is None or key not in nginx_row:
            self.headline.append([exp_label, metric, sb, "—", "—", "no nginx equivalent"])
            return
        s, n = best_row[key], nginx_row[key]
        ratio = s / n if n else float("inf")
        gain = ratio if higher_better else (1 / ratio if ratio else float("inf"))
        overlap = (best_row.get(key + "_min", s) <= nginx_row.get(key + "_max", n)
                   and nginx_row.get(key + "_min", n) <= best_row.get(key + "_max", s))
        if gain >= 1.05:
            verdict = "spindle ahead"
        elif gain > 0.95:
            verdict = "on par"
        else:
            verdict = "**spindle behind**"
        if overlap and verdict != "on par":
            verdict += " (ranges overlap)"
        if best_row.get("errors_total") or nginx_row.get("errors_total"):
            verdict += "; errors, see section"
        self.headline.append([exp_label, metric, sb, f"{num(n, digits)}{unit}", f"{ratio:.2f}", verdict])

    @staticmethod
    def best(rows, key, higher_better=True, clean=True):
        cand = [r for r in rows if r["server"] != "nginx" and key in r and
                (not clean or not r.get("errors_total"))]
        if not cand:
            cand = [r for r in rows if r["server"] != "nginx" and key in r]
        if not cand:
            return None
        return (max if higher_better else min)(cand, key=lambda r: r[key])

    @staticmethod
    def nginx(rows):
        return next((r for r in rows if r["server"] == "nginx"), None)

    # -- seed 000 -----------------------------------------------------------

    def seed000(self):
        exp = "seed000"
        main = by_model(select(self.rows, exp, part="main"))
        high = select(self.rows, exp, part="high")
        if not main and not high:
            return
        self.head(exp, "Seed 000 — ab -c 30 -n 1000 on the 4537-byte page, every model")
        self.md.append(table(
            ["server", "req/s median (min–max)", "mean ms/request", "p50 ms", "p90 ms", "p99 ms", "failed"],
            [[r["server"], spread(r, "rps"), spread(r, "mean_ms", 2), num(r.get("p50_ms")),
              num(r.get("p90_ms")), num(r.get("p99_ms")), errs(r)] for r in main]))
        self.md.append("\nHigher concurrency (the seed's fork server failed here with “Too many open files”):\n")
        self.md.append(table(
            ["server", "ab", "req/s", "mean ms", "p99 ms", "longest ms", "failed"],
            [[r["server"], f"-c {r['conc']} -n {r['n']}", spread(r, "rps"), spread(r, "mean_ms", 1),
              num(r.get("p99_ms")), num(r.get("total_max_ms")), errs(r)] for r in high]))
        fig, axes = plt.subplots(1, 2, figsize=(12, 4.2), gridspec_kw={"width_ratios": [3, 2]})
        bars(axes[0], main, "rps", "ab -c 30 -n 1000, 4537-byte page", "requests/s (median, min–max)")
        bars(axes[1], high, "rps", "higher concurrency (ab -n 2000)", "requests/s",
             label=lambda r: f"{r['server']} c={r['conc']}")
        self.img(save(fig, self.out, "seed000_throughput.png"), "seed 000 throughput")
        self.compare("Seed 000", "req/s, ab -c 30 -n 1000", self.best(main, "rps"), self.nginx(main), "rps")
        hk = [r for r in high if r["conc"] == 1000]
        self.compare("Seed 000", "req/s, ab -c 1000 -n 2000", self.best(hk, "rps"), self.nginx(hk), "rps")

    # -- seed 001 -----------------------------------------------------------

    def seed001(self):
        exp = "seed001"
        rows = by_model(select(self.rows, exp))
        if not rows:
            return
        self.head(exp, "Seed 001 — 500 requests, 50 in parallel: response-time distribution")
        self.md.append(table(
            ["server", "avg ms", "min ms", "max ms", "std-dev ms", "failed"],
            [[r["server"], spread(r, "avg_ms", 2), spread(r, "min_ms", 2), spread(r, "max_ms", 2),
              spread(r, "std_ms", 2), errs(r)] for r in rows]))
        self.md.append("\nEach cell: median over repeats (min–max over repeats). The seed reported seconds "
                       "(its server did real work per request); ours serve a cached 4.5 kB page.\n")
        fig, ax = plt.subplots(figsize=(8, 4))
        xs = range(len(rows))
        ax.bar(xs, [r.get("avg_ms", 0) for r in rows], color=[COLORS.get(r["server"]) for r in rows],
               yerr=[r.get("std_ms", 0) for r in rows], capsize=3, ecolor="#444", label="avg ± std-dev")
        ax.scatter(xs, [r.get("max_ms", 0) for r in rows], marker="v", color="#444", zorder=3, label="max")
        ax.scatter(xs, [r.get("min_ms", 0) for r in rows], marker="^", color="#999", zorder=3, label="min")
        ax.set_xticks(list(xs))
        ax.set_xticklabels([r["server"] for r in rows], rotation=30, ha="right", fontsize=8)
        ax.legend(fontsize=8)
        _style(ax, "500 requests, 50 in parallel, new connection each", "response time, ms (lower is better)")
        self.img(save(fig, self.out, "seed001_latency.png"), "seed 001 response times")
        self.compare("Seed 001", "avg response time, ms (lower is better)", self.best(rows, "avg_ms", False),
                     self.nginx(rows), "avg_ms", higher_better=False, digits=2)

    # -- seed 002 -----------------------------------------------------------

    def seed002(self):
        exp = "seed002"
        rows = select(self.rows, exp)
        if not rows:
            return
        self.head(exp, "Seed 002 — CPU work and shared buckets (the workload endpoint)")

        def sub(s):
            return [r for r in rows if s in r.get("subs", [])]

        def label(r):
            d = f"d{r['dmin']}-{r['dmax']}"
            lk = "global" if r["lock"] == "global" else f"{r['buckets']} buckets"
            return f"{r['server']} {r['cores']}c {d} {lk}"

        fig, axes = plt.subplots(2, 2, figsize=(12, 8))
        # (a)
        a = sub("a")
        self.md.append("\n**(a) 1 core vs 2 cores** (delay 1–3 units, Connection: close; on 2 cores the "
                       "server shares CPU 1 with wrk)\n")
        trs = []
        for m in ("pool", "epoll"):
            one = next((r for r in a if r["server"] == m and r["cores"] == 1), None)
            two = next((r for r in a if r["server"] == m and r["cores"] == 2), None)
            sp = (f"{two['rps'] / one['rps']:.2f}x" if one and two and one.get("rps") and two.get("rps") else "—")
            trs.append([m, spread(one, "rps"), spread(two, "rps"), sp, errs(one) + " / " + errs(two)])
        self.md.append(table(["model", "1 core req/s", "2 cores req/s", "speed-up", "errors (1c / 2c)"], trs))
        bars(axes[0][0], sorted(a, key=lambda r: (r["server"], r["cores"])), "rps",
             "(a) 1 vs 2 cores, delay 1–3 ms", "requests/s", label=lambda r: f"{r['server']} {r['cores']} core(s)")
        # (b)
        b = sub("b")
        self.md.append("\n**(b) thread per request (thread) vs pre-created threads (pool)**, 1 core, delay 1–3\n")
        self.md.append(table(["model", "req/s", "mean ms", "p99 ms", "errors"],
                             [[r["server"], spread(r, "rps"), spread(r, "mean_ms", 1), spread(r, "p99_ms", 1),
                               errs(r)] for r in by_model(b)]))
        # (c)
        c = sub("c")
        self.md.append("\n**(c) small (1–3) vs large (1–20) delay variance**, 1 core\n")
        self.md.append(table(["model", "delay units", "req/s", "mean ms", "p99 ms", "errors"],
                             [[r["server"], f"{r['dmin']}–{r['dmax']}", spread(r, "rps"), spread(r, "mean_ms", 1),
                               spread(r, "p99_ms", 1), errs(r)]
                              for r in sorted(c, key=lambda r: (r["server"], r["dmax"]))]))
        bars(axes[0][1], sorted(b + [r for r in c if r not in b], key=lambda r: (r["dmax"], r["server"])), "rps",
             "(b)+(c) thread vs pool, delay variance (1 core)", "requests/s",
             label=lambda r: f"{r['server']} d{r['dmin']}-{r['dmax']}")
        ax = axes[1][0]
        for m in ("thread", "pool"):
            rs = sorted([r for r in c if r["server"] == m], key=lambda r: r["dmax"])
            ax.plot([f"{r['dmin']}–{r['dmax']}" for r in rs], [r.get("p99_ms", 0) for r in rs], marker="o",
                    color=COLORS[m], label=f"{m} p99")
            ax.plot([f"{r['dmin']}–{r['dmax']}" for r in rs], [r.get("mean_ms", 0) for r in rs], marker="s",
                    linestyle="--", color=COLORS[m], label=f"{m} mean")
        ax.legend(fontsize=8)
        ax.set_xlabel("delay units per request (1 unit = 1 ms of CPU)")
        _style(ax, "(c) latency vs delay variance", "latency, ms")
        # (d)
        d = sub("d")
        self.md.append("\n**(d) lock contention: bucket count, zero delay, keep-alive, 2 cores** "
                       "(global = one lock for all buckets, the baseline)\n")
        dm = sorted({r["server"] for r in d})
        counts = sorted({r["buckets"] for r in d if r["lock"] == "bucket"})
        hdr = ["model"] + [f"{n} buckets" for n in counts] + ["global lock", "errors"]
        trs = []
        ax = axes[1][1]
        for m in dm:
            cells = [next((r for r in d if r["server"] == m and r["lock"] == "bucket" and r["buckets"] == n), None)
                     for n in counts]
            g = next((r for r in d if r["server"] == m and r["lock"] == "global"), None)
            trs.append([m] + [spread(x, "rps") for x in cells] + [spread(g, "rps"),
                                                                   ", ".join(errs(x) for x in cells + [g])])
            xs = [str(n) for n in counts]
            ax.errorbar(xs, [x.get("rps", 0) if x else 0 for x in cells],
                        yerr=[[max(0, x["rps"] - x["rps_min"]) if x and "rps" in x else 0 for x in cells],
                              [max(0, x["rps_max"] - x["rps"]) if x and "rps" in x else 0 for x in cells]],
                        marker="o", color=COLORS.get(m), label=f"{m}, lock per bucket", capsize=3)
            if g and "rps" in g:
                ax.axhline(g["rps"], color=COLORS.get(m), linestyle=":", label=f"{m}, one global lock")
        self.md.append(table(hdr, trs))
        ax.set_xlabel("buckets")
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=8)
        _style(ax, "(d) bucket count, zero delay (2 cores)", "requests/s")
        self.img(save(fig, self.out, "seed002_workload.png"), "seed 002 workload")
        b1 = self.best(a + b + c, "rps")
        self.compare("Seed 002", "req/s, CPU work 1–3 ms, Connection: close", b1, None, "rps")
        self.compare("Seed 002", "req/s, zero delay, bucket locks (2 cores)", self.best(d, "rps"), None, "rps")

    # -- seed 003 -----------------------------------------------------------

    def seed003(self):
        exp = "seed003"
        rows = select(self.rows, exp)
        if not rows:
            return
        self.head(exp, "Seed 003 — ab -c 200, tiny bodies, keep-alive or not: spindle epoll vs nginx")
        trs, plot_rows = [], []
        for body in sorted({r["body"] for r in rows}):
            for ka in (True, False):
                e = next((r for r in rows if r["body"] == body and r["keepalive"] == ka and r["server"] == "epoll"), None)
                n = next((r for r in rows if r["body"] == body and r["keepalive"] == ka and r["server"] == "nginx"), None)
                ratio = f"{e['rps'] / n['rps']:.2f}" if e and n and e.get("rps") and n.get("rps") else "—"
                trs.append([f"{body} B", "-k" if ka else "close", spread(e, "rps"), spread(n, "rps"), ratio,
                            spread(e, "mean_ms", 2), spread(n, "mean_ms", 2),
                            f"{num(e.get('p99_ms') if e else None)} / {num(n.get('p99_ms') if n else None)}",
                            f"{errs(e)} / {errs(n)}"])
                plot_rows += [x for x in (e, n) if x]
                self.compare("Seed 003", f"req/s, {body} B, {'ab -k' if ka else 'ab (close)'} -c 200", e, n, "rps")
        self.md.append(table(["body", "mode", "epoll req/s", "nginx req/s", "epoll ÷ nginx", "epoll mean ms",
                              "nginx mean ms", "p99 ms (epoll / nginx)", "failed (epoll / nginx)"], trs))
        fig, ax = plt.subplots(figsize=(9, 4))
        bars(ax, plot_rows, "rps", "ab -c 200, static 13 B / 100 B files", "requests/s",
             label=lambda r: f"{r['server']} {r['body']}B {'-k' if r['keepalive'] else 'close'}")
        self.img(save(fig, self.out, "seed003_smallbodies.png"), "seed 003")

    # -- every model, the issue table ------------------------------------------

    def models(self):
        exp = "models"
        rows = select(self.rows, exp)
        if not rows:
            return
        self.head(exp, "Every model on the two headline loads")
        ab = {r["server"]: r for r in rows if r["tool"] == "ab"}
        wrk = {r["server"]: r for r in rows if r["tool"] == "wrk"}
        trs = []
        for name in ab:
            a, w = ab.get(name), wrk.get(name)
            trs.append([name, spread(a, "rps"), num(a.get("p99_ms") if a else None),
                        spread(w, "rps"), num(w.get("p99_ms") if w else None, 2), f"{errs(a)} / {errs(w)}"])
        self.md.append(table(["server", "ab -c 30 req/s (4537 B)", "ab p99 ms", "wrk -c 200 keep-alive req/s "
                              "(13 B)", "wrk p99 ms", "failed (ab / wrk)"], trs))
        self.compare("Models", "req/s, ab -c 30 -n 1000, 4537 B", ab.get("epoll"), ab.get("nginx"), "rps")
        self.compare("Models", "req/s, wrk -c 200 keep-alive, 13 B", wrk.get("epoll"), wrk.get("nginx"), "rps")

    # -- statistics and cache cost ---------------------------------------------

    def overhead(self):
        exp = "overhead"
        rows = select(self.rows, exp)
        if not rows:
            return
        self.head(exp, "What the statistics and the file cache cost")
        trs = []
        for body in sorted({r["body"] for r in rows}):
            base = next((r for r in rows if r["body"] == body and r["variant"] == "stats on, cache on"), None)
            for r in (r for r in rows if r["body"] == body):
                ratio = f"{r['rps'] / base['rps']:.3f}" if base and base.get("rps") and r.get("rps") else "—"
                trs.append([f"{body} B", r["variant"], spread(r, "rps"), ratio, spread(r, "mean_ms", 2),
                            num(r.get("p99_ms"), 2), errs(r)])
        self.md.append(table(["body", "epoll", "req/s", "÷ (stats on, cache on)", "mean ms", "p99 ms",
                              "errors"], trs))

    # -- seed 004 -----------------------------------------------------------

    def seed004(self):
        exp = "seed004"
        rows = select(self.rows, exp)
        if not rows:
            return
        self.head(exp, "Seed 004 — throughput and latency vs concurrency, with and without keep-alive")
        concs = sorted({r["conc"] for r in rows})
        servers = [m for m in MODEL_ORDER if any(r["server"] == m for r in rows)]
        fig, axes = plt.subplots(2, 2, figsize=(13, 8.5))
        for col, ka in enumerate((True, False)):
            mode = "keep-alive (wrk)" if ka else "new connection per request (ab)"
            for what, key, digits in (("req/s", "rps", 0), ("mean latency ms", "mean_ms", 2)):
                trs = []
                for m in servers:
                    cells = [next((r for r in rows if r["server"] == m and r["conc"] == c and r["keepalive"] == ka),
                                  None) for c in concs]
                    trs.append([m] + [spread(x, key, digits) if x else "not run" for x in cells]
                               + [", ".join(errs(x) for x in cells if x)])
                self.md.append(f"\n**{mode}: {what}**\n")
                self.md.append(table(["server"] + [f"c={c}" for c in concs] + ["errors per c"], trs))
            for row, key, ylabel in ((0, "rps", "requests/s"), (1, "mean_ms", "mean latency, ms (log)")):
                ax = axes[row][col]
                for i, m in enumerate(servers):
                    pts = sorted([r for r in rows if r["server"] == m and r["keepalive"] == ka and key in r],
                                 key=lambda r: r["conc"])
                    if not pts:
                        continue
                    # dodge: spread the models a little along the log axis so whiskers stay apart
                    dodge = 1 + 0.035 * (i - (len(servers) - 1) / 2)
                    bad = [r for r in pts if r.get("errors_total") or r.get("failed_runs")]
                    if bad:
                        ax.scatter([r["conc"] * dodge for r in bad], [r[key] for r in bad], marker="x", s=70,
                                   color="red", zorder=4, label="_nolegend_")
                    ax.errorbar([r["conc"] * dodge for r in pts], [r[key] for r in pts],
                                yerr=[[r[key] - r[key + "_min"] for r in pts], [r[key + "_max"] - r[key] for r in pts]],
                                marker="o", capsize=2, color=COLORS.get(m), label=m,
                                linestyle="--" if m == "nginx" else "-", linewidth=2.2 if m == "nginx" else 1.4)
                ax.set_xscale("log")
                ax.set_xticks(concs)
                ax.set_xticklabels([str(c) for c in concs])
                ax.set_xlabel("concurrent clients")
                if key == "mean_ms":
                    ax.set_yscale("log")
                else:
                    ax.set_ylim(bottom=0)
                _style(ax, f"{mode}", ylabel)
                ax.grid(axis="x", alpha=0.2)
        axes[0][0].legend(fontsize=8, ncol=2)
        fig.text(0.5, 0.005, "median of repeats, whiskers min–max; red x = the cell had errors (see the "
                 "tables); points are dodged sideways to keep whiskers apart", ha="center", fontsize=8)
        self.img(save(fig, self.out, "seed004_concurrency.png", rect=(0, 0.02, 1, 1)), "seed 004 concurrency sweep")
        for ka in (True, False):
            for c in (100, 1000):
                cr = [r for r in rows if r["conc"] == c and r["keepalive"] == ka]
                if cr:
                    self.compare("Seed 004", f"req/s, c={c}, {'keep-alive (wrk)' if ka else 'close (ab)'}",
                                 self.best(cr, "rps"), self.nginx(cr), "rps")

    # -- beyond ---------------------------------------------------------------

    def beyond(self):
        dl = select(self.rows, "downloads")
        rss = by_model(select(self.rows, "idle_rss"))
        if not dl and not rss:
            return
        self.md.append("\n## Beyond the seeds" + (" (quick: reduced grid)" if self.quick else "") + "\n")
        if dl:
            self.md.append("\n### Large downloads\n")
            for n in self.lab.notes.get("downloads", []):
                self.md.append(f"- {n}")
            self.md.append("")
            self.md.append(table(["server", "file", "MB/s", "files completed", "errors"],
                                 [[r["server"], f"{r['file_mb']} MB", spread(r, "mbps", 0), spread(r, "requests"),
                                   errs(r)] for r in sorted(dl, key=lambda r: (r["file_mb"],
                                   MODEL_ORDER.index(r["server"]) if r["server"] in MODEL_ORDER else 99))]))
            for mb in sorted({r["file_mb"] for r in dl}):
                x = [r for r in dl if r["file_mb"] == mb]
                self.compare("Beyond", f"MB/s, {mb} MB file, wrk -c 4", self.best(x, "mbps"), self.nginx(x), "mbps")
        if rss:
            self.md.append("\n### Memory with 10,000 idle keep-alive connections\n")
            for n in self.lab.notes.get("idle_rss", []):
                self.md.append(f"- {n}")
            self.md.append("")
            self.md.append(table(["server", "connections held", "RSS MB (sum)", "PSS MB (sum)", "PSS idle MB",
                                  "kB per connection (PSS)", "processes", "threads", "errors"],
                                 [[r["server"], num(r.get("open")), spread(r, "rss_mb", 1), spread(r, "pss_mb", 1),
                                   spread(r, "base_pss_mb", 1), spread(r, "kb_per_conn", 2), num(r.get("processes")),
                                   num(r.get("threads")), errs(r)] for r in rss]))
            self.compare("Beyond", "PSS MB with 10k idle keep-alive (lower is better)",
                         self.best(rss, "pss_mb", False), self.nginx(rss), "pss_mb", higher_better=False, digits=1)
        fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
        if dl:
            bars(axes[0], sorted(dl, key=lambda r: (r["file_mb"], MODEL_ORDER.index(r["server"]))), "mbps",
                 "large files, wrk -c 4", "MB/s", label=lambda r: f"{r['server']} {r['file_mb']} MB")
        if rss:
            bars(axes[1], rss, "pss_mb", "10,000 idle keep-alive connections", "PSS, MB (lower is better)")
            for i, r in enumerate(rss):
                axes[1].text(i, r.get("pss_mb", 0), f"{r.get('kb_per_conn', 0):.1f} kB/conn", ha="center",
                             va="bottom", fontsize=7)
        self.img(save(fig, self.out, "beyond_downloads_memory.png"), "downloads and memory")

    # -- whole ----------------------------------------------------------------

    def failures(self):
        bad = [r for r in self.rows if r["problems"] or r["failed_runs"]]
        self.md.append("\n## Failures and errors (every one)\n")
        if not bad:
            self.md.append("None: every response in every cell had status 2xx and the expected size "
                           "(ab: no failed or non-2xx requests; wrk: no socket errors, no non-2xx, bytes per "
                           "response equal to curl's pre-check).\n")
            return
        self.md.append(table(["experiment", "cell", "repeats", "problems"],
                             [[r["exp"], r["cell"], r["reps"],
                               "; ".join(r["problems"] + r["failed_runs"]).replace("|", "/")[:400]] for r in bad]))

    def render(self) -> str:
        self.seed000()
        self.seed001()
        self.seed002()
        self.seed003()
        self.seed004()
        self.beyond()
        self.models()
        self.overhead()
        self.failures()
        man = self.man
        top = [f"# spindle lab report — {man['mode']} mode, {man['started']}\n",
               f"{man['cpu_model']}, {man['cpus_online']} CPUs, Linux {man['kernel']}; spindle "
               f"{man['tools']['spindle'].replace('spindle ', '')} at {man['spindle_revision']}; "
               f"{man['tools']['nginx'].replace('nginx version: ', '')}; {man['tools']['wrk'].split(' Copyright')[0]}; "
               f"{man['tools']['ab']}. Run took {man['elapsed_s'] / 60:.1f} min, {man['repeats']} repeats per cell "
               f"(median, with min–max over repeats). {man['pinning']['note']}\n"]
        la0, lamax = man.get("loadavg_at_start"), man.get("loadavg_max_during")
        if la0 is not None and lamax is not None:
            busy = la0 > 0.7 or lamax > 3.0
            top.append(f"Machine load (1-min load average): {la0:.2f} before the run, at most {lamax:.2f} "
                       f"before a cell (the lab itself accounts for up to ~2). "
                       + ("**Other work was competing for the CPUs during this run: expect noise; the "
                          "`loadavg1` column of results.csv shows when.**\n" if busy else
                          "Nothing else competed noticeably.\n"))
        if man.get("interrupted"):
            top.append("**This run was interrupted: sections are incomplete.**\n")
        top.append("\n## Headline: spindle's best model vs nginx\n")
        top.append("Ratio = spindle ÷ nginx (above 1 = spindle higher; for lower-is-better rows, below 1 = "
                   "spindle better). ±5% counts as on par; “ranges overlap” = the min–max spreads over "
                   "repeats overlap, so the order is not settled by this run.\n")
        top.append(table(["experiment", "metric", "spindle best (model: median)", "nginx", "ratio", "verdict"],
                         self.headline))
        behind = [h for h in self.headline if "behind" in h[5]]
        if behind:
            top.append("\n**Where spindle is behind nginx:**\n")
            for h in behind:
                top.append(f"- {h[0]}, {h[1]}: {h[2]} vs nginx {h[3]} (ratio {h[4]}).")
            top.append("")
        else:
            top.append("\nspindle is not behind nginx by more than 5% on any headline row in this run.\n")
        tail = ["\n## Setup\n", "nginx ran from this generated configuration (same docroot, same core "
                "and worker count as spindle):\n", "```nginx", man.get("nginx_conf", "").rstrip(), "```\n",
                "spindle: `server.conf` of the repository plus `--set workers=N --set access_log=off` "
                "(and the experiment's settings). Exact commands are in results.csv (`cmd`); machine, "
                "versions and sysctls in manifest.json.\n"]
        return "\n".join(top + self.md + tail) + "\n"


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
    (out / "results.json").write_text(json.dumps({"manifest": man, "notes": lab.notes, "records": recs,
                                                  "aggregated": rep.rows}, indent=1, default=str) + "\n")
    keys: list[str] = []
    for r in lab.records:
        for k in r:
            if k not in keys and k != "raw":
                keys.append(k)
    with open(out / "results.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys, extrasaction="ignore")
        w.writeheader()
        for r in lab.records:
            w.writerow({k: (json.dumps(v) if isinstance(v, (list, dict)) else v) for k, v in r.items()})
