"""The released-code comparison of FedAKD (pipelines/fedakd/validation/released_code.py): its data shim hands the
released loop exactly our clients' images, split by the code's own ``train_test_split`` into our train and local test
splits; its run-time settings and recording wrappers leave the code's functions as they were; its first-round checks
and its statistics hold and fail where they should. The released code itself cannot be fetched here, so stand-ins
with its names and signatures take its place."""
from __future__ import annotations

import argparse
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.stats
import torch

from bench.data import load_dataset, prepare_dataset
from bench.errors import BenchError
from bench.models.registry import build_model
from bench.runner.federation import partition_for

from tests.scripts import load_script

SCRIPT = Path(__file__).resolve().parents[1] / "pipelines" / "fedakd" / "validation" / "released_code.py"
script: Any = load_script(SCRIPT, "fedakd_released_code")

# the released SimpleCNN's state-dict names (METHOD/fedack.py: conv1, bn1, conv2, bn2, fc)
CODE_KEYS = [f"{layer}.{leaf}" for layer, leaves in (
    ("conv1", ("weight", "bias")), ("bn1", ("weight", "bias", "running_mean", "running_var", "num_batches_tracked")),
    ("conv2", ("weight", "bias")), ("bn2", ("weight", "bias", "running_mean", "running_var", "num_batches_tracked")),
    ("fc", ("weight", "bias"))) for leaf in leaves]


def released_module(**changes: Any) -> types.SimpleNamespace:
    """A stand-in for ``METHOD/fedack.py``'s names the script uses, with the code's values."""
    module = types.SimpleNamespace(learning_rates={"FashionMNIST": (0.001, 1, 1), "CIFAR10": (0.005, 1, 1)},
                                   BATCH_SIZE=32, LOCAL_EPOCHS=1, NUM_CLIENTS=10, NUM_GLOBAL_ROUNDS=30)
    for key, value in changes.items():
        setattr(module, key, value)
    return module


@pytest.fixture(scope="module")
def workload(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any, Any, Path]:
    args = script.parse_args(["checkout", "--train-images", "500", "--clients", "3", "--rounds", "2"])
    data_dir = tmp_path_factory.mktemp("data")
    script.register_workload(args.train_images)
    prepare_dataset(script.DATASET, data_dir)
    data = load_dataset(script.DATASET, data_dir)
    cfg = script.ours_config(args, seed=0)
    return cfg, data, partition_for(cfg, data, None), data_dir


def test_the_code_s_own_split_of_each_client_s_data_is_our_train_and_local_test_split(workload: Any) -> None:
    """Each client's ``(data.npy, labels.npy)`` is its images as devide.py stores them (float32 pixel/255, no channel
    axis; int64 labels), and the code's ``train_test_split(test_size=0.2, shuffle=True, random_state=42)`` of them
    gives our train split as its train part and our local test split as its test part, image for image."""
    from sklearn.model_selection import train_test_split

    cfg, data, part, _ = workload
    clients = script.client_arrays(data, part)
    assert cfg.partition.scheme_params["form"] == "code" and len(clients) == part.num_clients == 3
    for (x, y), train, test in zip(clients, part.train, part.local_test):
        assert x.dtype == np.float32 and x.shape == (len(train) + len(test), 28, 28) and y.dtype == np.int64
        x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.2, shuffle=True, random_state=42)
        assert np.array_equal(x_train, data.train_x[train, 0].astype(np.float32) / 255.0)
        assert np.array_equal(x_test, data.train_x[test, 0].astype(np.float32) / 255.0)
        assert np.array_equal(y_train, data.train_y[train]) and np.array_equal(y_test, data.train_y[test])


def test_the_order_is_refused_when_the_code_would_hold_out_another_number_of_images() -> None:
    assert sorted(script.code_order(np.arange(8), np.array([8, 9]))) == list(range(10))
    with pytest.raises(BenchError, match="test_fraction 0.2"):
        script.code_order(np.arange(9), np.array([9]))


def test_the_loader_answers_like_the_code_s_for_a_client_without_data() -> None:
    clients = [(np.zeros((2, 28, 28), np.float32), np.zeros(2, np.int64))]
    load = script.released_loader(clients)
    assert load("any folder", 0) is clients[0]
    assert load("any folder", 1) == (None, None) and load("any folder", -1) == (None, None)


def test_the_loop_runs_with_the_workload_s_clients_rounds_and_the_code_s_fmnist_rates(workload: Any) -> None:
    """``fedack_training`` is called with the code's FashionMNIST (lr, α, β) and the CPU, the module's client and round
    counts set to the workload's, its data loading answering with our arrays; the result is its matrix."""
    _, data, part, _ = workload
    clients = script.client_arrays(data, part)
    calls = []

    def fedack_training(base_dir: str, lr: float, alpha: float, beta: float, device: torch.device) -> np.ndarray:
        calls.append((lr, alpha, beta, device.type))
        loaded = [module.load_client_data_labels(base_dir, cid) for cid in range(module.NUM_CLIENTS)]
        assert all(got is ours for got, ours in zip(loaded, clients))
        return np.full((module.NUM_GLOBAL_ROUNDS, module.NUM_CLIENTS), float(torch.rand(1)))

    module = released_module(fedack_training=fedack_training)
    first = script.run_released_loop(module, clients, rounds=4, seed=7)
    again = script.run_released_loop(module, clients, rounds=4, seed=7)
    assert first.shape == (4, 3) and (module.NUM_CLIENTS, module.NUM_GLOBAL_ROUNDS) == (3, 4)
    assert calls == [(0.001, 1, 1, "cpu")] * 2 and np.array_equal(first, again)  # torch seeded with the run seed


def test_ours_runs_the_code_s_hyperparameters_and_is_refused_otherwise(workload: Any) -> None:
    cfg, _, _, _ = workload
    script.check_hyperparameters(released_module(), cfg)
    assert (cfg.algorithm.params["mode"], cfg.dataset.normalize, cfg.device) == ("code", "unit", "cpu")
    with pytest.raises(BenchError, match="'lr': \\(0.005, 0.001\\)"):
        script.check_hyperparameters(released_module(learning_rates={"FashionMNIST": (0.005, 1, 1)}), cfg)
    with pytest.raises(BenchError, match="batch_size"):
        script.check_hyperparameters(released_module(BATCH_SIZE=64), cfg)


def test_ours_is_scored_as_the_code_on_the_code_s_partition_and_weighs_its_whole_data(workload: Any) -> None:
    """Ours' matrix holds every client's local test accuracy each round; its first aggregation weighs each client by
    its train and local test images together (|D_k| as the code's ``len(data)``); another partition is refused."""
    import dataclasses

    cfg, _, part, data_dir = workload
    acc, weights = script.run_ours(cfg, data_dir, part)
    assert acc.shape == (2, 3) and ((0 <= acc) & (acc <= 1)).all()
    assert weights == [float(len(tr) + len(te)) for tr, te in zip(part.train, part.local_test)]
    with pytest.raises(BenchError, match="another partition"):
        script.run_ours(cfg, data_dir, dataclasses.replace(part, seed=1))


def test_the_recording_wrappers_change_nothing_and_keep_the_first_round() -> None:
    """The wrapped functions get the same arguments and return the same values; the record keeps the first
    ``clients`` calls' models (copies, not the live tensors) and selections; the originals are back afterwards."""
    def local_to_global_distill(global_model: torch.nn.Linear, local_model: Any, cx: Any, cy: Any, device: Any,
                                lr: float, alpha: float, local_epochs: int = 1) -> None:
        with torch.no_grad():
            global_model.weight.add_(lr)

    def global_to_local_distill(local_model: torch.nn.Linear, global_model: torch.nn.Linear, x: np.ndarray,
                                y: np.ndarray, device: Any, lr: float, beta: float,
                                local_epochs: int = 1) -> tuple[np.ndarray, np.ndarray]:
        with torch.no_grad():
            local_model.weight.add_(beta * local_epochs)
        return x[:1], y[:1]

    module = released_module(local_to_global_distill=local_to_global_distill,
                             global_to_local_distill=global_to_local_distill)
    record = script.FirstRound()
    student, local = torch.nn.Linear(1, 1, bias=False), torch.nn.Linear(1, 1, bias=False)
    torch.nn.init.zeros_(student.weight)
    torch.nn.init.zeros_(local.weight)
    x, y = np.arange(3.0), np.arange(3)
    with script.record_first_round(module, 2, record):
        for _ in range(3):  # a round of two clients, then the next round's first
            module.local_to_global_distill(student, local, x, y, "cpu", 1.0, 1.0)
            assert module.global_to_local_distill(local, student, x, y, "cpu", 1.0, 2.0, local_epochs=2)[0] == x[:1]
    assert module.local_to_global_distill is local_to_global_distill
    assert module.global_to_local_distill is global_to_local_distill
    assert [float(s["weight"]) for s in record.uploads] == [1.0, 2.0]
    assert record.aggregate is not None and float(record.aggregate["weight"]) == 1.0
    assert [float(s["weight"]) for s in record.local_models] == [4.0, 8.0]
    assert float(student.weight.detach()) == 3.0 and float(local.weight.detach()) == 12.0
    assert len(record.selected) == 2


def code_state(seed: int) -> dict[str, torch.Tensor]:
    """A SimpleCNN state under the released code's names (conv1, bn1, conv2, bn2, fc)."""
    model = build_model("fedakd_simplecnn", (1, 28, 28), 10, seed=seed)
    model.train()(torch.rand(4, 1, 28, 28, generator=torch.Generator().manual_seed(seed)))  # BN statistics move
    return dict(zip(CODE_KEYS, (v.clone() for v in model.state_dict().values())))


def first_round(sizes: list[int]) -> tuple[Any, list[tuple[np.ndarray, np.ndarray]]]:
    """A round-1 record as the code makes it: uploads, their |D_k|-weighted average (the code's loop, in float32,
    ``num_batches_tracked`` truncated), local models, and I_k = the images each local model gets right."""
    gen = torch.Generator().manual_seed(0)
    clients = [(torch.rand(n, 28, 28, generator=gen).numpy(), torch.randint(0, 10, (n,), generator=gen).numpy())
               for n in sizes]
    record = script.FirstRound(uploads=[code_state(k) for k in range(len(sizes))],
                               local_models=[code_state(10 + k) for k in range(len(sizes))])
    aggregate = {}
    for key in CODE_KEYS:
        total = sum(u[key].float() * (n / sum(sizes)) for u, n in zip(record.uploads, sizes))
        aggregate[key] = total.to(record.uploads[0][key].dtype)
    record.aggregate = aggregate
    model = build_model("fedakd_simplecnn", (1, 28, 28), 10).eval()
    for (x, y), local in zip(clients, record.local_models):
        model.load_state_dict(dict(zip(model.state_dict(), local.values())))
        with torch.no_grad():
            right = (model(torch.from_numpy(x[:, None]))[1].argmax(1) == torch.from_numpy(y)).numpy()
        record.selected.append(x[right])
    return record, clients


def test_the_first_round_checks_hold_on_the_code_s_own_computation_and_fail_off_it() -> None:
    sizes = [40, 25]
    record, clients = first_round(sizes)
    checks = script.first_round_checks(record, clients, [40.0, 25.0], eval_batch=16)
    assert all(script.first_round_holds(checks).values()), checks
    assert checks["aggregate"] < 1e-6 and checks["weights"] == 0.0 and checks["selection_mismatch"] == 0
    assert 0 < checks["selected_share"] < 1 and checks["batch_count"] <= 1.0
    dropped = script.FirstRound(record.uploads, record.aggregate, record.local_models,
                                [record.selected[0][1:], record.selected[1]])
    assert script.first_round_checks(dropped, clients, [40.0, 25.0], 16)["selection_mismatch"] >= 1
    assert not script.first_round_holds(script.first_round_checks(record, clients, [25.0, 40.0], 16))["weights"]
    swapped = [record.uploads[1], record.uploads[0]]  # the same uploads averaged at each other's weights
    off = script.first_round_checks(script.FirstRound(swapped, record.aggregate, record.local_models, record.selected),
                                    clients, [40.0, 25.0], 16)
    assert not script.first_round_holds(off)["aggregate"]


def test_states_are_renamed_by_position_and_refused_when_the_layers_differ() -> None:
    ours = list(build_model("fedakd_simplecnn", (1, 28, 28), 10).state_dict())
    state = code_state(0)
    assert list(script.renamed(state, ours)) == ours
    assert all(script.renamed(state, ours)[o] is state[c] for o, c in zip(ours, CODE_KEYS))
    with pytest.raises(BenchError, match="does not match"):
        script.renamed(dict(zip(["conv1.weight", "conv1.running_mean"], list(state.values())[:2])), ours[:2])
    with pytest.raises(BenchError, match="tensors"):
        script.renamed(state, ours[:-1])


@pytest.mark.filterwarnings("ignore:Precision loss occurred:RuntimeWarning")  # scipy's own, on a side without spread
def test_avg_and_max_are_the_code_s_per_round_statistics_and_welch_compares_the_sides() -> None:
    """Avg = the clients' mean per round (``mean_each_round``), Max = their max, the final statistic the mean of the
    last three rounds; per round Welch's p of the sides' values over seeds, undefined without spread."""
    released = [script.Run("released", s, [[0.1, 0.3], [0.2, 0.6], [0.5, 0.5], [0.4, 0.8]]) for s in (0, 1)]
    released[1].accuracy = [[0.2, 0.2], [0.3, 0.5], [0.6, 0.4], [0.6, 0.8]]
    ours = [script.Run("ours", s, [[0.2, 0.2], [0.2, 0.2], [0.3, 0.3], [0.5, 0.5]]) for s in (0, 1)]
    assert released[0].avg() == pytest.approx([0.2, 0.4, 0.5, 0.6]) and released[0].max() == [0.3, 0.6, 0.5, 0.8]
    assert script.last3(released[0].avg()) == pytest.approx(0.5)
    table = script.comparison(released + ours, rounds=4)
    first = table["rounds"][0]["avg"]
    assert first["released"] == first["ours"] == pytest.approx([0.2, 0.2]) and first["p"] is None  # no spread
    fourth = table["rounds"][3]["avg"]
    assert fourth["p"] == pytest.approx(scipy.stats.ttest_ind([0.6, 0.7], [0.5, 0.5], equal_var=False).pvalue)
    assert table["rounds"][2]["max"]["p"] == pytest.approx(
        scipy.stats.ttest_ind([0.5, 0.6], [0.3, 0.3], equal_var=False).pvalue)
    last3 = table["last3"]["max"]
    assert last3["released"] == pytest.approx([(0.6 + 0.5 + 0.8) / 3, (0.5 + 0.6 + 0.8) / 3])
    assert script.welch_p([0.1, 0.2], [0.9]) is None


def test_the_report_lists_every_round_the_final_statistic_and_the_first_round_verdict() -> None:
    args = script.parse_args(["c", "--rounds", "2", "--seeds", "0", "1"])
    checks = {"aggregate": 1e-7, "batch_count": 3.0, "selection_mismatch": 0.0, "selected_share": 0.4, "weights": 0.0}
    runs = [script.Run("released", s, [[0.1, 0.3], [0.2, 0.4 + s / 10]], first_round=checks) for s in (0, 1)]
    runs += [script.Run("ours", s, [[0.1, 0.1], [0.3, 0.3 + s / 10]]) for s in (0, 1)]
    text = script.report(runs, args, [10, 5], "cmd")
    assert "| 2 | 0.3250 ± 0.0354 | 0.3250 ± 0.0354 | 1.00 | 0.4500 ± 0.0707 | 0.3500 ± 0.0707 | 0.29 |" in text
    assert "| last 3 (the code's statistic) |" in text and text.count("| yes |") == 2
    runs[0].first_round = {**checks, "selection_mismatch": 2.0}
    assert "| 0 | 1.0e-07 | 3 | 2 | 0.400 | 0 | **no** |" in script.report(runs, args, [10, 5], "cmd")


def test_ours_missing_a_client_s_accuracy_is_refused() -> None:
    records = [(1, "local_acc", 0, 0.5), (1, "local_acc", 1, 0.25), (2, "local_acc", 0, 0.75), (1, "global_acc", None, 0.1)]
    with pytest.raises(BenchError, match="every client in every round"):
        script.client_accuracy(records, clients=2, rounds=2)
    assert script.client_accuracy(records + [(2, "local_acc", 1, 1.0)], 2, 2).tolist() == [[0.5, 0.25], [0.75, 1.0]]


def test_bad_arguments_are_refused_in_one_line() -> None:
    for bad in (["c", "--clients", "0"], ["c", "--rounds", "0"], ["c", "--train-images", "250"],
                ["c", "--clients", "5", "--train-images", "400"], ["c", "--train-images", "20000"]):
        with pytest.raises(SystemExit) as exit_info:
            script.parse_args(bad)
        assert exit_info.value.code == 2
    assert isinstance(script.parse_args(["c"]), argparse.Namespace)


def test_a_folder_that_is_not_the_released_code_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert script.main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "is not a checkout of the released FedAKD code" in err and len(err.strip().splitlines()) == 1
