"""Where a cell's requests spent their time inside spindle: the server's
/metrics histograms `spindle_request_queue_seconds` (readable or accepted ->
picked up by the thread or loop that serves it) and
`spindle_request_service_seconds` (picked up -> the response's last byte
handed to the kernel), read before and after the cell. The difference of the
two readings is the cell's requests alone; from it come the mean (exact: the
histograms carry their sums), p50, p99 and p99.9 (estimated within a bucket
of the 1-2-5 ladder, interpolated as spindle itself does for /status) of both.

Why read /metrics and not the access log: the histograms cost the server no
system call per request and are summed over every worker in the shared
segment, so one request before and one after the cell read them all. The
reading before the cell is itself a request, timed like the others: it lands
in the cell's counts (one sample among the cell's thousands). Other servers
(nginx, the peers, the floor server) have no such histograms: their cells
carry none of these fields."""
from __future__ import annotations

import math
import re

NAMES = {"queue": "spindle_request_queue_seconds", "service": "spindle_request_service_seconds"}
QUANTILES = (("p50", 0.5), ("p99", 0.99), ("p999", 0.999))
_LINE = re.compile(r'^(\w+?)(_bucket|_sum|_count)\{([^}]*)\}\s+(\S+)\s*$')
_LE = re.compile(r'le="([^"]*)"')


def parse_metrics(text: str) -> dict | None:
    """Prometheus text -> {"queue"|"service": {"le_s": [upper bounds, inf
    last], "cum": [cumulative counts], "sum_s", "count"}}; None when neither
    histogram is there (another server, or a spindle that does not time
    requests)."""
    out: dict[str, dict] = {}
    names = {v: k for k, v in NAMES.items()}
    for ln in text.splitlines():
        m = _LINE.match(ln)
        if not m or m.group(1) not in names:
            continue
        h = out.setdefault(names[m.group(1)], {"le_s": [], "cum": [], "sum_s": 0.0, "count": 0})
        value = float(m.group(4))
        if m.group(2) == "_bucket":
            le = _LE.search(m.group(3))
            if not le:
                continue
            h["le_s"].append(math.inf if le.group(1) == "+Inf" else float(le.group(1)))
            h["cum"].append(int(value))
        elif m.group(2) == "_sum":
            h["sum_s"] = value
        else:
            h["count"] = int(value)
    for h in out.values():
        order = sorted(range(len(h["le_s"])), key=lambda i: h["le_s"][i])
        h["le_s"] = [h["le_s"][i] for i in order]
        h["cum"] = [h["cum"][i] for i in order]
    return out or None


def delta(before: dict | None, after: dict | None) -> dict | None:
    """The cell's histograms: after - before, as counts per bucket. None when a
    reading is missing or the two do not belong together (other buckets, or
    counts that went down: the server restarted in between)."""
    if not before or not after:
        return None
    out = {}
    for key in NAMES:
        b, a = before.get(key), after.get(key)
        if not b or not a or b["le_s"] != a["le_s"]:
            return None
        cum = [y - x for x, y in zip(b["cum"], a["cum"])]
        if any(c < 0 for c in cum) or any(y < x for x, y in zip(cum, cum[1:])):
            return None
        counts = [c - p for p, c in zip([0] + cum[:-1], cum)]
        out[key] = {"le_s": list(a["le_s"]), "counts": counts, "sum_s": max(0.0, a["sum_s"] - b["sum_s"]),
                    "count": cum[-1] if cum else 0}
    return out


def quantile_s(le_s: list[float], counts: list[int], q: float) -> float | None:
    """The q-quantile, interpolated within the bucket its rank falls in (from
    the bucket below's bound to its own; the last, unbounded bucket gives its
    lower bound: "at least"), as spindle's stats_ladder_quantile_us."""
    total = sum(counts)
    if total == 0:
        return None
    rank, seen = q * total, 0.0
    for i, n in enumerate(counts):
        if n == 0 or seen + n < rank:
            seen += n
            continue
        lo = 0.0 if i == 0 else le_s[i - 1]
        hi = le_s[i]
        if math.isinf(hi):
            return lo
        return lo + (hi - lo) * ((rank - seen) / n)
    return le_s[-2] if len(le_s) > 1 else None


def fields(d: dict | None) -> dict:
    """results.csv's columns for a cell: timed_requests, queue_/service_ mean,
    p50, p99, p999 in µs, and each histogram's non-empty buckets as [[upper
    bound in µs (None: above the last), count], ...] (queue_hist, service_hist)."""
    if not d:
        return {}
    out: dict = {"timed_requests": d["queue"]["count"]}
    for key in NAMES:
        h = d[key]
        n = h["count"]
        if not n:
            continue
        out[f"{key}_mean_us"] = h["sum_s"] * 1e6 / n
        for name, q in QUANTILES:
            v = quantile_s(h["le_s"], h["counts"], q)
            if v is not None:
                out[f"{key}_{name}_us"] = v * 1e6
        out[f"{key}_hist"] = [[None if math.isinf(le) else round(le * 1e6, 3), c]
                              for le, c in zip(h["le_s"], h["counts"]) if c]
    return out
