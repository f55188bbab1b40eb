"""Paired comparisons of one method against others over (setting, seed) pairs, and how small a difference a suite's
seeds let the test detect, judged by the rule of bench/suites/verdicts.py (the paired t-test, its interval, Holm).

Each pair is the same setting (partition) and seed (initialisation, participation, batch order) for both methods,
so the difference ``d = new − baseline`` removes what the two runs share. Per baseline: the mean of ``d`` with its
95 % t interval and the paired t-test's p-value, wins/ties/losses, Holm's correction across the baselines, and the
smallest difference the test could have detected with power 0.8 given the spread of these ``d``. Every difference
zero is an exact tie: not measured.

**Pair noise** (:func:`pair_noise`) is the sample standard deviation over seeds of the difference between two
methods on the same setting, pooled over method pairs and settings: what the report's detectable differences and
``bench sensitivity`` are computed from.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from bench.suites.verdicts import ALPHA, Test, detectable_difference, holm, mean, paired_test, sample_std, \
    seeds_to_detect


@dataclass(frozen=True)
class Paired:
    """One baseline against the new method over the same (setting, seed) pairs: the test of ``new − baseline``
    (None: every difference zero) and its Holm-adjusted p-value across the baselines."""

    baseline: str
    pairs: tuple[tuple[str, int], ...]
    differences: tuple[float, ...]  # new − baseline, per pair
    test: Test | None
    p_holm: float | None = None

    @property
    def mean(self) -> float:
        return mean(self.differences)

    @property
    def interval(self) -> tuple[float, float] | None:
        return None if self.test is None else self.test.interval

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
    def detectable(self) -> float | None:
        """The smallest mean difference the paired t-test detects with power 0.8 over these pairs, given their
        spread (None: fewer than two pairs)."""
        if len(self.differences) < 2:
            return None
        return detectable_difference(sample_std(self.differences), len(self.differences))

    @property
    def verdict(self) -> str:
        """better, worse or inconclusive at α after Holm; not measured for an exact tie."""
        if self.test is None:
            return "not measured"
        return {"holds": "better", "fails": "worse", "undecided": "inconclusive"}[self.test.outcome(self.p_holm)]

    def by_setting(self) -> dict[str, list[float]]:
        out: dict[str, list[float]] = {}
        for (setting, _), d in zip(self.pairs, self.differences):
            out.setdefault(setting, []).append(d)
        return out


def compare(baseline: str, pairs: Sequence[tuple[str, int]], new: Sequence[float], base: Sequence[float]) -> Paired:
    """The paired comparison of ``new`` with ``base`` (values in ``pairs`` order)."""
    d = tuple(float(a) - float(b) for a, b in zip(new, base, strict=True))
    return Paired(baseline, tuple(pairs), d, None if all(x == 0 for x in d) else paired_test(d))


def compare_all(pairs: Sequence[tuple[str, int]], new: Sequence[float],
                baselines: dict[str, Sequence[float]]) -> list[Paired]:
    """The new method against each baseline, with Holm's correction across the baselines' tests."""
    found = [compare(name, pairs, new, values) for name, values in baselines.items()]
    adjusted = holm([None if c.test is None else c.test.p for c in found])
    return [Paired(c.baseline, c.pairs, c.differences, c.test, p) for c, p in zip(found, adjusted)]


def pooled_std(groups: Sequence[Sequence[float]]) -> float:
    """The pooled sample standard deviation of groups (those of one value carry no spread); NaN without any."""
    kept = [g for g in groups if len(g) > 1]
    dof = sum(len(g) - 1 for g in kept)
    if not dof:
        return math.nan
    return math.sqrt(math.fsum(sample_std(g) ** 2 * (len(g) - 1) for g in kept) / dof)


def pair_noise(cells: Mapping[str, Mapping[str, Mapping[int, float]]]) -> float:
    """The pair noise of ``{method: {setting: {seed: value}}}``: per setting and pair of methods, the differences on
    the seeds both have; their pooled sample standard deviation."""
    methods = list(cells)
    groups = []
    for i, a in enumerate(methods):
        for b in methods[i + 1:]:
            for setting in cells[a]:
                if setting in cells[b]:
                    seeds = [s for s in cells[a][setting] if s in cells[b][setting]]
                    groups.append([cells[a][setting][s] - cells[b][setting][s] for s in seeds])
    return pooled_std(groups)


Pair = tuple[str, int]  # (setting, seed)


@dataclass(frozen=True)
class Sensitivity:
    """One statistic over some methods' per-seed values: the spread across seeds against the spread across methods,
    and the smallest difference the paired test detects over their (setting, seed) pairs."""

    statistic: str
    methods: int
    pairs: int
    seed_spread: float  # pooled within-cell sample std over seeds
    method_spread: float  # per setting, the std over methods of their means; averaged over settings
    pair_noise: float  # pooled sample std over seeds of the difference of two methods, per setting
    detectable: float | None  # power POWER at ALPHA, the paired t-test, over `pairs` pairs with `pair_noise`
    separated: int  # method pairs the paired t-test separates at ALPHA (uncorrected) over the pairs
    method_pairs: int
    settings: int
    seeds: int  # seeds per setting (the fewest any setting has)

    def seeds_for(self, shift: float) -> int | None:
        """The seeds, over these settings, with which the pair noise lets the paired t-test detect a mean difference
        ``shift`` with power ``POWER`` (:func:`~bench.suites.verdicts.seeds_to_detect`; None: beyond its count; the
        pair noise must be finite: with one seed a setting there is none). The pair noise is pooled within settings,
        so the count leaves out how a difference varies between settings (the reports' headline counts it in)."""
        return seeds_to_detect(shift, self.pair_noise, self.settings)


def sensitivity(statistic: str, values: Mapping[str, Mapping[Pair, float]]) -> Sensitivity:
    """The sensitivity of ``statistic`` over ``{method: {(setting, seed): value}}``, at least two methods, each on the
    same pairs (what `bench sensitivity` prints for a pinned suite and each paper report per table)."""
    methods = list(values)
    pairs = sorted(values[methods[0]])
    if len(methods) < 2 or any(sorted(values[m]) != pairs for m in methods):
        raise ValueError(f"{statistic}: sensitivity needs two or more methods on the same (setting, seed) pairs")
    settings = list(dict.fromkeys(s for s, _ in pairs))
    cells = {m: {s: {seed: values[m][s, seed] for s_, seed in pairs if s_ == s} for s in settings} for m in methods}
    noise = pair_noise(cells)
    separated = 0
    for i, a in enumerate(methods):
        for b in methods[i + 1:]:
            d = [values[a][x] - values[b][x] for x in pairs]
            separated += any(d) and (p := paired_test(d).p) is not None and p < ALPHA
    spread = [sample_std([mean(list(cells[m][s].values())) for m in methods]) for s in settings]
    return Sensitivity(statistic, len(methods), len(pairs),
                       pooled_std([list(cells[m][s].values()) for m in methods for s in settings]),
                       mean(spread), noise, detectable_difference(noise, len(pairs)), separated,
                       len(methods) * (len(methods) - 1) // 2, len(settings),
                       min(sum(s_ == s for s_, _ in pairs) for s in settings))
