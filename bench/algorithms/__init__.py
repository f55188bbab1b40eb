"""Algorithm registry: one file per method in this package, each registering an
:class:`Algorithm` subclass with :func:`register_algorithm`; every module here is imported on first
use, so adding a method is adding its file.

Third-party methods join through the ``fkd_bench.algorithms`` entry-point group: a plug-in package
declares ``[project.entry-points."fkd_bench.algorithms"] mymethod = "mypkg.mymethod"`` and the
module registers its class with :func:`register_algorithm` on import.
"""
from __future__ import annotations

from collections.abc import Callable
import pkgutil
from importlib import import_module
from importlib.metadata import entry_points
from typing import TypeVar

from bench.algorithms.base import Algorithm, AlgorithmParams, AveragingParams, ParameterAveraging
from bench.errors import BenchError

A = TypeVar("A", bound=type[Algorithm])
_ALGORITHMS: dict[str, type[Algorithm]] = {}


def register_algorithm(name: str) -> Callable[[A], A]:
    def decorate(cls: A) -> A:
        if name in _ALGORITHMS and _ALGORITHMS[name] is not cls:
            raise ValueError(f"algorithm {name!r} registered twice")
        cls.name = name
        _ALGORITHMS[name] = cls
        return cls

    return decorate


def _load() -> None:
    for module in pkgutil.iter_modules(__path__):
        import_module(f"{__name__}.{module.name}")
    for ep in entry_points(group="fkd_bench.algorithms"):
        ep.load()


def algorithm_names() -> list[str]:
    _load()
    return sorted(_ALGORITHMS)


def get_algorithm(name: str) -> type[Algorithm]:
    _load()
    if name not in _ALGORITHMS:
        raise BenchError(f"unknown algorithm {name!r}; available: {', '.join(sorted(_ALGORITHMS))}")
    return _ALGORITHMS[name]


__all__ = ["Algorithm", "AlgorithmParams", "AveragingParams", "ParameterAveraging", "register_algorithm", "algorithm_names", "get_algorithm"]
