"""Paper plug-ins: how a suite finds the paper whose tables it makes. The ``bench`` package names no paper.

A paper is a module that builds its :class:`~bench.suites.paper.Paper` (the transcribed tables, claims, report
sections, figures, model configurations) and registers it on import with :func:`register_paper`, as a method
module registers its algorithm. A suite's ``suite.paper`` names it in one of two ways:

* a module file, relative to the suite's params file: ``paper: paper.py``. In this repository every paper is a
  folder, ``pipelines/<paper>/``, holding ``paper.py`` beside its ``paper.yaml``, ``params.yaml`` and
  ``dvc.yaml``; a fifth paper is one more such folder. The file is imported once per process as a module of a
  package made of its folder, so it may import the folder's other modules relatively
  (``from .figures import ...``);
* the name of a paper an installed package registers through the ``fkd_bench.papers`` entry-point group:
  ``[project.entry-points."fkd_bench.papers"] mypaper = "mypkg.mypaper"`` (loaded when the name is looked up).

:func:`known_papers` imports every ``<folder>/*/paper.py`` of a folder of papers (``bench models`` lists their
model configurations).
"""
from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import re
import sys
from importlib.metadata import entry_points
from pathlib import Path
from types import ModuleType
from typing import TypeVar

from bench.errors import BenchError
from bench.suites.paper import Paper

ENTRY_POINTS = "fkd_bench.papers"
MODULE_FILE = "paper.py"  # a paper folder's module (known_papers)

P = TypeVar("P", bound=Paper)
PAPERS: dict[str, Paper] = {}
"""The registered papers by their definitions' names (the last registered of a name: a scratch copy of a paper
folder registers its own, which its suites use)."""
_REGISTERED: list[Paper] = []  # in the order registered: what a module file registers on import
_FROM_FILE: dict[Path, Paper] = {}  # a module file's paper, by the file's resolved path


def register_paper(paper: P) -> P:
    """Make ``paper`` known by its definition's name; a plug-in module calls it once, on import."""
    PAPERS[paper.definition.name] = paper
    _REGISTERED.append(paper)
    return paper


def get_paper(name: str) -> Paper:
    """A registered paper, or one an installed package registers through the ``fkd_bench.papers`` entry points."""
    if name not in PAPERS:
        for point in entry_points(group=ENTRY_POINTS, name=name):
            point.load()
    if name not in PAPERS:
        known = sorted({*PAPERS, *(point.name for point in entry_points(group=ENTRY_POINTS))})
        raise BenchError(f"paper {name!r} is neither a module file (a path ending in .py, relative to the params "
                         f"file, e.g. `paper: paper.py`) nor a registered paper ({', '.join(known) or 'none'})")
    return PAPERS[name]


def find_paper(reference: str, base: Path) -> Paper:
    """The paper a suite's ``suite.paper`` names: a module file relative to ``base`` (the params file's folder),
    or a registered name (:func:`get_paper`)."""
    return paper_from_file(base / reference) if reference.endswith(".py") else get_paper(reference)


def paper_from_file(path: Path) -> Paper:
    """The paper the module file ``path`` registers (imported the first time)."""
    path = path.resolve()
    import_paper_module(path)
    return _FROM_FILE[path]


def import_paper_module(path: Path) -> ModuleType:
    """The paper module at ``path``, imported once as a module of a package made of its folder (so relative imports
    of the folder's other modules work). It must register exactly one paper; one that fails to import is not kept,
    nor what it registered."""
    path = path.resolve()
    if not path.is_file():
        raise BenchError(f"paper module {path} not found; name the plug-in's module file relative to the params "
                         "file (e.g. `paper: paper.py`)")
    folder = path.parent
    digest = hashlib.sha256(str(folder).encode()).hexdigest()[:12]
    package = f"fkd_paper_{re.sub(r'[^0-9A-Za-z_]', '_', folder.name)}_{digest}"
    name = f"{package}.{path.stem}"
    if name in sys.modules:
        return sys.modules[name]
    if package not in sys.modules:
        package_spec = importlib.machinery.ModuleSpec(package, None, is_package=True)
        assert package_spec.submodule_search_locations is not None
        package_spec.submodule_search_locations.append(str(folder))
        sys.modules[package] = importlib.util.module_from_spec(package_spec)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    before, start = dict(PAPERS), len(_REGISTERED)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
        new = _REGISTERED[start:]
        if len(new) != 1:
            raise BenchError(f"{path} registers {len(new)} papers; a paper module registers exactly one, with "
                             "bench.suites.plugins.register_paper(...) on import")
    except BaseException:
        del sys.modules[name]
        del _REGISTERED[start:]
        PAPERS.clear()
        PAPERS.update(before)
        raise
    _FROM_FILE[path] = new[0]
    return module


def known_papers(folder: Path) -> list[Paper]:
    """Every paper: those of a folder of paper folders (each ``<folder>/*/paper.py``, in name order), those
    installed packages register through the ``fkd_bench.papers`` entry points, and any other registered one."""
    found = [paper_from_file(path) for path in sorted(Path(folder).glob(f"*/{MODULE_FILE}"))]
    for point in entry_points(group=ENTRY_POINTS):
        point.load()
    return list(dict.fromkeys([*found, *PAPERS.values()]))
