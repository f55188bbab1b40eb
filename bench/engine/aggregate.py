"""Server-side aggregation helpers shared by the parameter-averaging methods."""
from __future__ import annotations

from collections.abc import Collection, Sequence

import torch


def weighted_average(states: Sequence[dict[str, torch.Tensor]], weights: Sequence[float],
                     keys: Collection[str] | None = None) -> dict[str, torch.Tensor]:
    """Σ_k w_k · state_k / Σ_k w_k for every floating-point entry (of ``keys``, default all), summed in
    the given (client-id) order. Integer entries (BatchNorm's ``num_batches_tracked``) are copied from
    the first state: they do not enter the forward pass (specs/fedhkd.md §11.3)."""
    if not states:
        raise ValueError("weighted_average needs at least one state")
    total = float(sum(weights))
    out: dict[str, torch.Tensor] = {}
    for key, first in states[0].items():
        if keys is not None and key not in keys:
            continue
        if not first.is_floating_point():
            out[key] = first.clone()
            continue
        acc = torch.zeros_like(first)
        for state, w in zip(states, weights):
            acc.add_(state[key], alpha=w / total)
        out[key] = acc
    return out


@torch.no_grad()
def copy_state(dst: torch.nn.Module, src: torch.nn.Module, keys: Collection[str] | None = None) -> None:
    """Copy ``src``'s parameters and buffers (those of ``keys``, default all) into ``dst`` in place
    (same architecture): ``dst.load_state_dict(src.state_dict())`` without its per-call bookkeeping."""
    dst_state, src_state = dst.state_dict(), src.state_dict()
    if dst_state.keys() != src_state.keys():
        raise ValueError("copy_state needs two models of the same architecture")
    names = list(dst_state) if keys is None else [k for k in dst_state if k in keys]
    torch._foreach_copy_([dst_state[k] for k in names], [src_state[k] for k in names])
