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
