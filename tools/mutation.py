"""Mutation testing of one file against the tests that guard it, with mutmut (docs/testing.md).

    uv run --locked python tools/mutation.py bench/algorithms/fedprox.py [--tests NODE ...] [--jobs N] [--budget S]

mutmut changes one thing at a time in the file (an operator, a constant, an argument, a sign) and runs the
tests on each such *mutant*; a mutant that no test fails on *survived*. This command runs mutmut in a scratch
folder, ``.mutation/<file stem>/``: links to the folders the tests read and a ``pyproject.toml`` naming the file
and the tests (without ``--tests``, the ones ``tests/mutation.toml`` lists for the file). It prints each mutant
that was not killed, as ``file:line status`` with the line before (-) and after (+), then the counts and the
wall time, and writes the same to ``.mutation/<file stem>/survivors.txt``. Mutants are tried fastest first until
``--budget`` seconds have passed; those left are counted as "not checked". ``--resume`` keeps the folder's earlier
results (a plain run starts afresh), tries the earlier survivors again (new tests may kill them), then goes on
with the mutants not checked yet.
"""
from __future__ import annotations

import argparse
import ast
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import tomllib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGETS = ROOT / "tests" / "mutation.toml"
# What the tests read besides bench/ and tests/ (mutmut copies these into its mutants/ folder).
ALSO_COPY = ("examples", "benchmarks", "pipelines", "params.yaml", "dvc.yaml")
SINGLE_THREADED = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


@dataclass(frozen=True)
class Mutant:
    name: str
    status: str
    line: int
    before: str
    after: str


def fail(message: str) -> None:
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


def listed_tests(source: str) -> list[str]:
    """The tests tests/mutation.toml lists for ``source``."""
    targets = tomllib.loads(TARGETS.read_text())["files"]
    if source not in targets:
        fail(f"{TARGETS.relative_to(ROOT)} lists no tests for {source}; name them with --tests or add an entry")
    return list(targets[source])


def toml_list(items: list[str]) -> str:
    return "[" + ", ".join(f'"{item}"' for item in items) + "]"


def prepare(folder: Path, source: str, tests: list[str], fresh: bool) -> None:
    """The scratch folder mutmut runs in: links to the repository's folders, the project's pyproject.toml (its
    pytest settings) and a [tool.mutmut] section."""
    if fresh and folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True, exist_ok=True)
    copied = [name for name in ALSO_COPY if (ROOT / name).exists()]
    for name in ("bench", "tests", *copied):
        if not (folder / name).is_symlink():
            (folder / name).symlink_to(ROOT / name)
    (folder / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text() + f"""
[tool.mutmut]
source_paths = ["bench"]
only_mutate = ["{source}"]
pytest_add_cli_args_test_selection = {toml_list(tests)}
pytest_add_cli_args = ["-x", "-q", "-p", "no:cacheprovider"]
also_copy = {toml_list(copied)}
process_isolation = "forkserver"
""")


def mutmut_command(*args: str) -> list[str]:
    return [shutil.which("mutmut", path=str(Path(sys.executable).parent)) or "mutmut", *args]


def mutmut(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(mutmut_command(*args), cwd=folder, env={**os.environ, **SINGLE_THREADED},
                          capture_output=True, text=True)


def run_within(folder: Path, jobs: int, budget: float, log: Path, names: list[str] | None = None) -> int:
    """``mutmut run`` in ``folder`` (on the mutants ``names`` only, if given), interrupted (as Ctrl-C does: the
    results so far are kept) once ``budget`` seconds have passed; its exit status, 0 when the budget stopped it."""
    with log.open("a") as handle:
        process = subprocess.Popen(mutmut_command("run", "--max-children", str(jobs), *(names or [])), cwd=folder,
                                   env={**os.environ, **SINGLE_THREADED}, stdout=handle, stderr=subprocess.STDOUT,
                                   start_new_session=True)
        try:
            return process.wait(timeout=budget)
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=120)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
            return 0


NO_MUTANTS = "could not find any test case for any mutant"
"""What mutmut logs, then exits 1, when a file has nothing it mutates."""


def results(folder: Path, module: str) -> dict[str, str]:
    """Each mutant of ``module`` that mutmut knows in ``folder``, with its status ("killed", "survived", "not
    checked", ...)."""
    if not (folder / "mutants").is_dir():
        return {}
    listed = mutmut(folder, "results", "--all", "true").stdout
    return {name: status for name, status in re.findall(r"^\s*(\S+): (.+)$", listed, re.M)
            if name.startswith(module + ".")}


def function_span(tree: ast.Module, qualified: list[str]) -> tuple[int, int]:
    """First line (its first decorator's) and last line of the function ``qualified`` (class, method) in ``tree``."""
    body: list[ast.stmt] = tree.body
    node: ast.stmt | None = None
    for name in qualified:
        node = next((n for n in body if isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                     and n.name == name), None)
        if node is None:
            return 1, 1
        body = node.body if isinstance(node, ast.ClassDef) else []
    assert node is not None and node.end_lineno is not None
    decorators = getattr(node, "decorator_list", [])
    return min([node.lineno, *(d.lineno for d in decorators)]), node.end_lineno


def locate(name: str, status: str, diff: str, module: str, lines: list[str], tree: ast.Module) -> Mutant:
    """The mutant's line in the file: the first removed line of mutmut's diff of its function, found in the
    function's span of the file (nearest to the hunk's offset where the same text occurs twice)."""
    key = re.sub(r"__mutmut_\d+$", "", name.removeprefix(module + "."))
    qualified = key.split("ǁ")[1:3] if key.startswith("xǁ") else [key.removeprefix("x_")]
    first, last = function_span(tree, qualified)
    offset, before, after = 0, "", ""
    position = 0
    for text in diff.splitlines():
        if (hunk := re.match(r"@@ -(\d+)", text)) is not None:
            position = int(hunk[1])
        elif text.startswith("-") and not text.startswith("---") and not before:
            before, offset = text[1:].strip(), position
        elif text.startswith("+") and not text.startswith("+++") and not after:
            after = text[1:].strip()
        elif text.startswith(" ") and not before:
            position += 1
    guess = first + offset - 1
    matches = [i + 1 for i in range(first - 1, last) if lines[i].strip() == before]
    line = min(matches, key=lambda i: abs(i - guess)) if matches else guess
    return Mutant(name, status, line, before, after)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", help="the file to mutate, relative to the repository root (bench/...)")
    parser.add_argument("--tests", nargs="+", metavar="NODE",
                        help="pytest node ids to run on each mutant (default: tests/mutation.toml's for the file)")
    parser.add_argument("--jobs", type=int, default=1, help="mutants tested at once (default 1: the cores are shared)")
    parser.add_argument("--budget", type=float, default=1800.0,
                        help="seconds of mutation testing; mutants left then are 'not checked' (default 1800)")
    parser.add_argument("--resume", action="store_true",
                        help="keep the earlier results in .mutation/<stem>/, retry their survivors, then go on")
    args = parser.parse_args(argv)
    source = Path(args.source).as_posix()
    if not (ROOT / source).is_file() or not source.startswith("bench/") or not source.endswith(".py"):
        fail(f"{args.source} is not a Python file under bench/ (give its path from the repository root)")
    tests = args.tests or listed_tests(source)
    folder = ROOT / ".mutation" / Path(source).stem
    prepare(folder, source, tests, fresh=not args.resume)
    module = source.removesuffix(".py").replace("/", ".")

    start = time.monotonic()
    print(f"mutmut on {source} against {len(tests)} tests, {args.jobs} at a time, for at most {args.budget:.0f} s "
          f"(log: {folder / 'run.log'})", flush=True)
    exit_status = 0
    if args.resume and (survivors := [name for name, status in results(folder, module).items() if status == "survived"]):
        exit_status = run_within(folder, args.jobs, args.budget, folder / "run.log", survivors)  # new tests may kill them
    if exit_status == 0 and (remaining := args.budget - (time.monotonic() - start)) > 0:
        exit_status = run_within(folder, args.jobs, remaining, folder / "run.log")
    seconds = time.monotonic() - start
    if (exit_status != 0 and not results(folder, module) and NO_MUTANTS in (folder / "run.log").read_text()
            and not any(isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                        for node in ast.walk(ast.parse((ROOT / source).read_text())))):
        print(f"0 mutants: mutmut mutates only the bodies of functions and methods, and {source} defines none (its "
              f"behaviour is class-level values and what it inherits); check those by hand; {seconds:.0f} s")
        return 0
    if exit_status != 0:
        fail(f"mutmut exited {exit_status}; the tests may fail without mutation; see {folder / 'run.log'}")

    statuses = results(folder, module)
    text = (ROOT / source).read_text()
    lines, tree = text.splitlines(), ast.parse(text)
    left = [locate(name, status, mutmut(folder, "show", name).stdout, module, lines, tree)
            for name, status in statuses.items() if status not in ("killed", "not checked")]
    left.sort(key=lambda m: (m.line, m.name))
    counts = Counter(statuses.values())
    report = [f"{source}:{m.line} {m.status} ({m.name.rsplit('.', 1)[-1]})\n  - {m.before}\n  + {m.after}"
              for m in left]
    report.append(f"{len(statuses)} mutants: " + ", ".join(f"{n} {status}" for status, n in counts.most_common())
                  + f"; {seconds:.0f} s")
    (folder / "survivors.txt").write_text("\n".join(report) + "\n")
    print("\n".join(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
