"""Every dataset parsed end to end from small files fabricated in its real on-disk format, with
their checksums registered for the test; plus the missing, mismatched and truncated file paths.
No test touches the network: BENCH_OFFLINE=1 and the downloader is replaced."""
from __future__ import annotations

import dataclasses
import gzip
import hashlib
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

from bench.data import PreparedDataset, describe_source, download, get_dataset_spec, load_dataset, prepare_dataset
from bench.data import registry
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


def py2_pickle(obj: dict, keys: set[str]) -> bytes:
    """``obj`` pickled as Python 2 pickled CIFAR: the dict keys in ``keys`` as byte strings (SHORT_BINSTRING),
    which ``encoding="bytes"`` loads as bytes and ``encoding="latin1"`` (torchvision) as str."""
    import pickletools
    import struct
    blob = pickle.dumps(obj, protocol=2)
    out, last = [], 0
    for op, arg, pos in pickletools.genops(blob):
        if op.name == "BINUNICODE" and arg in keys:
            out += [blob[last:pos], b"U" + bytes([len(arg)]) + arg.encode("latin1")]
            last = pos + 1 + 4 + len(arg.encode("utf-8"))
            assert blob[pos + 1:pos + 5] == struct.pack("<I", len(arg.encode("utf-8")))
    return b"".join(out) + blob[last:]


def make_cifar(root: Path, name: str) -> tuple[list[Path], dict]:
    out = root / "raw" / name
    out.mkdir(parents=True)
    classes, inner, key, meta = (10, "cifar-10-batches-py", "labels", ("batches.meta", "label_names")) \
        if name == "cifar10" else (100, "cifar-100-python", "fine_labels", ("meta", "fine_label_names"))
    members = {"train": [f"data_batch_{i}" for i in range(1, 6)] if name == "cifar10" else ["train"],
               "test": ["test_batch"] if name == "cifar10" else ["test"]}
    expected = {}
    path = out / f"{'cifar-10' if name == 'cifar10' else 'cifar-100'}-python.tar.gz"

    def add(archive: tarfile.TarFile, member: str, blob: bytes) -> None:
        info = tarfile.TarInfo(f"{inner}/{member}")
        info.size = len(blob)
        archive.addfile(info, io.BytesIO(blob))

    with tarfile.open(path, "w:gz") as archive:
        for split, names in members.items():
            xs, ys = [], []
            for member in names:
                x, y = images(3, 3, 32, 32), RNG.integers(0, classes, 3)
                add(archive, member, py2_pickle({"data": x.reshape(3, -1), key: y.tolist(), "batch_label": "x"},
                                                {"data", key, "batch_label"}))
                xs.append(x); ys.append(y)
            expected[split] = (np.concatenate(xs), np.concatenate(ys))
        add(archive, meta[0], py2_pickle({meta[1]: [f"c{i}" for i in range(classes)]}, {meta[1]}))
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


# ---------------------------------------------------------------------------------------------
# torchvision's layouts. torchvision's own download code lays the fabricated files out: each file is
# put where torchvision downloads it and torchvision's checksum tables are patched to the fabricated
# files, so ``download=True`` finds the "download" done and only extracts, as after a real download.


@pytest.fixture
def torchvision_offline(monkeypatch):
    from torchvision.datasets import utils as tvu

    def refuse(*args, **kwargs):
        raise AssertionError("torchvision touched the network")

    for attr in ("_urlretrieve", "download_file_from_google_drive", "_download_file_from_remote_location"):
        monkeypatch.setattr(tvu, attr, refuse)


def _copy(paths: list[Path], folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for p in paths:
        (folder / p.name).write_bytes(p.read_bytes())


def tv_mnist(name: str, paths: list[Path], root: Path, monkeypatch) -> dict:
    """torchvision.datasets.MNIST / FashionMNIST: the .gz files in <root>/<class>/raw/, extracted beside them."""
    from torchvision import datasets as tvd
    cls = {"mnist": tvd.MNIST, "fashionmnist": tvd.FashionMNIST}[name]
    monkeypatch.setattr(cls, "resources", [(p.name, md5_file(p)) for p in paths])
    monkeypatch.setattr(cls, "mirrors", ["https://example.invalid/"])
    _copy(paths, root / cls.__name__ / "raw")
    loaded = {s: cls(str(root), train=s == "train", download=True) for s in ("train", "test")}
    return {s: (d.data.numpy()[:, None], d.targets.numpy()) for s, d in loaded.items()}


def tv_emnist(name: str, paths: list[Path], root: Path, monkeypatch) -> dict:
    """torchvision.datasets.EMNIST: gzip.zip in <root>/EMNIST/raw/, every member extracted there, gzip/ removed."""
    from torchvision import datasets as tvd
    monkeypatch.setattr(tvd.EMNIST, "md5", md5_file(paths[0]))
    _copy(paths, root / "EMNIST" / "raw")
    split = name.removeprefix("emnist-")
    loaded = {s: tvd.EMNIST(str(root), split=split, train=s == "train", download=True) for s in ("train", "test")}
    # torchvision keeps NIST's transposed storage; bench turns the images upright
    return {s: (d.data.numpy()[:, None].transpose(0, 1, 3, 2), d.targets.numpy()) for s, d in loaded.items()}


def tv_cifar(name: str, paths: list[Path], root: Path, monkeypatch) -> dict:
    """torchvision.datasets.CIFAR10 / CIFAR100: the tarball in <root>/, extracted to <root>/<base_folder>/."""
    from torchvision import datasets as tvd
    cls = {"cifar10": tvd.CIFAR10, "cifar100": tvd.CIFAR100}[name]
    with tarfile.open(paths[0]) as archive:
        md5 = {Path(m.name).name: hashlib.md5(archive.extractfile(m).read()).hexdigest() for m in archive if m.isfile()}
    monkeypatch.setattr(cls, "tgz_md5", md5_file(paths[0]))
    monkeypatch.setattr(cls, "train_list", [[f, md5[f]] for f, _ in cls.train_list])
    monkeypatch.setattr(cls, "test_list", [[f, md5[f]] for f, _ in cls.test_list])
    monkeypatch.setattr(cls, "meta", {**cls.meta, "md5": md5[cls.meta["filename"]]})
    monkeypatch.setitem(download.EXTRACTED_MD5, name, {f: md5[f] for f, _ in cls.train_list + cls.test_list})
    _copy(paths, root)
    loaded = {s: cls(str(root), train=s == "train", download=True) for s in ("train", "test")}
    return {s: (d.data.transpose(0, 3, 1, 2), np.asarray(d.targets)) for s, d in loaded.items()}


def tv_svhn(name: str, paths: list[Path], root: Path, monkeypatch) -> dict:
    """torchvision.datasets.SVHN: train_32x32.mat and test_32x32.mat in <root>/ itself."""
    from torchvision import datasets as tvd
    by_name = {p.name: p for p in paths}
    monkeypatch.setattr(tvd.SVHN, "split_list", {s: (url, f, md5_file(by_name[f])) for s, (url, f, _)
                                                 in tvd.SVHN.split_list.items() if s in ("train", "test")})
    _copy(paths, root)
    loaded = {s: tvd.SVHN(str(root), split=s, download=True) for s in ("train", "test")}
    return {s: (d.data, d.labels) for s, d in loaded.items()}


TORCHVISION = {"mnist": tv_mnist, "fashionmnist": tv_mnist, "emnist-byclass": tv_emnist,
               "emnist-balanced": tv_emnist, "cifar10": tv_cifar, "cifar100": tv_cifar, "svhn": tv_svhn}
# The archives torchvision downloads; without them its extracted files are what is left.
ARCHIVES = {"mnist": "MNIST/raw/*.gz", "fashionmnist": "FashionMNIST/raw/*.gz", "emnist-byclass": "EMNIST/raw/gzip.zip",
            "emnist-balanced": "EMNIST/raw/gzip.zip", "cifar10": "*.tar.gz", "cifar100": "*.tar.gz"}


def _torchvision_root(name: str, tmp_path: Path, register, monkeypatch) -> tuple[Path, PreparedDataset, dict]:
    """(torchvision root, the dataset prepared from this project's own layout, torchvision's arrays)."""
    folder, make = CASES[name]
    paths, _ = make(tmp_path / "own")
    register(folder, paths)
    own = load_dataset(name, prepare_dataset(name, tmp_path / "own").parent.parent)
    root = tmp_path / "torchvision"
    return root, own, TORCHVISION[name](name, paths, root, monkeypatch)


def _same_data(a: PreparedDataset, b: PreparedDataset) -> None:
    for key in ("train_x", "train_y", "test_x", "test_y"):
        np.testing.assert_array_equal(getattr(a, key), getattr(b, key))
    assert (a.num_classes, a.mean, a.std) == (b.num_classes, b.mean, b.std)


def _patch_sizes(monkeypatch, name: str, data: PreparedDataset) -> None:
    monkeypatch.setitem(registry._DATASETS, name, dataclasses.replace(
        get_dataset_spec(name), num_train=len(data.train_y), num_test=len(data.test_y)))


@pytest.mark.parametrize("name", sorted(TORCHVISION))
def test_torchvision_layout_parses_like_own_layout(name, tmp_path, register, monkeypatch, torchvision_offline):
    root, own, loaded = _torchvision_root(name, tmp_path, register, monkeypatch)
    data = load_dataset(name, prepare_dataset(name, root).parent.parent)
    _same_data(own, data)
    for split in ("train", "test"):  # torchvision's own loader reads the same images and labels
        np.testing.assert_array_equal(getattr(data, f"{split}_x"), loaded[split][0])
        np.testing.assert_array_equal(getattr(data, f"{split}_y"), loaded[split][1])
    assert data.source["layout"] == "torchvision" and "unverified_files" not in data.source
    assert data.source["verification"] == "every file verified against its published md5"
    assert all((root / rel).is_file() for rel in data.source["raw_files"])
    assert not (root / "raw").exists()  # nothing downloaded into this project's layout
    assert "verified against its published md5" in describe_source(data.source)


@pytest.mark.parametrize("name", sorted(ARCHIVES))
def test_torchvision_extracted_files_without_the_archive(name, tmp_path, register, monkeypatch, torchvision_offline):
    root, own, _ = _torchvision_root(name, tmp_path, register, monkeypatch)
    for archive in root.glob(ARCHIVES[name]):
        archive.unlink()
    if name.startswith("cifar"):  # the extracted batches have published md5s (torchvision's train_list/test_list)
        data = load_dataset(name, prepare_dataset(name, root).parent.parent)
        assert "unverified_files" not in data.source
        assert set(data.source["raw_files"]) == {f"{'cifar-10-batches-py' if name == 'cifar10' else 'cifar-100-python'}"
                                                 f"/{m}" for m in download.EXTRACTED_MD5[name]}
    else:  # idx files have none: the samples per split are checked against the dataset's registered description
        with pytest.raises(BenchError, match=r"train / \d+ test samples, .* no published checksum"):
            prepare_dataset(name, root)
        _patch_sizes(monkeypatch, name, own)
        data = load_dataset(name, prepare_dataset(name, root).parent.parent)
        assert len(data.source["unverified_files"]) == 4 and all(
            f.endswith("-ubyte") for f in data.source["unverified_files"])
        assert "without a file checksum" in data.source["verification"]
        assert "without a file checksum" in describe_source(data.source)
    _same_data(own, data)


def test_torchvision_layout_checksum_mismatch_is_refused(tmp_path, register, monkeypatch, torchvision_offline):
    root, _, _ = _torchvision_root("mnist", tmp_path, register, monkeypatch)
    gz = root / "MNIST" / "raw" / "t10k-labels-idx1-ubyte.gz"
    gz.write_bytes(gz.read_bytes() + b"x")
    with pytest.raises(BenchError, match=f"{gz}.*published checksum.*refusing"):
        prepare_dataset("mnist", root)


def test_torchvision_cifar_corrupt_tarball_falls_back_to_verified_batches(tmp_path, register, monkeypatch,
                                                                           torchvision_offline):
    root, own, _ = _torchvision_root("cifar10", tmp_path, register, monkeypatch)
    tarball = root / "cifar-10-python.tar.gz"
    tarball.write_bytes(tarball.read_bytes()[:100])
    data = load_dataset("cifar10", prepare_dataset("cifar10", root).parent.parent)
    assert set(data.source["raw_files"]) == {f"cifar-10-batches-py/{m}" for m in download.EXTRACTED_MD5["cifar10"]}
    _same_data(own, data)
    batch = root / "cifar-10-batches-py" / "test_batch"
    batch.write_bytes(batch.read_bytes()[:-1])  # and with a damaged batch too, both are refused, each named
    with pytest.raises(BenchError, match=r"(?s)cifar-10-python.tar.gz has md5.*test_batch has md5"):
        prepare_dataset("cifar10", root, force=True)


def test_own_layout_comes_first(tmp_path, register, monkeypatch, torchvision_offline):
    root, own, _ = _torchvision_root("svhn", tmp_path, register, monkeypatch)
    _copy(list((tmp_path / "own" / "raw" / "svhn").iterdir()), root / "raw" / "svhn")
    data = load_dataset("svhn", prepare_dataset("svhn", root).parent.parent)
    assert "layout" not in data.source and data.sha256 == own.sha256  # the own layout's manifest is unchanged


def test_image_shape_checked_against_spec(tmp_path, register, monkeypatch):
    paths, _ = make_idx(tmp_path, "mnist")
    register("mnist", paths)
    monkeypatch.setitem(registry._DATASETS, "mnist", dataclasses.replace(get_dataset_spec("mnist"),
                                                                         image_shape=(1, 32, 32)))
    with pytest.raises(BenchError, match="images are 1x28x28, mnist has 1x32x32"):
        prepare_dataset("mnist", tmp_path)


@pytest.mark.parametrize("name,where", [
    ("mnist", "ROOT/MNIST/raw/"), ("fashionmnist", "ROOT/FashionMNIST/raw/"),
    ("emnist-balanced", "ROOT/EMNIST/raw/{emnist-balanced-train-images-idx3-ubyte"),
    ("cifar10", "ROOT/cifar-10-batches-py/"), ("cifar100", "ROOT/cifar-100-python/"), ("svhn", "ROOT/{train_32x32.mat, test_32x32.mat}")])
def test_offline_message_names_the_torchvision_layout(name, where, tmp_path):
    with pytest.raises(BenchError) as err:
        prepare_dataset(name, tmp_path)
    message = str(err.value)
    assert "torchvision.datasets." in message and "--data-dir" in message and where in message
    assert str(tmp_path.resolve() / "raw" / CASES[name][0]) in message


def test_data_list_and_prepare_say_where_files_came_from(tmp_path, register, monkeypatch, torchvision_offline,
                                                         capsys):
    from bench.cli import main
    root, own, _ = _torchvision_root("mnist", tmp_path, register, monkeypatch)
    for archive in root.glob(ARCHIVES["mnist"]):
        archive.unlink()
    _patch_sizes(monkeypatch, "mnist", own)
    assert main(["data", "prepare", "mnist", "--data-dir", str(root)]) == 0
    assert "torchvision layout" in capsys.readouterr().out
    assert main(["data", "list", "--data-dir", str(root)]) == 0
    listing = capsys.readouterr().out
    assert "prepared: raw files from the torchvision layout" in listing and "without a file checksum" in listing
    assert main(["data", "list", "--data-dir", str(tmp_path / "own")]) == 0
    assert "prepared: raw files from <data-dir>/raw/" in capsys.readouterr().out


def test_torchvision_paths_match_torchvision():
    """The folder and file names the layouts use are torchvision's own."""
    from torchvision import datasets as tvd
    from bench.data import cifar, mnist, svhn
    assert {f.path for f in mnist.torchvision_idx_layouts("fashionmnist")[1].files} == {
        f"FashionMNIST/raw/{n.removesuffix('.gz')}" for n, _ in tvd.FashionMNIST.resources}
    assert [f.path for f in cifar.torchvision_layouts("cifar100")[1].files] == [
        f"{tvd.CIFAR100.base_folder}/{n}" for n, _ in tvd.CIFAR100.train_list + tvd.CIFAR100.test_list]
    assert cifar.torchvision_layouts("cifar10")[0].files[0].path == tvd.CIFAR10.filename
    assert [f.path for f in svhn.torchvision_layouts()[0].files] == [tvd.SVHN.split_list[s][1]
                                                                      for s in ("train", "test")]
    emnist = set()
    for train in (True, False):  # torchvision's own path properties, on an instance that reads nothing
        ds = tvd.EMNIST.__new__(tvd.EMNIST)
        ds.root, ds.split, ds.train = "ROOT", "byclass", train
        emnist |= {Path(f).relative_to("ROOT").as_posix() for f in (ds.images_file, ds.labels_file)}
    assert {f.path for f in mnist.torchvision_emnist_layouts("byclass")[1].files} == emnist


def test_synthetic28_is_fixed_and_shaped_like_mnist(tmp_path: Path) -> None:
    from bench.data import load_dataset

    a = load_dataset("synthetic28", tmp_path)
    assert a.image_shape == (1, 28, 28) and (len(a.train_y), len(a.test_y)) == (12_000, 4_000)
    assert np.bincount(a.train_y).tolist() == [1_200] * 10 and np.bincount(a.test_y).tolist() == [400] * 10
    assert a.sha256 == "ce6ccb1979daed680c0d8578b9b344382af86f5843671b4ef5a4b30e611a5f95"
