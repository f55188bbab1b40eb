"""The documents' figures from `bench versus`, `bench audit` and `bench sensitivity` are what those commands
give at this commit (issue 29 item 9): `.ci/readme_figures.py --check` recomputes each block of its page
(docs/methods.md, docs/integrity.md) from the pinned files and the committed per-pair values of the
`bench versus` run (the audit line is checked against a real re-run in tests/test_audit.py). The README is
a front page: its two commands come first, and it quotes no measured figure a command does not keep."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / ".ci" / "readme_figures.py"


def _check(*args: str, blocks: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), "--check", *args,
                           *(a for b in blocks for a in ("--block", b))], capture_output=True, text=True, cwd=ROOT)


@pytest.mark.slow
def test_the_documents_figures_are_what_their_commands_give_and_a_stale_one_is_caught(tmp_path: Path) -> None:
    done = _check()
    assert done.returncode == 0, done.stdout + done.stderr
    stale = tmp_path / "methods.md"  # the figures the README printed before the re-pin of commit 30419b2
    stale.write_text((ROOT / "docs" / "methods.md").read_text().replace("Wilcoxon W = 2, p = 0.00293, Holm 0.0293",
                                                                        "Wilcoxon W = 5, p = 0.0044, Holm 0.044"))
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


def test_every_link_of_the_documents_resolves_inside_the_repository() -> None:
    """The front page links into docs/ and the paper folders, and the narratives link to each other by section:
    every relative link of README.md, docs/ and the paper folders' READMEs and notes names a file of the repository
    and, where it names a section of a Markdown page, a heading of that page."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted(ROOT.glob("pipelines/*/README.md")),
             *sorted(ROOT.glob("pipelines/*/NOTES.md"))]
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
