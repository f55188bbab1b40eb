"""CIFAR-10 and CIFAR-100 from the official python tarballs (pipelines/fedal/NOTES.md §4.1, pipelines/fedhkd/NOTES.md
§5.1, pipelines/fedakd/NOTES.md §2.1). The batches are read from the verified tarball in place; CIFAR-100
uses the 100 fine labels.

torchvision's layouts are found too (``torchvision.datasets.CIFAR10(root, download=True)``): the
tarball ``<root>/cifar-10-python.tar.gz`` (verified against its published md5), else the batches it
extracted to ``<root>/cifar-10-batches-py/`` (``cifar-100-python/`` for CIFAR-100), each verified
against the md5 torchvision's ``train_list`` / ``test_list`` publish for it."""
from __future__ import annotations

import pickle
import tarfile
from functools import partial
from collections.abc import Callable
from pathlib import Path
from typing import IO

import numpy as np

from bench.data.registry import DatasetSpec, register_dataset
from bench.data.download import (EXTRACTED_MD5, REMOTE_FILES, TORCHVISION, Layout, LayoutFile, locate, parsing,
                                 prepared_from_raw)
from bench.data.prepared import PreparedDataset

# name -> (folder inside the tarball, train members, test members, label key, classes)
_LAYOUT = {
    "cifar10": ("cifar-10-batches-py", [f"data_batch_{i}" for i in range(1, 6)], ["test_batch"], b"labels", 10),
    "cifar100": ("cifar-100-python", ["train"], ["test"], b"fine_labels", 100),
}
_TORCHVISION_CLASSES = {"cifar10": "CIFAR10", "cifar100": "CIFAR100"}


def torchvision_layouts(name: str) -> tuple[Layout, ...]:
    """The tarball in the root, else the extracted batch folder, as torchvision's CIFAR classes keep them."""
    inner, train_members, test_members, _, _ = _LAYOUT[name]
    how = f"torchvision.datasets.{_TORCHVISION_CLASSES[name]}(root, download=True)"
    tarball = REMOTE_FILES[name][0]
    batch_md5 = EXTRACTED_MD5[name]
    return (Layout(TORCHVISION, "tar.gz", (LayoutFile(tarball.name, tarball.name, tarball.md5),), how),
            Layout(TORCHVISION, "batches", tuple(LayoutFile(m, f"{inner}/{m}", batch_md5.get(m))
                                                 for m in train_members + test_members), how))


def _read_batches(open_member: Callable[[str], IO[bytes]], members: list[str],
                  label_key: bytes) -> tuple[np.ndarray, np.ndarray]:
    xs, ys = [], []
    for member in members:
        with open_member(member) as handle:
            batch = pickle.load(handle, encoding="bytes")
        xs.append(np.asarray(batch[b"data"], dtype=np.uint8).reshape(-1, 3, 32, 32))
        ys.append(np.asarray(batch[label_key], dtype=np.int64))
    return np.concatenate(xs), np.concatenate(ys)


def prepare_cifar(name: str, data_dir: Path) -> PreparedDataset:
    inner, train_members, test_members, label_key, classes = _LAYOUT[name]
    raw = locate(name, name, data_dir, "tar.gz", torchvision_layouts(name))
    if raw.form == "tar.gz":
        path = raw.files[REMOTE_FILES[name][0].name]
        with parsing(path, name), tarfile.open(path, "r:gz") as archive:
            def open_member(member: str) -> IO[bytes]:
                handle = archive.extractfile(f"{inner}/{member}")
                if handle is None:
                    raise KeyError(f"{inner}/{member} is not a file in the archive")
                return handle

            train = _read_batches(open_member, train_members, label_key)
            test = _read_batches(open_member, test_members, label_key)
        fmt = "python pickle batches in tar.gz"
    else:
        with parsing(raw.files[train_members[0]].parent, name):
            train = _read_batches(lambda m: open(raw.files[m], "rb"), train_members, label_key)
            test = _read_batches(lambda m: open(raw.files[m], "rb"), test_members, label_key)
        fmt = "python pickle batches (extracted from the tarball by torchvision)"
    return prepared_from_raw(name, classes, train, test, raw, format=fmt)


for _name, (_inner, _tr, _te, _key, _classes) in _LAYOUT.items():
    register_dataset(DatasetSpec(
        name=_name, num_classes=_classes, image_shape=(3, 32, 32), num_train=50000, num_test=10000,
        prepare=partial(prepare_cifar, _name),
        description=f"CIFAR-{_classes}, 32x32 colour (official python tarball)"))
