"""The model registry: :func:`register_model`, :func:`build_model` and the architecture draw."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from bench.rng import numpy_stream, seeded_torch
from bench.errors import BenchError

ModelFactory = Callable[..., nn.Module]

ExampleInput = tuple[tuple[int, ...], int]
"""``(in_shape, num_classes)`` with which a model is described by :mod:`bench.models.inventory`."""

CLASSIFIER = "classifier"
"""Kind of model whose ``forward(x)`` returns ``(features, logits)``."""
GENERATOR = "generator"
"""Kind of model whose ``forward(z, y=None)`` maps noise (and labels) to a sample of shape ``in_shape``;
it has a ``noise_dim`` attribute. For generators ``in_shape`` is the shape of one generated sample."""


@dataclass(frozen=True)
class ModelEntry:
    name: str
    factory: ModelFactory
    description: str
    example_input: ExampleInput | None = None
    kind: str = CLASSIFIER


_MODELS: dict[str, ModelEntry] = {}


def register_model(name: str, description: str = "", example_input: ExampleInput | None = None,
                   kind: str = CLASSIFIER) -> Callable[[ModelFactory], ModelFactory]:
    """Decorator: ``factory(in_shape: tuple[int, ...], num_classes: int, **kwargs) -> nn.Module``.

    ``example_input`` is the ``(in_shape, num_classes)`` the model is described with (parameters,
    FLOPs) by ``bench models``; ``kind`` is :data:`CLASSIFIER` or :data:`GENERATOR`.
    """
    if kind not in (CLASSIFIER, GENERATOR):
        raise ValueError(f"unknown model kind {kind!r}")

    def decorate(factory: ModelFactory) -> ModelFactory:
        if name in _MODELS:
            raise ValueError(f"model {name!r} registered twice")
        doc = description or (factory.__doc__ or "").strip().splitlines()[0]
        example = None if example_input is None else (tuple(example_input[0]), int(example_input[1]))
        _MODELS[name] = ModelEntry(name, factory, doc, example, kind)
        return factory

    return decorate


def model_names(kind: str | None = None) -> list[str]:
    """Registered names, sorted; only those of ``kind`` when given."""
    return sorted(name for name, entry in _MODELS.items() if kind is None or entry.kind == kind)


def get_model_entry(name: str) -> ModelEntry:
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


def assign_architectures(candidates: list[str], num_clients: int, seed: int) -> list[str]:
    """Each client's architecture, drawn uniformly and independently from ``candidates`` with the
    run's ``"architectures"`` stream (pipelines/fedal/NOTES.md §4.1 "Architecture assignment")."""
    if not candidates:
        raise BenchError("assign_architectures needs at least one candidate architecture")
    for name in candidates:
        get_model_entry(name)
    picks = numpy_stream(seed, "architectures").integers(0, len(candidates), size=num_clients)
    return [candidates[int(i)] for i in picks]
