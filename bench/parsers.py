"""Parsers for the load generators' output: ab's text report and the JSON
line our wrk Lua scripts print from done(). Pure functions (tested in
tests/bench/test_parsers.py against captured outputs)."""
from __future__ import annotations

import json
import re


class ParseError(ValueError):
    pass


def _num(pat: str, text: str, cast=float, default=None):
    m = re.search(pat, text, re.M)
    if not m:
        if default is not None:
            return default
        raise ParseError(f"ab output has no match for {pat!r}")
    return cast(m.group(1))


def parse_ab(text: str) -> dict:
    """ApacheBench 2.3 output -> metrics. Raises ParseError when the run did not
    finish (ab prints no 'Requests per second' after aborting)."""
    # ab prints no rate when no request completed (done == 0): the run finished
    # and measured zero, which is a result (a server that stopped answering).
    finished_empty = ("Requests per second" not in text
                      and re.search(r"^Complete requests:\s+0$", text, re.M) is not None)
    if "Requests per second" not in text and not finished_empty:
        m = re.search(r"Total of (\d+) requests completed", text)
        done = f"{m.group(1)} requests completed" if m else "no summary"
        err = [ln for ln in text.splitlines() if "apr_" in ln or "rror" in ln]
        raise ParseError(f"ab aborted ({done}): {'; '.join(err)[:300] or text[-300:]}")
    r = {
        "complete": _num(r"^Complete requests:\s+(\d+)", text, int),
        "failed": _num(r"^Failed requests:\s+(\d+)", text, int),
        "non2xx": _num(r"^Non-2xx responses:\s+(\d+)", text, int, 0),
        "keepalive_requests": _num(r"^Keep-Alive requests:\s+(\d+)", text, int, 0),
        "doc_length": _num(r"^Document Length:\s+(\d+) bytes", text, int),
        "time_taken_s": _num(r"^Time taken for tests:\s+([\d.]+) seconds", text),
        "total_bytes": _num(r"^Total transferred:\s+(\d+) bytes", text, int),
        "body_bytes": _num(r"^(?:HTML|Body) transferred:\s+(\d+) bytes", text, int),
        "rps": 0.0 if finished_empty else _num(r"^Requests per second:\s+([\d.]+)", text),
        # ab's "Time per request" is concurrency x time taken / requests, computed
        # from the rate, not a latency it measured: kept under its own name, and
        # mean_ms below is the measured per-request "Total" mean.
        "ab_time_per_req_ms": (None if finished_empty else
                               _num(r"^Time per request:\s+([\d.]+) \[ms\] \(mean\)$", text)),
        "ab_time_per_req_across_ms": (None if finished_empty else
                                      _num(r"^Time per request:\s+([\d.]+) \[ms\] \(mean, across", text)),
        "concurrency": _num(r"^Concurrency Level:\s+(\d+)", text, int),
    }
    # Failed requests break down as (Connect: a, Receive: b, Length: c, Exceptions: d)
    m = re.search(r"\(Connect: (\d+), Receive: (\d+), Length: (\d+), Exceptions: (\d+)\)", text)
    r["failed_detail"] = ({"connect": int(m.group(1)), "receive": int(m.group(2)),
                           "length": int(m.group(3)), "exceptions": int(m.group(4))} if m else {})
    m = re.search(r"^Total:\s+(\d+)\s+(\d+)\s+([\d.]+)\s+(\d+)\s+(\d+)", text, re.M)
    if m:
        r.update(total_min_ms=int(m.group(1)), total_mean_ms=int(m.group(2)),
                 total_sd_ms=float(m.group(3)), total_median_ms=int(m.group(4)),
                 total_max_ms=int(m.group(5)))
        r["mean_ms"] = float(r["total_mean_ms"])   # measured, in ab's whole milliseconds
    for p in (50, 66, 75, 80, 90, 95, 98, 99):
        v = re.search(rf"^\s+{p}%\s+(\d+)", text, re.M)
        if v:
            r[f"p{p}_ms"] = int(v.group(1))
    m = re.search(r"^SSL/TLS Protocol:\s+(\S+)", text, re.M)     # over https: protocol,cipher,bits
    if m:
        r["tls"] = m.group(1)
    r["errors"] = r["failed"] + r["non2xx"]
    if finished_empty:          # no latency was measured: leave it out rather than invent one
        del r["ab_time_per_req_ms"], r["ab_time_per_req_across_ms"]
        r.pop("mean_ms", None)
    return r


def ab_answered(r: dict, body_size: int) -> dict:
    """ab counts a connection closed or reset before any response as a
    "complete" request (with no failure when it was closed cleanly), and its
    "Requests per second" counts those too. For a document of known size the
    requests really answered are the bodies received: {answered, unanswered,
    rps} with rps = answered 2xx responses per second."""
    if body_size <= 0:
        raise ValueError("ab_answered needs the document's size")
    answered = max(0, min(r["complete"], r["body_bytes"] // body_size) - r["non2xx"])
    # ab's own rate scaled by the answered share (its printed time has 3 decimals)
    rps = r["rps"] * answered / r["complete"] if r["complete"] else 0.0
    return {"answered": answered, "unanswered": r["complete"] - answered, "rps": rps}


def parse_wrk(text: str) -> dict:
    """The JSON object our Lua done() prints on a line starting 'SPINDLE_BENCH ',
    plus wrk's own 'Non-2xx or 3xx' and 'Socket errors' lines as a cross-check."""
    line = next((ln for ln in text.splitlines() if ln.startswith("SPINDLE_BENCH ")), None)
    if line is None:
        raise ParseError(f"wrk printed no SPINDLE_BENCH summary: {text[-300:]!r}")
    try:
        d = json.loads(line[len("SPINDLE_BENCH "):])
    except json.JSONDecodeError as e:
        raise ParseError(f"bad wrk summary JSON: {e}") from None
    dur_s = d["duration_us"] / 1e6
    if dur_s <= 0:
        raise ParseError("wrk summary with zero duration")
    r = {
        "requests": d["requests"],
        "bytes": d["bytes"],
        "duration_s": dur_s,
        "rps": d["requests"] / dur_s,
        "mbps": d["bytes"] / dur_s / 1e6,
        "err_connect": d["errors"]["connect"],
        "err_read": d["errors"]["read"],
        "err_write": d["errors"]["write"],
        "err_status": d["errors"]["status"],
        "err_timeout": d["errors"]["timeout"],
        "mean_ms": d["latency"]["mean"] / 1000.0,
        "stdev_ms": d["latency"]["stdev"] / 1000.0,
        "max_ms": d["latency"]["max"] / 1000.0,
        "p50_ms": d["latency"]["p50"] / 1000.0,
        "p90_ms": d["latency"]["p90"] / 1000.0,
        "p99_ms": d["latency"]["p99"] / 1000.0,
        "status_counts": d.get("status", {}),
    }
    m = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", text)
    r["non2xx"] = int(m.group(1)) if m else 0
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text)
    if m:
        wrk_own = tuple(int(x) for x in m.groups())
        if wrk_own != (r["err_connect"], r["err_read"], r["err_write"], r["err_timeout"]):
            raise ParseError(f"wrk socket errors {wrk_own} disagree with the Lua summary")
    r["errors"] = (r["err_connect"] + r["err_read"] + r["err_write"] + r["err_timeout"]
                   + max(r["err_status"], r["non2xx"]))
    return r


def parse_s_time(text: str) -> dict:
    """`openssl s_time -reuse -www PATH` -> connections made, how many of them
    resumed a session (s_time prints 'r' per resumed connection, another mark
    per full handshake, after 'starting') and bytes read per connection."""
    m = re.search(r"^(\d+) connections in [\d.]+s;", text, re.M)
    if not m:
        raise ParseError(f"s_time printed no summary: {text[-300:]!r}")
    after = text.split("starting", 1)[-1]
    marks = after[:after.find(m.group(0))]
    return {"connections": int(m.group(1)), "resumed": marks.count("r"),
            "bytes_per_conn": _num(r"(\d+) bytes read per connection", text, int, 0)}


def parse_vegeta(report_json: str, hdrplot: str, target_rate: float) -> dict:
    """vegeta's `report -type json` plus its `-type hdrplot` distribution (the
    JSON stops at p99; the plot gives p99.9 and the whole CDF)."""
    try:
        d = json.loads(report_json)
    except json.JSONDecodeError as e:
        raise ParseError(f"bad vegeta JSON report: {e}") from None
    if not d.get("requests"):
        raise ParseError("vegeta report with no requests")
    cdf = parse_hdrplot(hdrplot)
    codes = {int(k): v for k, v in d.get("status_codes", {}).items()}
    ok = sum(v for k, v in codes.items() if 200 <= k < 300)
    lat = d["latencies"]
    r = {
        "target_rate": target_rate,
        "requests": d["requests"],
        "sent_rate": d["rate"],              # requests issued per second (open loop: = target)
        "rps": d["throughput"],              # successful responses per second
        "duration_s": (d["duration"] + d["wait"]) / 1e9,
        "ok": ok,
        "errors": d["requests"] - ok,
        "error_samples": d.get("errors", [])[:5],
        "status_counts": codes,
        "mean_ms": lat["mean"] / 1e6,
        "p50_ms": lat["50th"] / 1e6,
        "p90_ms": lat["90th"] / 1e6,
        "p99_ms": lat["99th"] / 1e6,
        "max_ms": lat["max"] / 1e6,
        "p999_ms": percentile_from_cdf(cdf, 0.999),
        "cdf": cdf,
    }
    return r


def parse_hdrplot(text: str) -> list[tuple[float, float]]:
    """'Value(ms) Percentile TotalCount 1/(1-Percentile)' rows -> [(ms, fraction)]."""
    out = []
    for ln in text.splitlines():
        parts = ln.split()
        if len(parts) < 2:
            continue
        try:
            out.append((float(parts[0]), float(parts[1])))
        except ValueError:
            continue          # the header
    if not out:
        raise ParseError("vegeta hdrplot has no rows")
    return out


def percentile_from_cdf(cdf: list[tuple[float, float]], q: float) -> float:
    """The smallest latency whose cumulative fraction reaches q."""
    for ms, frac in cdf:
        if frac >= q:
            return ms
    return cdf[-1][0]


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of an ascending list (q in [0, 1])."""
    if not sorted_values:
        raise ValueError("percentile of nothing")
    k = max(0, min(len(sorted_values) - 1, int(-(-q * len(sorted_values) // 1)) - 1))
    return sorted_values[k]


def parse_totals(text: str) -> dict:
    """The workload endpoint's '/work?totals' answer ->
    {'total', 'buckets', 'delay_units', 'hold_units'}."""
    words = text.split()
    keys = words[0::2]
    if keys != ["total", "buckets", "delay_units", "hold_units"]:
        raise ParseError(f"unexpected /work?totals answer: {text[:120]!r}")
    try:
        return dict(zip(keys, (int(v) for v in words[1::2])))
    except ValueError:
        raise ParseError(f"non-numeric /work?totals answer: {text[:120]!r}") from None


_H2LOAD_UNIT_MS = {"us": 1e-3, "ms": 1.0, "s": 1e3}


def _h2load_ms(text: str) -> float:
    """One of h2load's durations ('123.45us', '1.23ms', '1.00s') in ms."""
    m = re.fullmatch(r"([\d.]+)(us|ms|s)", text)
    if not m:
        raise ParseError(f"h2load duration {text!r}")
    return float(m.group(1)) * _H2LOAD_UNIT_MS[m.group(2)]


def parse_h2load(text: str) -> dict:
    """h2load (nghttp2 1.52) output -> metrics: answers by status, bytes, the
    protocol it spoke, the request time's mean and spread (h2load prints no
    percentiles). rps = 2xx answers / the measured duration. Raises ParseError
    when the run did not finish (no 'finished in' line)."""
    fin = re.search(r"^finished in ([\d.]+(?:us|ms|s)), ([\d.]+) req/s", text, re.M)
    req = re.search(r"^requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, (\d+) failed, "
                    r"(\d+) errored, (\d+) timeout", text, re.M)
    codes = re.search(r"^status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx", text, re.M)
    traffic = re.search(r"^traffic: \S+ \((\d+)\) total, \S+ \((\d+)\) headers \(space savings ([-\d.]+)%\), "
                        r"\S+ \((\d+)\) data", text, re.M)
    if not (fin and req and codes and traffic):
        raise ParseError(f"h2load did not finish: {text.strip()[-300:]}")
    seconds = _h2load_ms(fin.group(1)) / 1000
    ok = int(codes.group(1))
    r = {"duration_s": seconds, "h2load_rps": float(fin.group(2)),
         "requests": int(req.group(3)), "started": int(req.group(2)), "succeeded": int(req.group(4)),
         "failed": int(req.group(5)), "errored": int(req.group(6)), "timeout": int(req.group(7)),
         "ok": ok, "non2xx": int(codes.group(2)) + int(codes.group(3)) + int(codes.group(4)),
         "bytes": int(traffic.group(1)), "header_bytes": int(traffic.group(2)),
         "header_savings_pct": float(traffic.group(3)), "data_bytes": int(traffic.group(4)),
         "rps": ok / seconds if seconds > 0 else 0.0}
    r["mbps"] = r["data_bytes"] / seconds / 1e6 if seconds > 0 else 0.0
    proto = re.search(r"^Application protocol: (\S+)", text, re.M)
    r["protocol"] = proto.group(1) if proto else None
    t = re.search(r"^time for request:\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)", text, re.M)
    if t:
        r.update(min_ms=_h2load_ms(t.group(1)), max_ms=_h2load_ms(t.group(2)), mean_ms=_h2load_ms(t.group(3)),
                 stdev_ms=_h2load_ms(t.group(4)))
    return r
