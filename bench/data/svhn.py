"""SVHN train and test (``extra`` unused) from the official ``.mat`` files (pipelines/fedal/NOTES.md §4.1,
pipelines/fedhkd/NOTES.md §5.1, pipelines/dafkd/NOTES.md §3.1). Label 10 (digit "0") becomes 0, as in torchvision.

torchvision's layout is found too: ``torchvision.datasets.SVHN(root, split, download=True)`` keeps
``train_32x32.mat`` and ``test_32x32.mat`` in ``<root>/`` itself; they are verified against the
same published md5."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from bench.data.registry import DatasetSpec, register_dataset
from bench.data.download import REMOTE_FILES, TORCHVISION, Layout, LayoutFile, locate, parsing, prepared_from_raw
from bench.data.prepared import PreparedDataset


def _read_mat(path: Path) -> tuple[np.ndarray, np.ndarray]:
    import scipy.io  # only when reading SVHN: every run imports the dataset registry (scipy.io: ~0.07 s)

    mat = scipy.io.loadmat(path)
    x = np.transpose(np.asarray(mat["X"], dtype=np.uint8), (3, 2, 0, 1))  # H W C N -> N C H W
    y = np.asarray(mat["y"], dtype=np.int64).reshape(-1) % 10
    if len(y) != len(x):
        raise ValueError(f"{len(x)} images but {len(y)} labels")
    return x, y


def torchvision_layouts() -> tuple[Layout, ...]:
    return (Layout(TORCHVISION, "mat", tuple(LayoutFile(r.name, r.name, r.md5) for r in REMOTE_FILES["svhn"]),
                   "torchvision.datasets.SVHN(root, split='train' and 'test', download=True)"),)


def prepare_svhn(data_dir: Path) -> PreparedDataset:
    raw = locate("svhn", "svhn", data_dir, "mat", torchvision_layouts())
    splits = []
    for fname in ("train_32x32.mat", "test_32x32.mat"):
        with parsing(raw.files[fname], "svhn"):
            splits.append(_read_mat(raw.files[fname]))
    return prepared_from_raw("svhn", 10, splits[0], splits[1], raw, format="mat", label_10_is_digit_0=True)


SVHN = register_dataset(DatasetSpec(
    name="svhn", num_classes=10, image_shape=(3, 32, 32), num_train=73257, num_test=26032, prepare=prepare_svhn,
    description="SVHN cropped digits, 32x32 colour, train/test (extra unused)"))
