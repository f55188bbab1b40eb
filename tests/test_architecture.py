"""The architecture's promises that code review alone would miss: the rooms import each other in one
direction only (that no method state travels untyped is tests/test_typed_state.py)."""
from __future__ import annotations

import ast
import platform
import re
from pathlib import Path

import networkx as nx
import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "bench"
# The rooms from the ground up (docs/architecture.md); a room may import only rooms to its left.
LAYERS = ["errors", "fileio", "rng", "config", "models", "data", "engine", "algorithms", "experiment", "tracking",
          "runner", "suites", "report", "cli"]


def _module(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> nx.DiGraph:
    """Every ``bench`` module and the ``bench`` modules it imports anywhere in its body (function-level
    and ``TYPE_CHECKING`` imports included)."""
    modules = {_module(p): p for p in PACKAGE.rglob("*.py")}
    graph = nx.DiGraph()
    for name, path in modules.items():
        graph.add_node(name)
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                targets = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            graph.add_edges_from((name, t) for t in targets if t in modules and t != name)
    return graph


def room(module: str) -> str:
    """The room of a module; the package's ``__init__`` (CPU kernel pinning) is the ground floor."""
    return module.split(".")[1] if "." in module else "errors"


def test_no_import_cycles_between_any_two_modules() -> None:
    cycles = list(nx.simple_cycles(import_graph()))
    assert not cycles, f"import cycles: {cycles[:5]}"


def test_rooms_import_only_the_rooms_below_them() -> None:
    upward = [(a, b) for a, b in import_graph().edges
              if room(a) != room(b) and LAYERS.index(room(b)) > LAYERS.index(room(a))]
    assert not upward, f"imports against the layering: {upward}"


def test_every_room_is_layered() -> None:
    assert {room(m) for m in import_graph().nodes if m != "bench"} <= set(LAYERS)


def paper_names() -> set[str]:
    """The papers of the repository: each folder of pipelines/ with a paper plug-in (paper.py)."""
    return {path.parent.name for path in (PACKAGE.parent / "pipelines").glob("*/paper.py")}


def test_only_method_files_under_bench_are_named_after_a_paper() -> None:
    """A paper is a folder of pipelines/; bench/ holds what papers share, named by what it is (models by
    architecture, partitions by what they draw). A method is one file named after it, and FedAL, FedHKD, DaFKD
    and FedAKD are methods too: bench/algorithms/<method>.py registering that method is the only exception."""
    from bench.algorithms import algorithm_names

    papers = paper_names()
    assert papers >= {"fedal", "fedhkd", "dafkd", "fedakd"}
    named = {path for path in PACKAGE.rglob("*") if path.is_file() and "__pycache__" not in path.parts
             and any(paper in part for part in path.relative_to(PACKAGE).parts for paper in papers)}
    methods = {path for path in named if path.parent == PACKAGE / "algorithms" and path.suffix == ".py"
               and path.stem in algorithm_names()}
    assert sorted(map(str, named - methods)) == []



def test_no_file_of_the_shared_script_folders_is_named_after_a_paper() -> None:
    """A paper's one-off scripts live in its folder (pipelines/<paper>/studies/, validation/), never in the
    folders every paper shares: no file under benchmarks/ or tools/ has a paper's name as a word of its path."""
    root = PACKAGE.parent
    papers = paper_names()
    assert papers >= {"fedal", "fedhkd", "dafkd", "fedakd"}
    files = [path for folder in ("benchmarks", "tools") for path in (root / folder).rglob("*")
             if path.is_file() and "__pycache__" not in path.parts]
    named = sorted(str(path.relative_to(root)) for path in files
                   if papers & {word for part in path.relative_to(root).parts[1:]
                                for word in re.split(r"[^a-z0-9]+", part.lower())})
    assert named == []


def test_no_bench_module_imports_a_paper_plug_in() -> None:
    """bench finds papers from a suite's params file or the fkd_bench.papers entry points, never by importing
    one: no bench module imports from pipelines/ (or a plug-in's package), nor names a plug-in's file."""
    papers = paper_names()
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text())
        docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                      if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                      and node.body and isinstance(node.body[0], ast.Expr)
                      and isinstance(node.body[0].value, ast.Constant)}
        for node in ast.walk(tree):
            imported = [node.module or ""] if isinstance(node, ast.ImportFrom) else \
                [a.name for a in node.names] if isinstance(node, ast.Import) else []
            offenders += [(path.name, name) for name in imported if name.split(".")[0] in ("pipelines", *papers)
                          or name.startswith("fkd_paper_")]
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                offenders += [(path.name, node.value) for paper in papers  # citing its NOTES.md is no import
                              if re.search(rf"pipelines/{paper}/[\w/]*\.py|{paper}/paper\.py", node.value)]
    assert offenders == []


@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"),
                    reason="the portable kernels are x86-64's AVX2 level and MKL's COMPATIBLE branch; "
                           f"{platform.machine()} has neither")
def test_bench_takes_native_cpu_kernels_unless_portable_is_asked() -> None:
    """Importing bench leaves the libraries their fastest kernels (bench/__init__.py); BENCH_CPU_KERNELS=portable
    takes ATen at AVX2 and MKL in its vendor-independent COMPATIBLE branch; variables already set are kept."""
    import subprocess
    import sys

    from bench import CPU_KERNEL_VARIABLES

    probe = ("import os, bench, torch; torch.ones(2) + 1; "
             "print(torch.backends.cpu.get_cpu_capability(), os.environ.get('MKL_CBWR'))")
    env = {k: v for k, v in __import__("os").environ.items() if k not in (*CPU_KERNEL_VARIABLES, "BENCH_CPU_KERNELS")}

    def probed(**variables: str) -> list[str]:
        return subprocess.run([sys.executable, "-c", probe], env={**env, **variables}, capture_output=True, text=True,
                              check=True).stdout.split()

    capability, cbwr = probed()
    assert capability in ("AVX2", "AVX512", "DEFAULT") and cbwr == "None"
    assert probed(BENCH_CPU_KERNELS="portable") == ["AVX2", "COMPATIBLE"]
    assert probed(BENCH_CPU_KERNELS="portable", MKL_CBWR="AVX2") == ["AVX2", "AVX2"]


def test_an_unknown_kernel_level_is_one_clear_error(monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    from bench.cli import main

    monkeypatch.setenv("BENCH_CPU_KERNELS", "fast")
    assert main(["algorithms"]) == 2
    assert capsys.readouterr().err == ("error: BENCH_CPU_KERNELS=fast is not a CPU-kernel level; set it to portable "
                                       "or native, or unset it (native)\n")


def test_cpu_kernels_are_written_and_read_as_provenance_records_them() -> None:
    from bench import CPU_KERNELS, describe_cpu_kernels, kernel_level_name, parse_cpu_kernels

    portable = describe_cpu_kernels(CPU_KERNELS["portable"])
    assert portable == "ATEN_CPU_CAPABILITY=avx2 MKL_CBWR=COMPATIBLE ONEDNN_MAX_CPU_ISA=AVX2"
    assert describe_cpu_kernels({}) == "native" and parse_cpu_kernels("native") == {}
    assert parse_cpu_kernels(portable) == CPU_KERNELS["portable"]
    assert (kernel_level_name(portable), kernel_level_name("native")) == ("portable", "native")
    assert kernel_level_name("MKL_CBWR=AVX2") == "MKL_CBWR=AVX2"  # neither level: the variables themselves
    assert parse_cpu_kernels("unknown") is None  # a record from before the variables were recorded
