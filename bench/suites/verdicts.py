"""The rule by which a claim is judged on seeds (docs/verdicts.md), written once: the test of one
comparison, the correction across a claim's comparisons, the count that makes a verdict, and the smallest
difference the test detects.

**One comparison** is a difference the claim says is positive, ``d = x − y − margin`` in the claim's direction
(``margin``: a stated size, e.g. "by 3 points"; 0 for "beats").

* *Paired* — x and y on the same (setting, seed) pairs (two methods in one column, or two statistics of the same
  runs): the one-sample t-test of the per-pair differences against the margin, and its 95 % t interval.
* *Unpaired* — x and y on different settings (accuracy at α = 5 against α = 1): Welch's t-test and interval.

The t-test, because with the 2–5 seeds a profile has per setting it is the only test that can reject at all: a
sign-flip or Wilcoxon signed-rank test cannot reach p < 0.05 below 6 non-zero pairs (its smallest two-sided
p-value is 2/2ⁿ), and the t interval excludes the margin exactly when the test rejects, so the printed interval and
the verdict never disagree. Its assumption — per-pair differences scatter normally — is a fair one for accuracies
averaged over hundreds of test images; with few seeds it is an assumption, and the report says which test it ran.

Exact ties — every pair's difference zero, which includes a target neither side ever reaches — are **not
measured**: no test can say anything about them. One pair (one seed) is measured but cannot be tested.

**A claim over several comparisons** corrects for them with Holm's step-down method (the family-wise error
rate at α = 0.05 over all the claim's comparisons): a comparison *holds* when its Holm-adjusted p < 0.05 and its
effect lies beyond the margin on the claim's side, *fails* when the same holds on the other side. A claim needs
some number ``k`` of its ``n`` measured comparisons to hold (:class:`Need`: all, most, 8 of 10, …):

* **supported** — at least ``k`` hold;
* **contradicted** — more than ``n − k`` fail, so ``k`` can no longer hold;
* **inconclusive** — neither: the seeds cannot tell;
* **not measured** — no comparison measured (nothing ran, or every one an exact tie).

Claims grouped per column ("first in 8 of 10 columns": in each column, beats every other row) apply the same count
twice: each group is supported / contradicted / inconclusive by its own need, then the claim by its need over the
groups; Holm runs over every comparison of the claim. The same comparison counted twice (an analogue column standing
for several paper columns) is one comparison.

:func:`detectable_difference` inverts the paired test's power: the smallest true difference it finds with
probability 0.8 at α = 0.05, given the pair noise and the number of pairs (the noncentral t distribution, exact);
:func:`seeds_to_detect` counts the seeds a comparison over some settings needs for a given difference.

Sums here are :func:`math.fsum` (correctly rounded), so every number is the same on every host.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from scipy import integrate, optimize, stats

ALPHA = 0.05
CONFIDENCE = 0.95
POWER = 0.8
TARGET_POINTS = 1.5  # accuracy points a proxy's headline comparison should detect with power POWER
MOST_SEEDS = 10_000  # beyond this many seeds :func:`seeds_to_detect` stops counting

Verdict = Literal["supported", "contradicted", "inconclusive", "not measured", "not exercised"]
Outcome = Literal["holds", "fails", "undecided"]


def mean(values: Sequence[float]) -> float:
    return math.fsum(values) / len(values)


def sample_std(values: Sequence[float]) -> float:
    """The sample standard deviation (ddof 1) of at least two values."""
    centre = mean(values)
    return math.sqrt(math.fsum((v - centre) ** 2 for v in values) / (len(values) - 1))


@dataclass(frozen=True)
class Test:
    """The test of one comparison: the mean difference (the claim's side positive), its 95 % interval, the
    two-sided p-value against ``margin`` (None, and no interval, when it cannot be tested: one pair), and what
    ran (``name``: "paired t, 3 pairs", "Welch t, 3 + 3 seeds")."""

    name: str
    effect: float
    interval: tuple[float, float] | None
    p: float | None
    margin: float = 0.0

    def outcome(self, p_adjusted: float | None) -> Outcome:
        """Whether the comparison holds or fails at α after the claim's correction (``p_adjusted``)."""
        if p_adjusted is None or p_adjusted >= ALPHA or self.effect == self.margin:
            return "undecided"
        return "holds" if self.effect > self.margin else "fails"


def _t_test(name: str, effect: float, se: float, df: float, margin: float) -> Test:
    """The t-test of ``effect`` (standard error ``se``, ``df`` degrees of freedom) against ``margin``; with no
    spread at all (every pair the same difference) the difference is certain: p = 0, or 1 on the margin."""
    if se == 0:
        return Test(name, effect, (effect, effect), 0.0 if effect != margin else 1.0, margin)
    half = float(stats.t.ppf(0.5 + CONFIDENCE / 2, df)) * se
    p = float(2 * stats.t.sf(abs(effect - margin) / se, df))
    return Test(name, effect, (effect - half, effect + half), min(1.0, p), margin)


def paired_test(differences: Sequence[float], margin: float = 0.0) -> Test:
    """The one-sample t-test of per-pair differences against ``margin`` and its t interval (module docstring)."""
    n = len(differences)
    name = f"paired t, {n} pair{'s' if n != 1 else ''}"
    if n < 2:
        return Test(name, differences[0], None, None, margin)
    return _t_test(name, mean(differences), sample_std(differences) / math.sqrt(n), n - 1, margin)


def welch_test(x: Sequence[float], y: Sequence[float], margin: float = 0.0) -> Test:
    """Welch's t-test of mean(x) − mean(y) against ``margin`` (unequal variances, Welch–Satterthwaite degrees of
    freedom) and its interval; untestable (p None) with fewer than two values on a side."""
    name = f"Welch t, {len(x)} + {len(y)} seeds"
    effect = mean(x) - mean(y)
    if len(x) < 2 or len(y) < 2:
        return Test(name, effect, None, None, margin)
    vx, vy = sample_std(x) ** 2 / len(x), sample_std(y) ** 2 / len(y)
    se = math.sqrt(vx + vy)
    df = (vx + vy) ** 2 / (vx ** 2 / (len(x) - 1) + vy ** 2 / (len(y) - 1)) if se else 1.0
    return _t_test(name, effect, se, df, margin)


def holm(p_values: Sequence[float | None]) -> list[float | None]:
    """Holm's step-down adjusted p-values (None stays None and does not count as a test)."""
    tested = sorted((p, i) for i, p in enumerate(p_values) if p is not None)
    out: list[float | None] = [None] * len(p_values)
    running = 0.0
    for rank, (p, index) in enumerate(tested):
        running = max(running, min(1.0, (len(tested) - rank) * p))
        out[index] = running
    return out


@dataclass(frozen=True)
class Need:
    """How many of ``n`` measured comparisons (or groups) a claim needs to hold: at least ``share``·n (more than
    ``share``·n with ``strict``), less ``but`` ("all but one": among the best two)."""

    share: float = 1.0
    strict: bool = False
    but: int = 0

    def of(self, n: int) -> int:
        k = math.floor(self.share * n + 1e-9) + 1 if self.strict else math.ceil(self.share * n - 1e-9)
        return max(1, min(n, k) - self.but) if n else 0

    @property
    def label(self) -> str:
        if self == ALL:
            return "all"
        if self == MOST:
            return "most"
        if self == ANY:
            return "any"
        base = "all" if self.share == 1 and not self.strict else f"{'>' if self.strict else '≥'} {self.share:.0%}"
        return base + (f" but {self.but}" if self.but else "")


ALL = Need()
MOST = Need(0.5, strict=True)
ANY = Need(0.0, strict=True)


def decide(holds: int, fails: int, measured: int, need: Need) -> Verdict:
    """The verdict from the counts of comparisons (or groups) that hold and fail among those measured."""
    if measured == 0:
        return "not measured"
    k = need.of(measured)
    if holds >= k:
        return "supported"
    if fails > measured - k:
        return "contradicted"
    return "inconclusive"


def t_power(shift: float, noise: float, pairs: int) -> float:
    """The probability that the two-sided paired t-test rejects at ``ALPHA`` over ``pairs`` pairs whose differences
    scatter normally with standard deviation ``noise`` around ``shift`` (the noncentral t distribution; integrated
    over the χ² of the sample variance where scipy's noncentral t gives no number)."""
    if pairs < 2:
        return 0.0
    df = pairs - 1
    critical = float(stats.t.ppf(1 - ALPHA / 2, df))
    centre = shift / noise * math.sqrt(pairs)
    power = float(stats.nct.sf(critical, df, centre) + stats.nct.cdf(-critical, df, centre))
    if math.isfinite(power):
        return power

    def given(v: float) -> float:  # T = (Z + centre)/√(V/df), V ~ χ²(df): the rejection probability given V = v
        s = critical * math.sqrt(v / df)
        return float((stats.norm.sf(s - centre) + stats.norm.cdf(-s - centre)) * stats.chi2.pdf(v, df))

    # where scipy's nct gives NaN (a large noncentrality, from about 5): over the χ²'s bulk, where quad finds its
    # peak even when many pairs make it narrow; outside it lies less than 2e-15 of the probability
    return float(integrate.quad(given, stats.chi2.ppf(1e-15, df), stats.chi2.isf(1e-15, df))[0])


def detectable_difference(noise: float, pairs: int) -> float | None:
    """The smallest true mean difference the paired t-test detects with power ``POWER`` at ``ALPHA`` over ``pairs``
    pairs with pair noise ``noise`` (None: one pair cannot be tested; 0 without noise)."""
    if pairs < 2 or not math.isfinite(noise):
        return None
    if noise == 0:
        return 0.0
    high = 1.0
    while t_power(high * noise, noise, pairs) < POWER:
        high *= 2
    return noise * float(optimize.brentq(lambda k: t_power(k * noise, noise, pairs) - POWER, 0.0, high, xtol=1e-10))


def seeds_to_detect(shift: float, noise: float, settings: int, most: int = MOST_SEEDS) -> int | None:
    """The fewest seeds k with which the paired t-test over ``settings`` × k pairs, their differences scattering
    with standard deviation ``noise``, detects a true mean difference ``shift`` with power ``POWER`` at ``ALPHA``
    (None: more than ``most``, or no difference to detect). Power grows with the pairs, so this bisects on k. The
    spread is taken as the differences' true standard deviation, however few pairs measured it; a caller with no
    spread measured (NaN) has no count to ask for."""
    if shift == 0:
        return None

    def detects(seeds: int) -> bool:
        return settings * seeds >= 2 and (noise == 0 or t_power(shift, noise, settings * seeds) >= POWER)

    if not detects(most):
        return None
    low, high = 0, most  # detects(high); not detects(low): no pairs
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if detects(middle) else (middle, high)
    return high


def seeds_label(seeds: int | None, ran: int) -> str:
    """A count of :func:`seeds_to_detect` (None: beyond ``MOST_SEEDS``) beside the seeds that ran, as the reports and
    `bench sensitivity` print it: ``"134 (3)"``."""
    return f"{'more than ' + str(MOST_SEEDS) if seeds is None else seeds} ({ran})"
