"""The mutation command's targets (tools/mutation.py, docs/testing.md): every file tests/mutation.toml names
exists under bench/, every test it lists exists, and every method a paper's tables run has an entry."""
from __future__ import annotations

import ast
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGETS = tomllib.loads((ROOT / "tests" / "mutation.toml").read_text())["files"]


def test_every_target_is_a_bench_file_whose_listed_tests_exist() -> None:
    for source, tests in TARGETS.items():
        assert source.startswith("bench/") and (ROOT / source).is_file(), source
        assert tests, source
        for node in tests:
            path, _, name = node.partition("::")
            assert (ROOT / path).is_file(), node
            if name:
                defined = {f.name for f in ast.walk(ast.parse((ROOT / path).read_text()))
                           if isinstance(f, ast.FunctionDef)}
                assert name.split("[")[0] in defined, node


def test_each_papers_method_has_its_tests_listed() -> None:
    for method in ("fedal", "fedhkd", "dafkd", "fedakd"):
        assert f"tests/test_{method}.py" in TARGETS[f"bench/algorithms/{method}.py"]


def papers_algorithms() -> set[str]:
    """Every algorithm a paper's suite runs: each method of pipelines/<paper>/params.yaml, in every profile and
    at the top level (the paper's own scale), with its per-setting values."""
    from bench.suites import load_suite

    names = set()
    for plug_in in sorted((ROOT / "pipelines").glob("*/paper.py")):
        suite = load_suite(plug_in.parent / "params.yaml")
        for profile in ("null", *suite.params.profiles):
            for key, method in suite.reload([f"profile={profile}"]).params.methods.items():
                names |= {method.algorithm(key, setting)["name"] for setting in (None, *method.per_setting)}
    return names


def test_every_method_the_papers_run_has_its_file_listed() -> None:
    """Each algorithm the four pipelines run is one file of bench/algorithms/ (the module its registered class
    is defined in), and tests/mutation.toml names the tests that guard that file. fedavg.py and standalone.py are
    listed too, though mutmut finds no mutants in them (pipelines/fedakd/NOTES.md, "Mutation survivors of the
    other baselines"): their entries cost nothing and keep this rule without exceptions."""
    from bench.algorithms import get_algorithm

    names = papers_algorithms()
    assert {"fedal", "fedhkd", "dafkd", "fedakd", "fedmd_fedal", "standalone"} <= names
    files = {Path(sys.modules[get_algorithm(name).__module__].__file__ or "").resolve() for name in names}
    assert all(path.parent == ROOT / "bench" / "algorithms" for path in files), files
    assert sorted(path.relative_to(ROOT).as_posix() for path in files
                  if path.relative_to(ROOT).as_posix() not in TARGETS) == []
