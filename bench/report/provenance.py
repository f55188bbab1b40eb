"""Where a report's numbers come from: the commit(s) and code of its runs, their environment, and the
commit of the pinned file it shows, said plainly where they differ (``summary.md``, ``paper.md``)."""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from bench.report.pinned import PinnedFile
from bench.report.runs import RunKey, RunRecord

DIRTY = "-dirty"  # bench/tracking's suffix for a commit with uncommitted changes to bench/
ENVIRONMENT = (("torch", "torch"), ("machine", "machine"), ("cpu_capability", "CPU kernels"),
               ("python", "Python"))


def _values(value: str | list[str] | None) -> list[str]:
    return [] if value is None else [value] if isinstance(value, str) else list(value)


def _commits(commits: list[str]) -> str:
    return ", ".join(f"`{c}`" for c in commits)


def provenance_markdown(runs: Mapping[RunKey, RunRecord], methods: list[str], pinned: PinnedFile | None,
                        pinned_name: str | None) -> str:
    """A ``## Provenance`` section: per git commit of the runs, which methods' runs it made (and whether
    they were trained from uncommitted changes), their code hash and environment; the pinned file's
    commit and whether it is the runs'."""
    by_commit: dict[str, list[str]] = {}
    for (method, _, _), record in runs.items():
        commit = str(record.provenance.get("git_commit", "unknown"))
        by_commit.setdefault(commit, [])
        if method not in by_commit[commit]:
            by_commit[commit].append(method)
    order = {m: i for i, m in enumerate(methods)}
    for listed in by_commit.values():
        listed.sort(key=lambda m: order.get(m, len(order)))
    commits = sorted(by_commit)
    lines = []
    if len(commits) == 1:
        lines.append(f"- Runs ({len(runs)}): git commit {_commits(commits)}.")
    else:
        lines.append(f"- Runs ({len(runs)}) from {len(commits)} git commits (a method's runs are re-trained "
                     "when its code or params change): "
                     + "; ".join(f"`{c}`: {', '.join(by_commit[c])}" for c in commits) + ".")
    dirty = [c for c in commits if c.endswith(DIRTY)]
    if dirty:
        which = "these runs were" if dirty == commits else f"the runs of {_commits(dirty)} were"
        lines.append(f"- **Not reproducible from a commit:** {which} trained from uncommitted changes to `bench/` "
                     f"(`{DIRTY}`), so their code is identified only by its sha256 below. To give them a commit, "
                     "commit the code and re-train (`dvc repro -f`: DVC sees no changed dependency).")
    if "unknown" in commits:
        lines.append("- `unknown`: runs trained outside a git checkout; their code is identified only by its "
                     "sha256 below.")
    code = sorted({str(r.provenance.get("code_sha256", "unknown")) for r in runs.values()})
    lines.append(f"- Code sha256 (`bench/`, provenance.json `code_sha256`): {_commits(code)}.")
    lines.append("- Environment: " + "; ".join(
        f"{label} {', '.join(sorted({str(r.provenance.get(key, 'unknown')) for r in runs.values()}))}"
        for key, label in ENVIRONMENT) + ".")
    if pinned is None:
        lines.append("- Pinned values: none (no pinned file; `bench pin` writes one).")
    else:
        pinned_commits = sorted(_values(pinned.environment.get("git_commit"))) or ["unknown"]
        pinned_code = sorted(_values(pinned.environment.get("code_sha256")))
        same = set(pinned_commits) == set(commits)
        line = (f"- Pinned values (`{pinned_name}`): from runs of git commit {_commits(pinned_commits)}"
                + (", the same commit as these runs'." if same else
                   f", **another commit than these runs'**"
                   + (" (the same code sha256)" if pinned_code and set(pinned_code) == set(code) else "")
                   + "; the compare stage (`drift.md`) checks that these runs still give the pinned numbers."))
        lines.append(line)
        if any(c.endswith(DIRTY) for c in pinned_commits):
            lines.append(f"- **The pinned runs were trained from uncommitted changes** ({_commits(pinned_commits)}): "
                         "no commit reproduces the pinned numbers; re-pin from committed code.")
    lines.append("- Audit any cell: `bench audit <this report> '<heading>/<row>/<column>'` as printed (a heading "
                 "may be shortened to its start: `'global/fedavg/iid final'` in the default suite's summary), or by "
                 "its id `<method>/<setting>/<statistic>` (statistics as named in `bench/suites/statistics.py`, e.g. "
                 "`fedavg/iid/final_global_acc`); `--rerun` re-runs its runs and checks them bitwise. "
                 "`dvc pull` fetches the runs' records.")
    return "\n".join(["## Provenance", "", *lines])


def pinned_display_name(path: Path, root: Path | None) -> str:
    """The pinned file's path as the report names it: relative to the suite's folder where possible."""
    if root is not None:
        try:
            return Path(path).resolve().relative_to(Path(root).resolve()).as_posix()
        except ValueError:
            pass
    return str(path)
