"""The dataset registry: specs, preparation into the cached format, loading."""
from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
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
    root = resolve_data_dir(data_dir)
    try:
        prepared = spec.prepare(root)
        _check_against_spec(prepared, spec)
    except ValueError as exc:  # parsed, but not what the dataset must hold (shapes, labels, sizes)
        raise BenchError(f"dataset {name}: the files under {root} are not valid {name} data "
                         f"({exc}); replace them with the official files (`bench data list`)") from None
    prepared.save(folder)
    return folder


def _check_against_spec(prepared: PreparedDataset, spec: DatasetSpec) -> None:
    """The image shape always; the samples per split too where some raw file had no published checksum
    to verify it (``source["unverified_files"]``: e.g. idx files torchvision extracted)."""
    if prepared.image_shape != spec.image_shape:
        raise ValueError(f"images are {'x'.join(map(str, prepared.image_shape))}, "
                         f"{spec.name} has {'x'.join(map(str, spec.image_shape))}")
    unverified = prepared.source.get("unverified_files")
    sizes = (len(prepared.train_y), len(prepared.test_y))
    if isinstance(unverified, list) and unverified and sizes != (spec.num_train, spec.num_test):
        raise ValueError(f"{sizes[0]} train / {sizes[1]} test samples, {spec.name} has {spec.num_train} / "
                         f"{spec.num_test}; {', '.join(map(str, unverified))} have no published checksum, so "
                         f"their sizes are what is checked")


def describe_source(source: Mapping[str, object]) -> str:
    """Where a prepared dataset's raw files came from and how they were checked, in one line."""
    if "raw_files" not in source:
        return f"built from {source.get('origin', 'its generator')} (no raw files)"
    if "layout" not in source:
        return "raw files from <data-dir>/raw/, each verified against its published checksum where one is published"
    where = f"{source['layout']} layout ({source.get('layout_written_by', '')})"
    unverified = source.get("unverified_files")
    if isinstance(unverified, list) and unverified:
        return (f"raw files from the {where}; {len(unverified)} read without a file checksum (none published): "
                "shapes, labels and samples per split checked against the dataset spec")
    return f"raw files from the {where}, each verified against its published md5"


def prepared_source(name: str, data_dir: str | os.PathLike[str] | None = None) -> Mapping[str, object] | None:
    """The ``source`` of ``name``'s prepared manifest, None if it is not prepared (arrays not verified)."""
    path = prepared_dir(name, data_dir) / "manifest.json"
    try:
        source = json.loads(path.read_text()).get("source")
    except (OSError, ValueError, AttributeError):
        return None
    return source if isinstance(source, dict) else None


def load_dataset(name: str, data_dir: str | os.PathLike[str] | None = None) -> PreparedDataset:
    """The prepared dataset ``name``; embedded datasets are prepared on first use."""
    spec = get_dataset_spec(name)
    folder = prepared_dir(name, data_dir)
    if spec.embedded and not (folder / "manifest.json").exists():
        prepare_dataset(name, data_dir)
    return load_prepared(folder)
