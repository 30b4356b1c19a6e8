"""The lab's rules for whether a cell's numbers can be reported, and how two
measurements compare. Pure functions (tests/bench/test_checks.py)."""
from __future__ import annotations

CPU_TOLERANCE = 1.05        # cpu-mode work served per wall second may exceed the cores by 5% at most
CLIENT_BOUND = 0.90         # a generator that used > 90% of its core may be what limited the cell


CPU_SLACK_S = 0.05          # /proc CPU times are sampled: allow this much on top of the 5%


def cpu_work_check(units: int, unit_s: float, wall_s: float, cores: int, kind: str,
                   server_cpu_s: float | None = None) -> tuple[float, str | None]:
    """Delay-seconds served per wall second, and why the cell is invalid (or None).
    Only `cpu` work is bounded: by the cores, and by the CPU time the server's
    processes actually used over the same window (wall spinning and sleeps may
    overlap, and are credited without using the CPU)."""
    if wall_s <= 0:
        return 0.0, "no wall time measured"
    work_s = units * unit_s
    rate = work_s / wall_s
    if kind != "cpu":
        return rate, None
    if rate > cores * CPU_TOLERANCE:
        return rate, (f"served {rate:.2f} CPU-seconds of cpu work per second on {cores} core(s) "
                      f"(more than {cores} x {CPU_TOLERANCE:.2f}): the delay cannot be CPU work")
    if server_cpu_s is not None and work_s > server_cpu_s * CPU_TOLERANCE + CPU_SLACK_S:
        return rate, (f"credited {work_s:.2f} s of cpu work while the server used {server_cpu_s:.2f} CPU-s: "
                      f"the delay cannot be CPU work")
    return rate, None


def bucket_check(bucket_delta: int, client_ok: int, in_flight_max: int) -> str | None:
    """The buckets must count every request the client saw answered, plus at most
    the requests still in flight when the client stopped (answered after it
    stopped counting). Fewer = lost updates; more = requests counted twice."""
    if bucket_delta < client_ok:
        return f"buckets grew by {bucket_delta} but the client saw {client_ok} answers: lost updates"
    if bucket_delta > client_ok + in_flight_max:
        return (f"buckets grew by {bucket_delta}, more than the {client_ok} answers seen plus "
                f"{in_flight_max} in flight")
    return None


def generator_share(gen_cpu_s: float, wall_s: float, cores: int = 1) -> float:
    """Fraction of its pinned core(s) the load generator used."""
    return gen_cpu_s / (wall_s * cores) if wall_s > 0 else 0.0


def client_bound(gen_cpu_s: float, wall_s: float, cores: int = 1) -> bool:
    return generator_share(gen_cpu_s, wall_s, cores) > CLIENT_BOUND


def verdict(a: tuple[float, float], b: tuple[float, float], higher_better: bool = True) -> str:
    """'ahead' / 'behind' for A against B only when the (min, max) ranges over
    repeats do not overlap; otherwise 'unsettled'."""
    (a_lo, a_hi), (b_lo, b_hi) = a, b
    if a_lo > b_hi:
        return "ahead" if higher_better else "behind"
    if a_hi < b_lo:
        return "behind" if higher_better else "ahead"
    return "unsettled"


# -- physics: what any cell's numbers must satisfy --------------------------

CPU_TICK_SLACK_S = 0.1      # /proc CPU times tick at 10 ms per process: slack over a whole cell


def _ncpus(spec: str | None) -> int:
    """CPUs in a taskset list such as "0", "0-1" or "0,2"."""
    n = 0
    for part in (spec or "").split(","):
        lo, _, hi = part.partition("-")
        if lo.strip().isdigit():
            n += (int(hi) - int(lo) + 1) if hi.strip().isdigit() else 1
    return n


def rps_ceiling(cell: dict) -> float | None:
    """The most req/s the server of this cell could have served had the
    generator kept up: its pinned cores over its CPU per request (the lowest
    seen over repeats, so the ceiling is generous). None when unknown."""
    us = cell.get("server_us_per_req_min")
    cores = _ncpus(cell.get("cpus"))
    if not us or us <= 0 or cores <= 0:
        return None
    return cores * 1e6 / us


def client_bound_loser(winner: dict, loser: dict, key: str) -> bool:
    """True when a comparison's losing cell was client-bound and so may not
    have lost: its generator, not its server, set the rate. For req/s the
    server's CPU per request can still settle it: if even its ceiling stays
    below the winner's worst repeat, the server really was slower."""
    if not loser.get("client_bound"):
        return False
    if key in ("rps", "ab_rps"):
        ceiling = rps_ceiling(loser)
        if ceiling is not None and winner.get(key + "_min") is not None and ceiling < winner[key + "_min"]:
            return False
    return True


def server_cpu_check(server_cpu_s: float, wall_s: float, cores: int) -> str | None:
    """A server pinned to `cores` CPUs cannot use more than that many CPU-seconds
    per wall second; more means the accounting counted something twice or
    outside the cell's window, so none of the cell's CPU figures can be trusted."""
    if wall_s <= 0:
        return None
    used = server_cpu_s / wall_s
    if server_cpu_s > cores * CPU_TOLERANCE * wall_s + CPU_TICK_SLACK_S:
        return (f"the server used {used:.2f} CPU-seconds per second pinned to {cores} core(s): "
                f"the CPU accounting is wrong")
    return None


LITTLE_HIGH = 1.2     # more requests in flight than connections (beyond measurement slack): impossible
LITTLE_LOW = 0.5      # under half the connections busy on average: the generator held them idle


def littles_law(rps: float, mean_ms: float | None, conc: int | None) -> tuple[float | None, str | None]:
    """Closed loop with `conc` connections: throughput x mean latency is the mean
    number of requests in flight (Little's law), which cannot exceed conc and
    should be close to it. Returns (in-flight / conc, why it is suspect or None)."""
    if not conc or mean_ms is None or mean_ms <= 0 or not rps or rps <= 0:
        return None, None
    ratio = rps * mean_ms / 1000.0 / conc
    if ratio > LITTLE_HIGH:
        return ratio, (f"req/s x mean latency = {ratio * conc:.1f} requests in flight, more than the {conc} "
                       f"connections: the rate or the latency is mismeasured")
    if ratio < LITTLE_LOW:
        return ratio, (f"req/s x mean latency = {ratio * conc:.1f} requests in flight on {conc} connections: "
                       f"connections sat idle (the generator, or time outside the measured latency such as "
                       f"connection set-up), so req/s understates the server at c = {conc}")
    return ratio, None


SATURATED_SHARE = 0.95      # answered below 95% of the offered rate (or requests failing): saturated


def saturation(points: list[dict]) -> tuple[str, float | None]:
    """One server's open-loop curve -> ("saturated", first rate it could not
    keep up with), ("not reached", highest rate measured), or ("unknown", None).
    A point where the generator was client-bound (> 90% of its core) says
    nothing about the server and is skipped. A generator that fell behind its
    rate with CPU to spare ran out of workers: its max_workers requests were
    all outstanding, waiting on the server, which is saturation. Each point:
    {rate, rps, errors, fell_behind, client_bound}."""
    clean = sorted((p for p in points if not p.get("client_bound")), key=lambda p: p["rate"])
    for p in clean:
        if p.get("errors") or p.get("fell_behind") or p.get("rps", 0) < SATURATED_SHARE * p["rate"]:
            return "saturated", p["rate"]
    if clean:
        return "not reached", clean[-1]["rate"]
    return "unknown", None


RATE_KEYS = ("rps", "ab_rps", "mbps")


def winner(cells: dict[str, dict], key: str, higher_better: bool = True) -> tuple[str | None, str]:
    """Which of several servers' cells is best on `key`, and why: a winner only
    when every cell is valid and repeated, and the best median's min–max range
    clears every other cell's range. A client-bound cell that came out behind
    on a rate (req/s, MB/s) may not have lost (client_bound_loser), so it
    leaves the cell unsettled; CPU per request is the server's own cost and
    settles regardless. Returns (name or None, reason)."""
    usable = {n: c for n, c in cells.items()
              if not c.get("invalid") and c.get(key) is not None and c.get(key + "_min") is not None}
    if len(usable) < 2:
        return None, "fewer than two servers measured"
    if any(c.get("reps_ok", 0) < 2 for c in usable.values()):
        return None, "unsettled (one run)"
    best = (max if higher_better else min)(usable, key=lambda n: usable[n][key])
    b = usable[best]
    for name, c in usable.items():
        if name == best:
            continue
        v = verdict((b[key + "_min"], b[key + "_max"]), (c[key + "_min"], c[key + "_max"]), higher_better)
        if v != "ahead":
            return None, f"unsettled ({best} and {name} overlap)"
        if key in RATE_KEYS and client_bound_loser(b, c, key):
            return None, f"unsettled ({name} was client-bound)"
    return best, f"{best} (its range clears every other server's)"
