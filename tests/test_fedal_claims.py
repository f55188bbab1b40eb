"""FedAL's two claims against FedAvg (issue 26 item 5): accuracy under the same running time (Figs. 5, 7) and two
orders of magnitude less upload to reach the same accuracy (Fig. 11), derived per seed from the runs' curves."""
from __future__ import annotations

import math
from pathlib import Path

import pytest

from bench.suites.paper import Results
from bench.suites.plugins import import_paper_module

fedal = import_paper_module(Path(__file__).resolve().parents[1] / "pipelines" / "fedal" / "paper.py")
DEFINITION = fedal.PAPER.definition
SEEDS = (0, 1, 2)
TIME_CLAIM, UPLOAD_CLAIM = "FedAL is more accurate than FedAvg", "FedAL needs two orders of magnitude less upload"


def test_accuracy_at_a_time_is_the_last_evaluation_by_then() -> None:
    assert fedal.accuracy_at([1.0, 2.0, 3.0], [0.1, 0.5, 0.9], 2.5) == 0.5
    assert fedal.accuracy_at([1.0, 2.0, 3.0], [0.1, 0.5, 0.9], 3.0) == 0.9
    assert fedal.accuracy_at([1.0, 2.0], [0.1, 0.5], 0.5) is None


def test_the_volume_to_reach_is_the_first_point_at_the_target() -> None:
    assert fedal.volume_to_reach([1.0, 2.0, 4.0], [0.3, 0.6, 0.6], 0.6) == 2.0
    assert fedal.volume_to_reach([1.0, 2.0], [0.3, 0.5], 0.6) is None


def test_equal_time_is_the_shortest_run_and_uses_each_curve_there() -> None:
    """FedAvg stops at 2 s: FedAL is read at 2 s too (0.5), not at its own end (0.9)."""
    curves = {"fedal": ([1.0, 2.0, 3.0], [0.1, 0.5, 0.9]), "fedavg": ([0.5, 2.0], [0.4, 0.7])}
    assert fedal.at_equal_time(curves) == {"fedal": 0.5, "fedavg": 0.7}


def test_upload_orders_compare_the_volumes_at_the_accuracy_both_reach() -> None:
    """Both reach 0.8 (FedAL's final); FedAL gets there with 0.01 MB, FedAvg with 5 MB: log10(500)."""
    orders = fedal.upload_orders(([0.005, 0.01], [0.6, 0.8]), ([1.0, 5.0, 9.0], [0.5, 0.85, 0.95]))
    assert orders == pytest.approx(math.log10(500))


def fabricated(fedal_ahead: bool, saving: float) -> Results:
    """Ours on the proxy's homogeneous column: FedAL's curve ends later in time than FedAvg's, and above or below
    it at FedAvg's end; FedAvg's upload is ``saving``× FedAL's at every point."""
    columns = DEFINITION.columns_for(["hom-a2"])
    seeds = {("fedal", c.key, "acc"): {("hom-a2", s): 0.5 for s in SEEDS} for c in columns}
    ours = Results(DEFINITION, list(DEFINITION.methods), columns, {}, seeds)

    def trace(figure: str, method: str, setting: str, seed: int) -> tuple[list[float], list[float]] | None:
        jitter = 0.002 * seed
        if figure == fedal.TIME_FIGURE:  # every other method (FedAvg, FedMD, FedProto) alike
            if method == "fedal":
                return [1.0, 2.0, 4.0], [0.5, (0.8 if fedal_ahead else 0.6) + jitter, 0.95]
            return [1.0, 2.0], [0.55, 0.7 - jitter]
        if method == "fedal":
            return [0.01, 0.02], [0.6, 0.8 + jitter]
        if method == "fedavg":
            return [0.01 * saving, 0.02 * saving * (1 + jitter), 0.03 * saving], [0.5, 0.85, 0.95]
        return None

    ours.derived = fedal.PAPER.derive(ours, trace)
    return ours


def verdicts(ours: Results) -> dict[str, str]:
    return {text: c.verdict for c in fedal.PAPER.claims(ours) for text in (TIME_CLAIM, UPLOAD_CLAIM)
            if c.text.startswith(text)}


def test_fedal_ahead_at_equal_time_and_a_thousandfold_saving_support_both_claims() -> None:
    ours = fabricated(fedal_ahead=True, saving=1000.0)
    assert ours.derived["fedal", "hom-a2-f7", fedal.AT_TIME].values[("hom-a2", 1)] == pytest.approx(0.802)
    assert ours.derived["fedavg", "hom-a2-f7", fedal.AT_TIME].values[("hom-a2", 1)] == pytest.approx(0.698)
    assert verdicts(ours) == {TIME_CLAIM: "supported", UPLOAD_CLAIM: "supported"}


def test_fedal_behind_at_equal_time_and_a_tenfold_saving_contradict_both_claims() -> None:
    """At FedAvg's end FedAL is at 0.6 (its 0.95 comes later); a 10× saving is one order of magnitude, not two."""
    ours = fabricated(fedal_ahead=False, saving=10.0)
    assert verdicts(ours) == {TIME_CLAIM: "contradicted", UPLOAD_CLAIM: "contradicted"}


def test_the_paper_prints_no_numbers_for_either_figure() -> None:
    claims = {c.text.split(" (")[0]: c.verdict for c in fedal.PAPER.claims(fedal.PAPER.printed())}
    assert [v for t, v in claims.items() if t.startswith((TIME_CLAIM, UPLOAD_CLAIM))] == ["not measured"] * 2
