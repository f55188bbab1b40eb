"""Every dataset parsed end to end from small files fabricated in its real on-disk format, with
their checksums registered for the test; plus the missing, mismatched and truncated file paths.
No test touches the network: BENCH_OFFLINE=1 and the downloader is replaced."""
from __future__ import annotations

import gzip
import io
import json
import pickle
import tarfile
import zipfile
from pathlib import Path

import numpy as np
import pytest
import scipy.io
from PIL import Image

from bench.data import download, get_dataset_spec, load_dataset, prepare_dataset
from bench.data.download import RemoteFile, md5_file
from bench.errors import BenchError

RNG = np.random.default_rng(0)


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    monkeypatch.setenv("BENCH_OFFLINE", "1")

    def refuse(url, dest):
        raise AssertionError(f"network touched: {url}")

    monkeypatch.setattr(download, "DOWNLOADER", refuse)


@pytest.fixture
def register(monkeypatch):
    """Register fabricated files as the published checksums of a raw folder."""
    def _register(folder: str, paths: list[Path]) -> None:
        monkeypatch.setitem(download.REMOTE_FILES, folder, tuple(
            RemoteFile(p.name, (f"https://example.invalid/{p.name}",), md5_file(p)) for p in paths))
    return _register


def idx_bytes(array: np.ndarray) -> bytes:
    header = bytes([0, 0, 0x08, array.ndim]) + np.asarray(array.shape, dtype=">u4").tobytes()
    return header + array.astype(np.uint8).tobytes()


def images(n: int, c: int, h: int, w: int) -> np.ndarray:
    return RNG.integers(0, 256, size=(n, c, h, w), dtype=np.uint8)


# ---------------------------------------------------------------------------------------------
# Fabricators: each writes the dataset's raw files under raw/<folder>/ and returns (paths, expected)


def make_idx(root: Path, folder: str) -> tuple[list[Path], dict]:
    out = root / "raw" / folder
    out.mkdir(parents=True)
    expected = {"train": (images(12, 1, 28, 28), RNG.integers(0, 10, 12)),
                "test": (images(5, 1, 28, 28), RNG.integers(0, 10, 5))}
    paths = []
    for split, prefix in (("train", "train"), ("test", "t10k")):
        x, y = expected[split]
        for kind, arr in (("images-idx3", x[:, 0]), ("labels-idx1", y)):
            path = out / f"{prefix}-{kind}-ubyte.gz"
            path.write_bytes(gzip.compress(idx_bytes(arr)))
            paths.append(path)
    return paths, expected


def make_emnist(root: Path, split: str, classes: int) -> tuple[list[Path], dict]:
    out = root / "raw" / "emnist"
    out.mkdir(parents=True)
    expected = {"train": (images(9, 1, 28, 28), RNG.integers(0, classes, 9)),
                "test": (images(4, 1, 28, 28), RNG.integers(0, classes, 4))}
    path = out / "gzip.zip"
    with zipfile.ZipFile(path, "w") as archive:
        for s, (x, y) in expected.items():
            stored = x[:, 0].transpose(0, 2, 1)  # NIST stores EMNIST transposed
            archive.writestr(f"gzip/emnist-{split}-{s}-images-idx3-ubyte.gz", gzip.compress(idx_bytes(stored)))
            archive.writestr(f"gzip/emnist-{split}-{s}-labels-idx1-ubyte.gz", gzip.compress(idx_bytes(y)))
    return [path], expected


def make_cifar(root: Path, name: str) -> tuple[list[Path], dict]:
    out = root / "raw" / name
    out.mkdir(parents=True)
    classes, inner, key = (10, "cifar-10-batches-py", b"labels") if name == "cifar10" else \
        (100, "cifar-100-python", b"fine_labels")
    members = {"train": [f"data_batch_{i}" for i in range(1, 6)] if name == "cifar10" else ["train"],
               "test": ["test_batch"] if name == "cifar10" else ["test"]}
    expected = {}
    path = out / f"{'cifar-10' if name == 'cifar10' else 'cifar-100'}-python.tar.gz"
    with tarfile.open(path, "w:gz") as archive:
        for split, names in members.items():
            xs, ys = [], []
            for member in names:
                x, y = images(3, 3, 32, 32), RNG.integers(0, classes, 3)
                blob = pickle.dumps({b"data": x.reshape(3, -1), key: y.tolist(), b"batch_label": b"x"}, protocol=2)
                info = tarfile.TarInfo(f"{inner}/{member}")
                info.size = len(blob)
                archive.addfile(info, io.BytesIO(blob))
                xs.append(x); ys.append(y)
            expected[split] = (np.concatenate(xs), np.concatenate(ys))
    return [path], expected


def make_svhn(root: Path) -> tuple[list[Path], dict]:
    out = root / "raw" / "svhn"
    out.mkdir(parents=True)
    expected, paths = {}, []
    for split, n in (("train", 7), ("test", 4)):
        x, y = images(n, 3, 32, 32), np.arange(n) % 10
        mat_y = np.where(y == 0, 10, y).reshape(-1, 1).astype(np.uint8)  # SVHN stores digit 0 as 10
        path = out / f"{split}_32x32.mat"
        scipy.io.savemat(path, {"X": x.transpose(2, 3, 1, 0), "y": mat_y})
        expected[split] = (x, y)
        paths.append(path)
    return paths, expected


def png_bytes(chw: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(chw.transpose(1, 2, 0)).save(buffer, format="PNG")
    return buffer.getvalue()


def make_cinic(root: Path) -> tuple[list[Path], dict]:
    out = root / "raw" / "cinic10"
    out.mkdir(parents=True)
    from bench.data.cinic import CLASSES
    rows: dict[str, list] = {"train": [], "test": [], "valid": []}
    for split, members in rows.items():
        for c in (3, 0, 9):
            for k in range(2):
                members.append((f"{split}/{CLASSES[c]}/img-{k}.png", images(1, 3, 32, 32)[0], c))
    path = out / "CINIC-10.tar.gz"
    with tarfile.open(path, "w:gz") as archive:
        for split in ("test", "valid", "train"):  # member order must not matter
            for name, x, _ in rows[split]:
                blob = png_bytes(x)
                info = tarfile.TarInfo(name)
                info.size = len(blob)
                archive.addfile(info, io.BytesIO(blob))
    expected = {}
    for split in ("train", "test"):
        ordered = sorted(rows[split], key=lambda r: r[0])
        expected[split] = (np.stack([r[1] for r in ordered]), np.array([r[2] for r in ordered]))
    return [path], expected


def make_celeba(root: Path) -> tuple[list[Path], dict]:
    out = root / "raw" / "celeba"
    (out / "leaf" / "train").mkdir(parents=True)
    (out / "leaf" / "test").mkdir(parents=True)
    users = {"7": 4, "12": 3, "3": 2}
    counter = 0
    zip_path = out / "img_align_celeba.zip"
    blobs = {}
    split_data: dict[str, dict] = {"train": {}, "test": {}}
    for user, n in users.items():
        names = []
        for _ in range(n):
            counter += 1
            name = f"{counter:06d}.jpg"
            buffer = io.BytesIO()
            Image.fromarray(RNG.integers(0, 256, (22, 18, 3), dtype=np.uint8)).save(buffer, format="JPEG")
            blobs[name] = buffer.getvalue()
            names.append(name)
        labels = [counter % 2 for counter in range(n)]
        split_data["train"][user] = {"x": names[:-1], "y": labels[:-1]}
        split_data["test"][user] = {"x": names[-1:], "y": labels[-1:]}
    with zipfile.ZipFile(zip_path, "w") as archive:
        for name, blob in blobs.items():
            archive.writestr(f"img_align_celeba/{name}", blob)
    for split, data in split_data.items():
        # two JSON shards, as LEAF writes them
        for shard, shard_users in enumerate((["7"], ["12", "3"])):
            blob = {"users": shard_users, "num_samples": [len(data[u]["y"]) for u in shard_users],
                    "user_data": {u: data[u] for u in shard_users}}
            (out / "leaf" / split / f"all_data_{shard}_niid_{split}.json").write_text(json.dumps(blob))
    sorted_users = sorted(users)  # ["12", "3", "7"]
    expected = {}
    for split, data in split_data.items():
        y = np.concatenate([data[u]["y"] for u in sorted_users])
        g = np.concatenate([[sorted_users.index(u)] * len(data[u]["y"]) for u in sorted_users])
        expected[split] = (None, y, g)
    return [zip_path], expected


CASES = {
    "mnist": ("mnist", lambda root: make_idx(root, "mnist")),
    "fashionmnist": ("fashionmnist", lambda root: make_idx(root, "fashionmnist")),
    "emnist-byclass": ("emnist", lambda root: make_emnist(root, "byclass", 62)),
    "emnist-balanced": ("emnist", lambda root: make_emnist(root, "balanced", 47)),
    "cifar10": ("cifar10", lambda root: make_cifar(root, "cifar10")),
    "cifar100": ("cifar100", lambda root: make_cifar(root, "cifar100")),
    "svhn": ("svhn", make_svhn),
    "cinic10": ("cinic10", make_cinic),
    "celeba": ("celeba", make_celeba),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_prepare_parses_real_format_end_to_end(name, tmp_path, register):
    folder, make = CASES[name]
    paths, expected = make(tmp_path)
    register(folder, paths)
    out = prepare_dataset(name, tmp_path)
    data = load_dataset(name, tmp_path)
    spec = get_dataset_spec(name)
    assert out == tmp_path / "prepared" / name and (out / "manifest.json").exists()
    assert data.num_classes == spec.num_classes and data.image_shape == spec.image_shape
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["sha256"] == data.sha256
    assert set(manifest["source"]["raw_files"]) >= {p.name for p in paths}
    for split in ("train", "test"):
        x_exp, y_exp, *group = expected[split]
        np.testing.assert_array_equal(getattr(data, f"{split}_y"), y_exp)
        if x_exp is not None:
            np.testing.assert_array_equal(getattr(data, f"{split}_x"), x_exp)
        if group:
            np.testing.assert_array_equal(getattr(data, f"{split}_group"), group[0])
    assert len(data.mean) == len(data.std) == spec.image_shape[0]
    # preparing again is a no-op with the same hash
    assert prepare_dataset(name, tmp_path) == out and load_dataset(name, tmp_path).sha256 == data.sha256


def test_celeba_users_recorded(tmp_path, register):
    paths, _ = make_celeba(tmp_path)
    register("celeba", paths)
    data = load_dataset("celeba", prepare_dataset("celeba", tmp_path).parent.parent)
    assert data.source["users"] == ["12", "3", "7"] and data.source["task"] == "Smiling"


@pytest.mark.parametrize("name", sorted(CASES))
def test_offline_message_names_files_checksums_and_folder(name, tmp_path):
    folder = CASES[name][0]
    with pytest.raises(BenchError) as err:
        prepare_dataset(name, tmp_path)
    message = str(err.value)
    target = tmp_path.resolve() / "raw" / folder
    assert str(target) in message
    if name == "celeba":
        assert "LEAF" in message and "preprocess.sh" in message
    for remote in download.REMOTE_FILES[folder]:
        assert remote.name in message and remote.md5 in message
    assert not (tmp_path / "prepared" / name / "manifest.json").exists()


def test_checksum_mismatch_is_refused(tmp_path, register):
    paths, _ = make_idx(tmp_path, "mnist")
    register("mnist", paths)
    paths[0].write_bytes(paths[0].read_bytes() + b"extra")
    with pytest.raises(BenchError, match="published checksum.*refusing"):
        prepare_dataset("mnist", tmp_path)


def test_truncated_file_is_refused(tmp_path, register):
    paths, _ = make_cifar(tmp_path, "cifar10")
    register("cifar10", paths)
    blob = paths[0].read_bytes()
    paths[0].write_bytes(blob[: len(blob) // 2])
    with pytest.raises(BenchError, match="truncated"):
        prepare_dataset("cifar10", tmp_path)


@pytest.mark.parametrize("name", ["mnist", "cifar10", "svhn", "cinic10"])
def test_truncated_file_with_matching_checksum_fails_to_parse_cleanly(name, tmp_path, register):
    folder, make = CASES[name]
    paths, _ = make(tmp_path)
    blob = paths[0].read_bytes()
    paths[0].write_bytes(blob[: len(blob) * 2 // 3])
    register(folder, paths)
    with pytest.raises(BenchError, match="could not parse .* truncated"):
        prepare_dataset(name, tmp_path)


def test_idx_header_size_checked():
    from bench.data.mnist import parse_idx
    data = idx_bytes(np.zeros((2, 3, 3), np.uint8))
    assert parse_idx(data).shape == (2, 3, 3)
    with pytest.raises(ValueError, match="truncated"):
        parse_idx(data[:-1])


def test_download_is_atomic_and_verified(tmp_path, register, monkeypatch):
    monkeypatch.delenv("BENCH_OFFLINE")
    paths, expected = make_svhn(tmp_path / "source")
    register("svhn", paths)
    content = {p.name: p.read_bytes() for p in paths}
    calls = []

    def fake(url, dest):
        calls.append(url)
        assert dest.name.endswith(".part")
        dest.write_bytes(content[url.rsplit("/", 1)[1]])

    monkeypatch.setattr(download, "DOWNLOADER", fake)
    data = load_dataset("svhn", prepare_dataset("svhn", tmp_path).parent.parent)
    np.testing.assert_array_equal(data.train_x, expected["train"][0])
    assert len(calls) == 2 and not list((tmp_path / "raw" / "svhn").glob("*.part"))


def test_failed_or_corrupt_download_leaves_nothing(tmp_path, register, monkeypatch):
    monkeypatch.delenv("BENCH_OFFLINE")
    paths, _ = make_svhn(tmp_path / "source")
    register("svhn", paths)

    def corrupt(url, dest):
        dest.write_bytes(b"half a file")

    monkeypatch.setattr(download, "DOWNLOADER", corrupt)
    with pytest.raises(BenchError, match="download failed.*md5") as err:
        prepare_dataset("svhn", tmp_path)
    assert "train_32x32.mat" in str(err.value)
    assert list((tmp_path / "raw" / "svhn").iterdir()) == []


def test_leftover_part_file_is_never_used(tmp_path, register):
    paths, _ = make_idx(tmp_path / "source", "mnist")
    register("mnist", paths)
    target = tmp_path / "raw" / "mnist"
    target.mkdir(parents=True)
    for p in paths:
        (target / (p.name + ".part")).write_bytes(p.read_bytes())
    with pytest.raises(BenchError, match="offline"):
        prepare_dataset("mnist", tmp_path)


def test_data_dir_resolution(monkeypatch, tmp_path):
    from bench.data import resolve_data_dir
    monkeypatch.setenv("BENCH_DATA_DIR", str(tmp_path / "env"))
    assert resolve_data_dir(tmp_path / "arg") == (tmp_path / "arg").resolve()
    assert resolve_data_dir() == (tmp_path / "env").resolve()
    monkeypatch.delenv("BENCH_DATA_DIR")
    assert resolve_data_dir() == Path("data").resolve()


def test_synthetic32_is_fixed_and_shaped_like_cifar(tmp_path: Path) -> None:
    from bench.data import load_dataset, prepare_dataset

    a = load_dataset("synthetic32", tmp_path / "a")
    prepare_dataset("synthetic32", tmp_path / "b")
    b = load_dataset("synthetic32", tmp_path / "b")
    assert a.sha256 == b.sha256 and a.image_shape == (3, 32, 32)
    assert (len(a.train_y), len(a.test_y)) == (400, 200) and np.bincount(a.train_y).tolist() == [40] * 10
    # the fabricated images the pinned smoke results were made with (fixed seed; any change moves them)
    assert a.sha256 == "b948b26ca08a23a4228a0d539ae11e93c51f73fcca78b6a981705386e5f8a579"


def test_synthetic28_is_fixed_and_shaped_like_mnist(tmp_path: Path) -> None:
    from bench.data import load_dataset

    a = load_dataset("synthetic28", tmp_path)
    assert a.image_shape == (1, 28, 28) and (len(a.train_y), len(a.test_y)) == (12_000, 4_000)
    assert np.bincount(a.train_y).tolist() == [1_200] * 10 and np.bincount(a.test_y).tolist() == [400] * 10
    assert a.sha256 == "ce6ccb1979daed680c0d8578b9b344382af86f5843671b4ef5a4b30e611a5f95"
