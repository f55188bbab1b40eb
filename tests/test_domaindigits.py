"""``domaindigits``: built offline, byte-identical twice, checksummed, its domains recorded and balanced."""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

import bench.data.domaindigits as dd
from bench.cli import main
from bench.data import get_dataset_spec, load_dataset, prepare_dataset, prepared_dir
from bench.errors import BenchError
from bench.report.dataset_plots import plot_domain_samples, sample_grid

# Small variants (their splits are prefixes of the registered ones), registered once for these tests
SMALL = {"28": dd.register_domain_digits("domaindigits28-test", (1, 28, 28), 200, 100),
         "32": dd.register_domain_digits("domaindigits32-test", (3, 32, 32), 200, 100),
         "8": dd.register_domain_digits("domaindigits8-test", (1, 8, 8), 200, 100)}
# The sha256 of the small builds' image arrays at VERSION. A change of the generator (or of the locked
# Pillow, FreeType, matplotlib fonts or scikit-learn it renders with) changes them: bump VERSION, then
# update these pins.
PINNED = {"version": "1",
          "domaindigits28-test": "35ad636c24ed60b16f27823b0f97ba0ea4a92382fb02a21c162105b915ca2258",
          "domaindigits32-test": "bf2c0f723385ff34a80f15973f92da619d59cf7fcaf595cca2d9a1666edf5563",
          "domaindigits8-test": "623ca7c5374201fe648b82bba731d2b80dbc9936c27b4f29ae9e0b0749538f70"}


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("domaindigits")
    return {shape: prepare_dataset(spec.name, root) for shape, spec in SMALL.items()}


def test_registered_variants_have_the_papers_shapes_and_the_proxies_8x8():
    assert get_dataset_spec("domaindigits28").image_shape == (1, 28, 28)
    assert get_dataset_spec("domaindigits32").image_shape == (3, 32, 32)
    assert get_dataset_spec("domaindigits8").image_shape == (1, 8, 8)  # the CPU proxies' digits size
    for name in ("domaindigits28", "domaindigits32", "domaindigits8"):
        spec = get_dataset_spec(name)
        assert (spec.num_train, spec.num_test, spec.num_classes, spec.embedded) == (12_000, 3_000, 10, True)
        # 10 clients with 20 % local test each hold >= 100 local test images on an equal split
        assert spec.num_train // 10 * 0.2 >= 100


@pytest.mark.parametrize("shape", ["28", "32", "8"])
def test_shapes_dtypes_and_balanced_domains(small, shape):
    data = load_dataset(SMALL[shape].name, small[shape].parent.parent)
    c, h, w = SMALL[shape].image_shape
    assert data.train_x.shape == (200, c, h, w) and data.test_x.shape == (100, c, h, w)
    assert data.train_x.dtype == np.uint8 and data.train_y.dtype == np.int64
    assert data.train_domain is not None and data.test_domain is not None
    assert data.train_domain.dtype == np.int64 and data.test_domain.shape == (100,)
    for y, d, per_cell in ((data.train_y, data.train_domain, 2), (data.test_y, data.test_domain, 1)):
        cells = np.bincount(d * 10 + y, minlength=len(dd.DOMAINS) * 10)
        assert cells.tolist() == [per_cell] * (len(dd.DOMAINS) * 10)  # every (domain, class) equally often
    table = data.source["domains"]
    assert [t["id"] for t in table] == list(range(len(dd.DOMAINS)))
    assert [t["name"] for t in table] == [d.name for d in dd.DOMAINS]
    assert data.source["version"] == dd.VERSION
    assert data.train_x.std() > 20  # not blank


@pytest.mark.parametrize("shape", ["28", "32", "8"])
def test_prepared_twice_byte_identical(small, shape, tmp_path):
    again = prepare_dataset(SMALL[shape].name, tmp_path)
    first = sorted(p.name for p in small[shape].iterdir())
    assert first == sorted(p.name for p in again.iterdir())
    assert {"train_domain.npy", "test_domain.npy", "manifest.json"} <= set(first)
    for name in first:
        assert (small[shape] / name).read_bytes() == (again / name).read_bytes(), name


@pytest.mark.parametrize("shape", ["28", "32", "8"])
def test_generator_output_pinned_to_its_version(small, shape):
    manifest = json.loads((small[shape] / "manifest.json").read_text())
    assert (dd.VERSION, manifest["arrays"]["train_x"]["sha256"]) == (PINNED["version"], PINNED[SMALL[shape].name]), \
        "the generator's output changed: bump domaindigits.VERSION and update PINNED"


def test_a_smaller_split_is_a_prefix_of_a_larger_one():
    labels, domains = dd.layout(300, "train")
    assert np.array_equal(dd.layout(100, "train")[0], labels[:100])
    images, small_labels, _ = dd.render_split("train", 100, (1, 28, 28))
    assert np.array_equal(images[:5], dd.render_split("train", 200, (1, 28, 28))[0][:5])
    assert np.array_equal(small_labels, labels[:100]) and not np.array_equal(labels, dd.layout(300, "test")[0])


def test_both_variants_render_the_same_source(small):
    grey = load_dataset(SMALL["28"].name, small["28"].parent.parent)
    colour = load_dataset(SMALL["32"].name, small["32"].parent.parent)
    assert np.array_equal(grey.train_y, colour.train_y) and np.array_equal(grey.train_domain, colour.train_domain)
    from PIL import Image

    luma = np.stack([np.asarray(Image.fromarray(x.transpose(1, 2, 0)).resize((28, 28), Image.Resampling.BOX)
                                .convert("L"), float).ravel() for x in colour.train_x[:40]])
    own = grey.train_x[:40, 0].reshape(40, -1).astype(float)
    same = [np.corrcoef(a, b)[0, 1] for a, b in zip(own, luma)]
    other = [np.corrcoef(a, b)[0, 1] for a, b in zip(own, np.roll(luma, 1, axis=0))]
    assert np.median(same) > 0.9 > 0.5 > np.median(np.abs(other))


def test_ink_is_darker_than_paper_in_every_channel_and_domain():
    labels, domains = dd.layout(2000, "train")
    recipes = [dd.draw_image(int(y), int(d), "train", i) for i, (y, d) in enumerate(zip(labels, domains))]
    gaps = np.array([np.subtract(r.paper, r.ink) for r in recipes])
    assert gaps.min() >= dd.MIN_CHANNEL_GAP
    assert len({r.ink for r in recipes if r.domain == 8}) == 200  # street: colours drawn, not a palette


def test_sizes_must_fill_every_domain_and_class():
    with pytest.raises(BenchError, match="use a multiple of 100"):
        dd.layout(150, "train")


def test_corrupted_prepared_file_refused_through_the_cli(small, tmp_path, capsys):
    folder = prepared_dir(SMALL["28"].name, tmp_path)
    folder.mkdir(parents=True)
    for path in small["28"].iterdir():
        (folder / path.name).write_bytes(path.read_bytes())
    raw = bytearray((folder / "train_domain.npy").read_bytes())
    raw[-1] ^= 1  # one domain id changed; the file still parses
    (folder / "train_domain.npy").write_bytes(bytes(raw))
    code = main(["partition", "-S", f"dataset.name={SMALL['28'].name}", "-S", "partition.scheme=domains",
                 "--out", str(tmp_path / "part"), "--data-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert "train_domain.npy does not match its sha256 in manifest.json (corrupted)" in err
    assert not (tmp_path / "part").exists()


def test_partition_by_domain_through_the_cli(small, capsys, tmp_path):
    code = main(["partition", "-S", f"dataset.name={SMALL['32'].name}", "-S", "partition.scheme=domains",
                 "-S", "partition.num_clients=10", "--out", str(tmp_path / "part"),
                 "--data-dir", str(small["32"].parent.parent)])
    assert code == 0, capsys.readouterr().err
    data = load_dataset(SMALL["32"].name, small["32"].parent.parent)
    summary = json.loads((tmp_path / "part" / "partition.json").read_text())
    flat = np.load(tmp_path / "part" / "train_indices.npy")
    clients = np.split(flat, np.cumsum(summary["train_sizes"])[:-1])
    assert sorted(int(data.train_domain[c][0]) for c in clients) == list(range(10))
    assert all(len(np.unique(data.train_domain[c])) == 1 for c in clients)


def test_missing_font_named_with_the_fix(monkeypatch, tmp_path):
    import matplotlib

    monkeypatch.setattr(matplotlib, "get_data_path", lambda: str(tmp_path))
    with pytest.raises(BenchError, match="font DejaVuSans.ttf is not in .* run `uv sync --locked`"):
        dd.font_path("DejaVuSans.ttf")


def test_sample_figure(small, tmp_path):
    datasets = [load_dataset(spec.name, small[s].parent.parent) for s, spec in SMALL.items()]
    grid, names = sample_grid(datasets[1], 10)
    assert names == [d.name for d in dd.DOMAINS]
    assert grid.shape == (len(dd.DOMAINS) * (32 + 2), 10 * (32 + 2), 3)
    tile = grid[5 * 34:5 * 34 + 32, 3 * 34:3 * 34 + 32]  # domain 5, class 3: its first test image
    first = np.flatnonzero((datasets[1].test_domain == 5) & (datasets[1].test_y == 3))[0]
    assert np.array_equal(tile, datasets[1].test_x[first].transpose(1, 2, 0))
    path = plot_domain_samples(datasets, tmp_path / "fig.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(BenchError, match="records no domains"):
        sample_grid(load_dataset("synthetic28s", tmp_path), 10)


def test_dvc_stage_builds_offline_byte_identical_twice(tmp_path):
    """`dvc repro` of the prepare stage (domaindigits28 at its registered size) in a scratch project, then
    forced again: the same output hash both times, and the sha256 docs/datasets.md states."""
    import shutil

    from tests.conftest import run_dvc

    root = Path(__file__).resolve().parents[1]
    shutil.copytree(root / "bench", tmp_path / "bench", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "pipelines" / "data").mkdir(parents=True)
    shutil.copy(root / "pipelines" / "data" / "dvc.yaml", tmp_path / "pipelines" / "data")
    shutil.copy(root / "uv.lock", tmp_path)
    assert run_dvc(tmp_path, "init", "--no-scm", "-q").returncode == 0
    stage = "pipelines/data/dvc.yaml:prepare_domaindigits@domaindigits28"
    hashes = []
    for extra in ([], ["-f"]):
        done = run_dvc(tmp_path, "repro", *extra, stage)
        assert done.returncode == 0, done.stderr[-2000:]
        lock = (tmp_path / "pipelines" / "data" / "dvc.lock").read_text()
        hashes.append(re.search(r"path: data/prepared/domaindigits28\n\s+hash: md5\n\s+md5: (\S+)", lock).group(1))
    assert hashes[0] == hashes[1]
    sha256 = json.loads((tmp_path / "data" / "prepared" / "domaindigits28" / "manifest.json").read_text())["sha256"]
    assert f"`domaindigits28` | {dd.VERSION} | `{sha256}`" in (root / "docs" / "datasets.md").read_text()


def test_benchmark_script_measures_on_a_small_variant(small, monkeypatch):
    """benchmarks/domaindigits.py (docs/datasets.md's figures), pointed at the small variants: every proxy's
    FedAvg row still resolves from its params file, and each measurement runs and reports what it says."""
    from argparse import Namespace

    from benchmarks import domaindigits as script

    root = small["28"].parent.parent
    monkeypatch.setattr(script, "SHAPES", {s: (spec.name, spec.image_shape) for s, spec in SMALL.items()})
    for proxy in script.PROXIES:
        config = script.proxy_config(proxy, SMALL["32"].name, 1, overrides=["training.optimizer.lr=0.01"])
        assert (config.partition.scheme, config.dataset.name, config.training.rounds) == ("iid", SMALL["32"].name, 1)
        assert config.training.optimizer.lr == 0.01
    fedavg = script.measure_fedavg(Namespace(proxy="dafkd", shape="28", train=None, rounds=2, every=1, set=[],
                                             data_dir=root))
    assert fedavg["model"] == "dafkd_resnet11" and 0 <= fedavg["global_acc"] <= 1 and set(fedavg["curve"]) == {1, 2}
    assert fedavg["images_per_round"] == 4 * 20 * 32  # 4 of 10 clients a round, 20 steps of 32
    domains = script.measure_domains(Namespace(shape="32", train=0, epochs=1, data_dir=root))
    assert domains["train_images"] == 200 and set(domains["per_domain_acc"]) == {d.name for d in dd.DOMAINS}
    features = script.measure_features(Namespace(shape="28", optimizer="sgd", lr=0.05, steps=2, seeds=2,
                                                 data_dir=root))
    assert [r["seed"] for r in features["runs"]] == [0, 1]
    assert all(0 <= r["dead_features"] <= 1 for r in features["runs"])
