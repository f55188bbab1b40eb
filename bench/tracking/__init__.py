"""Run records: metrics/curves files (the source of truth), provenance tags, MLflow (for browsing)."""
from __future__ import annotations

import contextlib
import csv
import fcntl
import hashlib
import io
import json
import math
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, TypeVar

import yaml

from bench import cpu_kernels_in_force, describe_cpu_kernels
from bench.fileio import atomic_write, sha256_file, write_json, write_text

T = TypeVar("T")


def source_sha256() -> str:
    """sha256 over the package's Python sources (paths and contents): the code a run ran, with or
    without git."""
    package = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        digest.update(path.relative_to(package).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


@lru_cache(maxsize=1)
def code_version() -> dict[str, str]:
    """Git commit (with a ``-dirty`` suffix for uncommitted changes), the source hash and the uv.lock hash."""
    root = Path(__file__).resolve().parents[2]
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                                check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", "bench"],
                               cwd=root, capture_output=True, text=True, check=True).stdout.strip()
        commit += "-dirty" if dirty else ""
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    lock = root / "uv.lock"
    return {"git_commit": commit, "code_sha256": source_sha256(),
            "uv_lock_sha256": sha256_file(lock) if lock.exists() else "unknown"}


@lru_cache(maxsize=1)
def cpu_identity() -> str:
    """The processor as the kernel libraries see it: vendor, family, model and stepping, the cache sizes and
    a digest of the feature flags. Two hosts with the same CPU-kernel policy still computed different bits
    (measured: the default suite's FedGen and FedAL's FCCL re-trained on an AMD family-26 host against pins
    made on another host, the same code giving the same bits on each; docs/determinism.md), so only runs on
    the same processor are compared bitwise (bench.report.pinned)."""
    fields: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, sep, value = line.partition(":")
            if not sep:
                break  # the first processor's block ends at its blank line
            fields.setdefault(key.strip(), value.strip())
    caches = []
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        with contextlib.suppress(OSError):
            level, kind, size = ((index / n).read_text().strip() for n in ("level", "type", "size"))
            caches.append(f"L{level}{'' if kind == 'Unified' else kind[0].lower()} {size}")
    if not fields:
        return platform.processor() or "unknown"
    flags = hashlib.sha256(" ".join(sorted(fields.get("flags", "").split())).encode()).hexdigest()[:12]
    return (f"{fields.get('vendor_id', '?')} family {fields.get('cpu family', '?')} model {fields.get('model', '?')} "
            f"stepping {fields.get('stepping', '?')} ({fields.get('model name', '?')}); {' '.join(caches) or 'caches ?'}; "
            f"flags {flags}")


def environment() -> dict[str, str]:
    import torch  # here, so that logging a run to MLflow (bench.tracking.background) never imports torch

    return {"platform": platform.platform(), "machine": platform.machine(), "cpu": cpu_identity(),
            "python": sys.version.split()[0], "torch": torch.__version__,
            # the CPU kernels torch dispatches to (e.g. AVX2, AVX512): they round differently
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "cpu_kernels": describe_cpu_kernels(cpu_kernels_in_force())}


def provenance(result: Any) -> dict[str, Any]:
    """Everything needed to audit a run: config hash, data/partition hashes, code, environment, seed."""
    cfg = result.config
    return {"config_sha256": cfg.sha256, "dataset_sha256": result.dataset_sha256,
            "partition_sha256": result.partition_sha256, "seed": cfg.seed, "device": result.device,
            "deterministic": cfg.deterministic, "threads": cfg.threads, "architectures": result.architectures,
            **code_version(), **environment()}


def curves_csv(curves: list[dict[str, float]]) -> str:
    columns = ["round"] + sorted({k for row in curves for k in row} - {"round"})
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(columns)
    for row in curves:
        writer.writerow(["" if (v := row.get(c)) is None or (isinstance(v, float) and math.isnan(v)) else repr(v)
                         for c in columns])
    return buf.getvalue()


RECORDS_HEADER = ("round", "metric", "client", "value")
RUN_FILES = ("metrics.json", "failure.json", "config.yaml", "curves.csv", "records.csv", "provenance.json",
             "timing.json", "model.pt")


def clear_run(out_dir: str | Path) -> None:
    """Remove an earlier run's record files from ``out_dir`` (not its checkpoint), so a reused folder
    never mixes two runs' files."""
    for name in RUN_FILES:
        (Path(out_dir) / name).unlink(missing_ok=True)


def records_csv(records: list[tuple[int, str, int | None, float]]) -> str:
    """``records.csv``: one row per recorded value — ``round,metric,client,value``, client empty for
    run-level values (the global model, the train loss), in the order the run recorded them."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(RECORDS_HEADER)
    writer.writerows((r, metric, "" if client is None else client, repr(float(value)))
                     for r, metric, client, value in records)
    return buf.getvalue()


def write_run(result: Any, out_dir: str | Path) -> Path:
    """Write config.yaml, curves.csv, records.csv, provenance.json, timing.json and — last, so its
    presence means success — metrics.json. ``metrics.json`` holds no wall-clock values, so a re-run
    gives it bitwise."""
    out = Path(out_dir)
    cfg = result.config
    write_curves(result, out)
    write_json(out / "provenance.json", provenance(result))
    write_json(out / "timing.json", result.timing)
    if cfg.tracking.save_model and result.state.server.model is not None:
        import torch  # not at module level: bench.tracking.background logs runs without torch

        state = {k: v.detach().cpu() for k, v in result.state.server.model.state_dict().items()}
        atomic_write(out / "model.pt", lambda handle: torch.save(state, handle))
    (out / "failure.json").unlink(missing_ok=True)
    write_json(out / "metrics.json", {"status": "ok", "config_sha256": cfg.sha256, "seed": cfg.seed,
                                      "algorithm": cfg.algorithm.name, "rounds": cfg.training.rounds,
                                      **result.summary()})
    return out


def write_curves(result: Any, out_dir: str | Path) -> None:
    """config.yaml, curves.csv and records.csv: a run's values round by round (a finished run's, or one that
    diverged and trained on, ``training.on_divergence: train_on``)."""
    out = Path(out_dir)
    write_text(out / "config.yaml", yaml.safe_dump(result.config.to_dict(), sort_keys=True))
    write_text(out / "curves.csv", curves_csv(result.curves))
    write_text(out / "records.csv", records_csv(result.records))


def write_failure(out_dir: str | Path, config: Any, reason: str) -> None:
    out = Path(out_dir)
    (out / "metrics.json").unlink(missing_ok=True)
    write_json(out / "failure.json", {"status": "failed", "reason": reason, "config_sha256": config.sha256,
                                      "seed": config.seed})


def mlflow_uri() -> str:
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{Path('mlflow.db').resolve()}"


def sqlite_file(uri: str) -> Path | None:
    """The database file of a ``sqlite:///`` tracking URI; None for any other store."""
    return Path(uri.removeprefix("sqlite:///").split("?")[0]) if uri.startswith("sqlite:///") else None


@contextlib.contextmanager
def store_lock() -> Iterator[None]:
    """Serialise writers of a SQLite MLflow store across processes (``flock`` on ``<db>.lock``): SQLite
    and MLflow's schema migrations on a new store are not safe with concurrent writers. A server store
    needs no lock."""
    store = sqlite_file(mlflow_uri())
    if store is None:
        yield
        return
    lock = store.with_name(store.name + ".lock")
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _retrying(action: Callable[[], T], attempts: int = 8) -> T:
    """``action()``, retried with backoff while the store answers "database is locked" (another
    program holding the SQLite file)."""
    for attempt in range(attempts):
        try:
            return action()
        except Exception as exc:  # sqlalchemy's OperationalError, wrapped by MLflow
            if "database is locked" not in str(exc) or attempt == attempts - 1:
                raise
            time.sleep(0.05 * 2 ** attempt)
    raise AssertionError("unreachable")


def experiment_id(name: str) -> str:
    """The id of MLflow experiment ``name``, created if missing. On a shared server another process may
    create it between the lookup and the creation (no file lock spans a server): then it is looked up again."""
    import mlflow

    found = mlflow.get_experiment_by_name(name)
    if found is not None:
        return found.experiment_id
    try:
        return mlflow.create_experiment(name)
    except Exception:
        found = mlflow.get_experiment_by_name(name)
        if found is None:
            raise
        return found.experiment_id


def init_mlflow(experiment: str) -> str:
    """Create the store and experiment once, before runs fan out to processes: processes that each create a missing SQLite store at once race on its schema."""
    import mlflow

    def create() -> str:
        mlflow.set_tracking_uri(mlflow_uri())
        return experiment_id(experiment)

    with store_lock():
        return _retrying(create)


def log_mlflow(config: Any, out_dir: str | Path) -> None:
    """Log one run to MLflow from its record files (the source of truth): flattened params,
    per-round metrics from curves.csv (step = round), the summary from metrics.json, provenance as
    tags; FINISHED when metrics.json exists, FAILED (with the reason) when failure.json does. Safe
    with concurrent writers (:func:`store_lock`)."""
    write_mlflow(mlflow_record(config, Path(out_dir)))


def write_mlflow(run: MlflowRun) -> None:
    """Log one :class:`MlflowRun`; safe with concurrent writers (:func:`store_lock`)."""
    with store_lock():
        _retrying(lambda: _write_mlflow(run))


def logged_run_dirs(experiment: str) -> set[str]:
    """The ``out_dir`` tags of the runs an experiment already holds."""
    import mlflow

    with store_lock():
        mlflow.set_tracking_uri(mlflow_uri())
        found = mlflow.get_experiment_by_name(experiment)
        if found is None:
            return set()
        runs = mlflow.search_runs([found.experiment_id], output_format="list", max_results=100_000)
    return {r.data.tags.get("out_dir", "") for r in runs}


@dataclass(frozen=True)
class MlflowRun:
    """One run as MLflow receives it; JSON-able, so that another process can log it."""

    experiment: str
    name: str
    status: str  # FINISHED or FAILED
    tags: dict[str, str]
    params: dict[str, str]
    metrics: list[tuple[str, float, int]]  # (key, value, step)


def mlflow_record(config: Any, out: Path) -> MlflowRun:
    """What :func:`log_mlflow` logs for the run recorded in ``out``."""
    tags = {"seed": str(config.seed), "config_sha256": config.sha256, "out_dir": str(out.resolve()),
            "algorithm": config.algorithm.name, "dataset": config.dataset.name, **code_version(), **environment()}
    metrics: list[tuple[str, float, int]] = []
    if (out / "metrics.json").exists():
        status = "FINISHED"
        tags.update({k: str(v) for k, v in json.loads((out / "provenance.json").read_text()).items()})
        with open(out / "curves.csv", newline="") as handle:
            for row in csv.DictReader(handle):
                metrics += [(k, float(v), int(row["round"])) for k, v in row.items() if k != "round" and v]
        summary = json.loads((out / "metrics.json").read_text())
        metrics += [(f"{group}/{k}", float(v), 0) for group, values in summary.items()
                    if isinstance(values, dict) for k, v in values.items()]
    else:
        status = "FAILED"
        failure = out / "failure.json"
        tags["failure"] = json.loads(failure.read_text())["reason"][:5000] if failure.exists() else "no record"
    return MlflowRun(config.tracking.experiment, f"{config.name}-s{config.seed}", status, tags,
                     {k: str(v)[:6000] for k, v in _flatten(config.to_dict()).items()}, metrics)


def _write_mlflow(run: MlflowRun) -> None:
    import mlflow
    from mlflow.entities import Metric, Param, RunTag

    client = mlflow.MlflowClient(mlflow_uri())
    mlflow.set_tracking_uri(mlflow_uri())
    run_id = client.create_run(experiment_id(run.experiment), run_name=run.name).info.run_id
    params = [Param(k, v) for k, v in run.params.items()]
    metrics = [Metric(k, v, 0, step) for k, v, step in run.metrics]
    client.log_batch(run_id, tags=[RunTag(k, v) for k, v in run.tags.items()])
    for start in range(0, len(params), 100):  # MLflow's per-call limits: 100 params, 1000 metrics
        client.log_batch(run_id, params=params[start:start + 100])
    for start in range(0, len(metrics), 1000):
        client.log_batch(run_id, metrics=metrics[start:start + 1000])
    client.set_terminated(run_id, status=run.status)


def _flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out
