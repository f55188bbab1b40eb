"""One mechanism for a method's paper and released-code readings (bench/algorithms/readings.py): each switch
declared once with both values; ``mode`` picks them, an explicit value wins, and the resolved config keeps the
shape (and so the hash) it had before a switch existed."""
from __future__ import annotations

import pytest

from bench.algorithms import get_algorithm
from bench.algorithms.fedhkd import FedHKDParams
from bench.algorithms.fedmd import FedMDParams
from bench.algorithms.readings import ModeParams, readings_table
from tests.test_communication import shipped_methods

WITH_MODES = sorted(name for name in shipped_methods() if issubclass(get_algorithm(name).Params, ModeParams))


def test_the_methods_whose_code_differs_declare_their_switches() -> None:
    assert WITH_MODES == ["cffl", "cgsv", "dafkd", "fedakd", "fedave", "feddc", "fedhkd", "fedmd", "fedmpr",
                          "fedsac"]
    for name in WITH_MODES:
        readings = get_algorithm(name).Params.readings()
        assert readings and all(r.paper != r.code for r in readings.values()), name


@pytest.mark.parametrize("name", WITH_MODES)
def test_mode_picks_each_switch_and_an_explicit_value_wins(name: str) -> None:
    params = get_algorithm(name).Params
    readings = params.readings()
    paper, code = params(), params(mode="code")
    for switch, values in readings.items():
        assert getattr(paper, switch) == values.paper and getattr(code, switch) == values.code, switch
    switch, values = next(iter(readings.items()))
    assert getattr(params(mode="code", **{switch: values.paper}), switch) == values.paper
    for resolved in (paper, code):  # the resolved config reads back as the same parameters
        assert params.model_validate(resolved.model_dump(mode="json")) == resolved


@pytest.mark.parametrize("name", WITH_MODES)
def test_the_docstring_tables_every_switch(name: str) -> None:
    params = get_algorithm(name).Params
    table = readings_table(params)
    assert all(switch in table for switch in params.readings()) and table in (params.__doc__ or "").replace("\n    ",
                                                                                                           "\n")


def test_switches_added_later_stay_out_of_the_configs_made_before_them() -> None:
    """FedHKD's hk_update, softmax and hk_data are left out of a paper-mode config at their paper values (in code
    mode they are written); FedMD's λ_md is written as null and its distance left out at its mode's value."""
    later = {"hk_update", "softmax", "hk_data"}
    assert not later & FedHKDParams().model_dump().keys()
    assert later <= FedHKDParams(mode="code").model_dump().keys()
    assert FedHKDParams(softmax="naive").model_dump()["softmax"] == "naive"
    for mode in ("paper", "code"):
        resolved = FedMDParams(mode=mode).model_dump()
        assert resolved == {"mode": mode, "lambda_md": None, "temperature": 0.5, "weighting": "samples"}
    assert FedMDParams().lambda_md == 0.05 and FedMDParams(mode="code").lambda_md == 0.1
    assert FedMDParams(mode="code").distance == "negated_kldivloss"
    assert FedMDParams(lambda_md=0.3).model_dump()["lambda_md"] == 0.3
    assert FedMDParams(mode="code", lambda_md=None).lambda_md == 0.1  # null: the mode's value


@pytest.mark.parametrize("name", WITH_MODES)
def test_a_method_departs_from_its_paper_exactly_at_the_switches_that_hold_another_value(name: str) -> None:
    params = get_algorithm(name).Params
    readings = params.readings()
    assert not params().departs_from_paper(*readings) and params(mode="code").departs_from_paper(*readings)
    for switch, values in readings.items():
        code_here = params.model_construct(**{switch: values.code})  # unvalidated: some switches need another's value
        assert code_here.departs_from_paper(switch) and code_here.departs_from_paper(*readings), switch
        assert not code_here.departs_from_paper(*(other for other in readings if other != switch)), switch
