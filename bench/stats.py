"""The lab's statistics: medians with bootstrap 95% intervals, ratios of
medians with their own intervals and p-values, Holm's correction over every
comparison of a report, and equivalence within a stated margin. Standard
library only (a report has ~100 comparisons of 5 repeats each: pure Python
takes well under a second). Tested in tests/bench/test_stats.py.

Why these choices, for a reader checking them:

- A figure is the median of its repeats (robust to one disturbed repeat); its
  95% interval is the percentile bootstrap of the median, computed exactly
  for an odd number of repeats (the resampled median's distribution is a
  binomial tail over the sorted values) and resampled for an even number. With 5 repeats that
  interval is the sample's range, whose coverage of the true median is
  1 - 2/2^5 = 94% for any continuous distribution: the nominal level is not
  reachable with 5 values, and the report says so.
- A comparison is the ratio of two medians. Its interval is built on the log
  scale from the bootstrap standard error of each log-median, with Student's t
  on Welch's degrees of freedom (at least n - 1). A percentile bootstrap of a
  ratio of 5-value medians cannot give the small p-values a correction for
  ~100 comparisons needs (it either reads 0, which overstates the evidence, or
  the exact rank bound 2/252, which can never pass the correction); the
  t-interval scales with how far apart the medians are relative to their
  spread, which is what a second run reproduces.
- Holm-Bonferroni over every comparison of the report: it controls the chance
  of any false verdict at 5% without assuming the comparisons independent
  (they share servers and the host), and is uniformly more powerful than
  Bonferroni. Rejecting the i-th smallest p-value of m is the same as its
  interval at level 1 - 0.05 / (m - i + 1) excluding 1.
- "No difference" holds only where both one-sided tests put the ratio inside
  the margin (TOST; ±5% by default); its p-value joins the same Holm family.
"""
from __future__ import annotations

import math
import random
import zlib
from dataclasses import dataclass, field

ALPHA = 0.05
MARGIN = 0.05          # equivalence: a ratio within 0.95 .. 1.05 is "no difference"
N_BOOT = 2000


# --------------------------------------------------------------------------
# Student's t (no scipy): the regularised incomplete beta function
# --------------------------------------------------------------------------

def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny, eps = 1e-300, 3e-16
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < eps:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    lbeta = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
    front = math.exp(lbeta + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_sf(t: float, df: float) -> float:
    """P(T > t) for Student's t with df degrees of freedom."""
    if math.isinf(t):
        return 0.0 if t > 0 else 1.0
    x = df / (df + t * t)
    tail = 0.5 * _betainc(df / 2.0, 0.5, x)
    return tail if t >= 0 else 1.0 - tail


def t_ppf(q: float, df: float) -> float:
    """The q-quantile of Student's t (bisection on t_sf; q in (0, 1))."""
    if q == 0.5:
        return 0.0
    if q < 0.5:
        return -t_ppf(1.0 - q, df)
    lo, hi = 0.0, 1.0
    while t_sf(hi, df) > 1.0 - q:
        hi *= 2.0
        if hi > 1e12:
            return hi
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if t_sf(mid, df) > 1.0 - q:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-10 * max(1.0, hi):
            break
    return (lo + hi) / 2.0


# --------------------------------------------------------------------------
# Medians and their bootstrap
# --------------------------------------------------------------------------

def median(xs) -> float:
    s = sorted(xs)
    n = len(s)
    if n == 0:
        raise ValueError("median of nothing")
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2.0


def rng_for(key: str) -> random.Random:
    """A bootstrap's random stream, fixed by what it is about: re-rendering a
    report gives the same intervals, and two comparisons do not share draws."""
    return random.Random(zlib.crc32(key.encode()))


def boot_medians(xs, n_boot: int = N_BOOT, rng: random.Random | None = None) -> list[float]:
    xs = list(xs)
    rng = rng or random.Random(0)
    n = len(xs)
    return [median(rng.choices(xs, k=n)) for _ in range(n_boot)]


def median_distribution(xs) -> list[tuple[float, float]] | None:
    """The exact bootstrap distribution of the median of an odd number of
    values, as (value, probability) over the sorted values: the resampled
    median is at most the k-th smallest when at least (n+1)/2 of the n draws
    are, a binomial tail (Maritz & Jarrett 1978). No random draws, so fast
    and the same every time. None for an even count (the median then
    averages two draws: resampled instead)."""
    s = sorted(xs)
    n = len(s)
    if n % 2 == 0:
        return None
    need = (n + 1) // 2

    def cdf(k):   # P(median* <= s[k-1])
        p = k / n
        return sum(math.comb(n, j) * p ** j * (1 - p) ** (n - j) for j in range(need, n + 1))
    out, prev = [], 0.0
    for k in range(1, n + 1):
        c = cdf(k)
        out.append((s[k - 1], c - prev))
        prev = c
    return out


def quantile(sorted_xs: list[float], q: float) -> float:
    """Linear interpolation between order statistics (numpy's default)."""
    n = len(sorted_xs)
    pos = q * (n - 1)
    i = int(math.floor(pos))
    if i >= n - 1:
        return sorted_xs[-1]
    return sorted_xs[i] + (pos - i) * (sorted_xs[i + 1] - sorted_xs[i])


def median_ci(xs, level: float = 0.95, n_boot: int = N_BOOT, key: str = "") -> tuple[float, float] | None:
    """Percentile-bootstrap interval of the median; None under 2 values."""
    xs = [x for x in xs if x is not None]
    if len(xs) < 2:
        return None
    a = (1.0 - level) / 2.0
    dist = median_distribution(xs)
    if dist is not None:
        # the smallest value whose CDF reaches a, the largest whose upper tail does
        cum, lo = 0.0, dist[-1][0]
        for v, p in dist:
            cum += p
            if cum >= a - 1e-12:
                lo = v
                break
        tail, hi = 0.0, dist[0][0]
        for v, p in reversed(dist):
            tail += p
            if tail >= a - 1e-12:
                hi = v
                break
        return lo, hi
    bm = sorted(boot_medians(xs, n_boot, rng_for(key or repr(sorted(xs)))))
    return quantile(bm, a), quantile(bm, 1.0 - a)


# --------------------------------------------------------------------------
# Ratios of medians
# --------------------------------------------------------------------------

@dataclass
class Ratio:
    """median(a) / median(b), with what its intervals and tests need."""
    ratio: float
    log_ratio: float
    se: float            # standard error of the log-ratio (bootstrap)
    df: float            # Welch-Satterthwaite degrees of freedom
    n_a: int
    n_b: int

    def interval(self, level: float = 0.95) -> tuple[float, float]:
        if self.se == 0:
            return self.ratio, self.ratio
        t = t_ppf(1.0 - (1.0 - level) / 2.0, self.df)
        return math.exp(self.log_ratio - t * self.se), math.exp(self.log_ratio + t * self.se)

    @property
    def ci95(self) -> tuple[float, float]:
        return self.interval(0.95)

    def p_differs(self) -> float:
        """Two-sided p-value of 'the medians are equal' (ratio = 1)."""
        if self.se == 0:
            return 1.0 if self.log_ratio == 0 else 0.0
        return min(1.0, 2.0 * t_sf(abs(self.log_ratio) / self.se, self.df))

    def p_equivalent(self, margin: float = MARGIN) -> float:
        """TOST p-value of 'the ratio lies outside 1 ± margin'."""
        lo, hi = math.log(1.0 - margin), math.log(1.0 + margin)
        if self.se == 0:
            return 0.0 if lo < self.log_ratio < hi else 1.0
        p_lo = t_sf((self.log_ratio - lo) / self.se, self.df)
        p_hi = t_sf((hi - self.log_ratio) / self.se, self.df)
        return max(p_lo, p_hi)


def _log_se(xs, n_boot: int, rng: random.Random) -> float:
    """Bootstrap standard error of log(median): exact for an odd count,
    resampled for an even one."""
    dist = median_distribution(xs)
    if dist is not None:
        mu = sum(p * math.log(v) for v, p in dist)
        return math.sqrt(max(0.0, sum(p * (math.log(v) - mu) ** 2 for v, p in dist)))
    logs = [math.log(m) for m in boot_medians(xs, n_boot, rng)]
    mu = sum(logs) / len(logs)
    return math.sqrt(sum((v - mu) ** 2 for v in logs) / (len(logs) - 1))


def ratio_of_medians(a, b, n_boot: int = N_BOOT, key: str = "") -> Ratio | None:
    """median(a) / median(b) of positive samples; None when either has fewer
    than 2 values or a non-positive median."""
    a = [x for x in a if x is not None]
    b = [x for x in b if x is not None]
    if len(a) < 2 or len(b) < 2 or min(a + b) <= 0:
        return None
    rng = rng_for(key or repr((sorted(a), sorted(b))))
    sa, sb = _log_se(a, n_boot, rng), _log_se(b, n_boot, rng)
    va, vb = sa * sa, sb * sb
    se = math.sqrt(va + vb)
    na, nb = len(a), len(b)
    if va + vb > 0:
        df = (va + vb) ** 2 / ((va * va) / (na - 1) + (vb * vb) / (nb - 1))
    else:
        df = float(na + nb - 2)
    lr = math.log(median(a)) - math.log(median(b))
    return Ratio(math.exp(lr), lr, se, max(df, min(na, nb) - 1.0), na, nb)


# --------------------------------------------------------------------------
# Multiple comparisons
# --------------------------------------------------------------------------

def holm(pvals: dict, alpha: float = ALPHA) -> dict:
    """Holm-Bonferroni: {id: rejected?}. The i-th smallest of m p-values is
    compared with alpha / (m - i + 1); the first that fails stops the rest."""
    order = sorted(pvals, key=lambda k: pvals[k])
    m = len(order)
    out = {k: False for k in order}
    for i, k in enumerate(order):
        if pvals[k] <= alpha / (m - i):
            out[k] = True
        else:
            break
    return out


# --------------------------------------------------------------------------
# A report's family of comparisons
# --------------------------------------------------------------------------

AHEAD, BEHIND, UNSETTLED = "ahead", "behind", "unsettled"
EQUIVALENT, DIFFERENT = "equivalent", "different"
OPPOSITE = {AHEAD: BEHIND, BEHIND: AHEAD, EQUIVALENT: DIFFERENT, DIFFERENT: EQUIVALENT,
            "holds": "does not hold", "does not hold": "holds"}
SETTLED = {AHEAD, BEHIND, EQUIVALENT, DIFFERENT, "holds", "does not hold"}


@dataclass
class Judgement:
    """One comparison: a against b on one metric. kind 'difference' (which is
    better) or 'equivalence' (within the margin). verdict is set by
    Family.resolve (until then 'unsettled')."""
    id: str
    kind: str
    higher_better: bool = True
    r: Ratio | None = None
    why_not: str = ""              # why no test ran (missing, invalid, one repeat)
    verdict: str = UNSETTLED
    p: float | None = None
    p_eq: float | None = None
    margin: float = MARGIN
    rejected: dict = field(default_factory=dict)
    basis: str = ""                # what the ratio is of, when not the metric named by the id
    # The id of the first judgement registered on the same two samples and test
    # (itself when it is the first): a claim that restates a seed's comparison,
    # or a pair read both ways, is one comparison, counted once by a replication
    comparison: str = ""

    @property
    def ratio(self) -> float | None:
        return self.r.ratio if self.r else None

    @property
    def ci95(self) -> tuple[float, float] | None:
        return self.r.ci95 if self.r else None

    def width(self) -> float | None:
        """Half-width of the 95% interval, as a fraction (e.g. 0.22 = ±22%)."""
        if not self.r:
            return None
        lo, hi = self.r.ci95
        return max(hi - self.r.ratio, self.r.ratio - lo) / self.r.ratio

    def text(self) -> str:
        """'1.17 [1.08–1.27]' or why there is no ratio."""
        if not self.r:
            return self.why_not or "no ratio"
        lo, hi = self.r.ci95
        return f"{self.r.ratio:.2f} [{lo:.2f}–{hi:.2f}]"

    def as_json(self) -> dict:
        return {"id": self.id, "verdict": self.verdict, "ratio": round(self.ratio, 4) if self.r else None,
                "ci95": [round(x, 4) for x in self.ci95] if self.r else None, "kind": self.kind,
                "p": None if self.p is None else float(f"{self.p:.3g}"),
                **({"p_equivalent": float(f"{self.p_eq:.3g}")} if self.p_eq is not None else {}),
                **({"why": self.why_not} if self.why_not else {}),
                **({"basis": self.basis} if self.basis else {}),
                **({"comparison": self.comparison} if self.comparison else {})}


class Family:
    """Every comparison of one report, corrected together (Holm). Comparisons
    are registered by id (the same id returns the same judgement, so a report
    can be built twice: once to collect, once, after resolve(), to print)."""

    def __init__(self, alpha: float = ALPHA, margin: float = MARGIN):
        self.alpha, self.margin = alpha, margin
        self.items: dict[str, Judgement] = {}
        self.by_samples: dict[tuple, str] = {}   # (test, the two samples in either order) -> first id
        self.resolved = False
        self.m_holm = 0   # the tests Holm's correction ran over (those registered before resolve())

    def _get(self, jid: str, kind: str, a, b, higher_better: bool, why_not: str) -> Judgement:
        if jid in self.items:
            return self.items[jid]
        j = Judgement(jid, kind, higher_better, margin=self.margin)
        if why_not:
            j.why_not = why_not
        else:
            j.r = ratio_of_medians(a, b, key=jid)
            if j.r is None:
                j.why_not = "fewer than 2 repeats, or a value not above 0"
            else:
                same = (kind, *sorted((tuple(a), tuple(b))))
                j.comparison = self.by_samples.setdefault(same, jid)
        if j.r:
            j.p = j.r.p_differs()
            if kind == "equivalence":
                j.p_eq = j.r.p_equivalent(self.margin)
        self.items[jid] = j
        if self.resolved:
            # registered after the correction: judged alone at Bonferroni's level
            # for the family it joins (the strictest step of Holm's), leaving the
            # verdicts already read unchanged
            self._judge(j, {k: p <= self.alpha / max(1, self.m) for k, p in
                            (("diff", j.p), ("eq", j.p_eq)) if p is not None})
        return j

    def difference(self, jid: str, a, b, higher_better: bool = True, why_not: str = "") -> Judgement:
        return self._get(jid, "difference", a, b, higher_better, why_not)

    def equivalence(self, jid: str, a, b, why_not: str = "") -> Judgement:
        return self._get(jid, "equivalence", a, b, True, why_not)

    def pvalues(self) -> dict:
        ps = {}
        for j in self.items.values():
            if j.p is not None:
                ps[(j.id, "diff")] = j.p
            if j.p_eq is not None:
                ps[(j.id, "eq")] = j.p_eq
        return ps

    def resolve(self) -> None:
        rej = holm(self.pvalues(), self.alpha)
        self.m_holm = self.m
        for j in self.items.values():
            self._judge(j, {"diff": rej.get((j.id, "diff"), False), "eq": rej.get((j.id, "eq"), False)})
        self.resolved = True

    @staticmethod
    def _judge(j: Judgement, rejected: dict) -> None:
        j.rejected = {"diff": rejected.get("diff", False), "eq": rejected.get("eq", False)}
        if not j.r:
            j.verdict = UNSETTLED
        elif j.kind == "difference":
            if j.rejected["diff"]:
                up = j.r.ratio > 1
                j.verdict = AHEAD if up == j.higher_better else BEHIND
            else:
                j.verdict = UNSETTLED
        else:
            j.verdict = EQUIVALENT if j.rejected["eq"] else DIFFERENT if j.rejected["diff"] else UNSETTLED

    @property
    def m(self) -> int:
        return len(self.pvalues())

    def correction_words(self) -> str:
        """How the family was corrected, in the report's words: Holm's over
        the tests registered before resolve(), and those registered after it
        (pairs a published run judged), each alone at Bonferroni's level."""
        words = f"Holm's correction over the {self.m_holm} tests of this report's verdicts"
        late = self.m - self.m_holm
        if late > 0:
            words += (f" (and {late} more, pairs the published run judged that this run's verdicts do not "
                      f"need, each judged after it at Bonferroni's level, 5% ÷ the tests then counted)")
        return words


# --------------------------------------------------------------------------
# Replication: this run's verdicts against a published run's
# --------------------------------------------------------------------------

HELD, NOT_HELD, REVERSED, WAS_UNSETTLED, MISSING = "held", "not held", "reversed", "was unsettled", "not in this run"
# the published run reached it, the run before it did not: a verdict, not yet a settled one
REACHED_ONCE = "reached once"


def replication(published: list[dict], new: list[dict]) -> list[dict]:
    """One row per verdict of the published run: its verdict, this run's, and
    whether it held (same settled verdict), was not held (this run unsettled
    or another verdict), was reversed (settled to its opposite), or was never
    settled to begin with.

    Settled means reached by two runs: a published verdict that carries
    "settled": false (its own run reached it, the run before did not) is a
    verdict reached once; its row still says whether this run reprinted it
    (`reprinted`), and the summary counts those apart. Published verdicts
    written before the flag existed count as settled when reached."""
    now = {v["id"]: v for v in new}
    out = []
    for old in published:
        cur = now.get(old["id"])
        ov, nv = old.get("verdict"), cur.get("verdict") if cur else None
        if not is_settled(ov):
            status = WAS_UNSETTLED
        elif cur is None:
            status = MISSING
        elif nv == ov:
            status = HELD
        elif OPPOSITE.get(ov) == nv:
            status = REVERSED
        else:
            status = NOT_HELD
        once = status != WAS_UNSETTLED and old.get("settled") is False
        out.append({"id": old["id"], "kind": old.get("kind"), "comparison": comparison_of(old),
                    "published": ov, "published_ratio": old.get("ratio"),
                    "published_ci95": old.get("ci95"), "now": nv,
                    "now_ratio": cur.get("ratio") if cur else None, "now_ci95": cur.get("ci95") if cur else None,
                    "status": REACHED_ONCE if once else status, "reprinted": status})
    return out


def comparison_of(v: dict) -> str | None:
    """Which comparison a published verdict is (None for a claim or a winner,
    which restate comparisons). Verdicts written before `comparison` existed
    are matched by their ratio: a pair read both ways has the inverse ratio
    and interval, a claim on the same samples the same ones."""
    if v.get("kind") not in ("difference", "equivalence"):
        return None
    if v.get("comparison"):
        return v["comparison"]
    if v.get("ratio") and v.get("ci95") and min(v["ci95"]) > 0:
        lo, hi = v["ci95"]
        return f"{v['kind']}:{abs(math.log(v['ratio'])):.4f}:{math.log(hi / lo):.4f}"
    return v["id"]


def replication_summary(rows: list[dict]) -> dict:
    """The figure a replication is judged by (settled verdicts: reached by the
    published run and the one before it), and the same count over every
    verdict the published run reached (`reached_*`), settled or not.

    The `comparisons_*` figures count each comparison once: the verdicts list
    a seed's comparison, the claim that restates it and a headline row on the
    same cells, and a winner restates its pairs, so one noisy comparison moves
    several verdicts together. There only the tests themselves count, each
    once (winners and claims left out)."""
    settled = [r for r in rows if r["status"] not in (WAS_UNSETTLED, REACHED_ONCE)]
    reached = [r for r in rows if r["status"] != WAS_UNSETTLED]
    held = sum(1 for r in settled if r["status"] == HELD)
    reached_held = sum(1 for r in reached if r["reprinted"] == HELD)
    firsts: dict[str, dict] = {}
    for r in rows:
        if r.get("comparison"):
            firsts.setdefault(r["comparison"], r)
    comp_settled = [r for r in firsts.values() if r["status"] not in (WAS_UNSETTLED, REACHED_ONCE)]
    comp_reached = [r for r in firsts.values() if r["status"] != WAS_UNSETTLED]
    comp_held = sum(1 for r in comp_settled if r["status"] == HELD)
    comp_reached_held = sum(1 for r in comp_reached if r["reprinted"] == HELD)
    return {"published_settled": len(settled), "held": held,
            "reversed": sum(1 for r in settled if r["status"] == REVERSED),
            "not_held": sum(1 for r in settled if r["status"] == NOT_HELD),
            "missing": sum(1 for r in settled if r["status"] == MISSING),
            "held_share": held / len(settled) if settled else None,
            "reached": len(reached), "reached_held": reached_held,
            "reached_reversed": sum(1 for r in reached if r["reprinted"] == REVERSED),
            "reached_share": reached_held / len(reached) if reached else None,
            "comparisons_settled": len(comp_settled), "comparisons_held": comp_held,
            "comparisons_reversed": sum(1 for r in comp_settled if r["status"] == REVERSED),
            "comparisons_share": comp_held / len(comp_settled) if comp_settled else None,
            "comparisons_reached": len(comp_reached), "comparisons_reached_held": comp_reached_held,
            "comparisons_reached_share": comp_reached_held / len(comp_reached) if comp_reached else None}


def is_settled(verdict: str | None) -> bool:
    """A verdict that says something: not unsettled, not "not comparable" (a
    peers cell's winner, a server's name, is settled too)."""
    return verdict is not None and verdict not in (UNSETTLED, "not comparable")


def settled_by_both(verdict: str, published: str | None) -> bool:
    return is_settled(verdict) and verdict == published
