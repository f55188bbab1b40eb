"""Model registry. Every model's ``forward`` returns ``(features, logits)``.

Register an architecture with :func:`register_model`; build it with :func:`build_model`, which
initialises its weights from a named RNG stream so two builds with the same seed are identical.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from bench.engine.rng import seeded_torch
from bench.errors import BenchError

ModelFactory = Callable[..., nn.Module]


@dataclass(frozen=True)
class ModelEntry:
    name: str
    factory: ModelFactory
    description: str


_MODELS: dict[str, ModelEntry] = {}


def register_model(name: str, description: str = "") -> Callable[[ModelFactory], ModelFactory]:
    """Decorator: ``factory(in_shape: tuple[int, ...], num_classes: int, **kwargs) -> nn.Module``."""

    def decorate(factory: ModelFactory) -> ModelFactory:
        if name in _MODELS:
            raise ValueError(f"model {name!r} registered twice")
        doc = description or (factory.__doc__ or "").strip().splitlines()[0]
        _MODELS[name] = ModelEntry(name, factory, doc)
        return factory

    return decorate


def model_names() -> list[str]:
    _load_builtin()
    return sorted(_MODELS)


def get_model_entry(name: str) -> ModelEntry:
    _load_builtin()
    if name not in _MODELS:
        raise BenchError(f"unknown model {name!r}; available: {', '.join(sorted(_MODELS))}")
    return _MODELS[name]


def build_model(name: str, in_shape: tuple[int, ...], num_classes: int, seed: int = 0,
                key: tuple[int | str, ...] = ("init",), **kwargs: object) -> nn.Module:
    """Build model ``name`` with weights drawn from the stream ``(seed, *key)``."""
    entry = get_model_entry(name)
    with seeded_torch(seed, *key):
        try:
            return entry.factory(tuple(in_shape), num_classes, **kwargs)
        except TypeError as exc:
            raise BenchError(f"model {name!r} rejected its arguments: {exc}") from None


def count_parameters(model: nn.Module, trainable_only: bool = False) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)


def _load_builtin() -> None:
    # Importing the modules runs their @register_model decorators.
    from bench.models import small  # noqa: F401


__all__ = ["register_model", "build_model", "model_names", "get_model_entry", "count_parameters", "torch"]
