"""The cached tensor format every dataset is prepared into.

A prepared dataset is a folder ``<data_dir>/prepared/<name>/`` holding ``train_x.npy`` and
``test_x.npy`` (uint8, N x C x H x W), ``train_y.npy`` and ``test_y.npy`` (int64), optionally
``train_group.npy`` / ``test_group.npy`` (int64 per-sample group id, e.g. the LEAF user),
``train_domain.npy`` / ``test_domain.npy`` (int64 per-sample domain id, e.g. the visual style of
``domaindigits``, whose table the dataset keeps in ``source["domains"]``), and
``manifest.json`` with each array's sha256, shape and dtype plus the dataset's metadata. Arrays are
verified against the manifest on load, so a corrupted cache is refused rather than used.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from pydantic import BaseModel, Field, ValidationError

from bench.config import describe_validation
from bench.errors import BenchError
from bench.fileio import canonical_json, sha256_array, sha256_bytes, write_json, write_npy

FORMAT_VERSION = 1
ARRAYS = ("train_x", "train_y", "test_x", "test_y", "train_group", "test_group", "train_domain", "test_domain")


@dataclass
class PreparedDataset:
    name: str
    train_x: np.ndarray
    train_y: np.ndarray
    test_x: np.ndarray
    test_y: np.ndarray
    num_classes: int
    mean: tuple[float, ...]
    std: tuple[float, ...]
    train_group: np.ndarray | None = None
    test_group: np.ndarray | None = None
    train_domain: np.ndarray | None = None
    test_domain: np.ndarray | None = None
    source: dict[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for split in ("train", "test"):
            x, y = getattr(self, f"{split}_x"), getattr(self, f"{split}_y")
            if x.dtype != np.uint8 or x.ndim != 4:
                raise ValueError(f"{self.name}: {split}_x must be uint8 N x C x H x W, got {x.dtype} {x.shape}")
            if y.dtype != np.int64 or y.shape != (len(x),):
                raise ValueError(f"{self.name}: {split}_y must be int64 of length {len(x)}")
            if len(y) and (y.min() < 0 or y.max() >= self.num_classes):
                raise ValueError(f"{self.name}: {split}_y has labels outside [0, {self.num_classes})")
            domain = getattr(self, f"{split}_domain")
            if domain is not None and (domain.dtype != np.int64 or domain.shape != (len(x),) or
                                       (len(domain) and domain.min() < 0)):
                raise ValueError(f"{self.name}: {split}_domain must be non-negative int64 of length {len(x)}")

    @property
    def image_shape(self) -> tuple[int, int, int]:
        return tuple(self.train_x.shape[1:])

    def arrays(self) -> dict[str, np.ndarray]:
        return {k: v for k in ARRAYS if (v := getattr(self, k)) is not None}

    @property
    def sha256(self) -> str:
        """One hash for the whole prepared dataset (arrays and metadata)."""
        return sha256_bytes(canonical_json(self._manifest_body()).encode())

    def _manifest_body(self) -> dict[str, object]:
        return {
            "format_version": FORMAT_VERSION,
            "name": self.name,
            "num_classes": self.num_classes,
            "mean": list(self.mean),
            "std": list(self.std),
            "arrays": {k: {"sha256": sha256_array(v), "shape": list(v.shape), "dtype": v.dtype.str}
                       for k, v in self.arrays().items()},
            "source": self.source,
        }

    def save(self, folder: str | Path) -> Path:
        folder = Path(folder)
        for key, array in self.arrays().items():
            write_npy(folder / f"{key}.npy", array)
        write_json(folder / "manifest.json", {**self._manifest_body(), "sha256": self.sha256})
        return folder


def channel_stats(x: np.ndarray, chunk: int = 4096) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per-channel mean and std of uint8 N x C x H x W images scaled to [0, 1], rounded to 6 places
    (accumulated in chunks, so large datasets need no float copy)."""
    total = np.zeros(x.shape[1]); square = np.zeros(x.shape[1])
    for start in range(0, len(x), chunk):
        block = x[start:start + chunk].astype(np.float64) / 255.0
        total += block.sum(axis=(0, 2, 3)); square += (block ** 2).sum(axis=(0, 2, 3))
    count = max(1, len(x) * x.shape[2] * x.shape[3])
    mean = total / count
    std = np.sqrt(np.maximum(square / count - mean ** 2, 0.0))
    return tuple(round(float(m), 6) for m in mean), tuple(round(float(s), 6) for s in std)


class _ArrayEntry(BaseModel):
    sha256: str


class Manifest(BaseModel):
    """``manifest.json``'s shape, checked before anything in it is trusted."""

    format_version: int
    name: str
    num_classes: int = Field(ge=1)
    mean: list[float]
    std: list[float]
    arrays: dict[str, _ArrayEntry]
    source: dict[str, object] = Field(default_factory=dict)


def load_prepared(folder: str | Path, verify: bool = True) -> PreparedDataset:
    """Load a prepared dataset, checking the manifest's shape and every array against it."""
    folder = Path(folder)
    manifest_path = folder / "manifest.json"
    again = f"delete the folder and run `bench data prepare {folder.name}` again"
    if not manifest_path.exists():
        raise BenchError(f"no prepared dataset at {folder}; run `bench data prepare {folder.name}`")
    try:
        raw = json.loads(manifest_path.read_text())
        if isinstance(raw, dict) and raw.get("format_version") != FORMAT_VERSION:
            raise BenchError(f"prepared dataset at {folder} has format {raw.get('format_version')}, expected "
                             f"{FORMAT_VERSION}; run `bench data prepare {folder.name}` again")
        manifest = Manifest.model_validate(raw)
        arrays = {k: np.load(folder / f"{k}.npy", allow_pickle=False) for k in manifest.arrays}
    except ValidationError as exc:
        raise BenchError(f"prepared dataset at {folder}: manifest.json has the wrong shape "
                         f"({describe_validation(exc)}); {again}") from None
    except (OSError, ValueError) as exc:
        raise BenchError(f"prepared dataset at {folder} is unreadable ({exc}); {again}") from None
    if verify:
        for key, array in arrays.items():
            if sha256_array(array) != manifest.arrays[key].sha256:
                raise BenchError(f"prepared dataset at {folder}: {key}.npy does not match its sha256 in "
                                 f"manifest.json (corrupted); {again}")
    try:
        return PreparedDataset(name=manifest.name, num_classes=manifest.num_classes, mean=tuple(manifest.mean),
                               std=tuple(manifest.std), source=manifest.source, **arrays)
    except (TypeError, ValueError) as exc:
        raise BenchError(f"prepared dataset at {folder} is invalid ({exc}); {again}") from None
