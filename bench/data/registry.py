"""The dataset registry: specs, preparation into the cached format, loading."""
from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench.data.prepared import PreparedDataset, load_prepared
from bench.errors import BenchError

Preparer = Callable[[Path], PreparedDataset]


@dataclass(frozen=True)
class DatasetSpec:
    """What the config layer may check before any file is read."""

    name: str
    num_classes: int
    image_shape: tuple[int, int, int]
    num_train: int
    num_test: int
    prepare: Preparer  # raw files under ``data_dir`` -> PreparedDataset
    embedded: bool = False  # ships inside a package: prepared on demand, no download
    description: str = ""


_DATASETS: dict[str, DatasetSpec] = {}


def register_dataset(spec: DatasetSpec) -> DatasetSpec:
    if spec.name in _DATASETS:
        raise ValueError(f"dataset {spec.name!r} registered twice")
    _DATASETS[spec.name] = spec
    return spec


def dataset_names() -> list[str]:
    return sorted(_DATASETS)


def get_dataset_spec(name: str) -> DatasetSpec:
    if name not in _DATASETS:
        raise BenchError(f"unknown dataset {name!r}; available: {', '.join(sorted(_DATASETS))}")
    return _DATASETS[name]


def resolve_data_dir(data_dir: str | os.PathLike[str] | None = None) -> Path:
    """``data_dir`` if given, else ``$BENCH_DATA_DIR``, else ``./data``."""
    return Path(data_dir or os.environ.get("BENCH_DATA_DIR") or "data").resolve()


def prepared_dir(name: str, data_dir: str | os.PathLike[str] | None = None) -> Path:
    return resolve_data_dir(data_dir) / "prepared" / name


def prepare_dataset(name: str, data_dir: str | os.PathLike[str] | None = None, force: bool = False) -> Path:
    """Prepare ``name`` into its cache folder (a no-op when a valid cache exists) and return the folder."""
    spec = get_dataset_spec(name)
    folder = prepared_dir(name, data_dir)
    if not force and (folder / "manifest.json").exists():
        try:
            load_prepared(folder)
            return folder
        except BenchError:
            pass  # corrupted cache: prepare again
    try:
        prepared = spec.prepare(resolve_data_dir(data_dir))
    except ValueError as exc:  # parsed, but not what the dataset must hold (shapes, labels)
        raise BenchError(f"dataset {name}: the files under {resolve_data_dir(data_dir)} are not valid {name} data "
                         f"({exc}); replace them with the official files (`bench data list`)") from None
    prepared.save(folder)
    return folder


def load_dataset(name: str, data_dir: str | os.PathLike[str] | None = None) -> PreparedDataset:
    """The prepared dataset ``name``; embedded datasets are prepared on first use."""
    spec = get_dataset_spec(name)
    folder = prepared_dir(name, data_dir)
    if spec.embedded and not (folder / "manifest.json").exists():
        prepare_dataset(name, data_dir)
    return load_prepared(folder)
