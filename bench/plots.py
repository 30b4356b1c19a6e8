"""The report's plotting rules, in one place: error bars are 95% confidence
intervals where the run has them (a metric's bootstrap interval from
bench/stats.py) and say "min–max over repeats" where it does
not; a client-bound bar is hatched and labelled (its height is the
generator's limit, not the server's); a log axis where one result would
flatten the others; the seeds' own figures only in the units they used."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COLORS = {"iterative": "#8c564b", "fork": "#d62728", "fork-nofile1024": "#d62728", "thread": "#ff7f0e",
          "thread-max40": "#ffbb78",
          "pool": "#2ca02c", "pool-5": "#2ca02c", "pool-15": "#98df8a", "prefork": "#17becf",
          "prefork-4x10": "#17becf", "epoll": "#1f77b4", "uring": "#9467bd", "nginx": "#000000",
          "nginx-seed003": "#000000", "nginx-tls": "#000000", "lighttpd": "#bcbd22", "h2o": "#e377c2"}
CB_HATCH = "///"
CB_LABEL = "client-bound (hatched): the generator's limit, not the server's"
LOG_SPREAD = 20      # a linear axis hides bars under 1/20 of the tallest: go logarithmic


def interval(r: dict, key: str) -> tuple[float, float, str] | None:
    """(low, high, what it is) of a row's metric: its bootstrap 95% CI when
    the aggregate has one (bench/stats.py's `<key>_ci95` = [low, high], or
    `<key>_ci95_low`/`_high`, or results.csv's `ci95_low`/`ci95_high` when
    `ci95_metric` is `key`), else min–max over repeats."""
    pair = r.get(f"{key}_ci95")
    if isinstance(pair, (list, tuple)) and len(pair) == 2 and None not in pair:
        return pair[0], pair[1], "95% CI"
    if r.get(f"{key}_ci95_low") is not None and r.get(f"{key}_ci95_high") is not None:
        return r[f"{key}_ci95_low"], r[f"{key}_ci95_high"], "95% CI"
    if r.get("ci95_metric") == key and r.get("ci95_low") is not None and r.get("ci95_high") is not None:
        return r["ci95_low"], r["ci95_high"], "95% CI"
    if r.get(f"{key}_min") is not None and r.get(f"{key}_max") is not None:
        return r[f"{key}_min"], r[f"{key}_max"], "min–max over repeats"
    return None


def valid(r: dict | None, key: str) -> bool:
    return bool(r) and key in r and r[key] is not None and not r.get("invalid") and not r.get("skipped")


def yerr(rows: list[dict], key: str) -> tuple[list[list[float]], str]:
    """matplotlib's yerr for these rows' medians, and the label saying what
    the bars are (a CI, or min–max when no CI was computed)."""
    lo, hi, kinds = [], [], set()
    for r in rows:
        iv = interval(r, key) if valid(r, key) else None
        if iv is None:
            lo.append(0.0)
            hi.append(0.0)
            continue
        kinds.add(iv[2])
        lo.append(max(0.0, r[key] - iv[0]))
        hi.append(max(0.0, iv[1] - r[key]))
    what = " / ".join(sorted(kinds)) or "no spread (one repeat)"
    return [lo, hi], what


def wants_log(values: list[float]) -> bool:
    vals = [v for v in values if v and v > 0]
    return len(vals) > 1 and max(vals) / min(vals) > LOG_SPREAD


def style(ax, title, ylabel, xlabel=None):
    ax.set_title(title, fontsize=10)
    ax.set_ylabel(ylabel)
    if xlabel:
        ax.set_xlabel(xlabel)
    ax.grid(alpha=0.3)
    ax.set_axisbelow(True)


def bars(ax, rows, key, title, ylabel, label=lambda r: r["server"], xlabel="server", log: bool | None = None):
    """Median bars with CI (or min–max) whiskers; an invalid, failed or
    skipped cell is a red X; a client-bound one hatched. `log`: None picks a
    log axis when one bar would flatten the others."""
    xs = list(range(len(rows)))
    vals = [r[key] if valid(r, key) else 0 for r in rows]
    err, what = yerr(rows, key)
    colors = [COLORS.get(r["server"], "#777777") for r in rows]
    drawn = ax.bar(xs, vals, color=colors, yerr=err, capsize=3, ecolor="#444444")
    # the legend says what bars and whiskers are, in no server's colour
    ax.plot([], [], color="#444444", marker="_", markersize=12, linestyle="none",
            label=f"this run: bars = medians, whiskers = {what}")
    first_cb = True
    for b, r in zip(drawn, rows):
        if r.get("client_bound"):
            b.set_hatch(CB_HATCH)
            b.set_edgecolor("#ffffff" if COLORS.get(r["server"]) == "#000000" else "#333333")
            if first_cb:             # one legend entry for every hatched bar
                b.set_label(CB_LABEL)
                first_cb = False
    ax.set_xticks(xs)
    ax.set_xticklabels([label(r) for r in rows], rotation=30, ha="right", fontsize=8)
    if log or (log is None and wants_log(vals)):
        ax.set_yscale("log")
        ylabel += " (log)"
    for x, r in zip(xs, rows):
        if not valid(r, key):
            ax.text(x, ax.get_ylim()[0], "X", ha="center", va="bottom", color="red")
    style(ax, title, ylabel, xlabel)


def errorbar_line(ax, xs, rows, key, **kw):
    """A line of medians with CI (or min–max) whiskers; client-bound points ringed."""
    err, what = yerr(rows, key)
    ax.errorbar(xs, [r[key] for r in rows], yerr=err, capsize=3, **kw)
    cb = [(x, r[key]) for x, r in zip(xs, rows) if r.get("client_bound")]
    if cb:
        ax.scatter([x for x, _ in cb], [y for _, y in cb], s=120, facecolors="none", edgecolors="red", zorder=5,
                   label="client-bound point")
    return what


def grid_figure(cells: list[str], servers: list[str], grid: dict, metrics, titles: dict[str, str]):
    """One column per cell, one row per metric: metrics are (key of a cell,
    y label of a cell) functions. Server bars with CIs, client-bound hatched,
    a log axis where one server flattens the rest."""
    fig, axes = plt.subplots(len(metrics), len(cells), figsize=(3.9 * len(cells), 3.5 * len(metrics)),
                             squeeze=False)
    for j, c in enumerate(cells):
        rows = [dict(grid[(c, s)], server=s) for s in servers if (c, s) in grid]
        for i, (key_of, ylabel_of) in enumerate(metrics):
            ax = axes[i][j]
            key = key_of(c)
            if not rows or not any(valid(r, key) for r in rows):
                ax.set_visible(False)
                continue
            bars(ax, rows, key, titles.get(c, c) if i == 0 else "", ylabel_of(c), xlabel=None)
    return fig, [ax for row in axes for ax in row if ax.get_visible()]


def close(fig) -> None:
    plt.close(fig)


def against_connections(curves: dict[tuple[str, str], list[dict]], key: str, title: str, ylabel: str,
                        order: list[str], dashed_key: str | None = None, dashed_label: str = "",
                        flagged=None, flag_label: str = ""):
    """The scale experiment: one panel per transport (plain HTTP, TLS), one
    line per server of `key` against the connections held (its points as
    measured, once each: no whiskers), a log axis where one server would
    flatten the others; with dashed_key, a dashed line of that key in the
    same colour (the fresh client's p50 under its p99); points for which
    flagged(row) is true are ringed in red (flag_label in the legend). A
    value at or below zero (a server that held less after the connections
    than before) keeps its place on a symmetric log axis, linear below 1."""
    transports = [t for t in ("plain", "TLS") if any(k[1] == t for k in curves)]
    fig, axes = plt.subplots(1, max(1, len(transports)), figsize=(6.2 * max(1, len(transports)), 4.4),
                             squeeze=False)
    axes = list(axes[0])
    rank = lambda s: order.index(s) if s in order else len(order)
    for ax, t in zip(axes, transports):
        values = []
        for srv in sorted({k[0] for k in curves if k[1] == t}, key=rank):
            pts = [r for r in curves[(srv, t)] if r.get(key) is not None]
            if not pts:
                continue
            color = COLORS.get(srv, "#777777")
            ax.plot([r["conns"] for r in pts], [r[key] for r in pts], marker="o", color=color, label=srv)
            values += [r[key] for r in pts]
            ring = [r for r in pts if flagged and flagged(r)]
            if ring:
                ax.scatter([r["conns"] for r in ring], [r[key] for r in ring], s=120, facecolors="none",
                           edgecolors="red", zorder=5, label=flag_label)
            if dashed_key:
                low = [r for r in pts if r.get(dashed_key) is not None]
                ax.plot([r["conns"] for r in low], [r[dashed_key] for r in low], linestyle="--", color=color,
                        linewidth=0.9, alpha=0.7)
                values += [r[dashed_key] for r in low]
        if dashed_key:
            ax.plot([], [], linestyle="--", color="#444444", linewidth=0.9, label=dashed_label)
        ax.plot([], [], linestyle="none", label="each point measured once (no whiskers)")
        label = ylabel
        if any(v <= 0 for v in values) and (wants_log([v for v in values if v > 0]) or max(values) > 1):
            ax.set_yscale("symlog", linthresh=1.0)
            label += " (log above 1, linear below)"
        elif wants_log(values):
            ax.set_yscale("log")
            label += " (log)"
        style(ax, f"{title}, {'plain HTTP' if t == 'plain' else 'TLS'}", label, "idle keep-alive connections held")
    return fig, axes


PAIR_HATCH = ".."     # the second protocol's bars (HTTP/1.1 beside HTTP/2)


def paired_bars(ax, servers: list[str], first: list[dict | None], second: list[dict | None], key: str,
                labels: tuple[str, str], title: str, ylabel: str, log: bool | None = None):
    """Two bars per server (the same cell in two variants, e.g. HTTP/2 and
    HTTP/1.1): medians with CI (or min–max) whiskers, the second variant
    dotted; an invalid, failed or missing cell a red X; a client-bound bar
    hatched as in bars()."""
    width = 0.4
    xs = list(range(len(servers)))
    kinds = set()
    allvals = []
    for shift, rows, label, hatch in ((-width / 2, first, labels[0], ""), (width / 2, second, labels[1], PAIR_HATCH)):
        full = [dict(r, server=s) if r else {"server": s} for r, s in zip(rows, servers)]
        vals = [r[key] if valid(r, key) else 0 for r in full]
        allvals += vals
        err, what = yerr(full, key)
        kinds.add(what)
        drawn = ax.bar([x + shift for x in xs], vals, width, color=[COLORS.get(s, "#777777") for s in servers],
                       yerr=err, capsize=2, ecolor="#444444", hatch=hatch, edgecolor="#ffffff" if hatch else None)
        # the variant's legend entry, in no server's colour (an empty bar draws nothing)
        ax.bar([0], [0], width=0, color="#999999", hatch=hatch, edgecolor="#ffffff" if hatch else None, label=label)
        for x, b, r in zip(xs, drawn, full):
            if r.get("client_bound"):
                b.set_hatch(CB_HATCH)
                b.set_edgecolor("#333333")
            if not valid(r, key):
                ax.text(x + shift, 0, "X", ha="center", va="bottom", color="red")
    for r_first, r_second in zip(first, second):
        if (r_first or {}).get("client_bound") or (r_second or {}).get("client_bound"):
            ax.bar([0], [0], width=0, color="#ffffff", hatch=CB_HATCH, edgecolor="#333333", label=CB_LABEL)
            break
    ax.plot([], [], color="#444444", marker="_", markersize=12, linestyle="none",
            label=f"this run: bars = medians, whiskers = {' / '.join(sorted(kinds))}")
    ax.set_xticks(xs)
    ax.set_xticklabels(servers, rotation=30, ha="right", fontsize=8)
    if log or (log is None and wants_log(allvals)):
        ax.set_yscale("log")
        ylabel += " (log)"
    style(ax, title, ylabel)


def paired_grid(columns: list[str], servers: list[str], pick, metrics, labels: tuple[str, str],
                titles: dict[str, str]):
    """One column per cell pair, one row per metric ((key, y label)); pick(column,
    variant index, server) gives a row or None."""
    fig, axes = plt.subplots(len(metrics), len(columns), figsize=(4.2 * len(columns), 3.6 * len(metrics)),
                             squeeze=False)
    for j, col in enumerate(columns):
        for i, (key, ylabel) in enumerate(metrics):
            first = [pick(col, 0, s) for s in servers]
            second = [pick(col, 1, s) for s in servers]
            paired_bars(axes[i][j], servers, first, second, key, labels, titles.get(col, col) if i == 0 else "",
                        ylabel)
    return fig, [ax for row in axes for ax in row]
