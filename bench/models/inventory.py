"""Inventory of the registered models for ``bench models``: parameters, FLOPs per image, feature size;
and the papers' (model, dataset) configurations (:class:`~bench.models.paper_configs.PaperConfig`, which each
paper plug-in lists) with their exact parameter counts beside the counts the papers print.

FLOPs are counted by PyTorch's own ``torch.utils.flop_counter.FlopCounterMode`` on one forward pass of
one sample (batch 1, eval mode, no grad) at the model's registered ``example_input``. The counter
counts a multiply-add as 2 FLOPs and covers matmuls and convolutions (not BN, activations or pooling).
Models are described on the ``meta`` device: shapes only, so no weights are initialised or computed on.
"""
from __future__ import annotations

import torch
from torch.utils.flop_counter import FlopCounterMode

from bench.models import GENERATOR, count_parameters, get_model_entry, model_names
from bench.models.paper_configs import PaperConfig


def forward_flops(model: torch.nn.Module, kind: str, in_shape: tuple[int, ...]) -> int:
    """FLOPs of one forward pass on one sample (for a generator: producing one sample), on the device
    of ``model``'s parameters (``meta`` counts without computing)."""
    model.eval()
    device = next(model.parameters()).device
    if kind == GENERATOR:
        args: tuple[torch.Tensor, ...] = (torch.zeros(1, model.noise_dim, device=device),  # type: ignore[call-overload]  # torch: Module attributes are Tensor | Module
                                          torch.zeros(1, dtype=torch.long, device=device))
    else:
        args = (torch.zeros(1, *in_shape, device=device),)
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(*args)
    return int(counter.get_total_flops())


def describe_models() -> list[dict]:
    """One row per registered model with an example input: name, kind, in_shape, num_classes,
    parameters, flops (per image), feature_dim (None for generators), description."""
    rows = []
    for name in model_names():
        entry = get_model_entry(name)
        if entry.example_input is None:
            continue
        in_shape, num_classes = entry.example_input
        with torch.device("meta"):
            model = entry.factory(in_shape, num_classes)
        rows.append({
            "name": name, "kind": entry.kind, "in_shape": in_shape, "num_classes": num_classes,
            "parameters": count_parameters(model),
            "flops": forward_flops(model, entry.kind, in_shape),
            "feature_dim": getattr(model, "feature_dim", None), "description": entry.description,
        })
    return rows


def format_models_table(rows: list[dict] | None = None) -> str:
    """``describe_models()`` as an aligned plain-text table."""
    rows = describe_models() if rows is None else rows
    header = ("model", "kind", "input", "classes", "parameters", "MFLOPs/image", "feature dim")
    body = [(r["name"], r["kind"], "x".join(map(str, r["in_shape"])), str(r["num_classes"]),
             f"{r['parameters']:,}", f"{r['flops'] / 1e6:,.2f}",
             "-" if r["feature_dim"] is None else str(r["feature_dim"])) for r in rows]
    widths = [max(len(row[i]) for row in (header, *body)) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) if i < 3 else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths)))
             for row in (header, *body)]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _aligned(header: tuple[str, ...], body: list[tuple[str, ...]], right: set[int]) -> str:
    widths = [max(len(row[i]) for row in (header, *body)) for i in range(len(header))]
    lines = ["  ".join(cell.rjust(w) if i in right else cell.ljust(w) for i, (cell, w) in enumerate(zip(row, widths)))
             .rstrip() for row in (header, *body)]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def describe_paper_configs(configs: tuple[PaperConfig, ...]) -> list[dict]:
    """One row per paper configuration, its model built on the ``meta`` device: the config's fields,
    ``parameters`` (the whole model), ``printed`` (what the paper or its reading notes print, as text), ``computed``
    (the count of each printed part) and ``matches`` (every printed count agrees)."""
    rows = []
    for config in configs:
        with torch.device("meta"):
            model = get_model_entry(config.model).factory(config.in_shape, config.num_classes, **config.kwargs)
        computed = [count_parameters(model if p.part is None else model.get_submodule(p.part)) for p in config.printed]
        rows.append({
            "paper": config.paper, "role": config.role, "model": config.model, "datasets": config.datasets,
            "in_shape": config.in_shape, "num_classes": config.num_classes, "kwargs": dict(config.kwargs),
            "parameters": count_parameters(model), "printed": ", ".join(map(str, config.printed)),
            "computed": computed, "matches": all(p.matches(c) for p, c in zip(config.printed, computed)),
            "source": config.source,
        })
    return rows


def format_paper_configs_table(rows: list[dict]) -> str:
    """:func:`describe_paper_configs`' rows as an aligned plain-text table."""
    header = ("paper", "role", "model", "dataset", "input", "classes", "kwargs", "parameters", "printed",
              "agrees", "source")
    body: list[tuple[str, ...]] = [(r["paper"], r["role"], r["model"], ", ".join(r["datasets"]), "x".join(map(str, r["in_shape"])),
             str(r["num_classes"]), ", ".join(f"{k}={v}" for k, v in r["kwargs"].items()) or "-",
             f"{r['parameters']:,}", r["printed"], "yes" if r["matches"] else "NO", r["source"]) for r in rows]
    return _aligned(header, body, right={5, 7})
