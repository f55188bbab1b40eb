"""Raw dataset files: the published checksum table, verification, and atomic download.

Raw files live in ``<data_dir>/raw/<folder>/``. A file present there is used only if its md5
matches the published checksum (torchvision's tables where torchvision covers the dataset); a
mismatch is refused. A download goes to ``<name>.part`` and is renamed into place only after its
checksum verifies, so a partial download is never used. With ``BENCH_OFFLINE=1`` (or when a
download fails) nothing is fetched and one message names every missing file, its checksum, its
source and the folder to put it in.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import pickle
import shutil
import tarfile
import urllib.request
import zipfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench.data.prepared import PreparedDataset, channel_stats
from bench.errors import BenchError, DataUnavailable
from bench.fileio import sha256_file


@dataclass(frozen=True)
class RemoteFile:
    name: str  # file name inside raw/<folder>/
    urls: tuple[str, ...]  # tried in order; "gdrive:<id>" is a Google Drive file id
    md5: str  # the published checksum
    how: str = ""  # extra instruction for files that are not a plain download


def _idx_files(mirrors: list[str], resources: list[tuple[str, str]]) -> tuple[RemoteFile, ...]:
    return tuple(RemoteFile(name, tuple(m + name for m in mirrors), md5) for name, md5 in resources)


def _published_checksums() -> dict[str, tuple[RemoteFile, ...]]:
    from torchvision import datasets as tvd  # imported on first use: 1.5 s every process would pay

    return {
        "mnist": _idx_files(tvd.MNIST.mirrors, tvd.MNIST.resources),
        "fashionmnist": _idx_files(tvd.FashionMNIST.mirrors, tvd.FashionMNIST.resources),
        "emnist": (RemoteFile("gzip.zip", (tvd.EMNIST.url,), tvd.EMNIST.md5),),
        "cifar10": (RemoteFile(tvd.CIFAR10.filename, (tvd.CIFAR10.url,), tvd.CIFAR10.tgz_md5),),
        "cifar100": (RemoteFile(tvd.CIFAR100.filename, (tvd.CIFAR100.url,), tvd.CIFAR100.tgz_md5),),
        "svhn": tuple(RemoteFile(name, (url,), md5) for url, name, md5 in
                      (tvd.SVHN.split_list["train"], tvd.SVHN.split_list["test"])),
        # CINIC-10's landing page publishes no checksum; this md5 is the one public torchvision-style
        # CINIC-10 loaders pin for the datashare archive (not yet checked against a real download).
        "cinic10": (RemoteFile("CINIC-10.tar.gz",
                               ("https://datashare.ed.ac.uk/bitstream/handle/10283/3192/CINIC-10.tar.gz",),
                               "6ee4d0c996905fe93221de577967a372"),),
        "celeba": tuple(RemoteFile(name, (f"gdrive:{file_id}",), md5) for file_id, md5, name in tvd.CelebA.file_list
                        if name == "img_align_celeba.zip"),
    }


class _ChecksumTable(dict):  # type: ignore[type-arg]
    """Raw folder -> files, filled from torchvision's published checksums on the first lookup of a
    folder it lacks. Tests replace entries to register fabricated files."""

    def __missing__(self, folder: str) -> tuple[RemoteFile, ...]:
        for key, files in _published_checksums().items():
            self.setdefault(key, files)
        return dict.__getitem__(self, folder)


REMOTE_FILES: dict[str, tuple[RemoteFile, ...]] = _ChecksumTable()

Downloader = Callable[[str, Path], None]


def _http_or_gdrive(url: str, dest: Path) -> None:
    if url.startswith("gdrive:"):
        from torchvision.datasets.utils import download_file_from_google_drive
        download_file_from_google_drive(url.removeprefix("gdrive:"), str(dest.parent), dest.name)
        return
    request = urllib.request.Request(url, headers={"User-Agent": "fkd-bench"})
    with urllib.request.urlopen(request, timeout=60) as response, open(dest, "wb") as handle:
        shutil.copyfileobj(response, handle, 1 << 20)


# Injectable so tests can prove no network is touched.
DOWNLOADER: Downloader = _http_or_gdrive


def offline() -> bool:
    return os.environ.get("BENCH_OFFLINE", "").strip().lower() in {"1", "true", "yes", "on"}


def md5_file(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def raw_dir(data_dir: Path, folder: str) -> Path:
    return Path(data_dir) / "raw" / folder


def _mismatch(path: Path, remote: RemoteFile, actual: str) -> BenchError:
    return BenchError(
        f"{path} has md5 {actual} but the published checksum is {remote.md5} (size {path.stat().st_size} "
        f"bytes: corrupted, truncated or a different version); refusing to use it. Delete it and download "
        f"it again from {remote.urls[0]}")


def _try_download(remote: RemoteFile, target: Path) -> str | None:
    """Download into ``<target>.part``; rename into place only once the checksum verifies.
    Returns None on success, else why it failed."""
    part = target.with_name(target.name + ".part")
    reasons = []
    for url in remote.urls:
        part.unlink(missing_ok=True)
        try:
            DOWNLOADER(url, part)
            actual = md5_file(part)
        except Exception as exc:  # noqa: BLE001 - any network/OS failure means "try the next mirror"
            reasons.append(f"{url}: {exc}")
            continue
        if actual == remote.md5:
            os.replace(part, target)
            return None
        reasons.append(f"{url}: md5 {actual} != published {remote.md5}")
    part.unlink(missing_ok=True)
    return "; ".join(reasons)


def fetch(dataset: str, folder: str, data_dir: Path) -> dict[str, Path]:
    """Every raw file of ``folder`` verified against its published md5 (downloaded unless offline)."""
    target_dir = raw_dir(data_dir, folder)
    found: dict[str, Path] = {}
    missing: list[tuple[RemoteFile, str]] = []
    for remote in REMOTE_FILES[folder]:
        path = target_dir / remote.name
        if not path.exists():
            if offline():
                missing.append((remote, "offline (BENCH_OFFLINE is set)"))
                continue
            target_dir.mkdir(parents=True, exist_ok=True)
            if (why := _try_download(remote, path)) is not None:
                missing.append((remote, f"download failed: {why}"))
                continue
        if (actual := md5_file(path)) != remote.md5:
            raise _mismatch(path, remote, actual)
        found[remote.name] = path
    if missing:
        raise DataUnavailable(missing_message(dataset, target_dir, missing))
    return found


def missing_message(dataset: str, target_dir: Path, missing: list[tuple[RemoteFile, str]]) -> str:
    lines = [f"dataset {dataset!r} needs {len(missing)} file(s) that are not in {target_dir}:"]
    for remote, why in missing:
        source = remote.how or " or ".join(
            f"https://drive.google.com/uc?id={u.removeprefix('gdrive:')}" if u.startswith("gdrive:") else u
            for u in remote.urls)
        lines.append(f"  {remote.name}  md5 {remote.md5}  from {source}  [{why}]")
    lines.append(f"Download them into {target_dir}/ (or point --data-dir / BENCH_DATA_DIR at a folder whose "
                 f"raw/{target_dir.name}/ holds them), then run `bench data prepare {dataset}` again.")
    return "\n".join(lines)


def raw_provenance(files: dict[str, Path]) -> dict[str, dict[str, str]]:
    """sha256 and md5 of each raw file, for the prepared manifest's ``source``."""
    return {name: {"sha256": sha256_file(p), "md5": md5_file(p)} for name, p in sorted(files.items())}


@contextlib.contextmanager
def parsing(path: Path, dataset: str) -> Iterator[None]:
    """Turn a parse failure of a raw file into one clear message."""
    try:
        yield
    except (OSError, EOFError, ValueError, KeyError, IndexError, zlib.error, tarfile.TarError,
            zipfile.BadZipFile, pickle.UnpicklingError) as exc:
        raise BenchError(f"could not parse {path} for dataset {dataset!r} ({type(exc).__name__}: {exc}); the file "
                         f"is damaged, truncated or not the expected format. Delete it and run "
                         f"`bench data prepare {dataset}` again") from None


def prepared_from_raw(name: str, num_classes: int, train: tuple[np.ndarray, np.ndarray],
                      test: tuple[np.ndarray, np.ndarray], files: dict[str, Path],
                      groups: tuple[np.ndarray, np.ndarray] | None = None, **source: object) -> PreparedDataset:
    """A PreparedDataset with train-split channel statistics and the raw files' provenance."""
    mean, std = channel_stats(train[0])
    return PreparedDataset(
        name=name, train_x=np.ascontiguousarray(train[0]), train_y=train[1].astype(np.int64),
        test_x=np.ascontiguousarray(test[0]), test_y=test[1].astype(np.int64), num_classes=num_classes,
        mean=mean, std=std, train_group=None if groups is None else groups[0].astype(np.int64),
        test_group=None if groups is None else groups[1].astype(np.int64),
        source={"raw_files": raw_provenance(files), **source})
