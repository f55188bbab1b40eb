"""SVHN train and test (``extra`` unused) from the official ``.mat`` files (specs/fedal.md §4.1,
specs/fedhkd.md §5.1, specs/dafkd.md §3.1). Label 10 (digit "0") becomes 0, as in torchvision."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import scipy.io

from bench.data.registry import DatasetSpec, register_dataset
from bench.data.download import fetch, parsing, prepared_from_raw
from bench.data.prepared import PreparedDataset


def _read_mat(path: Path) -> tuple[np.ndarray, np.ndarray]:
    mat = scipy.io.loadmat(path)
    x = np.transpose(np.asarray(mat["X"], dtype=np.uint8), (3, 2, 0, 1))  # H W C N -> N C H W
    y = np.asarray(mat["y"], dtype=np.int64).reshape(-1) % 10
    if len(y) != len(x):
        raise ValueError(f"{len(x)} images but {len(y)} labels")
    return x, y


def prepare_svhn(data_dir: Path) -> PreparedDataset:
    files = fetch("svhn", "svhn", data_dir)
    splits = []
    for fname in ("train_32x32.mat", "test_32x32.mat"):
        with parsing(files[fname], "svhn"):
            splits.append(_read_mat(files[fname]))
    return prepared_from_raw("svhn", 10, splits[0], splits[1], files, format="mat", label_10_is_digit_0=True)


SVHN = register_dataset(DatasetSpec(
    name="svhn", num_classes=10, image_shape=(3, 32, 32), num_train=73257, num_test=26032, prepare=prepare_svhn,
    description="SVHN cropped digits, 32x32 colour, train/test (extra unused)"))
