"""The README's figures from `bench versus`, `bench audit` and `bench sensitivity` are what those commands
give at this commit (issue 29 item 9): `.ci/readme_figures.py --check` recomputes each block from the
pinned files and the committed per-pair values of the `bench versus` run (the audit line is checked
against a real re-run in tests/test_audit.py)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / ".ci" / "readme_figures.py"


def _check(readme: Path, *blocks: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), "--check", "--readme", str(readme),
                           *(a for b in blocks for a in ("--block", b))], capture_output=True, text=True, cwd=ROOT)


@pytest.mark.slow
def test_the_readme_figures_are_what_their_commands_give_and_a_stale_one_is_caught(tmp_path: Path) -> None:
    done = _check(ROOT / "README.md")
    assert done.returncode == 0, done.stdout + done.stderr
    stale = tmp_path / "README.md"  # the figures the README printed before the re-pin of commit 30419b2
    stale.write_text((ROOT / "README.md").read_text().replace("Wilcoxon W = 2, p = 0.00293, Holm 0.0293",
                                                              "Wilcoxon W = 5, p = 0.0044, Holm 0.044"))
    done = _check(stale, "versus")
    assert done.returncode == 1 and done.stdout == (f"{stale} block figures:versus is not what its command gives now; "
                                                    "run .ci/readme_figures.py\n"), done.stdout + done.stderr
