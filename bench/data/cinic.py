"""CINIC-10 (pipelines/fedal/NOTES.md §4.1): 90,000 train / 90,000 test 32x32 PNGs in ``<split>/<class>/``
folders inside the official tarball, read in place; the ``valid`` split is unused. Images are
ordered by path, so the prepared arrays do not depend on the archive's member order."""
from __future__ import annotations

import io
import tarfile
from pathlib import Path

import numpy as np

from bench.data.registry import DatasetSpec, register_dataset
from bench.data.download import fetch, parsing, prepared_from_raw
from bench.data.prepared import PreparedDataset
from bench.errors import BenchError

CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
SPLITS = ("train", "test")


def _read_split_folders(archive: tarfile.TarFile) -> dict[str, list[tuple[str, np.ndarray, int]]]:
    from PIL import Image  # only when reading images: every run imports the dataset registry

    found: dict[str, list[tuple[str, np.ndarray, int]]] = {s: [] for s in SPLITS}
    for member in archive:
        parts = Path(member.name.removeprefix("./")).parts
        if not member.isfile() or len(parts) != 3 or parts[0] not in SPLITS or not parts[2].endswith(".png"):
            continue
        if parts[1] not in CLASSES:
            raise ValueError(f"unknown class folder {parts[1]!r} in {member.name}")
        handle = archive.extractfile(member)
        assert handle is not None
        image = Image.open(io.BytesIO(handle.read())).convert("RGB")
        if image.size != (32, 32):
            raise ValueError(f"{member.name} is {image.size}, expected 32x32")
        found[parts[0]].append((member.name, np.asarray(image).transpose(2, 0, 1), CLASSES.index(parts[1])))
    return found


def prepare_cinic10(data_dir: Path) -> PreparedDataset:
    files = fetch("cinic10", "cinic10", data_dir)
    path = files["CINIC-10.tar.gz"]
    with parsing(path, "cinic10"), tarfile.open(path, "r:gz") as archive:
        found = _read_split_folders(archive)
    arrays = []
    for split in SPLITS:
        if not found[split]:
            raise BenchError(f"{path} holds no {split}/<class>/*.png images; it is not the CINIC-10 archive. "
                             "Delete it and run `bench data prepare cinic10` again")
        rows = sorted(found[split], key=lambda r: r[0])
        arrays.append((np.stack([r[1] for r in rows]), np.array([r[2] for r in rows], dtype=np.int64)))
    return prepared_from_raw("cinic10", 10, arrays[0], arrays[1], files, format="png folders in tar.gz",
                             valid_split="unused")


CINIC10 = register_dataset(DatasetSpec(
    name="cinic10", num_classes=10, image_shape=(3, 32, 32), num_train=90000, num_test=90000,
    prepare=prepare_cinic10, description="CINIC-10, 32x32 colour, train/test (valid unused)"))
