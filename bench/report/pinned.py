"""Pinned baselines: the numbers a suite produced, committed as ``reports/pinned/<suite>.json``, and
the check that the suite still produces them.

``bench pin`` writes the file deliberately (never as a side effect); ``bench compare`` reads it.
Per method, setting and seed it holds the run's value of every statistic the suite declares
(:meth:`Suite.statistics`: by default the final-round and last-5-round mean of global and local
accuracy; a paper's cells add theirs, e.g. CF or rounds to a target), keyed by the statistic's name
(bench/suites/statistics.py), and the run's config hash; per (method, setting) the mean over seeds;
the environment the runs came from; and the tolerance policy. ``compare`` computes every pinned name
anew, so a file keeps comparing when the suite's declared statistics change. A value that is not
finite (a target never reached) is not pinned.

- **Same environment: exact.** When a run's fingerprint (machine, the processor (``cpu``: vendor,
  family, model, stepping, caches, a digest of its flags), the CPU kernels torch dispatches to and the
  kernel variables in force (``cpu_kernels``: the level, ``bench/__init__.py``), torch version, uv.lock sha256, Python minor version)
  equals the pinned one, its values must be bitwise equal: runs are
  deterministic (one seed per run, spawned RNG streams, deterministic kernels, single-threaded,
  fixed aggregation order), so any difference is a change in code or config, not noise. Runs at another
  kernel level than the pins (native runs against portable pins) are never compared bitwise, and
  :meth:`Comparison.kernels_line` says so.
- **Other environments: absolute tolerance** (fields of the file; defaults below). The kernel pinning
  does not make every processor compute the same bits: the default suite's pins, made on one host,
  re-trained on an AMD family-26 host with the pinning code itself gave other bits (FedGen, Dirichlet
  0.1, seed 1: 0.9533 against 0.9556; docs/determinism.md), so a pinned file without the processor
  (pinned before it was recorded) compares with its tolerance everywhere until re-pinned. Another CPU, BLAS
  or torch build rounds float32 differently; SGD amplifies those last-bit differences until a run
  behaves like a re-draw of its training noise (init and batch order), though its data and
  partition are unchanged. So the tolerance must cover the seed-to-seed spread. Measured on the
  default suite (FedAvg, 30 rounds, seeds 0-2): final global accuracy spans up to 2.2 points
  (450 test images, one image = 0.22 points), final local accuracy up to 6.5 points (small local
  test splits). Hence ``per_seed_abs = 0.07`` per seed, and ``mean_abs = 0.04`` for the mean over
  seeds (about sqrt(3) times less variable). A real regression (a broken method, a wrong
  aggregation) moves every seed and the mean by far more; within one environment the exact policy
  catches any change.
- **Another config: fail, in every environment.** A run whose config hash differs from the pinned run's
  (a params file or a default in the code changed) is ``CHANGED`` whatever its numbers, since a
  tolerance meant for rounding noise lets a real change through elsewhere (a tenfold FedProx ``mu``
  stayed within the default suite's tolerances). A deliberate change is re-pinned with ``bench pin``.

``bench compare`` writes the whole table to ``--out`` and prints the summary line and only what failed
(CHANGED, DRIFT, MISSING, and a saved partition that is not the one its data, scheme and seed make:
:mod:`bench.report.partition_check`), with what to do about it. A suite with no pinned file at the
default path (a profile nobody pinned) compares as all "not pinned", which does not fail.
"""
from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from bench import kernel_level_name, parse_cpu_kernels
from bench.config import describe_validation
from bench.errors import BenchError
from bench.fileio import write_json
from bench.report.partition_check import PartitionCheck, check_partitions
from bench.report.runs import RunKey, RunRecord, find_runs, repro_command, require_runs, run_values
from bench.suites import Suite
from bench.suites.statistics import Statistic, mean_std

FingerprintField = Literal["machine", "cpu", "cpu_capability", "cpu_kernels", "torch", "uv_lock_sha256",
                           "python_minor", "platform"]
FORMAT = "fkd-bench-pinned"
FORMAT_VERSION = 1
FINGERPRINT: tuple[FingerprintField, ...] = ("machine", "cpu", "cpu_capability", "cpu_kernels", "torch", "uv_lock_sha256",
                                             "python_minor")
ENVIRONMENT = ("platform", "machine", "cpu", "cpu_capability", "cpu_kernels", "python", "torch", "uv_lock_sha256",
               "git_commit", "code_sha256")
PER_SEED_ABS = 0.07
MEAN_ABS = 0.04


class _Strict(BaseModel):
    # a target never reached (rounds to target) is inf: written as the string "Infinity" (strict JSON), read back
    model_config = ConfigDict(extra="forbid", frozen=True, ser_json_inf_nan="strings")


class Tolerance(_Strict):
    same_environment: Literal["exact"] = "exact"
    fingerprint: tuple[FingerprintField, ...] = FINGERPRINT
    per_seed_abs: float = Field(PER_SEED_ABS, ge=0)
    mean_abs: float = Field(MEAN_ABS, ge=0)


class PinnedSeed(_Strict):
    config_sha256: str
    values: dict[str, float]


class PinnedCell(_Strict):
    seeds: dict[int, PinnedSeed] = Field(min_length=1)
    mean: dict[str, float]


class PinnedFile(_Strict):
    format: Literal["fkd-bench-pinned"]
    format_version: Literal[1]
    suite: str
    environment: dict[str, str | list[str]]
    tolerance: Tolerance
    values: dict[str, dict[str, PinnedCell]]  # method -> setting -> cell


def default_pinned_path(params_file: Path, suite_name: str) -> Path:
    """``reports/pinned/<suite>.json`` beside the params file (committed with it)."""
    return Path(params_file).parent / "reports" / "pinned" / f"{suite_name}.json"


def pinned_kernels(path: Path) -> str | None:
    """The CPU kernels a pinned file's runs were trained at (its ``cpu_kernels``, as provenance writes them);
    None without a readable file or that record (``bench compare`` reports a broken file)."""
    try:
        value = json.loads(Path(path).read_text()).get("environment", {}).get("cpu_kernels")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, str) and parse_cpu_kernels(value) is not None else None


def fingerprint(environment: dict, fields: tuple[str, ...] = FINGERPRINT) -> tuple[str, ...]:
    """The environment fields that must be equal for the exact policy to apply."""
    python = str(environment.get("python", "unknown"))
    values = {**environment, "python_minor": ".".join(python.split(".")[:2])}
    return tuple(str(values.get(k, "unknown")) for k in fields)


def same_environment(pinned: PinnedFile, provenance: dict) -> bool:
    """Whether a run's values must equal the pinned ones bitwise (else the pinned tolerance applies): its
    fingerprint equals the pinned runs' on the file's fields and on today's (:data:`FINGERPRINT`). A field
    the pinned file did not record (``cpu`` in files pinned before it was recorded) is never equal, so such
    pins compare with their tolerance on every host until re-pinned."""
    fields = tuple(dict.fromkeys((*pinned.tolerance.fingerprint, *FINGERPRINT)))
    environment = {k: v for k, v in pinned.environment.items() if isinstance(v, str)}
    ours = fingerprint(environment, fields)
    return "unknown" not in ours and fingerprint(provenance, fields) == ours


def seed_values(suite: Suite, runs: dict[RunKey, RunRecord], key: RunKey,
                extra: Sequence[str] = ()) -> dict[str, float]:
    """What is pinned of one run: each value of the suite's statistics for its setting and of the
    statistics named ``extra`` (those a pinned file holds); ``inf`` is a target never reached (rounds to a
    target, pipelines/dafkd/NOTES.md §3.6), pinned as such (JSON ``Infinity``)."""
    named = [*suite.statistics(key[1]), *(Statistic.model_validate(name) for name in extra)]
    unique = list({s.name: s for s in named}.values())
    return {k: v for k, v in run_values(suite, runs, key, unique).items() if not math.isnan(v)}


def seed_means(per_seed: list[dict[str, float]]) -> dict[str, float]:
    """Mean over seeds (in the order given) of each value every seed has."""
    keys = set.intersection(*(set(v) for v in per_seed))
    return {k: mean_std([v[k] for v in per_seed])[0] for k in sorted(keys)}


def pinned_environment(records: list[RunRecord]) -> dict[str, str | list[str]]:
    """The runs' environment; a field on which they differ lists every value, except a fingerprint field."""
    fingerprints = {fingerprint(r.provenance) for r in records}
    if len(fingerprints) > 1:
        raise BenchError(f"the runs come from {len(fingerprints)} environments ({', '.join(FINGERPRINT)}: "
                         f"{sorted(fingerprints)}); re-train them in one environment before `bench pin`")
    out: dict[str, str | list[str]] = {}
    for key in ENVIRONMENT:
        values = sorted({str(r.provenance.get(key, "unknown")) for r in records})
        out[key] = values[0] if len(values) == 1 else values
    return out


def pin(suite: Suite, path: Path, per_seed_abs: float | None = None, mean_abs: float | None = None) -> Path:
    """Write the pinned file of every run of the suite (all must exist; a run that diverged is pinned
    without values and left out of its cell's mean); tolerances default to the policy."""
    runs = require_runs(suite)
    p = suite.params
    values: dict[str, dict[str, PinnedCell]] = {}
    for method in p.methods:
        values[method] = {}
        for setting in suite.settings_of(method):
            seeds = {seed: runs.get((method, setting, seed)) for seed in sorted(p.suite.seeds)}
            per_seed = {seed: seed_values(suite, runs, (method, setting, seed)) if r else {}
                        for seed, r in seeds.items()}
            finished = [per_seed[s] for s, r in seeds.items() if r]  # a diverged seed is pinned without values
            values[method][setting] = PinnedCell(
                seeds={s: PinnedSeed(config_sha256=r.metrics["config_sha256"] if r else
                                     suite.config(method, setting, s).sha256, values=per_seed[s])
                       for s, r in seeds.items()},
                mean=seed_means(finished) if finished else {})
    pinned = PinnedFile(format=FORMAT, format_version=FORMAT_VERSION, suite=suite.name,
                        environment=pinned_environment(list(runs.values())),
                        tolerance=Tolerance(per_seed_abs=PER_SEED_ABS if per_seed_abs is None else per_seed_abs,
                                            mean_abs=MEAN_ABS if mean_abs is None else mean_abs), values=values)
    return write_json(path, json.loads(pinned.model_dump_json()))


def pin_warnings(path: Path) -> list[str]:
    """What a freshly written pinned file should not have: runs trained from uncommitted code."""
    commits = json.loads(Path(path).read_text())["environment"].get("git_commit", [])
    dirty = [c for c in ([commits] if isinstance(commits, str) else commits) if c.endswith("-dirty")]
    return [f"the runs were trained from uncommitted changes to bench/ ({', '.join(dirty)}): no commit reproduces "
            "the pinned numbers, only the pinned code_sha256 identifies their code; to pin a commit, commit the "
            "code, re-train (`dvc repro -f`) and pin again"] if dirty else []


def nothing_pinned(suite: Suite) -> PinnedFile:
    """The pinned file of a suite nobody pinned: every value compares as "not pinned"."""
    return PinnedFile(format=FORMAT, format_version=FORMAT_VERSION, suite=suite.name, environment={},
                      tolerance=Tolerance(), values={})


def load_pinned(path: Path, suite: Suite) -> PinnedFile:
    """The pinned file of this suite; one clear :class:`BenchError` (with the fix) for any problem."""
    fix = f"re-create it with `bench pin` (after `bench suite train`), or restore it with `git checkout -- {path}`"
    try:
        raw = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise BenchError(f"pinned file {path} not found; create it with `bench pin` (after `bench suite train`), "
                         "or pass --pinned") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BenchError(f"pinned file {path} is not valid JSON ({exc}); {fix}") from None
    try:
        pinned = PinnedFile.model_validate(raw)
    except ValidationError as exc:
        raise BenchError(f"pinned file {path} is not a {FORMAT} v{FORMAT_VERSION} file "
                         f"({describe_validation(exc)}); {fix}") from None
    if pinned.suite != suite.name:
        raise BenchError(f"pinned file {path} is for suite {pinned.suite!r}, not {suite.name!r}; pass --pinned "
                         "with this suite's file, or create it with `bench pin`")
    names = {k for cells in pinned.values.values() for cell in cells.values()
             for k in [*cell.mean, *(k for seed in cell.seeds.values() for k in seed.values)]}
    for name in sorted(names):
        try:
            Statistic.model_validate(name)
        except ValidationError as exc:
            raise BenchError(f"pinned file {path}: {describe_validation(exc)}; {fix}") from None
    return pinned


OK, CHANGED, DRIFT, MISSING, NOT_PINNED = "ok", "CHANGED", "DRIFT", "MISSING", "not pinned"
STATUSES = (OK, CHANGED, DRIFT, MISSING, NOT_PINNED)  # the order of the summary line
FAILING = (CHANGED, DRIFT, MISSING)
SHORT_LIMIT = 30  # lines of findings `Comparison.summary` prints before pointing to the full table


@dataclass(frozen=True)
class Row:
    """One compared value; ``seed`` None is the mean over the pinned seeds. ``changed``: the run was
    trained with another config than the pinned run (for the mean: some seed's run was)."""
    method: str
    setting: str
    seed: int | None
    key: str
    pinned: float | None
    now: float | None
    tolerance: float  # 0.0: exact (same environment)
    note: str = ""
    changed: bool = False

    @property
    def status(self) -> str:
        if self.pinned is None:
            return NOT_PINNED
        if self.now is None:
            return MISSING
        if self.changed:  # another config: whatever its numbers, they are not the pinned run's
            return CHANGED
        if self.tolerance == 0.0:
            return OK if self.now == self.pinned else DRIFT
        return OK if self.now == self.pinned or abs(self.now - self.pinned) <= self.tolerance else DRIFT  # inf == inf

    @property
    def failed(self) -> bool:
        return self.status in FAILING

    @property
    def run(self) -> str:
        return f"{self.method}/{self.setting}/{'mean' if self.seed is None else f'seed{self.seed}'}"

    @property
    def name(self) -> str:
        return f"{self.run} {self.key}"


def _compare_values(method: str, setting: str, seed: int | None, pinned: dict[str, float],
                    now: dict[str, float] | None, tolerance: float, note: str, changed: bool = False) -> list[Row]:
    """Rows for every pinned key, then every current key not pinned; ``note`` explains them."""
    now = now or {}
    keys = [*pinned, *(k for k in now if k not in pinned)]
    return [Row(method, setting, seed, k, pinned.get(k), now.get(k), tolerance,
                "no longer reported" if note == "" and k not in now else note, changed) for k in keys]


def _full(v: float | None) -> str:
    return "—" if v is None else repr(v)


def _tolerance(r: Row) -> str:
    if r.pinned is None or r.now is None:
        return "—"
    return "exact" if r.tolerance == 0.0 else f"±{r.tolerance:g}"


def _values(rows: list[Row]) -> str:
    return ", ".join(r.key for r in rows) if len(rows) <= 2 else f"{len(rows)} values"


@dataclass(frozen=True)
class Comparison:
    path: Path
    pinned: PinnedFile
    rows: list[Row]
    produce: str | None = None  # the command producing the suite's missing runs
    removed: tuple[str, ...] = ()  # pinned method/setting pairs the suite no longer has
    partitions: tuple[PartitionCheck, ...] = ()  # the saved partitions of the settings compared
    pinned_exists: bool = True  # False: no pinned file at the default path (nothing pinned)
    other_kernels: tuple[tuple[str, int], ...] = ()  # (CPU kernels, runs) of runs trained at other kernels than the pins

    def kernels_line(self) -> list[str]:
        """One line when runs were trained at other CPU kernels than the pinned runs: they compare within the
        tolerance, never bitwise, and how to compare them bitwise."""
        if not self.other_kernels:
            return []
        pinned = str(self.pinned.environment.get("cpu_kernels"))
        runs = ", ".join(f"{n} at {kernel_level_name(k)}" for k, n in self.other_kernels)
        return [f"CPU kernels: runs trained at other kernels than the pins ({runs}; pinned at "
                f"{kernel_level_name(pinned)}: {pinned}) compare within the pinned tolerance, not bitwise; to "
                "compare them bitwise, re-train them at the pins' kernels (`bench suite train` does, unless "
                "BENCH_CPU_KERNELS or a kernel variable is set)"]

    @property
    def failures(self) -> list[Row]:
        return [r for r in self.rows if r.failed]

    @property
    def failed(self) -> bool:
        """A value failed (CHANGED, DRIFT, MISSING) or a saved partition is not the one the runs used."""
        return bool(self.failures) or any(c.failed for c in self.partitions)

    @property
    def counts(self) -> dict[str, int]:
        return {s: sum(r.status == s for r in self.rows) for s in STATUSES}

    def summary_line(self) -> str:
        verified = sum(c.verified for c in self.partitions)
        return (f"suite {self.pinned.suite} against {self.path}"
                + ("" if self.pinned_exists else " (absent: nothing pinned; `bench pin` pins the runs)") + ": "
                + ", ".join(f"{n} {s}" for s, n in self.counts.items())
                + (f"; partitions: {verified} of {len(self.partitions)} verified against their data, scheme and seed"
                   if self.partitions else "")
                + (" (the data is not at hand for the others: --data-dir)"
                   if any(c.made is None and not c.failed for c in self.partitions) else ""))

    def findings(self) -> list[str]:
        """What failed, in table order: one line per (method, setting) whose config changed, per drifted
        value and per missing run (with why); then what is not pinned, per method."""
        changed: dict[tuple[str, str], list[Row]] = {}
        missing: dict[tuple[str, str, int | None, str], list[Row]] = {}
        not_pinned: dict[str, int] = {}
        drift: list[Row] = []
        for r in self.rows:
            status = r.status
            if status == CHANGED:
                changed.setdefault((r.method, r.setting), []).append(r)
            elif status == DRIFT:
                drift.append(r)
            elif status == MISSING:
                missing.setdefault((r.method, r.setting, r.seed, r.note), []).append(r)
            elif status == NOT_PINNED:
                not_pinned[r.method] = not_pinned.get(r.method, 0) + 1
        lines = []
        for (method, setting), rows in changed.items():
            seeds = sorted({r.seed for r in rows if r.seed is not None})
            which = (f"seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))}" if seeds
                     else "the mean over seeds")
            lines.append(f"  CHANGED: {method}/{setting}: {which} trained with another config than pinned "
                         f"({len(rows)} values)")
        lines += [f"  DRIFT: {r.name}: pinned {_full(r.pinned)}, now {_full(r.now)}, tolerance {_tolerance(r)}"
                  + (f" ({r.note})" if r.note else "") for r in drift]
        runs_missing = {(m, s) for m, s, seed, _ in missing if seed is not None}
        lines += [f"  MISSING: {rows[0].run} ({_values(rows)}): {note}" for (m, s, seed, note), rows in missing.items()
                  if seed is not None or (m, s) not in runs_missing]
        lines += [f"  PARTITION: {c.line()}" for c in self.partitions if c.failed]
        lines += [f"  not pinned: {method} ({n} values, new since the pin: `bench pin` adds them)"
                  for method, n in not_pinned.items()] if self.pinned_exists else []
        return lines

    def advice(self) -> list[str]:
        """What to do about each kind of failure present."""
        counts, out = self.counts, []
        commit = self.pinned.environment.get("git_commit", "unknown")
        commit = ", ".join(commit) if isinstance(commit, list) else commit
        if counts[CHANGED]:
            out.append("CHANGED: these runs were trained with another config than the pinned runs (a params file or "
                       "a default in the code changed), so their numbers are not comparable with the pinned ones. "
                       "If the change is deliberate, re-pin with `bench pin` and say why in the commit; otherwise "
                       "undo it.")
        if counts[DRIFT]:
            out.append("DRIFT: a number left its tolerance. If the change is meant to move the numbers, re-pin with "
                       f"`bench pin` and say why in the commit; otherwise find the change since the pinned commit "
                       f"({commit}).")
        if counts[MISSING]:
            out.append("MISSING: " + "; ".join(
                ([f"produce the runs with {self.produce}"] if self.produce else [])
                + ([f"the suite no longer has {', '.join(self.removed)}: if removed deliberately, re-pin with "
                    "`bench pin`"] if self.removed else [])) + ".")
        return out

    def format(self) -> str:
        """The drift table, then the summary line, every finding and what to do."""
        def num(v: float | None) -> str:
            return "—" if v is None else f"{v:.6f}"

        def diff(r: Row) -> str:
            if r.pinned is None or r.now is None:
                return "—"
            d = r.now - r.pinned
            return "0" if d == 0 else f"{d:+.2e}" if abs(d) < 1e-4 else f"{d:+.6f}"

        header = ("method", "setting", "seed", "value", "pinned", "now", "diff", "tolerance", "status")
        table = [header] + [(r.method, r.setting, "mean" if r.seed is None else str(r.seed), r.key, num(r.pinned),
                             num(r.now), diff(r), _tolerance(r),
                             r.status + (f" ({r.note})" if r.note else "")) for r in self.rows]
        widths = [max(len(row[i]) for row in table) for i in range(len(header) - 1)]
        lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)) + "  " + row[-1] for row in table]
        partitions = ["", *(c.line() for c in self.partitions)] if self.partitions else []
        return "\n".join([*lines, *partitions, "", self.summary_line(), *self.kernels_line(), *self.findings(),
                          *self.advice()])

    def summary(self, table: Path | str | None = None, limit: int = SHORT_LIMIT) -> str:
        """The summary line and what failed, without the table (for a log); ``table``: where the full one is."""
        findings = self.findings()
        where = f" (full table: {table})" if table else ""
        if len(findings) > limit:
            more = f"  ... and {len(findings) - limit} more" + (f" in {table}" if table else "")
            findings = [*findings[:limit], more]
        return "\n".join([self.summary_line() + where, *self.kernels_line(), *findings, *self.advice()])


def compare(suite: Suite, path: Path, data_dir: Path | None = None, required: bool = True) -> Comparison:
    """Every pinned value against the suite's current runs, and every current value not pinned.

    Exact where a run's environment fingerprint equals the pinned one, else the pinned tolerance; a run
    trained with another config than the pinned run is CHANGED; a pinned value whose run is missing,
    failed or stale is MISSING; all three fail. A value not pinned does not. A suite none of whose
    runs exist is an error naming the command that produces them. The saved partition of every setting
    compared is checked against the one its data (in ``data_dir``), scheme and seed make and the one its
    runs recorded. Without ``required``, a pinned file absent at ``path`` means nothing is pinned."""
    exists = required or Path(path).exists()
    pinned = load_pinned(path, suite) if exists else nothing_pinned(suite)
    found, problems = find_runs(suite)
    if not found:
        raise BenchError(f"suite {suite.name} has none of its {len(problems)} runs in {suite.results_dir()} to "
                         f"compare with {path}; run {repro_command(suite)} first")
    tol = pinned.tolerance
    cells: dict[tuple[str, str], PinnedCell | None] = {
        (m, s): cell for m, by_setting in pinned.values.items() for s, cell in by_setting.items()}
    for m, s, _ in found:
        cells.setdefault((m, s), None)
    methods, settings = list(suite.params.methods), list(suite.params.settings)

    def table_order(key: tuple[str, str]) -> tuple[int, str, int, str]:  # the suite's order, then the rest
        m, s = key
        return (methods.index(m) if m in methods else len(methods), m,
                settings.index(s) if s in settings else len(settings), s)

    rows: list[Row] = []
    for method, setting in sorted(cells, key=table_order):
        cell = cells[method, setting]
        seeds = sorted({*(cell.seeds if cell else ()), *(seed for m, s, seed in found if (m, s) == (method, setting))})
        pinned_names = list(dict.fromkeys([*(cell.mean if cell else ()),
                                           *(k for e in (cell.seeds.values() if cell else ()) for k in e.values)]))
        records: dict[int, RunRecord] = {}
        now: dict[int, dict[str, float]] = {}
        changed_seeds: set[int] = set()
        for seed in seeds:
            key: RunKey = (method, setting, seed)
            entry = cell.seeds.get(seed) if cell else None
            record = found.get(key)
            changed = False
            if record is None:
                note = problems.get(key, "not in the suite's params")
            else:
                records[seed] = record
                now[seed] = seed_values(suite, found, key, pinned_names)
                current = record.metrics["config_sha256"]
                changed = entry is not None and entry.config_sha256 != current
                note = (f"config changed since pinned: sha256 {entry.config_sha256[:12]}, now {current[:12]}"
                        if changed and entry is not None else "")
            if changed:
                changed_seeds.add(seed)
            exact = record is not None and same_environment(pinned, record.provenance)
            rows += _compare_values(method, setting, seed, entry.values if entry else {}, now.get(seed),
                                    0.0 if exact else tol.per_seed_abs, note, changed)
        mean_seeds = sorted(s for s, e in cell.seeds.items() if e.values) if cell else seeds  # not diverged ones
        complete = all(s in records for s in mean_seeds)
        now_mean = seed_means([now[s] for s in mean_seeds]) if complete and mean_seeds else None
        exact = complete and all(same_environment(pinned, records[s].provenance) for s in mean_seeds)
        changed_mean = bool(changed_seeds & set(mean_seeds))
        note = ("a seed's run is missing" if not complete
                else "a seed's config changed since pinned" if changed_mean else "")
        rows += _compare_values(method, setting, None, cell.mean if cell else {}, now_mean,
                                0.0 if exact else tol.mean_abs, note, changed_mean)
    failed = [r for r in rows if r.status == MISSING]
    produce = {r.method for r in failed if r.method in methods and r.setting in settings}
    removed = tuple(dict.fromkeys(f"{r.method}/{r.setting}" for r in failed
                                  if r.method not in methods or r.setting not in settings))
    trained: dict[tuple[str, int | None], set[str]] = {}
    for (_, setting, seed), record in found.items():
        recorded = record.provenance.get("partition_sha256")
        trained.setdefault(suite.partition_key(setting, seed), set()).update([recorded] if recorded else [])
    partitions = tuple(check_partitions(suite, [s for s in settings if any(k[0] == s for k in trained)], data_dir,
                                        trained))
    return Comparison(Path(path), pinned, rows, repro_command(suite, produce) if produce else None, removed,
                      partitions, exists, other_kernels(pinned, list(found.values())))


def other_kernels(pinned: PinnedFile, records: list[RunRecord]) -> tuple[tuple[str, int], ...]:
    """How many runs were trained at each CPU-kernel setting other than the pinned runs' (none when the file
    does not record its kernels)."""
    ours = pinned.environment.get("cpu_kernels")
    if not isinstance(ours, str) or parse_cpu_kernels(ours) is None:
        return ()
    levels = [str(r.provenance.get("cpu_kernels", "native")) for r in records]
    return tuple((k, levels.count(k)) for k in sorted(set(levels)) if parse_cpu_kernels(k) != parse_cpu_kernels(ours))
