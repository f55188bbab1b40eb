"""Figures a paper draws from its suite's runs and partitions beyond the generic ones (learning curves,
partition plots): a module ``bench/report/<paper>_figures.py`` registers its maker with
:func:`register_figures` under the paper's name; :func:`paper_figures` (the report stage) draws those of
the suite's paper, if any.
"""
from __future__ import annotations

import pkgutil
from collections.abc import Callable, Mapping
from importlib import import_module
from pathlib import Path

from bench.report.runs import RunKey, RunRecord
from bench.suites import Suite

FigureMaker = Callable[[Suite, Mapping[RunKey, RunRecord], Path, "Path | None"], list[Path]]
"""``(suite, runs, folder, data_dir) -> files written``."""
_MAKERS: dict[str, FigureMaker] = {}


def register_figures(paper: str) -> Callable[[FigureMaker], FigureMaker]:
    def decorate(maker: FigureMaker) -> FigureMaker:
        if paper in _MAKERS and _MAKERS[paper] is not maker:
            raise ValueError(f"figures of paper {paper!r} registered twice")
        _MAKERS[paper] = maker
        return maker

    return decorate


def paper_figures(suite: Suite, runs: Mapping[RunKey, RunRecord], folder: Path,
                  data_dir: Path | None = None) -> list[Path]:
    """The figures the suite's paper registers (none without a paper or a maker)."""
    import bench.report as package

    for module in pkgutil.iter_modules(package.__path__):
        if module.name.endswith("_figures") and module.name != "paper_figures":
            import_module(f"{package.__name__}.{module.name}")
    paper = suite.paper
    maker = _MAKERS.get(paper.definition.name) if paper is not None else None
    return maker(suite, runs, folder, data_dir) if maker is not None else []
