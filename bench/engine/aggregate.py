"""Server-side aggregation helpers shared by the parameter-averaging methods."""
from __future__ import annotations

from collections.abc import Collection, Sequence

import torch
from torch import nn
from torch.nn.modules.batchnorm import _NormBase


def weighted_average(states: Sequence[dict[str, torch.Tensor]], weights: Sequence[float],
                     keys: Collection[str] | None = None) -> dict[str, torch.Tensor]:
    """Σ_k w_k · state_k / Σ_k w_k for every floating-point entry (of ``keys``, default all), summed in
    the given (client-id) order. Integer entries (BatchNorm's ``num_batches_tracked``) are copied from
    the first state: they do not enter the forward pass (pipelines/fedhkd/NOTES.md §11.3)."""
    if not states:
        raise ValueError("weighted_average needs at least one state")
    total = float(sum(weights))
    out: dict[str, torch.Tensor] = {}
    floats: list[str] = []
    for key, first in states[0].items():
        if keys is not None and key not in keys:
            continue
        if not first.is_floating_point():
            out[key] = first.clone()
            continue
        out[key] = torch.zeros_like(first)
        floats.append(key)
    accs = [out[key] for key in floats]
    if accs and all(acc.is_cpu for acc in accs):
        # acc.add_(state[key], alpha=w / total), key by key: on the CPU _foreach_add_ runs exactly that
        # per tensor, in one call per client instead of one per entry.
        for state, w in zip(states, weights):
            torch._foreach_add_(accs, [state[key] for key in floats], alpha=w / total)
    else:
        for key, acc in zip(floats, accs):
            for state, w in zip(states, weights):
                acc.add_(state[key], alpha=w / total)
    return out


_PLAIN_CLASSES: dict[tuple[type[nn.Module], bool], bool] = {}


def _plain_class(cls: type[nn.Module], loading: bool) -> bool:
    """Whether ``cls`` saves (``loading``: and loads) its state as nn.Module does: its parameters and
    persistent buffers, no extra state (loading: BatchNorm's own loading, which only fills in a missing
    ``num_batches_tracked``, is allowed)."""
    key = (cls, loading)
    if key not in _PLAIN_CLASSES:
        module = nn.Module
        plain = (cls.get_extra_state is module.get_extra_state and cls._save_to_state_dict is module._save_to_state_dict
                 and cls.state_dict is module.state_dict)
        if loading:
            plain = plain and cls.load_state_dict is module.load_state_dict and cls._load_from_state_dict in (
                module._load_from_state_dict, _NormBase._load_from_state_dict)
        _PLAIN_CLASSES[key] = plain
    return _PLAIN_CLASSES[key]


def state_tensors(model: nn.Module, loading: bool = False) -> dict[str, torch.Tensor] | None:
    """The live tensors behind ``model.state_dict()`` (same keys, same order, not detached), collected
    without its per-module bookkeeping; None when a module customises its state dict (hooks, extra
    state, its own saving or, with ``loading``, loading): then use ``state_dict`` / ``load_state_dict``."""
    out: dict[str, torch.Tensor] = {}
    for prefix, module in model.named_modules(remove_duplicate=False):
        if (not _plain_class(type(module), loading) or module._state_dict_hooks or module._state_dict_pre_hooks
                or (loading and (module._load_state_dict_pre_hooks or module._load_state_dict_post_hooks))):
            return None
        dot = f"{prefix}." if prefix else ""
        for name, param in module._parameters.items():
            if param is not None:
                out[dot + name] = param
        skip = module._non_persistent_buffers_set
        for name, buf in module._buffers.items():
            if buf is not None and name not in skip:
                out[dot + name] = buf
    return out


@torch.no_grad()
def copy_state(dst: torch.nn.Module, src: torch.nn.Module, keys: Collection[str] | None = None) -> None:
    """Copy ``src``'s parameters and buffers (those of ``keys``, default all) into ``dst`` in place
    (same architecture): ``dst.load_state_dict(src.state_dict())`` without its per-call bookkeeping."""
    dst_state, src_state = state_tensors(dst), state_tensors(src)
    if dst_state is None or src_state is None:
        dst_state, src_state = dst.state_dict(), src.state_dict()
    if dst_state.keys() != src_state.keys():
        raise ValueError("copy_state needs two models of the same architecture")
    names = list(dst_state) if keys is None else [k for k in dst_state if k in keys]
    torch._foreach_copy_([dst_state[k] for k in names], [src_state[k] for k in names])


@torch.no_grad()
def load_state(model: nn.Module, state: dict[str, torch.Tensor], strict: bool = True) -> None:
    """``model.load_state_dict(state, strict)``: for a state of the model's own keys (all of them when
    ``strict``), shapes and dtypes, an in-place copy without load_state_dict's per-module bookkeeping
    (the same values); anything else goes through ``load_state_dict`` itself."""
    own = state_tensors(model, loading=True)
    if (own is None or not state.keys() <= own.keys() or (strict and own.keys() != state.keys())
            or any(own[k].shape != v.shape or own[k].dtype != v.dtype or own[k].device != v.device
                   for k, v in state.items())):
        model.load_state_dict(state, strict=strict)
        return
    torch._foreach_copy_([own[k] for k in state], list(state.values()))
