"""PyTorch's optimisers in eager mode without importing its compiler.

``torch.optim.Optimizer`` imports ``torch._dynamo`` (TorchDynamo, the ``torch.compile`` front end) the
first time an optimiser is built or steps: ``add_param_group``, ``state_dict``, ``load_state_dict`` and
``zero_grad`` are wrapped by ``torch._disable_dynamo``, which imports it to build their "not compiled"
version, and ``step`` by ``_use_grad_for_differentiable``, which imports it for two graph breaks. In
eager mode neither does anything else — no frame is being compiled, so there is nothing to disable or
break — yet the import costs 0.5-1 s of every run process (measured: benchmarks/test_fixed_cost.py).
This project never compiles, so:

* :func:`step` runs the optimiser's own ``step`` body under ``torch.no_grad()``, which is what
  ``Optimizer.step`` does in eager mode for a non-differentiable optimiser without hooks (same
  tensor operations, so bitwise the same update; ``tests/test_eager.py``). It falls back to
  ``optimizer.step()`` when hooks are registered, the optimiser is differentiable, or dynamo is loaded.
* Importing this module gives the four ``torch._disable_dynamo``-wrapped ``Optimizer`` methods the
  cached "disabled" version torch would build (``fn.__dynamo_disable``, torch's own cache): it calls
  the method directly while ``torch._dynamo`` is not imported, and once something imports it,
  builds torch's real disabled version and uses that from then on. So compiling code in the same
  process still gets exactly torch's behaviour.
"""
from __future__ import annotations

import inspect
import sys
from collections.abc import Callable
from typing import Any

import torch
import torch.optim.optimizer as torch_optimizer

_CACHE = "__dynamo_disable"  # the attribute torch._disable_dynamo caches its disabled function in
_DYNAMO_WRAPPED = ("add_param_group", "state_dict", "load_state_dict", "zero_grad")


def _dynamo_loaded() -> bool:
    return "torch._dynamo" in sys.modules


def _until_dynamo(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` itself while ``torch._dynamo`` is not imported; after, torch's disabled ``fn``."""

    def call(*args: Any, **kwargs: Any) -> Any:
        if not _dynamo_loaded():
            return fn(*args, **kwargs)
        import torch._dynamo

        disabled = torch._dynamo.disable(fn, recursive=True, wrapping=False)
        setattr(fn, _CACHE, disabled)  # torch's own cache entry from now on
        return disabled(*args, **kwargs)

    return call


def _defer_dynamo_import() -> None:
    for name in _DYNAMO_WRAPPED:
        fn = getattr(getattr(torch.optim.Optimizer, name), "__wrapped__", None)
        if fn is not None and getattr(fn, _CACHE, None) is None:
            setattr(fn, _CACHE, _until_dynamo(fn))


_defer_dynamo_import()


def step(optimizer: torch.optim.Optimizer) -> None:
    """``optimizer.step()`` as eager mode runs it, without importing ``torch._dynamo``."""
    body = inspect.unwrap(type(optimizer).step)
    if (body is type(optimizer).step or optimizer.defaults.get("differentiable") or _dynamo_loaded()
            or optimizer._optimizer_step_pre_hooks or optimizer._optimizer_step_post_hooks
            or torch_optimizer._global_optimizer_pre_hooks or torch_optimizer._global_optimizer_post_hooks):
        optimizer.step()
        return
    with torch.no_grad():
        body(optimizer)
