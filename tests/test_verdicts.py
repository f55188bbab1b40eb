"""The rule a claim is judged by on seeds (bench/suites/verdicts.py, docs/verdicts.md), reached on constructed
tables: a clear win is supported, a loss contradicted, a sign flip between seeds inconclusive, an exact tie and a
target nobody reaches not measured, an analogue column standing for three paper columns one comparison, several
comparisons Holm-corrected, a claim resting on an inert mechanism not exercised."""
from __future__ import annotations

import math

import pytest
import yaml
from scipy import stats

from bench.suites.paper import Claim, PaperDefinition, Results, claim
from bench.suites.verdicts import ALPHA, MOST, Need, Test as OneTest, detectable_difference, holm, paired_test, seeds_to_detect, \
    t_power, welch_test

DEFINITION = """
name: constructed
title: Constructed
source: tests/test_verdicts.py
proposed: new
methods: {new: New, old: Old}
tables:
  t1:
    title: Table 1
    measures: {acc: {label: Acc, statistic: final_global_acc, scale: 100, digits: 2}}
    columns: {c1: {label: C1}}
    printed: [{columns: [c1], measures: [acc], rows: {new: [0.9], old: [0.8]}}]
  t2:
    title: Table 2
    measures: {acc: {label: Acc, statistic: final_global_acc, scale: 100, digits: 2}}
    columns: {c2: {label: C2}}
    printed: [{columns: [c2], measures: [acc], rows: {new: [0.9], old: [0.8]}}]
  t3:
    title: Table 3
    measures: {acc: {label: Acc, statistic: final_global_acc, scale: 100, digits: 2}}
    columns: {c3: {label: C3}}
    printed: [{columns: [c3], measures: [acc], rows: {new: [0.9], old: [0.8]}}]
  t4:
    title: Table 4
    measures: {rounds: {label: rounds, statistic: reach0.85_global_acc, digits: 2}}
    columns: {c4: {label: C4}}
    printed: [{columns: [c4], measures: [rounds], rows: {new: [10], old: [20]}}]
analogues:
  a1: {label: "s (paper C1)", setting: s, stands_for: [c1]}
  a2: {label: "s (paper C2)", setting: s, stands_for: [c2]}
  a3: {label: "s (paper C3)", setting: s, stands_for: [c3]}
  a4: {label: "s (paper C4)", setting: s, stands_for: [c4]}
"""
SEEDS = (0, 1, 2, 3, 4)


def ours(new: list[float], old: list[float], measure: str = "acc", *,
         mechanisms: dict[tuple[str, str], dict[str, str]] | None = None) -> tuple[Results, list]:
    """Results of our runs on setting ``s`` with these per-seed values in every column of ``measure``; the rounds a
    run trained is 50 (a target never reached: inf, at least 51)."""
    d = PaperDefinition.model_validate(yaml.safe_load(DEFINITION))
    columns = d.columns_for(["s"])
    shown = [c for c in columns if measure in c.statistics]
    values, seeds, bounds = {}, {}, {}
    for method, per_seed in (("new", new), ("old", old)):
        for column in shown:
            key = (method, column.key, measure)
            seeds[key] = {("s", seed): v for seed, v in zip(SEEDS, per_seed)}
            bounds[key] = {("s", seed): 51.0 for seed, v in zip(SEEDS, per_seed) if math.isinf(v)}
            values[key] = sum(per_seed) / len(per_seed)
    return Results(d, ["new", "old"], columns, values, seeds, bounds, mechanisms or {}), shown


def new_beats_old(results: Results, columns: list, measure: str = "acc", **kwargs) -> Claim:
    return claim("New beats Old", results, [results.beats("new", "old", c, measure) for c in columns], **kwargs)


def test_a_clear_win_is_supported_with_its_effect_interval_and_test() -> None:
    new = [0.80, 0.82, 0.81, 0.83, 0.79]
    results, columns = ours(new, [v - d for v, d in zip(new, (0.05, 0.06, 0.05, 0.04, 0.06))])
    verdict = new_beats_old(results, columns[:1])
    assert verdict.verdict == "supported" and verdict.holds is True
    test = verdict.deciding.test
    expected = stats.ttest_1samp([0.05, 0.06, 0.05, 0.04, 0.06], 0.0)
    assert test.effect == pytest.approx(0.052) and test.p == pytest.approx(expected.pvalue)
    low, high = expected.confidence_interval(0.95)
    assert test.interval == pytest.approx((low, high))
    assert verdict.deciding.describe().startswith("New @ s vs Old @ s: +5.20 [+")
    assert "paired t, 5 pairs" in verdict.deciding.describe()


def test_a_consistent_loss_is_contradicted() -> None:
    new = [0.80, 0.82, 0.81, 0.83, 0.79]
    results, columns = ours(new, [v + d for v, d in zip(new, (0.05, 0.06, 0.05, 0.04, 0.06))])
    verdict = new_beats_old(results, columns[:1])
    assert verdict.verdict == "contradicted" and verdict.holds is False


def test_an_exact_tie_is_not_measured() -> None:
    values = [0.80, 0.82, 0.81, 0.83, 0.79]
    results, columns = ours(values, list(values))
    verdict = new_beats_old(results, columns[:1])
    assert verdict.verdict == "not measured" and verdict.deciding is None and verdict.holds is None


def test_a_sign_flip_between_seeds_is_inconclusive() -> None:
    """The mean favours New (+0.2 points) but two of five seeds favour Old: well inside the seed noise."""
    new = [0.80, 0.82, 0.81, 0.83, 0.79]
    results, columns = ours(new, [v - d for v, d in zip(new, (0.01, -0.008, 0.006, -0.005, 0.007))])
    verdict = new_beats_old(results, columns[:1])
    assert verdict.verdict == "inconclusive" and verdict.holds is None
    low, high = verdict.deciding.test.interval
    assert low < 0 < high


def test_a_target_nobody_reaches_is_not_measured() -> None:
    """Neither method reaches 85 % on any seed: every difference is inf − inf, a tie, not a win for either."""
    results, columns = ours([math.inf] * 5, [math.inf] * 5, "rounds")
    verdict = new_beats_old(results, columns, "rounds")
    assert verdict.verdict == "not measured"


def test_a_target_one_side_never_reaches_counts_at_least_its_rounds() -> None:
    """New reaches the target at rounds 10-14; Old never does in 50 rounds: its rounds are at least 51, so New is
    faster by at least 37 rounds on every seed (supported), never by an infinite amount."""
    results, columns = ours([10, 11, 12, 13, 14], [math.inf] * 5, "rounds")
    verdict = new_beats_old(results, columns, "rounds")
    assert verdict.verdict == "supported"
    assert verdict.deciding.test.effect == pytest.approx(51 - 12)


def test_one_comparison_standing_for_three_columns_counts_once() -> None:
    """Analogues a1-a3 are the same runs (setting s, one statistic) standing for three paper columns: the claim over
    the three columns is one comparison, so it is neither counted three times nor Holm-corrected against itself."""
    new = [0.80, 0.82, 0.81, 0.83, 0.79]
    results, columns = ours(new, [v - d for v, d in zip(new, (0.05, 0.06, 0.05, 0.04, 0.06))])
    assert [c.key for c in columns] == ["a1", "a2", "a3"]
    verdict = new_beats_old(results, columns)
    assert len(verdict.comparisons) == 1
    assert verdict.evidence.startswith("1/1 hold")
    single = new_beats_old(results, columns[:1])
    assert verdict.deciding.p_holm == single.deciding.p_holm == single.deciding.test.p


def test_several_comparisons_are_holm_corrected() -> None:
    """Three distinct comparisons, each p ≈ 0.03 alone: after Holm's correction none holds, so "all three" is
    inconclusive, while "any one" would not be supported either."""
    differences = [0.02, 0.01, 0.035, 0.005, 0.03]
    p = paired_test(differences).p
    assert 0.01 < p < 0.05
    d = PaperDefinition.model_validate(yaml.safe_load(DEFINITION))
    columns = d.columns_for(["s", "c1", "c2", "c3"])
    columns = [c for c in columns if c.key in ("c1", "c2", "c3")]
    seeds, values = {}, {}
    for column in columns:
        for method, shift in (("new", 0.0), ("old", 1.0)):
            key = (method, column.key, "acc")
            seeds[key] = {(column.setting, s): 0.8 - shift * dd for s, dd in zip(SEEDS, differences)}
            values[key] = sum(seeds[key].values()) / 5
    results = Results(d, ["new", "old"], columns, values, seeds)
    verdict = claim("New beats Old in C1-C3", results, [results.beats("new", "old", c, "acc") for c in columns])
    assert len(verdict.comparisons) == 3
    assert [j.p_holm for j in verdict.comparisons] == pytest.approx([min(1.0, 3 * p)] * 3)
    assert verdict.verdict == "inconclusive"


def test_a_claim_on_an_inert_mechanism_is_not_exercised() -> None:
    new = [0.80, 0.82, 0.81, 0.83, 0.79]
    old = [v - 0.05 for v in new]
    results, columns = ours(new, old, mechanisms={("new", "s"): {"disc_acc": "inert"}})
    assert new_beats_old(results, columns, rests_on=(("new", "disc_acc"),)).verdict == "not exercised"
    active, _ = ours(new, old, mechanisms={("new", "s"): {"disc_acc": "active"}})
    assert new_beats_old(active, columns, rests_on=(("new", "disc_acc"),)).verdict == "supported"
    unknown, _ = ours(new, old, mechanisms={("new", "s"): {"disc_acc": "not recorded"}})
    assert new_beats_old(unknown, columns, rests_on=(("new", "disc_acc"),)).verdict == "supported"


def test_most_needs_more_than_half_of_the_measured_comparisons() -> None:
    assert MOST.of(4) == 3 and MOST.of(3) == 2 and MOST.of(1) == 1


def test_a_need_counts_a_share_of_the_measured_comparisons_less_its_allowance() -> None:
    assert Need().of(3) == 3 and Need().of(0) == 0  # all; nothing measured needs nothing
    assert Need(0.8).of(10) == 8 and Need(0.5).of(3) == 2  # at least the share, rounded up
    assert Need(but=1).of(3) == 2 and Need(but=5).of(3) == 1  # "all but one"; never less than one


def test_one_pair_is_measured_but_untested_and_no_spread_is_certain() -> None:
    """One pair (or one seed on a side) gives an effect without a test; every pair the same difference is certain
    (p = 0, a point interval), and on the margin p = 1."""
    assert paired_test([0.3]) == OneTest("paired t, 1 pair", 0.3, None, None)
    assert welch_test([0.5], [0.1, 0.2]) == OneTest("Welch t, 1 + 2 seeds", pytest.approx(0.35), None, None)
    assert welch_test([0.1, 0.2], [0.5]).p is None
    tested = welch_test([0.5, 0.6], [0.1, 0.2])  # two seeds a side: tested
    assert tested.p is not None and tested.name == "Welch t, 2 + 2 seeds"
    assert paired_test([0.2, 0.2]) == OneTest("paired t, 2 pairs", 0.2, (0.2, 0.2), 0.0)
    assert paired_test([0.2, 0.2], margin=0.2).p == 1.0
    assert paired_test([0.1, 0.1], margin=0.2).outcome(0.0) == "fails"  # certain, and short of the margin
    assert welch_test([0.5, 0.5], [0.1, 0.1]).p == 0.0


def test_a_margin_is_tested_against_and_decides_the_outcome_on_its_side() -> None:
    """"Beats by 1 point": differences averaging exactly the margin give p = 1 and decide nothing; a comparison holds
    or fails only below α (not at it), by the side of the margin its effect lies on."""
    at_margin = paired_test([1.0, 1.2, 0.8], margin=1.0)
    assert at_margin.p == pytest.approx(1.0) and at_margin.outcome(0.0) == "undecided"
    above = paired_test([1.0, 1.2, 1.1], margin=0.5)
    assert above.outcome(0.01) == "holds" and above.outcome(ALPHA) == "undecided" and above.outcome(None) == "undecided"
    assert paired_test([1.0, 1.2, 1.1], margin=1.5).outcome(0.01) == "fails"
    assert holm([0.6, 0.7]) == [1.0, 1.0]  # adjusted p-values stop at 1


def test_the_printed_tables_are_judged_by_their_values() -> None:
    d = PaperDefinition.model_validate(yaml.safe_load(DEFINITION))
    printed = d.results()
    verdict = claim("New beats Old", printed, [printed.beats("new", "old", c, "acc") for c in printed.table("t1")])
    assert (verdict.verdict, verdict.evidence) == ("holds", "1/1")


def test_welch_and_paired_tests_agree_with_scipy() -> None:
    x, y = [0.81, 0.79, 0.84], [0.75, 0.78, 0.74, 0.77]
    welch = welch_test(x, y)
    assert welch.p == pytest.approx(stats.ttest_ind(x, y, equal_var=False).pvalue)
    assert holm([0.01, None, 0.04, 0.03]) == pytest.approx([0.03, None, 0.06, 0.06])


def test_the_detectable_difference_has_power_point_eight() -> None:
    """At the detectable difference the paired t-test rejects with probability 0.8; a larger shift, more."""
    shift = detectable_difference(0.01, 5)
    assert t_power(shift, 0.01, 5) == pytest.approx(0.8, abs=1e-6)
    assert t_power(1.5 * shift, 0.01, 5) > 0.8
    assert detectable_difference(0.01, 1) is None and detectable_difference(0.0, 3) == 0.0
    assert detectable_difference(0.01, 10) < shift  # more pairs detect less
    two = detectable_difference(0.01, 2)  # two seeds: one degree of freedom, t critical 12.7
    assert two is not None and t_power(two, 0.01, 2) == pytest.approx(0.8, abs=1e-6) and two > 6 * shift


def test_the_seeds_to_detect_a_difference_are_the_fewest_with_power_point_eight() -> None:
    """With three settings a seed adds three pairs: 1.5 points under 10.68 points of spread (DaFKD's pinned
    headline) need about (2.8 × 10.68 / 1.5)² ≈ 400 pairs, so 134 seeds; one seed fewer falls short of 0.8."""
    seeds = seeds_to_detect(1.5, 10.68, settings=3)
    assert seeds == 134
    assert t_power(1.5, 10.68, 3 * 134) >= 0.8 > t_power(1.5, 10.68, 3 * 133)
    assert seeds_to_detect(1.5, 10.68, settings=1) == 400  # one setting: a pair per seed
    # the seeds the detectable difference at n pairs implies: n pairs detect it, so n seeds of one setting do
    shift = detectable_difference(0.01, 7)
    assert shift is not None and seeds_to_detect(1.0001 * shift, 0.01, settings=1) == 7
    assert seeds_to_detect(0.5, 0.0, settings=1) == 2  # no noise: the least a test takes, two pairs
    assert seeds_to_detect(0.5, 0.0, settings=3) == 1
    assert seeds_to_detect(0.01, 10.68, settings=1, most=1000) is None  # beyond the count


def test_power_where_scipys_noncentral_t_gives_no_number_is_integrated_and_grows_with_the_pairs() -> None:
    """At 1.5 points under 10.68 of spread, from about 7,500 pairs scipy's noncentral t gives NaN and the power is
    integrated over the sample variance's χ², whose peak many pairs make narrow: integrated over all of [0, ∞),
    quad missed it and read 0 at 30,000 pairs."""
    for pairs in (7_500, 30_000):
        critical = stats.t.ppf(0.975, pairs - 1)
        assert math.isnan(stats.nct.cdf(-critical, pairs - 1, 1.5 / 10.68 * math.sqrt(pairs)))
        assert t_power(1.5, 10.68, pairs) == pytest.approx(1.0)
    powers = [t_power(1.5, 10.68, pairs) for pairs in range(2, 40_000, 97)]
    assert all(b >= a - 1e-9 for a, b in zip(powers, powers[1:]))
    assert powers[0] < 0.1 and powers[-1] == pytest.approx(1.0)
    assert seeds_to_detect(0.0, 10.68, settings=3) is None  # no difference to detect
