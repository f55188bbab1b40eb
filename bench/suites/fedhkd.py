"""FedHKD (ICLR 2023): which runs make which cell of Tables 1 and 2, the paper's values, and the
claims the report checks (specs/fedhkd.md §6, §6.1, §10).

The ``paper`` profile's settings are the paper's columns (``svhn-m10`` … ``svhn-b5``). The ``proxy``
(digits) and ``smoke`` (fabricated 3x32x32) profiles' columns are analogues of the paper's
(``m5``/``m10``/``m20`` for Table 1's 10/20/50 clients, ``m10-b0.2``/``m10-b5`` for Table 2), so
they are compared with the paper by rank and by the paper's qualitative claims, not by value.
"""
from __future__ import annotations

from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import torch
import yaml

from bench.data import get_dataset_spec
from bench.report.paper_report import Claim, Column, PaperResults
from bench.suites import Suite, load_suite

LABELS = {"fedavg": "FedAvg", "fedprox": "FedProx", "moon": "MOON", "fedalign": "FedAlign", "fedgen": "FedGen",
          "fedmd": "FedMD", "fedproto": "FedProto", "fedhkd_star": "FedHKD*", "fedhkd": "FedHKD",
          "fedhkd_code": "FedHKD (code mode)"}
PAPER_METHODS = [m for m in LABELS if m != "fedhkd_code"]  # the rows of the paper's tables
FOCUS = "fedhkd"  # the paper's proposed method, whose ranking the report states
DATASETS = {"svhn": "SVHN", "cifar10": "CIFAR-10", "cifar100": "CIFAR-100"}
TABLE1_CLIENTS = (10, 20, 50)
PROXY_TABLE1 = {"m5": 10, "m10": 20, "m20": 50}  # proxy setting -> the paper's client count it stands for
TABLE2_BETAS = ("0.2", "5")


@cache
def paper_values() -> dict[str, Any]:
    return yaml.safe_load(Path(__file__).with_name("fedhkd_paper.yaml").read_text())


def paper_value(table: str, dataset: str, method: str, column: str) -> float | None:
    """The printed value of ``method`` in ``column`` (e.g. ``local_10``, ``global_b5``, ``time_s``)."""
    data = paper_values()[table]
    row = data.get(dataset, {}).get(method)
    return None if row is None else row[data["columns"].index(column)]


def columns(settings: list[str]) -> list[Column]:
    """The table columns this suite's settings make, each tied to the paper cells it reproduces."""
    out: list[Column] = []
    if "svhn-m10" in settings:  # the paper profile
        for dataset, name in DATASETS.items():
            out += [Column("table1", f"{name} m={m}", f"{dataset}-m{m}", {dataset: str(m)}) for m in TABLE1_CLIENTS]
        for dataset in ("cifar10", "svhn"):
            out += [Column("table2", f"{DATASETS[dataset]} β={b}", f"{dataset}-b{b}", {dataset: f"b{b}"})
                    for b in TABLE2_BETAS]
    else:
        out += [Column("table1", f"m={s[1:]} (paper m={m})", s, {d: str(m) for d in DATASETS})
                for s, m in PROXY_TABLE1.items() if s in settings]
        out += [Column("table2", f"m=10 β={b}", f"m10-b{b}", {d: f"b{b}" for d in ("cifar10", "svhn")})
                for b in TABLE2_BETAS if f"m10-b{b}" in settings]
    return [c for c in out if c.setting in settings]


def paper_results() -> PaperResults:
    """The paper's own Tables 1-2 as results, so every claim is also checked on the printed numbers."""
    settings = [f"{d}-m{m}" for d in DATASETS for m in TABLE1_CLIENTS] + \
        [f"{d}-b{b}" for d in ("cifar10", "svhn") for b in TABLE2_BETAS]
    results = PaperResults(PAPER_METHODS, columns(settings))
    for column in results.columns:
        ((dataset, key),) = column.paper.items()
        for method in PAPER_METHODS:
            for metric in ("local", "global"):
                results.values[method, column.setting, metric] = paper_value(column.table, dataset, method,
                                                                             f"{metric}_{key}")
    for method in PAPER_METHODS:
        results.time_ratios[method] = sum(paper_value("table1", d, method, "time_s")
                                          / paper_value("table1", d, "fedavg", "time_s") for d in DATASETS) / 3
    return results


def parameter_counts(suite: Suite) -> dict[str, dict[str, int]]:
    """Per method and paper dataset, the parameters held during local training at the paper's scale
    (the ``paper`` profile's ``<dataset>-m10`` config): Table 1's "Params" column."""
    from bench.algorithms import get_algorithm
    from bench.engine.context import Context
    from bench.models import build_model

    paper = load_suite(suite.params_file, suite.root, ["profile=null"]) if suite.params_file else suite
    out: dict[str, dict[str, int]] = {}
    for method in suite.params.methods:
        for dataset in DATASETS:
            cfg = paper.config(method, f"{dataset}-m10", 0)
            spec = get_dataset_spec(cfg.dataset.name)
            ctx = Context(cfg, spec.image_shape, spec.num_classes, torch.device("meta"))
            algorithm = get_algorithm(cfg.algorithm.name)
            instance = algorithm(algorithm.Params.model_validate(cfg.algorithm.params), ctx)
            with torch.device("meta"):  # shapes only: counting needs no initialised weights
                model = build_model(cfg.model.name, spec.image_shape, spec.num_classes, **cfg.model.kwargs)
                out.setdefault(method, {})[dataset] = instance.resident_parameters(model)
    return out


def claims(results: PaperResults, paper_profile: bool) -> list[Claim]:
    """The paper's claims (§6.1, §10 acceptance criteria (b)-(d)), checked on ``results``."""
    cols1 = [c for c in results.columns if c.table == "table1"]
    cols2 = {c.setting: c for c in results.columns if c.table == "table2"}

    def tally(text: str, pairs: list[tuple[float | None, float | None]], need: str, strict: bool = False) -> Claim:
        valid = [(a, b) for a, b in pairs if a is not None and b is not None]
        wins = sum(a > b if strict else a >= b for a, b in valid)
        holds = None if not valid else (wins == len(valid) if need == "all" else wins > len(valid) / 2)
        return Claim(text, holds, f"{wins}/{len(valid)}")

    def ratio_claim(text: str, method: str, ok: Callable[[float], bool]) -> Claim:
        ratio = results.time_ratio(method)
        return Claim(text, None if ratio is None else ok(ratio), "—" if ratio is None else f"{ratio:.2f}×")

    svhn = [c for c in cols1 if not paper_profile or c.setting.startswith("svhn")]
    if paper_profile:
        beta_pairs = [(cols2.get(f"{d}-b0.2"), cols2.get(f"{d}-b5")) for d in ("cifar10", "svhn")]
    else:
        beta_pairs = [(cols2.get("m10-b0.2"), cols2.get("m10-b5"))]
    ranks = [r for c in results.columns for m in ("local", "global")
             if (r := results.rank("fedhkd", c, m, PAPER_METHODS))]
    return [
        tally("FedHKD's local accuracy ≥ FedAvg's in every Table-1 column (§10 b)",
              [(results.acc("fedhkd", c, "local"), results.acc("fedavg", c, "local")) for c in cols1], "all"),
        tally("FedHKD's global accuracy ≥ FedAvg's in most Table-1 columns (§10 b)",
              [(results.acc("fedhkd", c, "global"), results.acc("fedavg", c, "global")) for c in cols1], "most"),
        tally("FedGen is worse than FedAvg, local and global" + (" on SVHN" if paper_profile else
                                                                 " (the paper: on SVHN)") + " (§6.1 i, §10 c)",
              [(results.acc("fedavg", c, m), results.acc("fedgen", c, m)) for c in svhn for m in ("local", "global")],
              "all", strict=True),
        tally("FedHKD* has a better global accuracy than FedProto (§6.1)",
              [(results.acc("fedhkd_star", c, "global"), results.acc("fedproto", c, "global")) for c in cols1],
              "most"),
        tally("Local accuracy is lower at β=5 than at β=0.2, for every method (§6.1 iii, §10 d)",
              [(results.acc(m, high, "local"), results.acc(m, low, "local"))
               for m in results.methods for high, low in beta_pairs], "all", strict=True),
        ratio_claim("MOON takes ≳ 2× FedAvg's time per round (§10 c)", "moon", lambda r: r >= 1.95),
        ratio_claim("FedAlign takes ≳ 2× FedAvg's time per round (§10 c)", "fedalign", lambda r: r >= 1.95),
        ratio_claim("FedHKD's time per round is at most ~1.5× FedAvg's (§10 c)", "fedhkd", lambda r: r <= 1.5),
        Claim("FedHKD generally ranks best or second best (§6.1)", bool(ranks) and sum(r <= 2 for r in ranks)
              > len(ranks) / 2 if ranks else None, f"top-2 in {sum(r <= 2 for r in ranks)}/{len(ranks)} cells"),
    ]
