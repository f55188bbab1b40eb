"""Raw dataset files: the published checksum table, verification, and atomic download.

Raw files live in ``<data_dir>/raw/<folder>/``. A file present there is used only if its md5
matches the published checksum (torchvision's tables where torchvision covers the dataset); a
mismatch is refused. A download goes to ``<name>.part`` and is renamed into place only after its
checksum verifies, so a partial download is never used. With ``BENCH_OFFLINE=1`` (or when a
download fails) nothing is fetched and one message names every missing file, its checksum, its
source and the folder to put it in.

A dataset may also name other :class:`Layout` s under the data folder where its raw files may
already be, such as where torchvision's dataset classes keep them (``<root>/MNIST/raw/``,
``<root>/cifar-10-batches-py/``, ...), so ``--data-dir`` can point at a root torchvision downloaded
into. :func:`locate` uses this project's ``raw/<folder>/`` when it holds every file, else the first
other layout present, else downloads (or names every layout offline). A file of another layout is
verified against its published checksum where one is published; files torchvision extracted from
a verified archive have none (the idx files), so the prepared manifest's ``source`` lists them as
``unverified_files`` and :func:`bench.data.registry.prepare_dataset` checks the samples per split.
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
from collections.abc import Callable, Iterator, Sequence
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


class _ChecksumTable(dict[str, tuple[RemoteFile, ...]]):
    """Raw folder -> files, filled from torchvision's published checksums on the first lookup of a
    folder it lacks. Tests replace entries to register fabricated files."""

    def __missing__(self, folder: str) -> tuple[RemoteFile, ...]:
        for key, files in _published_checksums().items():
            self.setdefault(key, files)
        return dict.__getitem__(self, folder)


REMOTE_FILES: dict[str, tuple[RemoteFile, ...]] = _ChecksumTable()


def _extracted_checksums() -> dict[str, dict[str, str]]:
    from torchvision import datasets as tvd

    return {
        # torchvision checks every extracted CIFAR batch against these on each load.
        "cifar10": {f: md5 for f, md5 in tvd.CIFAR10.train_list + tvd.CIFAR10.test_list},
        "cifar100": {f: md5 for f, md5 in tvd.CIFAR100.train_list + tvd.CIFAR100.test_list},
        # No checksum is published for the idx files torchvision extracts from the .gz / gzip.zip.
        "mnist": {}, "fashionmnist": {}, "emnist": {},
    }


class _ExtractedTable(dict[str, dict[str, str]]):
    """Raw folder -> {extracted file name: published md5}, filled on first lookup like REMOTE_FILES."""

    def __missing__(self, folder: str) -> dict[str, str]:
        for key, files in _extracted_checksums().items():
            self.setdefault(key, files)
        return dict.__getitem__(self, folder) if folder in self else {}


EXTRACTED_MD5: dict[str, dict[str, str]] = _ExtractedTable()

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


def _mismatch(path: Path, md5: str, actual: str, again: str) -> BenchError:
    return BenchError(
        f"{path} has md5 {actual} but the published checksum is {md5} (size {path.stat().st_size} "
        f"bytes: corrupted, truncated or a different version); refusing to use it. {again}")


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


def fetch(dataset: str, folder: str, data_dir: Path, alternatives: Sequence[Layout] = ()) -> dict[str, Path]:
    """Every raw file of ``folder`` verified against its published md5 (downloaded unless offline);
    the offline message also names the ``alternatives`` layouts."""
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
            raise _mismatch(path, remote.md5, actual, f"Delete it and download it again from {remote.urls[0]}")
        found[remote.name] = path
    if missing:
        raise DataUnavailable(missing_message(dataset, target_dir, missing, alternatives))
    return found


def missing_message(dataset: str, target_dir: Path, missing: list[tuple[RemoteFile, str]],
                    alternatives: Sequence[Layout] = ()) -> str:
    lines = [f"dataset {dataset!r} needs {len(missing)} file(s) that are not in {target_dir}:"]
    for remote, why in missing:
        source = remote.how or " or ".join(
            f"https://drive.google.com/uc?id={u.removeprefix('gdrive:')}" if u.startswith("gdrive:") else u
            for u in remote.urls)
        lines.append(f"  {remote.name}  md5 {remote.md5}  from {source}  [{why}]")
    lines.append(f"Download them into {target_dir}/ (or point --data-dir / BENCH_DATA_DIR at a folder whose "
                 f"raw/{target_dir.name}/ holds them), then run `bench data prepare {dataset}` again.")
    if alternatives:
        lines.append(f"Or point --data-dir at a ROOT where {alternatives[0].origin} already downloaded it (ROOT is "
                     f"now {target_dir.parent.parent}); any one of these layouts is found:")
        lines += [f"  {layout.pattern()}  ({layout.how}"
                  f"{'; no published checksum: sizes checked' if any(f.md5 is None for f in layout.files) else ''})"
                  for layout in alternatives]
    return "\n".join(lines)


def raw_provenance(files: dict[str, Path]) -> dict[str, dict[str, str]]:
    """sha256 and md5 of each raw file, for the prepared manifest's ``source``."""
    return {name: {"sha256": sha256_file(p), "md5": md5_file(p)} for name, p in sorted(files.items())}


# --------------------------------------------------------------------------- other layouts

TORCHVISION = "torchvision"
UNVERIFIED_NOTE = ("read from a {origin} layout without a file checksum (none is published for these files): "
                   "their shapes, labels and samples per split are checked against the dataset spec")


@dataclass(frozen=True)
class LayoutFile:
    key: str  # the name the dataset's reader asks for
    path: str  # relative to the data folder, "/"-separated
    md5: str | None  # the published checksum; None where none is published (e.g. idx files torchvision extracted)


@dataclass(frozen=True)
class Layout:
    """Another place under the data folder where a dataset's raw files may already be."""

    origin: str  # who writes it, e.g. "torchvision"
    form: str  # how the dataset reads these files, e.g. "idx.gz" or "idx"
    files: tuple[LayoutFile, ...]
    how: str  # what creates it, e.g. "torchvision.datasets.MNIST(root, download=True)"

    def present(self, data_dir: Path) -> bool:
        return all((data_dir / f.path).is_file() for f in self.files)

    def pattern(self) -> str:
        """The files, grouped by folder: ``ROOT/MNIST/raw/{a, b}``."""
        folders: dict[str, list[str]] = {}
        for f in self.files:
            folder, _, name = f.path.rpartition("/")
            folders.setdefault(folder, []).append(name)
        return "  ".join(f"ROOT/{folder + '/' if folder else ''}" + (names[0] if len(names) == 1 else
                                                                     "{" + ", ".join(names) + "}")
                         for folder, names in folders.items())

    def verify(self, data_dir: Path) -> dict[str, Path]:
        """key -> path, every file with a published checksum verified against it."""
        found = {}
        for f in self.files:
            path = data_dir / f.path
            if f.md5 is not None and (actual := md5_file(path)) != f.md5:
                raise _mismatch(path, f.md5, actual, f"Replace it with the file {self.how} writes, or delete it "
                                                     f"and let `bench data prepare` download into raw/")
            found[f.key] = path
        return found


@dataclass(frozen=True)
class RawFiles:
    """A dataset's raw files, how to read them, and where they were found."""

    files: dict[str, Path]  # key -> path
    form: str
    layout: Layout | None = None  # None: this project's raw/<folder>/

    def provenance(self) -> dict[str, object]:
        """The prepared manifest's ``source`` entries for these files. This project's layout keeps its
        historical form (``raw_files`` by file name), so manifests prepared from it do not change."""
        if self.layout is None:
            return {"raw_files": raw_provenance(self.files)}
        by_path = {f.path: self.files[f.key] for f in self.layout.files}
        unverified = sorted(f.path for f in self.layout.files if f.md5 is None)
        note = (UNVERIFIED_NOTE.format(origin=self.layout.origin) if unverified else
                "every file verified against its published md5")
        return {"raw_files": raw_provenance(by_path), "layout": self.layout.origin,
                "layout_written_by": self.layout.how, "verification": note,
                **({"unverified_files": unverified} if unverified else {})}


def locate(dataset: str, folder: str, data_dir: Path, form: str, alternatives: Sequence[Layout] = ()) -> RawFiles:
    """The raw files of ``folder``: this project's ``raw/<folder>/`` when it holds every file; else the
    first of ``alternatives`` that is present and verifies; else :func:`fetch` (download, or the offline
    message naming every layout). ``form`` is how this project's own files are read.

    A present layout whose checksum does not match is refused, naming the file, unless a later layout
    whose every file has a published checksum verifies (a corrupt CIFAR tarball beside the verified
    extracted batches); files without a checksum never stand in for a refused file."""
    data_dir = Path(data_dir)
    own = raw_dir(data_dir, folder)
    if not all((own / remote.name).is_file() for remote in REMOTE_FILES[folder]):
        refused: list[BenchError] = []
        for layout in alternatives:
            if refused and any(f.md5 is None for f in layout.files):
                continue
            if layout.present(data_dir):
                try:
                    return RawFiles(layout.verify(data_dir), layout.form, layout)
                except BenchError as exc:
                    refused.append(exc)
        if refused:
            raise BenchError("\n".join(map(str, refused)))
    return RawFiles(fetch(dataset, folder, data_dir, alternatives), form)


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
                      test: tuple[np.ndarray, np.ndarray], files: dict[str, Path] | RawFiles,
                      groups: tuple[np.ndarray, np.ndarray] | None = None, **source: object) -> PreparedDataset:
    """A PreparedDataset with train-split channel statistics and the raw files' provenance."""
    provenance = files.provenance() if isinstance(files, RawFiles) else {"raw_files": raw_provenance(files)}
    mean, std = channel_stats(train[0])
    return PreparedDataset(
        name=name, train_x=np.ascontiguousarray(train[0]), train_y=train[1].astype(np.int64),
        test_x=np.ascontiguousarray(test[0]), test_y=test[1].astype(np.int64), num_classes=num_classes,
        mean=mean, std=std, train_group=None if groups is None else groups[0].astype(np.int64),
        test_group=None if groups is None else groups[1].astype(np.int64),
        source={**provenance, **source})
