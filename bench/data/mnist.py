"""The MNIST family in idx format: MNIST, Fashion-MNIST and EMNIST (ByClass, Balanced).

Raw files are the gzip'd idx files of torchvision's mirrors (EMNIST: NIST's ``gzip.zip``, read
in place). EMNIST images are stored transposed; they are flipped back to upright orientation
(as TFF's federated EMNIST stores them). Spec sources: specs/dafkd.md §3.1 (MNIST, FMNIST,
EMNIST ByClass default; A14; EMNIST-Balanced as the documented cheaper substitute, §6 item 3),
specs/fedal.md §4.1 (MNIST), specs/fedakd.md §2.1 (FMNIST).
"""
from __future__ import annotations

import gzip
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

from bench.data.registry import DatasetSpec, register_dataset
from bench.data.download import fetch, parsing, prepared_from_raw
from bench.data.prepared import PreparedDataset

_IDX_DTYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: np.dtype(">i2"), 0x0C: np.dtype(">i4"),
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


def _prepare_idx(name: str, folder: str, num_classes: int, data_dir: Path) -> PreparedDataset:
    files = fetch(name, folder, data_dir)

    def read(fname: str) -> bytes:
        with parsing(files[fname], name):
            return gzip.decompress(files[fname].read_bytes())

    with parsing(files["train-images-idx3-ubyte.gz"], name):
        train = _read_pair(read, "train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz")
        test = _read_pair(read, "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")
    return prepared_from_raw(name, num_classes, train, test, files, format="idx.gz")


def _prepare_emnist(name: str, split: str, num_classes: int, data_dir: Path) -> PreparedDataset:
    files = fetch(name, "emnist", data_dir)
    with parsing(files["gzip.zip"], name), zipfile.ZipFile(files["gzip.zip"]) as archive:
        def read(member: str) -> bytes:
            return gzip.decompress(archive.read(f"gzip/emnist-{split}-{member}-ubyte.gz"))

        train = _read_pair(read, "train-images-idx3", "train-labels-idx1")
        test = _read_pair(read, "test-images-idx3", "test-labels-idx1")
    upright = tuple((x.transpose(0, 1, 3, 2), y) for x, y in (train, test))
    return prepared_from_raw(name, num_classes, upright[0], upright[1], files, format="idx.gz in gzip.zip",
                             emnist_split=split, orientation="transposed to upright")


for _name, _folder, _desc in (("mnist", "mnist", "MNIST handwritten digits"),
                              ("fashionmnist", "fashionmnist", "Fashion-MNIST clothing images")):
    register_dataset(DatasetSpec(
        name=_name, num_classes=10, image_shape=(1, 28, 28), num_train=60000, num_test=10000,
        prepare=lambda d, n=_name, f=_folder: _prepare_idx(n, f, 10, d),
        description=f"{_desc}, 28x28 grey (torchvision mirrors, idx.gz)"))

for _split, _classes, _train, _test in (("byclass", 62, 697932, 116323), ("balanced", 47, 112800, 18800)):
    register_dataset(DatasetSpec(
        name=f"emnist-{_split}", num_classes=_classes, image_shape=(1, 28, 28), num_train=_train, num_test=_test,
        prepare=lambda d, n=f"emnist-{_split}", s=_split, c=_classes: _prepare_emnist(n, s, c, d),
        description=f"EMNIST {_split.capitalize()}, {_classes} classes, 28x28 grey (NIST gzip.zip)"))
