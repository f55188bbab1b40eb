from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from bench.cli import main
from bench.experiment import build_config, load_config
from bench.errors import BenchError


@pytest.mark.parametrize("raw, message", [
    ({"trainin": {}}, "trainin: unknown key"),
    ({"training": {"rounds": "many"}}, "training.rounds: Input should be a valid integer"),
    ({"training": {"rounds": 0}}, "training.rounds: Input should be greater than or equal to 1"),
    ({"partition": {"scheme": "dirichlet", "alpha": 0}}, "partition.alpha: Input should be greater than 0"),
    ({"partition": {"scheme": "dirichlet", "alpha": -1.0}}, "partition.alpha: Input should be greater than 0"),
    ({"partition": {"scheme": "dirichlet"}}, "partition.alpha: Field required"),
    ({"partition": {"scheme": "iid", "alpha": 0.5}}, "partition.alpha: unknown key"),
    ({"partition": {"num_clients": 5000}}, "partition.num_clients=5000 exceeds the 1347 training samples"),
    ({"algorithm": {"name": "fedprox", "mu": -1}}, "algorithm.mu: Input should be greater than or equal to 0"),
    ({"algorithm": {"name": "fedprox", "mux": 1}}, "algorithm.mux: unknown key (allowed: weighting, mu)"),
    ({"algorithm": {"name": "fedsomething"}}, "unknown algorithm 'fedsomething'; available:"),
    ({"model": {"name": "resnet1000"}}, "unknown model 'resnet1000'; available:"),
    ({"dataset": {"name": "imagenet"}}, "unknown dataset 'imagenet'; available:"),
    ({"participation": {"fraction": 0}}, "participation.fraction: Input should be greater than 0"),
    ({"training": {"optimizer": {"name": "rmsprop"}}}, "training.optimizer.name: Input should be 'sgd' or 'adam'"),
])
def test_bad_config_is_rejected_with_the_key(raw: dict, message: str) -> None:
    with pytest.raises(BenchError) as info:
        build_config(raw)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_overrides_apply_and_change_the_hash() -> None:
    base = build_config({})
    same = build_config({}, ["seed=0"])
    changed = build_config({}, ["algorithm.name=fedprox", "algorithm.mu=0.5", "training.rounds=7"])
    assert base.sha256 == same.sha256
    assert changed.algorithm.params["mu"] == 0.5 and changed.training.rounds == 7
    assert changed.sha256 != base.sha256


def test_hash_is_stable_across_key_order() -> None:
    a = build_config({"training": {"rounds": 4, "batch_size": 16}, "seed": 3})
    b = build_config({"seed": 3, "training": {"batch_size": 16, "rounds": 4}})
    assert a.sha256 == b.sha256
    assert build_config(a.to_dict()).sha256 == a.sha256  # the resolved config round-trips


def test_example_config_loads() -> None:
    cfg = load_config(Path(__file__).parents[1] / "examples" / "fedavg_digits.yaml")
    assert cfg.algorithm.name == "fedavg" and cfg.partition.num_clients == 10


@pytest.mark.parametrize("content, message", [
    (None, "not found"),
    ("training: [unclosed", "is not valid YAML"),
    ("- a list", "must hold a mapping"),
    ("training: {rounds: -2}", "training.rounds"),
])
def test_cli_bad_input_exits_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                            content: str | None, message: str) -> None:
    path = tmp_path / "c.yaml"
    if content is not None:
        path.write_text(content)
    assert main(["run", str(path), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1


def test_cli_unknown_method_via_override(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("training: {rounds: 1}\n")
    assert main(["run", str(path), "-S", "algorithm.name=nosuch", "--no-progress"]) == 2
    assert "unknown algorithm 'nosuch'" in capsys.readouterr().err


def test_cli_help_lists_commands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    for command in ("run", "data", "partition", "suite", "models", "algorithms"):
        assert command in out


def _refused(capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1, err


@pytest.mark.parametrize("make, message", [
    (lambda p: p.write_text(""), "is empty"),
    (lambda p: p.write_text("# only a comment\n"), "is empty"),
    (lambda p: p.mkdir(), "is a directory"),
    (lambda p: p.write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff\xfe"), "is not a text file"),
])
def test_unusable_config_files_are_refused_and_nothing_is_written(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                  make, message: str) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "c.yaml"
    make(path)
    _refused(capsys, ["run", str(path), "--no-progress", "--out", str(tmp_path / "out")], message)
    assert not (tmp_path / "out").exists()


def test_unknown_device_and_out_file_are_refused_before_training(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("training: {rounds: 1}\n")
    _refused(capsys, ["run", str(path), "-S", "device=tpu"], "device: must be cpu, cuda or cuda:N, got 'tpu'")
    (tmp_path / "taken").write_text("a file")
    _refused(capsys, ["run", str(path), "--out", str(tmp_path / "taken")], "is a file")
    assert (tmp_path / "taken").read_text() == "a file"


def test_a_partition_made_for_other_data_or_another_split_is_refused(data_dir: Path, tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("training: {rounds: 1}\ntracking: {mlflow: false}\n")
    data = ["--data-dir", str(data_dir)]
    assert main(["partition", str(path), "-S", "dataset.name=synthetic32", "--out", str(tmp_path / "p32"), *data]) == 0
    _refused(capsys, ["run", str(path), "--partition", str(tmp_path / "p32"), *data, "--no-progress"],
             "made for dataset synthetic32")
    assert main(["partition", str(path), "-S", "partition.local_test_fraction=0.5", "--out", str(tmp_path / "p"),
                 *data]) == 0
    capsys.readouterr()
    _refused(capsys, ["run", str(path), "--partition", str(tmp_path / "p"), *data, "--no-progress"],
             "local_test_fraction=0.5, but the config asks for 0.2")


def test_a_manifest_of_the_wrong_shape_or_bad_labels_is_refused(data_dir: Path, tmp_path: Path) -> None:
    import json
    import shutil

    import numpy as np

    from bench.data.prepared import load_prepared
    from bench.fileio import sha256_array

    folder = tmp_path / "digits"
    shutil.copytree(data_dir / "prepared" / "digits", folder)
    manifest = json.loads((folder / "manifest.json").read_text())
    (folder / "manifest.json").write_text(json.dumps({**manifest, "arrays": ["train_x"]}))
    with pytest.raises(BenchError, match="manifest.json has the wrong shape") as info:
        load_prepared(folder)
    assert "\n" not in str(info.value)
    labels = np.load(folder / "train_y.npy")
    labels[0] = 12
    np.save(folder / "train_y.npy", labels)
    manifest["arrays"]["train_y"]["sha256"] = sha256_array(labels)
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(BenchError, match="labels outside"):
        load_prepared(folder)


def test_an_unavailable_dataset_is_skipped_with_its_reason_only_when_asked(tmp_path: Path, monkeypatch,
                                                                            capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    """`dvc repro -P` offline: the data pipeline reports paper datasets as skipped, not failed."""
    monkeypatch.setenv("BENCH_OFFLINE", "1")
    assert main(["data", "prepare", "cifar10", "--data-dir", str(tmp_path)]) == 2
    assert "needs 1 file(s)" in capsys.readouterr().err
    assert main(["data", "prepare", "cifar10", "--data-dir", str(tmp_path), "--skip-unavailable"]) == 0
    assert "skipped cifar10" in capsys.readouterr().out
    reason = (tmp_path / "prepared" / "cifar10" / "UNAVAILABLE.txt").read_text()
    assert "cifar-10-python.tar.gz" in reason and "offline" in reason


def _data_pipeline_datasets() -> list[str]:
    stages = yaml.safe_load((Path(__file__).parents[1] / "pipelines" / "data" / "dvc.yaml").read_text())["stages"]
    return list(stages["prepare"]["foreach"])


@pytest.mark.parametrize("name", _data_pipeline_datasets())
def test_every_dataset_of_the_data_pipeline_is_skipped_offline_not_failed(name: str, tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """`dvc repro -P` on a fresh clone, offline: each `prepare@<name>` stage ends as skipped with its reason,
    whatever the dataset's raw files are (a download, or CelebA's LEAF JSON, which no download provides)."""
    monkeypatch.setenv("BENCH_OFFLINE", "1")
    assert main(["data", "prepare", name, "--data-dir", str(tmp_path), "--skip-unavailable"]) == 0
    assert f"skipped {name}" in capsys.readouterr().out
    assert (tmp_path / "prepared" / name / "UNAVAILABLE.txt").read_text().strip()


# ---------------------------------------------------------------- inputs refused before anything trains

@pytest.mark.parametrize("content, args, message", [
    ("training:\n  rounds: 3\n  rounds: 5\n", [], "key 'rounds' is given twice at line 3"),
    ("training: {rounds: 3}\ntraining: {rounds: 4}\n", [], "key 'training' is given twice"),
    ("training: {rounds: 1}\n", ["-S", "training.rounds=true"], "training.rounds: expected a number or a name, got true"),
    ("training: {rounds: 1}\n", ["-S", "seed=false"], "seed: expected a number or a name, got false"),
    ("training: {rounds: 1}\n", ["-S", "training.optimizer.lr=true"], "training.optimizer.lr: expected a number"),
    ("training: {rounds: 1}\n", ["-S", "algorithm.name=fedprox", "-S", "algorithm.mu=true"],
     "algorithm.mu: expected a number or a name, got true"),
    ("training: {rounds: 1}\n", ["-S", "training.optimizer.lr=inf"], "training.optimizer.lr: Input should be a finite"),
    ("training: {rounds: 1}\n", ["-S", "training.optimizer.lr=.inf"], "training.optimizer.lr: Input should be a finite"),
    ("training: {rounds: 1}\n", ["-S", "training.grad_clip=nan"], "training.grad_clip: Input should be a finite"),
    ("training: {rounds: 1}\n", ["-S", "algorithm.name=fedprox", "-S", "algorithm.mu=inf"],
     "algorithm.mu: must be a finite number, got inf"),
    ("training: {rounds: 1, batch_size: 1000000000}\n", [],
     "training.batch_size=1000000000 exceeds the 1347 training samples of digits"),
    ("name: \"a\\u0007bell\"\n", [], "name: 'a\\x07bell' holds '\\x07'"),
    ("name: \"two\\nlines\"\n", [], "holds '\\n'"),
    ("name: ../../etc/x\n", [], "name: '../../etc/x' holds '/'"),
    ("name: a\\b\n", [], "holds '\\\\'"),
    ("name: ..\n", [], "name: '..' is not a name"),
    ("training: {rounds: 1}\n", ["-S", "training={rounds: 1, rounds: 2}"], "is given twice"),
    ("training: {rounds: 1}\n", ["-S", "training.rounds=[unclosed"], "the value is not valid YAML"),
    ("training: {rounds: 1}\n", ["--checkpoint-every", "-1"], "argument --checkpoint-every: '-1' is not a whole "
                                                              "number >= 0"),
    ("training: {rounds: 1}\n", ["--checkpoint-interval", "inf"], "'inf' is not a number of seconds >= 0"),
    ("training: {rounds: 1}\n", ["--checkpoint-interval", "-5"], "'-5' is not a number of seconds >= 0"),
], ids=["duplicate-key", "duplicate-section", "rounds-true", "seed-false", "lr-true", "algorithm-param-true",
        "lr-inf", "lr-yaml-inf", "grad-clip-nan", "algorithm-param-inf", "absurd-batch", "bell-in-name",
        "newline-in-name", "slash-in-name", "backslash-in-name", "dotdot-name", "duplicate-in-override",
        "broken-override", "checkpoint-every-negative", "checkpoint-interval-inf", "checkpoint-interval-negative"])
def test_bad_input_is_refused_in_one_line_before_anything_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                               content: str, args: list[str], message: str) -> None:
    """Issue 29 items 5-6: each of these was accepted silently (the last duplicate key won, true ran one round,
    -1 never checkpointed, a name went into MLflow with its control characters) or crashed with a traceback."""
    path = tmp_path / "c.yaml"
    path.write_text(content + "tracking: {mlflow: false}\n")
    _refused(capsys, ["run", str(path), "--no-progress", "--out", str(tmp_path / "out"), *args], message)
    assert not (tmp_path / "out").exists()


def test_a_config_of_legitimate_switches_and_merge_keys_still_loads(tmp_path: Path) -> None:
    from bench.config import read_yaml_mapping

    path = tmp_path / "c.yaml"
    path.write_text("defaults: &d {rounds: 2, batch_size: 16}\ntraining:\n  <<: *d\n  rounds: 3\n  drop_last: true\n")
    raw = read_yaml_mapping(path)
    config = build_config({"training": raw["training"], "name": "fedavg-α_0.1 (seed 0)"})
    assert (config.training.rounds, config.training.batch_size, config.training.drop_last) == (3, 16, True)


def test_an_unwritable_run_folder_is_refused_before_training(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("training: {rounds: 1}\ntracking: {mlflow: false}\n")
    (tmp_path / "file").write_text("not a folder")
    _refused(capsys, ["run", str(path), "--no-progress", "--out", str(tmp_path / "file" / "run")],
             f"cannot use {tmp_path / 'file' / 'run'} as a run folder (Not a directory)")
    if os.geteuid() != 0:  # root writes through permissions; the folder-under-a-file case above stands for it
        (tmp_path / "locked").mkdir(mode=0o500)
        _refused(capsys, ["run", str(path), "--no-progress", "--out", str(tmp_path / "locked" / "run")],
                 "(Permission denied)")
