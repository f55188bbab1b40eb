"""CelebA in LEAF's federated form (pipelines/fedal/NOTES.md §4.1): one client per celebrity (LEAF user),
binary task "Smiling", images resized to 84x84 RGB as LEAF's reference model loads them.

Inputs in ``<data_dir>/raw/celeba/``: ``img_align_celeba.zip`` (the official aligned images,
verified against torchvision's published md5, read in place) and LEAF's preprocessing output
``leaf/train/*.json`` and ``leaf/test/*.json`` (``{"users", "num_samples", "user_data": {user:
{"x": [image file names], "y": [0/1]}}}``). LEAF publishes no checksum for its JSON, so their
sha256 are recorded in the manifest. Each sample's group id is its user's position in the sorted
user list, stored in ``source["users"]``.
"""
from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import numpy as np

from bench.data.registry import DatasetSpec, register_dataset
from bench.data.download import REMOTE_FILES, fetch, parsing, prepared_from_raw, raw_dir
from bench.data.prepared import PreparedDataset
from bench.errors import DataUnavailable

IMAGE_SIZE = 84
LEAF_COMMAND = ("git clone https://github.com/TalwalkarLab/leaf && cd leaf/data/celeba && "
                "./preprocess.sh -s niid --sf 1.0 -k 5 -t sample --tf 0.9")


def _leaf_json(data_dir: Path) -> dict[str, list[Path]]:
    leaf = raw_dir(data_dir, "celeba") / "leaf"
    found = {split: sorted((leaf / split).glob("*.json")) for split in ("train", "test")}
    if not all(found.values()):  # LEAF's preprocessing cannot be downloaded: unavailable, skipped offline
        zip_file = REMOTE_FILES["celeba"][0]
        raise DataUnavailable(
            f"dataset 'celeba' needs LEAF's federated CelebA JSON in {leaf}/train/*.json and {leaf}/test/*.json "
            f"(none found in {', '.join(s for s, f in found.items() if not f)}). Create them with LEAF "
            f"({LEAF_COMMAND}) and copy leaf/data/celeba/data/train and .../test there. The images come from "
            f"{zip_file.name} (md5 {zip_file.md5}, https://drive.google.com/uc?id="
            f"{zip_file.urls[0].removeprefix('gdrive:')}) in {leaf.parent}/; then run `bench data prepare celeba`.")
    return found


def _read_users(paths: list[Path]) -> dict[str, tuple[list[str], list[int]]]:
    users: dict[str, tuple[list[str], list[int]]] = {}
    for path in paths:
        with parsing(path, "celeba"):
            blob = json.loads(path.read_text())
            for user in blob["users"]:
                data = blob["user_data"][user]
                if len(data["x"]) != len(data["y"]):
                    raise ValueError(f"user {user}: {len(data['x'])} images but {len(data['y'])} labels")
                names, labels = users.setdefault(str(user), ([], []))
                names.extend(data["x"]); labels.extend(int(v) for v in data["y"])
    return users


def _load_images(archive: zipfile.ZipFile, names: list[str]) -> np.ndarray:
    from PIL import Image  # only when reading images: every run imports the dataset registry

    out = np.empty((len(names), 3, IMAGE_SIZE, IMAGE_SIZE), dtype=np.uint8)
    for i, name in enumerate(names):
        image = Image.open(io.BytesIO(archive.read(f"img_align_celeba/{name}"))).convert("RGB")
        out[i] = np.asarray(image.resize((IMAGE_SIZE, IMAGE_SIZE), Image.Resampling.BICUBIC)).transpose(2, 0, 1)
    return out


def prepare_celeba(data_dir: Path) -> PreparedDataset:
    json_files = _leaf_json(data_dir)
    files = fetch("celeba", "celeba", data_dir)
    splits = {split: _read_users(paths) for split, paths in json_files.items()}
    users = sorted(set(splits["train"]) | set(splits["test"]))
    group_of = {u: g for g, u in enumerate(users)}
    arrays = []
    zip_path = files["img_align_celeba.zip"]
    with parsing(zip_path, "celeba"), zipfile.ZipFile(zip_path) as archive:
        for split in ("train", "test"):
            names, labels, groups = [], [], []
            for user in sorted(splits[split]):
                user_names, user_labels = splits[split][user]
                names += user_names; labels += user_labels; groups += [group_of[user]] * len(user_names)
            arrays.append((_load_images(archive, names), np.asarray(labels, dtype=np.int64),
                           np.asarray(groups, dtype=np.int64)))
    leaf_files = {f"leaf/{split}/{p.name}": p for split, paths in json_files.items() for p in paths}
    return prepared_from_raw("celeba", 2, arrays[0][:2], arrays[1][:2], {**files, **leaf_files},
                             groups=(arrays[0][2], arrays[1][2]), format="LEAF JSON + img_align_celeba.zip",
                             task="Smiling", image_size=IMAGE_SIZE, resample="bicubic", users=users)


CELEBA = register_dataset(DatasetSpec(
    name="celeba", num_classes=2, image_shape=(3, IMAGE_SIZE, IMAGE_SIZE), num_train=180259, num_test=20029,
    prepare=prepare_celeba,
    description="CelebA in LEAF's federated form: 9,343 users (group id), 200,288 images, task Smiling, 84x84 "
                "colour; sizes are approximate (LEAF's per-user 90/10 split, exact counts set by LEAF's run)"))
