"""The documents' figures from `bench versus`, `bench audit` and `bench sensitivity` are what those commands
give at this commit (issue 29 item 9): `.ci/readme_figures.py --check` recomputes each block of its page
(docs/methods.md, docs/integrity.md) from the pinned files and the committed per-pair values of the
`bench versus` run (the audit line is checked against a real re-run in tests/test_audit.py). The README is
a front page: its two commands come first, and it quotes no measured figure a command does not keep. Every
link and every file path the documents name is a file of the repository."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / ".ci" / "readme_figures.py"


def _check(*args: str, blocks: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), "--check", *args,
                           *(a for b in blocks for a in ("--block", b))], capture_output=True, text=True, cwd=ROOT)


@pytest.mark.slow
def test_the_documents_figures_are_what_their_commands_give_and_a_stale_one_is_caught(tmp_path: Path) -> None:
    done = _check()
    assert done.returncode == 0, done.stdout + done.stderr
    stale = tmp_path / "methods.md"  # a figure that is not what the command gives (FedAlign's p, made up)
    stale.write_text((ROOT / "docs" / "methods.md").read_text().replace("paired t p = 0.0078, Holm 0.078",
                                                                        "paired t p = 0.0044, Holm 0.044"))
    done = _check("--page", str(stale), blocks=("versus",))
    assert done.returncode == 1 and done.stdout == (f"{stale} block figures:versus is not what its command gives now; "
                                                    "run .ci/readme_figures.py\n"), done.stdout + done.stderr


def test_the_readme_starts_with_the_two_commands_each_setting_up_from_the_locked_environment() -> None:
    """Issue 23 item 10, issue 29 item 10: the front page opens with the main job and the tests, each one line that
    works on a fresh clone (uv at the version CI pins, `uv sync --locked`, `uv run --locked`), nothing before them."""
    text = (ROOT / "README.md").read_text()
    pinned_uv = re.search(r"pip install -q (uv==[\d.]+)", (ROOT / ".ci" / "run").read_text())
    assert pinned_uv is not None
    opening = re.match(r"# fkd-bench\n\n```bash\n(.*?)\n```\n", text, re.S)
    assert opening is not None, "README.md must start with its commands block"
    setup = (f"python3 -m venv .tools && .tools/bin/pip install -q {pinned_uv[1]} && "
             ".tools/bin/uv sync --locked --compile-bytecode && .tools/bin/uv run --locked ")
    assert opening[1].split("\n") == [setup + "dvc repro", setup + "pytest"]
    assert len(text.splitlines()) <= 160


def _anchors(page: Path) -> set[str]:
    """The anchors a Markdown page's headings get (GitHub's rule: lower case, punctuation dropped, spaces to -)."""
    return {re.sub(r"[^\w\- ]", "", m[1].strip().lower()).replace(" ", "-")
            for m in re.finditer(r"^#+ (.*)$", page.read_text(), re.M)}


def documents() -> list[Path]:
    """README.md, docs/, the paper folders' READMEs and notes, the examples' READMEs."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted(ROOT.glob("pipelines/*/README.md")),
            *sorted(ROOT.glob("pipelines/*/NOTES.md")), *sorted(ROOT.glob("examples/**/README.md"))]


def test_every_link_of_the_documents_resolves_inside_the_repository() -> None:
    """The front page links into docs/ and the paper folders, and the narratives link to each other by section:
    every relative link of README.md, docs/ and the paper folders' READMEs and notes names a file of the repository
    and, where it names a section of a Markdown page, a heading of that page."""
    pages = documents()
    assert len(pages) >= 10
    broken = []
    for page in pages:
        text = re.sub(r"````.*?````|```.*?```", "", page.read_text(), flags=re.S)  # links in code blocks are examples
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue  # http(s), mailto: outside the repository by intent
            path, _, anchor = target.partition("#")
            linked = page.parent / path if path else page
            if not linked.exists() or (anchor and linked.suffix == ".md" and anchor not in _anchors(linked)):
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert broken == []


# A file path of the repository: one of its top-level folders, then no space, quote, bracket or separator, not
# inside a longer path (after a letter, dot, slash or colon: `../../bench/engine` in a dvc.yaml quote is relative to
# its pipeline). The authors' files the notes cite (`M:METHOD/cffl.py:94`, `model/model_multitask.py:57-62`) start
# with their repositories' folders, none of these.
TOP_FOLDERS = ("bench", "pipelines", "docs", "tests", "benchmarks", "tools", "examples", ".ci")
REPOSITORY_PATH = re.compile(rf"(?<![\w./:-])(?:{'|'.join(map(re.escape, TOP_FOLDERS))})/[^\s`'\"(),;]+")


def cited_paths(text: str) -> list[tuple[int, str]]:
    """(line, path) of each file path in a code span or code block of a Markdown text: a path with an extension
    and no placeholder (``*``, ``<paper>``, ``{a,b}``), without what follows the file (``:line``, ``:line-line``,
    a pytest ``::test``, an ``#anchor``, a ``§`` section)."""
    found = []
    for span in re.finditer(r"(`+)(.+?)\1", text, re.S):
        for raw in REPOSITORY_PATH.finditer(span[2]):
            path = re.sub(r"(:\d+(-\d+)?)+$", "", re.split(r"::|#|§", raw[0])[0].rstrip(".:"))
            if not re.search(r"[*<>{}\[\]]", path) and re.search(r"\.\w+$", path.rsplit("/", 1)[-1]):
                found.append((text.count("\n", 0, span.start(2) + raw.start()) + 1, path))
    return found


def dvc_cached_outputs() -> tuple[str, ...]:
    """Where the pipelines' DVC-cached outputs lie (partitions/, results/: `dvc pull` or `dvc repro` brings them, git
    does not hold them): each `outs` entry of a dvc.yaml that is not `cache: false`, up to its first template
    variable, from the repository root."""
    prefixes = []
    for dvc_file in [ROOT / "dvc.yaml", *sorted(ROOT.glob("pipelines/*/dvc.yaml"))]:
        folder = dvc_file.parent.relative_to(ROOT).as_posix()
        for stage in yaml.safe_load(dvc_file.read_text())["stages"].values():
            for out in stage.get("do", stage).get("outs", []):
                name, options = (out, {}) if isinstance(out, str) else next(iter(out.items()))
                if (options or {}).get("cache", True):
                    prefixes.append(f"{folder}/{name}".removeprefix("./").split("${")[0])
    return tuple(prefixes)


def test_the_cited_paths_are_found_without_the_authors_files_or_placeholders() -> None:
    text = ("`uv run python pipelines/fedal/studies/readings.py --control` and `bench/algorithms/fedal.py:94-98`; "
            "`tests/test_fedal.py::test_x[a]`, `docs/testing.md#measured`, `pipelines/fedal/NOTES.md` §3.\n"
            "`M:METHOD/cffl.py:94`, `model/model_multitask.py:57-62`, `../../bench/engine`, "
            "`pipelines/<paper>/paper.py`, `benchmarks/gpu/gpu-*.json`, `bench/algorithms/`\n"
            "```bash\nbench run --config examples/fedavg_digits.yaml\n```")
    assert cited_paths(text) == [(1, "pipelines/fedal/studies/readings.py"), (1, "bench/algorithms/fedal.py"),
                                 (1, "tests/test_fedal.py"), (1, "docs/testing.md"), (1, "pipelines/fedal/NOTES.md"),
                                 (4, "examples/fedavg_digits.yaml")]


def test_every_file_path_the_documents_cite_exists() -> None:
    """A file moved or renamed leaves no stale citation behind: every repository file path in a code span or block
    of the documents (README.md, docs/, the paper folders' READMEs and notes, the examples' READMEs) names a file of
    the repository. Only the pipelines' DVC-cached outputs may be absent (a clone without `dvc pull`)."""
    generated = dvc_cached_outputs()
    assert "pipelines/fedal/results/fedal-" in generated and not any("reports" in p for p in generated)
    cited = [(page, line, path) for page in documents() for line, path in cited_paths(page.read_text())]
    assert len(cited) >= 500
    missing = [f"{page.relative_to(ROOT)}:{line}: {path}" for page, line, path in cited
               if not (ROOT / path).exists() and not path.startswith(generated)]
    assert missing == []
