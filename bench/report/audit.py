"""The reviewer's command, ``bench audit REPORT CELL``: one cell of a suite's report traced to its
sources, and (``--rerun``) re-executed to check that its runs reproduce bitwise.

A cell is named as printed, ``<heading>/.../<row>/<column>`` (each heading a case-insensitive prefix
of the report's, as many of the innermost as needed; e.g. ``global/fedavg/iid final`` in
``summary.md``, ``table 1/m=5/FedAvg/local ours`` in ``paper.md``), or by its stable id
``<method>/<setting>/<statistic>`` (e.g. ``fedavg/iid/final_global_acc``), which every report's
Provenance section explains. The chain: the printed text and the value recomputed from the runs'
records, the statistic and the runs (seeds) behind it, and per run its config (hash of the config and
sha256 of ``config.yaml``), dataset and partition sha256 with the files they hash (checked), code
version (commit, clean or not; source sha256), ``uv.lock`` sha256 (and whether it is this checkout's),
torch, CPU kernels, device, MLflow run ids, and the pinned and paper values.

The runs' records come from ``dvc pull`` (the repository's DVC remote holds every pinned suite's run
records, partitions and prepared digits), so a fresh clone audits without training.
"""
from __future__ import annotations

import hashlib
import json
import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from bench import kernel_level_name, parse_cpu_kernels
from bench.config import read_yaml_mapping
from bench.data.prepared import load_prepared
from bench.data.registry import prepared_dir
from bench.errors import BenchError
from bench.experiment import build_config
from bench.fileio import sha256_file
from bench.report.paper_report import table_rows
from bench.report.partition_check import check_partitions
from bench.report.pinned import PinnedFile, default_pinned_path, load_pinned, same_environment
from bench.report.runs import ACC_METRICS, RunRecord, read_run, statistic_value
from bench.report.suite_report import LABELS, METRIC_TITLES, STATISTICS
from bench.runner.executor import RunRequest
from bench.suites import Suite, load_suite
from bench.suites.statistics import Statistic, mean_std
from bench.tracking import code_version, mlflow_uri


@dataclass(frozen=True)
class Cell:
    """A value cell of a report: where it is printed and what it is."""

    headings: tuple[str, ...]  # the report's headings above its table, outermost first (the title left out)
    row: str
    column: str
    method: str
    setting: str
    statistic: Statistic
    paper_column: str | None = None  # paper.md: the report column's key

    @property
    def id(self) -> str:
        return f"{self.method}/{self.setting}/{self.statistic.name}"

    @property
    def printed_name(self) -> str:
        return "/".join([*self.headings, self.row, self.column])


def report_cells(suite: Suite, report: Path) -> list[Cell]:
    """Every value cell a report of this suite prints: ``summary.md`` or ``paper.md``."""
    p = suite.params
    if report.name == "summary.md":
        return [Cell((METRIC_TITLES[metric],), method, f"{setting} {LABELS[name]}", method, setting,
                     Statistic.model_validate(f"{rounds}_{metric}"))
                for metric in ACC_METRICS for method in p.methods for setting in suite.settings_of(method)
                for name, rounds in STATISTICS.items()]
    if report.name == "paper.md" and suite.paper is not None:
        d = suite.paper.definition
        return [Cell((d.tables[c.table].title, c.label), d.label(method), f"{measure.label} ours", method,
                     c.setting, c.statistics[name], c.key)
                for c in d.columns_for(list(p.settings)) for name, measure in d.tables[c.table].measures.items()
                for method in table_rows(suite, c)]
    raise BenchError(f"{report}: not a report bench audit reads; name a suite's summary.md or paper.md "
                     "(reports/<suite>/)")


def printed_tables(text: str) -> dict[tuple[tuple[str, ...], str], list[tuple[str, str]]]:
    """A Markdown report's table rows: (headings below the title, row label) -> (column header, text) pairs."""
    cells: dict[tuple[tuple[str, ...], str], list[tuple[str, str]]] = {}
    stack: list[tuple[int, str]] = []
    header: list[str] | None = None
    for line in text.splitlines():
        if match := re.match(r"(#+)\s+(.*)", line):
            level = len(match[1])
            stack = [(lvl, h) for lvl, h in stack if lvl < level] + [(level, match[2].strip())]
            header = None
        elif line.startswith("|"):
            row = [c.strip() for c in line.strip().strip("|").split("|")]
            if header is None:
                header = row
            elif not all(set(c) <= {"-", ":"} for c in row):
                headings = tuple(h for lvl, h in stack if lvl > 1)
                cells[headings, row[0]] = list(zip(header[1:], row[1:]))
        elif line.strip():
            header = None
    return cells


def find_cell(cells: list[Cell], name: str) -> Cell:
    """The cell named by its id or as printed (module docstring); a clear error listing what fits."""
    by_id = [c for c in cells if c.id == name]
    if by_id:
        return by_id[0]
    parts = [p.strip().lower() for p in name.split("/")]
    if len(parts) < 2:
        raise BenchError(f"cell {name!r}: name it <heading>/.../<row>/<column> as printed, or by its id "
                         "<method>/<setting>/<statistic> (e.g. fedavg/iid/final_global_acc)")
    *headings, row, column = parts

    def fits(c: Cell) -> bool:
        inner = [h.lower() for h in c.headings[len(c.headings) - len(headings):]] if headings else []
        return (c.row.lower() == row and c.column.lower() == column and len(headings) <= len(c.headings)
                and all(h.startswith(given) for h, given in zip(inner, headings)))

    found = list({c.printed_name: c for c in cells if fits(c)}.values())
    if len(found) == 1:
        return found[0]
    if not found:
        rows = sorted({c.row for c in cells})
        columns = list(dict.fromkeys(c.column for c in cells))
        raise BenchError(f"cell {name!r} is not in the report; rows: {', '.join(rows)}; columns: "
                         f"{', '.join(columns[:12])}{' …' if len(columns) > 12 else ''}; or give the cell id "
                         "<method>/<setting>/<statistic>")
    raise BenchError(f"cell {name!r} is ambiguous ({len(found)} cells: "
                     f"{'; '.join(c.printed_name for c in found[:4])}); prefix it with more of its headings")


def suite_of_report(report: Path, params: Path | None) -> Suite:
    """The suite a report belongs to: ``<root>/reports/<suite>/<file>`` with ``<root>/params.yaml``."""
    if report.is_dir() or not report.exists():
        raise BenchError(f"report {report} not found; name a suite's reports/<suite>/summary.md or paper.md")
    if report.name not in ("summary.md", "paper.md"):
        raise BenchError(f"{report}: not a report bench audit reads; name a suite's summary.md or paper.md "
                         "(reports/<suite>/)")
    folders = report.resolve().parents
    if params is None and (len(folders) < 3 or folders[1].name != "reports"):
        raise BenchError(f"{report} is not in a suite's reports/<suite>/ folder; pass the suite's params file with "
                         "--params")
    params = params or folders[2] / "params.yaml"
    if not params.exists():
        raise BenchError(f"{params} not found; pass the suite's params file with --params")
    suite = load_suite(params)
    if suite.name != report.resolve().parent.name:
        raise BenchError(f"report {report} is of suite {report.resolve().parent.name!r}, but {params} makes suite "
                         f"{suite.name!r}; pass the right --params (or -S profile=...)")
    return suite


@dataclass(frozen=True)
class Audit:
    suite: Suite
    report: Path
    cell: Cell
    printed: list[tuple[str, str]]  # (column header, text): the cell as printed (paper.md: and its pinned, paper)
    runs: dict[int, RunRecord | str]  # seed -> record, or why it is unavailable
    values: dict[int, float | None]
    pinned: PinnedFile | None
    paper_value: str | None

    def check(self, data_dir: Path | None) -> tuple[list[str], list[str]]:
        """The chain from the printed cell to its sources, as lines, and every disagreement found on the way
        (a value differing from its pinned one, a file differing from what DVC recorded, a config, dataset or
        partition that is not the one the runs used): the audit fails when there is one."""
        c, s = self.cell, self.suite
        problems: list[str] = []
        out = [f"report   {self.report}", f"cell     {c.printed_name}", f"id       {c.id}  (suite {s.name})"]
        out += [f"printed  {k}: {v}" for k, v in self.printed]
        found = [value for seed in sorted(self.values) if (value := self.values[seed]) is not None]
        pinned = self.pinned.values.get(c.method, {}).get(c.setting) if self.pinned else None
        if len(found) == len(self.values):
            mean, std = mean_std(found)
            out.append(f"value    {c.statistic.name} over seeds {list(self.values)}: mean {mean!r}"
                       + (f", sample std {std!r}" if std is not None else "") + " (recomputed from the records)")
            if self.pinned is not None and pinned is not None \
                    and (pinned_mean := pinned.mean.get(c.statistic.name)) is not None:
                exact = all(same_environment(self.pinned, r.provenance) for r in self.runs.values()
                            if not isinstance(r, str))
                verdict = self._against_pin(mean, pinned_mean, exact, self.pinned.tolerance.mean_abs)
                if verdict.startswith("DIFFERS"):
                    problems.append(f"the mean {mean!r} differs from the pinned mean {pinned_mean!r} ({verdict})")
        if self.pinned is not None and pinned is not None:
            commits = self.pinned.environment.get("git_commit")
            out.append(f"pinned   mean {pinned.mean.get(c.statistic.name)!r} ({self.pinned_path}; "
                       f"pinned runs of commit {', '.join(commits) if isinstance(commits, list) else commits})")
        else:
            out.append("pinned   none (no pinned file, or this cell is not in it)")
        if self.paper_value is not None:
            out.append(f"paper    {self.paper_value}")
        statistic = c.statistic
        out.append(f"statistic {statistic.name}: rounds={statistic.rounds}"
                   + (f" k={statistic.k}" if statistic.k else "") + f", clients={statistic.clients}, "
                   f"metric={statistic.metric} (bench/suites/statistics.py), from each run's records.csv")
        lock = Path(s.params_file).resolve().parent if s.params_file else Path.cwd()
        here = code_version()["uv_lock_sha256"]
        recorded = dvc_recorded_files(s, c.method)
        runs = {seed: r for seed, r in self.runs.items() if not isinstance(r, str)}
        trained: dict[tuple[str, int | None], set[str]] = {}
        for seed, r in runs.items():
            if "partition_sha256" in r.provenance:
                trained.setdefault(s.partition_key(c.setting, seed), set()).add(str(r.provenance["partition_sha256"]))
        partitions = check_partitions(s, [c.setting], data_dir, trained)
        partition = next((p for p in partitions if p.failed), partitions[0])
        for seed, record in self.runs.items():
            out.append(f"seed {seed}")
            if isinstance(record, str):
                out.append(f"  run      {record}")
                problems.append(f"seed {seed}: {record}")
                continue
            prov, run_dir = record.provenance, record.run_dir
            out.append(f"  run      {run_dir}  value {self.values[seed]!r}")
            pinned_seed = pinned.seeds.get(seed) if pinned else None
            if pinned_seed is not None:
                assert self.pinned is not None  # a pinned seed comes from the pinned file
                verdict = self._against_pin(self.values[seed], pinned_seed.values.get(statistic.name),
                                            same_environment(self.pinned, prov), self.pinned.tolerance.per_seed_abs)
                out.append(f"  pinned   {pinned_seed.values.get(statistic.name)!r} ({verdict})")
                if verdict.startswith("DIFFERS"):
                    problems.append(f"seed {seed}: the value {self.values[seed]!r} differs from the pinned "
                                    f"{pinned_seed.values.get(statistic.name)!r}")
            out.append("  " + _files_line(run_dir, recorded, s.results_dir(c.method), problems, seed))
            config_sha = record.metrics["config_sha256"]
            current = s.config(c.method, c.setting, seed).sha256
            written = _config_file_hash(run_dir / "config.yaml")
            out.append(f"  config   {run_dir / 'config.yaml'} sha256 {sha256_file(run_dir / 'config.yaml')}; "
                       f"config hash {config_sha}" + (" (the suite's current config)" if config_sha == current
                                                       else f" (CHANGED: the suite's is now {current})")
                       + ("" if written == config_sha else f"; config.yaml resolves to {written}: DIFFERS"))
            if written != config_sha:
                problems.append(f"seed {seed}: config.yaml is not the config metrics.json names")
            out.append("  " + _dataset_line(s, c, seed, prov.get("dataset_sha256"), data_dir, problems))
            out.append(f"  partition sha256 {prov.get('partition_sha256')} (the runs recorded)")
            commit = str(prov.get("git_commit", "unknown"))
            out.append(f"  code     commit {commit.removesuffix('-dirty')} "
                       + ("(DIRTY: uncommitted changes to bench/)" if commit.endswith("-dirty") else
                          "(unknown: not a git checkout)" if commit == "unknown" else "(clean)")
                       + f"; bench/ sources sha256 {prov.get('code_sha256')}")
            lock_sha = prov.get("uv_lock_sha256")
            out.append(f"  uv.lock  sha256 {lock_sha} ({'this checkout' if lock_sha == here else 'NOT this checkout'}"
                       f"'s {lock / 'uv.lock' if (lock / 'uv.lock').exists() else 'uv.lock'})")
            out.append(f"  env      torch {prov.get('torch')}; CPU kernels {prov.get('cpu_capability')} "
                       f"({prov.get('cpu_kernels')}); device {prov.get('device')}; Python {prov.get('python')}; "
                       f"{prov.get('platform')}")
            pinned_kernels = self.pinned.environment.get("cpu_kernels") if self.pinned is not None else None
            kernels = str(prov.get("cpu_kernels", "native"))
            if isinstance(pinned_kernels, str) and parse_cpu_kernels(pinned_kernels) is not None \
                    and parse_cpu_kernels(pinned_kernels) != parse_cpu_kernels(kernels):
                out.append(f"  kernels  trained at CPU kernels {kernel_level_name(kernels)}, pinned at "
                           f"{kernel_level_name(pinned_kernels)}: compared within the pinned tolerance, not bitwise "
                           f"(a run at the pins' kernels compares bitwise: BENCH_CPU_KERNELS="
                           f"{kernel_level_name(pinned_kernels)})")
            out.append(f"  mlflow   {_mlflow_runs(run_dir, f'suite-{s.name}')}")
        files = ", ".join(sorted(p.name for p in partition.folder.iterdir() if p.suffix in (".json", ".npy"))) \
            if partition.folder.is_dir() else "none"
        out.append(f"{partition.line()}; files: {files}")
        if partition.failed:
            problems.append(partition.line())
        out.append(f"audit    {'OK: every value, file and hash checked agrees' if not problems else 'FAILED'}"
                   + "".join(f"\n  DIFFERS: {p}" for p in problems))
        return out, problems

    @staticmethod
    def _against_pin(now: float | None, pinned: float | None, exact: bool, tolerance: float) -> str:
        """A value against its pinned one under bench compare's rule: bitwise where the run's environment is
        the pinned runs' (bench.report.pinned.same_environment), else within the pinned tolerance."""
        if now == pinned:
            return "bitwise equal"
        if exact or now is None or pinned is None:
            return "DIFFERS"
        if abs(now - pinned) <= tolerance:
            return f"within the pinned tolerance {tolerance} (pinned in another environment: processor or versions)"
        return f"DIFFERS by more than the pinned tolerance {tolerance} (pinned in another environment)"

    @property
    def pinned_path(self) -> Path | None:
        return default_pinned_path(self.suite.params_file, self.suite.name) if self.suite.params_file else None


def _config_file_hash(path: Path) -> str:
    """The hash of the config a run's config.yaml holds, resolved as the run resolved it."""
    return build_config(read_yaml_mapping(path, "run config")).sha256


def dvc_recorded_files(suite: Suite, method: str) -> dict[str, str] | str:
    """The md5 of every file DVC recorded for the method's results folder, a stage output: its ``.dir`` md5 in
    the ``dvc.lock`` beside the suite's params file, and that listing in the repository's DVC cache (DVC's
    documented cache layout: ``.dvc/cache/files/md5/<2>/<30>.dir``, a JSON list of ``{md5, relpath}``); or why
    they are not at hand."""
    folder = suite.results_dir(method).resolve()
    lock = (Path(suite.params_file).resolve().parent if suite.params_file else Path.cwd()) / "dvc.lock"
    if not lock.exists():
        return f"no dvc.lock beside {suite.params_file}: the runs were not made by `dvc repro`"
    stages = (yaml.safe_load(lock.read_text()) or {}).get("stages", {})
    md5 = next((out.get("md5") for stage in stages.values() for out in stage.get("outs", [])
                if (lock.parent / out["path"]).resolve() == folder), None)
    if md5 is None or not md5.endswith(".dir"):
        return f"{lock} records no output {folder}"
    root = next((p for p in lock.parents if (p / ".dvc").is_dir()), None)
    listing = root / ".dvc" / "cache" / "files" / "md5" / md5[:2] / md5[2:] if root else None
    if listing is None or not listing.exists():
        return f"DVC's cache holds no listing {md5} of {folder} (`dvc pull` fetches it)"
    return {entry["relpath"]: entry["md5"] for entry in json.loads(listing.read_text())}


def _files_line(run_dir: Path, recorded: dict[str, str] | str, results: Path, problems: list[str], seed: int) -> str:
    names = sorted(p.name for p in run_dir.iterdir() if p.is_file()) if run_dir.is_dir() else []
    if isinstance(recorded, str):
        return f"files    {', '.join(names)}: not checked against DVC's record ({recorded})"
    prefix = run_dir.resolve().relative_to(results.resolve()).as_posix()
    expected = {rel.removeprefix(prefix + "/"): md5 for rel, md5 in recorded.items() if rel.startswith(prefix + "/")}
    differing = [n for n in names if expected.get(n) != hashlib.md5((run_dir / n).read_bytes()).hexdigest()]
    differing += [f"{n} (absent)" for n in sorted(set(expected) - set(names))]
    if differing:
        problems.append(f"seed {seed}: {', '.join(differing)} in {run_dir} differ from what `dvc repro` recorded")
        return f"files    {', '.join(names)}: DIFFERS from dvc.lock's record: {', '.join(differing)}"
    return f"files    {', '.join(names)}: each file's md5 is the one dvc.lock's stage output records"


def _dataset_line(suite: Suite, cell: Cell, seed: int, recorded: str | None, data_dir: Path | None,
                  problems: list[str]) -> str:
    name = suite.config(cell.method, cell.setting, seed).dataset.name
    folder = prepared_dir(name, data_dir)
    if not (folder / "manifest.json").exists():
        return (f"dataset  {name} sha256 {recorded}; {folder} absent (fetch it with `dvc pull`, or "
                f"`bench data prepare {name}`)")
    now = load_prepared(folder).sha256  # verifies every array against the manifest
    files = ", ".join(sorted(p.name for p in folder.iterdir() if p.suffix in (".json", ".npy")))
    if now != recorded:
        problems.append(f"seed {seed}: the dataset in {folder} is not the one the run recorded")
    return (f"dataset  {name} sha256 {recorded} ({'matches' if now == recorded else f'DIFFERS: {now}'} "
            f"{folder}: manifest.json over the sha256 of each array: {files})")


def _mlflow_runs(run_dir: Path, experiment: str) -> str:
    """The ids of the MLflow runs logged from this run folder, if this checkout's store has them."""
    uri = mlflow_uri()
    if uri.startswith("sqlite:///") and not Path(uri.removeprefix("sqlite:///").split("?")[0]).exists():
        return f"no MLflow store here ({uri}); runs are logged where they were trained (`bench mlflow sync` logs these)"
    import mlflow

    mlflow.set_tracking_uri(uri)
    found = mlflow.get_experiment_by_name(experiment)
    if found is None:
        return f"no experiment {experiment} in {uri}"
    runs = mlflow.search_runs([found.experiment_id], filter_string=f"tags.out_dir = '{run_dir.resolve()}'",
                              output_format="list")
    return (", ".join(f"{r.info.run_id} ({r.info.status})" for r in runs) if runs
            else f"none in {uri} for this folder (`bench mlflow sync {run_dir}` logs it)")


def audit(report: Path, name: str, params: Path | None = None) -> Audit:
    suite = suite_of_report(report, params)
    cell = find_cell(report_cells(suite, report), name)
    tables = printed_tables(report.read_text())
    row = next((cells for (headings, label), cells in tables.items()
                if label == cell.row and headings[-len(cell.headings):] == cell.headings), [])
    index = next((i for i, (header, _) in enumerate(row) if header == cell.column), None)
    if index is None:
        raise BenchError(f"{report} prints no cell {cell.printed_name}: the report is older than the suite's params; "
                         "regenerate it with `dvc repro` (or `bench suite report`)")
    runs = {seed: read_run(suite.run_dir(cell.method, cell.setting, seed)) for seed in suite.params.suite.seeds}
    records = {(cell.method, cell.setting, seed): r for seed, r in runs.items() if not isinstance(r, str)}
    values = {seed: statistic_value(suite, records, (cell.method, cell.setting, seed), cell.statistic)
              if not isinstance(r, str) else None for seed, r in runs.items()}
    pinned_path = default_pinned_path(suite.params_file, suite.name) if suite.params_file else None
    pinned = load_pinned(pinned_path, suite) if pinned_path and pinned_path.exists() else None
    paper_value = None
    if cell.paper_column is not None and suite.paper is not None:
        d = suite.paper.definition
        column = next(c for c in d.columns_for([cell.setting]) if c.key == cell.paper_column)
        measure = next(m for m, s in column.statistics.items() if s == cell.statistic)
        paper_value = " / ".join(f"{key} {d.value(cell.method, key, measure)}" for key in column.stands_for)
    printed = row[index:index + (3 if cell.paper_column else 1)]  # paper.md: ours, pinned, paper
    return Audit(suite, report, cell, printed, runs, values, pinned, paper_value)


# ---------------------------------------------------------------- --rerun

@dataclass(frozen=True)
class Rerun:
    seed: int
    folder: Path  # the re-run's records
    values: int  # recorded values compared
    differing: int
    first: str | None  # the first differing value: round, metric, client, recorded and re-run values
    statistic: tuple[float | None, float | None]  # the cell's statistic: recorded, re-run
    metrics_equal: bool  # metrics.json byte for byte

    @property
    def equal(self) -> bool:
        return self.differing == 0 and self.metrics_equal


def _records(path: Path) -> dict[tuple[str, str, str], str]:
    """records.csv as (round, metric, client) -> the value as written (repr: equal strings are equal bits)."""
    try:
        rows = path.read_text().splitlines()[1:]
        return {(r, m, c): v for r, m, c, v in (row.split(",") for row in rows)}
    except (OSError, ValueError) as exc:
        raise BenchError(f"{path}: cannot be read as round,metric,client,value ({exc}); fetch the run's records "
                         "again with `dvc pull`") from None


def compare_records(recorded: Path, rerun: Path) -> tuple[int, int, str | None]:
    """Values compared, values differing (repr strings: bitwise floats), and the first differing one
    in round order."""
    a, b = _records(recorded), _records(rerun)
    keys = sorted(set(a) | set(b), key=lambda k: (int(k[0]), k[1], int(k[2]) if k[2] else -1))
    differing = [k for k in keys if a.get(k) != b.get(k)]
    first = None
    if differing:
        r, m, c = differing[0]
        first = (f"round {r}, {m}" + (f", client {c}" if c else "") +
                 f": recorded {a.get((r, m, c), 'absent')}, re-run {b.get((r, m, c), 'absent')}")
    return len(keys), len(differing), first


def rerun(result: Audit, seeds: list[int], data_dir: Path | None, scratch: Path | None,
          execute: Callable[[RunRequest, str], object]) -> list[Rerun]:
    """Re-execute the cell's runs of ``seeds`` in a scratch folder, each at the CPU kernels its record names
    (``execute(request, cpu_kernels)``), and compare their records bitwise."""
    c, suite = result.cell, result.suite
    out = []
    for seed in seeds:
        record = result.runs.get(seed)
        if record is None:
            raise BenchError(f"seed {seed} is not one of the suite's seeds {list(result.runs)}")
        if isinstance(record, str):
            raise BenchError(f"cannot re-run against {record}; fetch the records with `dvc pull`")
        config = suite.config(c.method, c.setting, seed)
        if config.sha256 != record.metrics["config_sha256"]:
            raise BenchError(f"{record.run_dir} was trained with another config than the suite's now; a re-run "
                             "would not be the same run (restore the params, or `dvc repro` and audit again)")
        folder = Path(tempfile.mkdtemp(prefix=f"audit-{c.method}-{c.setting}-seed{seed}-", dir=scratch))
        partition = suite.partition_dir(c.setting, seed)
        execute(RunRequest(config, folder, data_dir, partition if (partition / "partition.json").exists() else None),
                str(record.provenance.get("cpu_kernels", "native")))
        values, differing, first = compare_records(record.run_dir / "records.csv", folder / "records.csv")
        again = read_run(folder)
        assert not isinstance(again, str)
        key = (c.method, c.setting, seed)
        now = statistic_value(suite, {key: again}, key, c.statistic)
        metrics_equal = (record.run_dir / "metrics.json").read_bytes() == (folder / "metrics.json").read_bytes()
        out.append(Rerun(seed, folder, values, differing, first, (result.values[seed], now), metrics_equal))
    return out


def rerun_lines(results: list[Rerun]) -> list[str]:
    lines = []
    for r in results:
        same = "bitwise equal" if r.statistic[0] == r.statistic[1] else "DIFFERS"
        lines.append(f"rerun seed {r.seed}: {'OK' if r.equal else 'MISMATCH'}: {r.values - r.differing} of "
                     f"{r.values} recorded values bitwise equal; statistic recorded {r.statistic[0]!r}, "
                     f"re-run {r.statistic[1]!r} ({same})" + (f"; first difference: {r.first}" if r.first else "")
                     + ("" if r.metrics_equal else "; metrics.json DIFFERS") + f" (re-run in {r.folder})")
    return lines

