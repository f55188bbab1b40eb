"""The MNIST family in idx format: MNIST, Fashion-MNIST and EMNIST (ByClass, Balanced).

Raw files are the gzip'd idx files of torchvision's mirrors (EMNIST: NIST's ``gzip.zip``, read
in place). EMNIST images are stored transposed; they are flipped back to upright orientation
(as TFF's federated EMNIST stores them). Sources: pipelines/dafkd/NOTES.md §3.1 (MNIST, FMNIST,
EMNIST ByClass default; A14; EMNIST-Balanced as the documented cheaper substitute, §6 item 3),
pipelines/fedal/NOTES.md §4.1 (MNIST), pipelines/fedakd/NOTES.md §2.1 (FMNIST).

torchvision's layouts are found too (``torchvision.datasets.MNIST(root, download=True)`` and
friends): ``<root>/MNIST/raw/`` (``FashionMNIST``, ``EMNIST``) holds the downloaded ``*-ubyte.gz``
(EMNIST: ``gzip.zip``), verified against the published md5, and the ``*-ubyte`` idx files torchvision
extracted from them (EMNIST: ``emnist-<split>-{train,test}-{images-idx3,labels-idx1}-ubyte``), which
have no published checksum and are used when the archives were deleted.
"""
from __future__ import annotations

import gzip
import zipfile
from functools import partial
from collections.abc import Callable
from pathlib import Path

import numpy as np
from numpy.typing import DTypeLike

from bench.data.registry import DatasetSpec, register_dataset
from bench.data.download import (EXTRACTED_MD5, REMOTE_FILES, TORCHVISION, Layout, LayoutFile, locate, parsing,
                                 prepared_from_raw)
from bench.data.prepared import PreparedDataset

_IDX_DTYPES: dict[int, DTypeLike] = {0x08: np.uint8, 0x09: np.int8, 0x0B: np.dtype(">i2"), 0x0C: np.dtype(">i4"),
               0x0D: np.dtype(">f4"), 0x0E: np.dtype(">f8")}


def parse_idx(data: bytes) -> np.ndarray:
    """Decode one idx file (LeCun's format: zero, zero, dtype code, ndim, big-endian dims, data)."""
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] not in _IDX_DTYPES:
        raise ValueError("not an idx file (bad magic number)")
    ndim = data[3]
    dims = np.frombuffer(data, dtype=">u4", count=ndim, offset=4).astype(int)
    dtype = np.dtype(_IDX_DTYPES[data[2]])
    expected = int(np.prod(dims)) * dtype.itemsize
    body = data[4 + 4 * ndim:]
    if len(body) != expected:
        raise ValueError(f"idx body has {len(body)} bytes, its header says {expected} (truncated)")
    return np.frombuffer(body, dtype=dtype).reshape(dims)


def _read_pair(read: Callable[[str], bytes], images: str, labels: str) -> tuple[np.ndarray, np.ndarray]:
    x, y = parse_idx(read(images)), parse_idx(read(labels))
    if x.ndim != 3 or y.shape != (len(x),):
        raise ValueError(f"{images}/{labels}: {x.shape} images do not match {y.shape} labels")
    return x[:, None].astype(np.uint8), y.astype(np.int64)


# raw folder -> torchvision's class, whose files are in <root>/<class name>/raw/
TORCHVISION_CLASSES = {"mnist": "MNIST", "fashionmnist": "FashionMNIST", "emnist": "EMNIST"}
IDX_STEMS = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")


def _torchvision(folder: str, form: str, names: tuple[str, ...], md5: dict[str, str], args: str = "") -> Layout:
    cls = TORCHVISION_CLASSES[folder]
    return Layout(TORCHVISION, form, tuple(LayoutFile(n, f"{cls}/raw/{n}", md5.get(n)) for n in names),
                  f"torchvision.datasets.{cls}(root{args}, download=True)")


def torchvision_idx_layouts(folder: str) -> tuple[Layout, ...]:
    """MNIST / Fashion-MNIST as torchvision keeps them: the downloaded .gz files, else what it extracted."""
    published = {r.name: r.md5 for r in REMOTE_FILES[folder]}
    return (_torchvision(folder, "idx.gz", tuple(published), published),
            _torchvision(folder, "idx", IDX_STEMS, EXTRACTED_MD5[folder]))


def torchvision_emnist_layouts(split: str) -> tuple[Layout, ...]:
    """EMNIST as torchvision keeps it: the downloaded gzip.zip, else the split's extracted idx files."""
    members = tuple(f"emnist-{split}-{s}-{kind}-ubyte" for s in ("train", "test")
                    for kind in ("images-idx3", "labels-idx1"))
    args = f", split={split!r}"
    return (_torchvision("emnist", "zip", ("gzip.zip",), {r.name: r.md5 for r in REMOTE_FILES["emnist"]}, args),
            _torchvision("emnist", "idx", members, EXTRACTED_MD5["emnist"], args))


def _prepare_idx(name: str, folder: str, num_classes: int, data_dir: Path) -> PreparedDataset:
    raw = locate(name, folder, data_dir, "idx.gz", torchvision_idx_layouts(folder))
    gz = raw.form == "idx.gz"

    def read(stem: str) -> bytes:
        path = raw.files[stem + ".gz" if gz else stem]
        with parsing(path, name):
            return gzip.decompress(path.read_bytes()) if gz else path.read_bytes()

    with parsing(raw.files["train-images-idx3-ubyte.gz" if gz else "train-images-idx3-ubyte"], name):
        train = _read_pair(read, "train-images-idx3-ubyte", "train-labels-idx1-ubyte")
        test = _read_pair(read, "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
    return prepared_from_raw(name, num_classes, train, test, raw, format=raw.form)


def _prepare_emnist(name: str, split: str, num_classes: int, data_dir: Path) -> PreparedDataset:
    raw = locate(name, "emnist", data_dir, "zip", torchvision_emnist_layouts(split))
    if raw.form == "zip":
        with parsing(raw.files["gzip.zip"], name), zipfile.ZipFile(raw.files["gzip.zip"]) as archive:
            def read(member: str) -> bytes:
                return gzip.decompress(archive.read(f"gzip/emnist-{split}-{member}-ubyte.gz"))

            train = _read_pair(read, "train-images-idx3", "train-labels-idx1")
            test = _read_pair(read, "test-images-idx3", "test-labels-idx1")
        fmt = "idx.gz in gzip.zip"
    else:
        def read(member: str) -> bytes:
            path = raw.files[f"emnist-{split}-{member}-ubyte"]
            with parsing(path, name):
                return path.read_bytes()

        with parsing(raw.files[f"emnist-{split}-train-images-idx3-ubyte"], name):
            train = _read_pair(read, "train-images-idx3", "train-labels-idx1")
            test = _read_pair(read, "test-images-idx3", "test-labels-idx1")
        fmt = "idx (extracted from gzip.zip by torchvision)"
    upright = tuple((x.transpose(0, 1, 3, 2), y) for x, y in (train, test))
    return prepared_from_raw(name, num_classes, upright[0], upright[1], raw, format=fmt,
                             emnist_split=split, orientation="transposed to upright")


for _name, _folder, _desc in (("mnist", "mnist", "MNIST handwritten digits"),
                              ("fashionmnist", "fashionmnist", "Fashion-MNIST clothing images")):
    register_dataset(DatasetSpec(
        name=_name, num_classes=10, image_shape=(1, 28, 28), num_train=60000, num_test=10000,
        prepare=partial(_prepare_idx, _name, _folder, 10),
        description=f"{_desc}, 28x28 grey (torchvision mirrors, idx.gz)"))

for _split, _classes, _train, _test in (("byclass", 62, 697932, 116323), ("balanced", 47, 112800, 18800)):
    register_dataset(DatasetSpec(
        name=f"emnist-{_split}", num_classes=_classes, image_shape=(1, 28, 28), num_train=_train, num_test=_test,
        prepare=partial(_prepare_emnist, f"emnist-{_split}", _split, _classes),
        description=f"EMNIST {_split.capitalize()}, {_classes} classes, 28x28 grey (NIST gzip.zip)"))
