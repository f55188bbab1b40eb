"""Paired statistics of one method against another over (setting, seed) pairs, and how small a
difference a suite's pinned seeds let such a test detect.

Each pair is the same setting (partition) and seed (initialisation, participation, batch order) for
both methods, so the difference ``d = new - baseline`` removes what the two runs share. Per baseline:
the mean of ``d`` with a percentile bootstrap interval (``scipy.stats.bootstrap``, seeded), the
two-sided Wilcoxon signed-rank test (``scipy.stats.wilcoxon``; zero differences dropped, exact
distribution when no |d| are tied, the normal approximation otherwise), wins/ties/losses, and Holm's
step-down correction of the p-values across baselines (scipy has no Holm; it is four lines).

With ``k`` non-zero differences the exact test's smallest two-sided p-value is ``2 / 2**k``: below
six pairs (``2/32 = 0.0625``) no difference, however large, is significant at 0.05, and the
comparison says so instead of printing a p-value that cannot mean anything.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

ALPHA = 0.05
CONFIDENCE = 0.95
RESAMPLES = 9999
POWER = 0.8


def smallest_p(nonzero: int) -> float:
    """The smallest two-sided p-value the exact Wilcoxon test can give with ``nonzero`` pairs."""
    return min(1.0, 2.0 / 2 ** nonzero)


def too_few_pairs(nonzero: int, alpha: float = ALPHA) -> str | None:
    """Why the test cannot mean anything with this many non-zero pairs, or None when it can."""
    if smallest_p(nonzero) < alpha:
        return None
    return (f"{nonzero} non-zero pair{'s' if nonzero != 1 else ''}: the smallest p-value the test can give is "
            f"{smallest_p(nonzero):.3g} ≥ {alpha}, so no difference can be significant; add seeds or settings")


def wilcoxon(differences: Sequence[float]) -> tuple[float | None, float | None]:
    """The two-sided Wilcoxon signed-rank statistic (the smaller of the signed rank sums) and its
    p-value; (None, None) when every difference is zero."""
    d = np.asarray(differences, dtype=float)
    if not np.any(d != 0):
        return None, None
    result = stats.wilcoxon(d, zero_method="wilcox", alternative="two-sided")
    return float(result.statistic), float(result.pvalue)


def bootstrap_interval(values: Sequence[float] | np.ndarray, seed: int = 0) -> tuple[float, float] | None:
    """A percentile bootstrap interval of the mean (``CONFIDENCE``); None for fewer than 2 values."""
    v = np.asarray(values, dtype=float)
    if len(v) < 2:
        return None
    if np.ptp(v) == 0:
        return float(v[0]), float(v[0])
    result = stats.bootstrap((v,), np.mean, confidence_level=CONFIDENCE, n_resamples=RESAMPLES,
                             method="percentile", rng=np.random.default_rng(seed))
    return float(result.confidence_interval.low), float(result.confidence_interval.high)


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
class Paired:
    """One baseline against the new method over the same (setting, seed) pairs."""

    baseline: str
    pairs: tuple[tuple[str, int], ...]
    differences: tuple[float, ...]  # new - baseline, per pair
    interval: tuple[float, float] | None
    statistic: float | None
    p_value: float | None
    p_holm: float | None = None

    @property
    def mean(self) -> float:
        return math.fsum(self.differences) / len(self.differences)

    @property
    def wins(self) -> int:
        return sum(d > 0 for d in self.differences)

    @property
    def ties(self) -> int:
        return sum(d == 0 for d in self.differences)

    @property
    def losses(self) -> int:
        return sum(d < 0 for d in self.differences)

    @property
    def note(self) -> str | None:
        """Why the test means nothing here (too few non-zero pairs), or None."""
        return too_few_pairs(len(self.differences) - self.ties)

    def by_setting(self) -> dict[str, list[float]]:
        out: dict[str, list[float]] = {}
        for (setting, _), d in zip(self.pairs, self.differences):
            out.setdefault(setting, []).append(d)
        return out


def compare(baseline: str, pairs: Sequence[tuple[str, int]], new: Sequence[float], base: Sequence[float]) -> Paired:
    """The paired comparison of ``new`` with ``base`` (values in ``pairs`` order)."""
    d = tuple(float(a) - float(b) for a, b in zip(new, base, strict=True))
    statistic, p = wilcoxon(d)
    return Paired(baseline, tuple(pairs), d, bootstrap_interval(d), statistic, p)


def compare_all(pairs: Sequence[tuple[str, int]], new: Sequence[float],
                baselines: dict[str, Sequence[float]]) -> list[Paired]:
    """The new method against each baseline, with Holm's correction across the baselines' tests."""
    found = [compare(name, pairs, new, values) for name, values in baselines.items()]
    adjusted = holm([c.p_value for c in found])
    return [Paired(c.baseline, c.pairs, c.differences, c.interval, c.statistic, c.p_value, p)
            for c, p in zip(found, adjusted)]


def wilcoxon_power(shift: float, noise: float, pairs: int, draws: int = 4000, seed: int = 0) -> float:
    """The probability that the two-sided Wilcoxon test rejects at ``ALPHA`` when the ``pairs``
    differences are ``shift + noise · N(0, 1)`` (seeded Monte Carlo)."""
    if pairs < 1 or smallest_p(pairs) >= ALPHA:
        return 0.0
    d = shift + noise * np.random.default_rng(seed).standard_normal((draws, pairs))
    p = stats.wilcoxon(d, alternative="two-sided", axis=1).pvalue
    return float(np.mean(p < ALPHA))


def detectable_difference(noise: float, pairs: int, step: float = 0.0005, limit: float = 0.5) -> float | None:
    """The smallest shift (a multiple of ``step``) the paired Wilcoxon test detects with power
    ``POWER`` over ``pairs`` pairs whose differences scatter with standard deviation ``noise``; None
    when the test cannot reject at all with so few pairs, or not below ``limit``."""
    if smallest_p(pairs) >= ALPHA:
        return None
    if noise == 0:
        return step
    low, high = 0, int(round(limit / step))  # binary search on the grid: power grows with the shift
    if wilcoxon_power(high * step, noise, pairs) < POWER:
        return None
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if wilcoxon_power(middle * step, noise, pairs) < POWER else (low, middle)
    return high * step
