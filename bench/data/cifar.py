"""CIFAR-10 and CIFAR-100 from the official python tarballs (specs/fedal.md §4.1, specs/fedhkd.md
§5.1, specs/fedakd.md §2.1). The batches are read from the verified tarball in place; CIFAR-100
uses the 100 fine labels."""
from __future__ import annotations

import pickle
import tarfile
from pathlib import Path

import numpy as np

from bench.data.registry import DatasetSpec, register_dataset
from bench.data.download import REMOTE_FILES, fetch, parsing, prepared_from_raw
from bench.data.prepared import PreparedDataset

# name -> (folder inside the tarball, train members, test members, label key, classes)
_LAYOUT = {
    "cifar10": ("cifar-10-batches-py", [f"data_batch_{i}" for i in range(1, 6)], ["test_batch"], b"labels", 10),
    "cifar100": ("cifar-100-python", ["train"], ["test"], b"fine_labels", 100),
}


def _read_batches(archive: tarfile.TarFile, inner: str, members: list[str],
                  label_key: bytes) -> tuple[np.ndarray, np.ndarray]:
    xs, ys = [], []
    for member in members:
        handle = archive.extractfile(f"{inner}/{member}")
        if handle is None:
            raise KeyError(f"{inner}/{member} is not a file in the archive")
        batch = pickle.load(handle, encoding="bytes")
        xs.append(np.asarray(batch[b"data"], dtype=np.uint8).reshape(-1, 3, 32, 32))
        ys.append(np.asarray(batch[label_key], dtype=np.int64))
    return np.concatenate(xs), np.concatenate(ys)


def prepare_cifar(name: str, data_dir: Path) -> PreparedDataset:
    inner, train_members, test_members, label_key, classes = _LAYOUT[name]
    files = fetch(name, name, data_dir)
    path = files[REMOTE_FILES[name][0].name]
    with parsing(path, name), tarfile.open(path, "r:gz") as archive:
        train = _read_batches(archive, inner, train_members, label_key)
        test = _read_batches(archive, inner, test_members, label_key)
    return prepared_from_raw(name, classes, train, test, files, format="python pickle batches in tar.gz")


for _name, (_inner, _tr, _te, _key, _classes) in _LAYOUT.items():
    register_dataset(DatasetSpec(
        name=_name, num_classes=_classes, image_shape=(3, 32, 32), num_train=50000, num_test=10000,
        prepare=lambda d, n=_name: prepare_cifar(n, d),
        description=f"CIFAR-{_classes}, 32x32 colour (official python tarball)"))
