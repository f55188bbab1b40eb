"""What the scripts that run an authors' released code beside ours share (``pipelines/<paper>/validation/
released_code.py``): the command line that repeats a run, the check that CHECKOUT is the authors' checkout, and the
Welch test of their per-round reports."""
from __future__ import annotations

import shlex
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import scipy.stats

from bench.errors import BenchError


def repeat_command(script: str, given: Sequence[str], checkout: Path) -> str:
    """The command that repeats this run, the checkout's path written as CHECKOUT (it differs per machine)."""
    return " ".join([f"uv run python {script}", *("CHECKOUT" if a == str(checkout) else shlex.quote(a) for a in given)])


def require_checkout(checkout: Path, files: Sequence[str], code: str, repository: str, commit: str) -> None:
    """One line naming the fix unless every one of ``files`` is in ``checkout``."""
    if not all((checkout / f).is_file() for f in files):
        raise BenchError(f"{checkout} is not a checkout of the released {code} code (no {' and '.join(files)}); "
                         f"clone github.com/{repository} and check out {commit[:7]}")


def welch_p(a: Sequence[float], b: Sequence[float]) -> float | None:
    """Welch's t-test of two samples' means (p-value); None where it is undefined (fewer than two values a side, or
    no spread on either side beyond float rounding). One side without spread leaves the test defined; scipy's
    precision warning for it is silenced."""
    if len(a) < 2 or len(b) < 2 or (np.ptp(a) < 1e-12 and np.ptp(b) < 1e-12):
        return None
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Precision loss occurred", RuntimeWarning)
        return float(scipy.stats.ttest_ind(a, b, equal_var=False).pvalue)


def p_text(p: float | None) -> str:
    return "—" if p is None else f"{p:.2f}"
