"""The mutation command's targets (tools/mutation.py, docs/testing.md): every file tests/mutation.toml names
exists under bench/, every test it lists exists, and each proposed method of the four papers has an entry."""
from __future__ import annotations

import ast
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
