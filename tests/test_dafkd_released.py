"""The released-code comparison of DaFKD (pipelines/dafkd/validation/released_code.py): its data shim gives the code
our clients' data in the code's loader layout, its device shim gives ``.cpu().state_dict()`` the copy semantics of a
GPU, and its comparison holds the one-round differences to the stated tolerances. The released code itself cannot be
fetched here, so the comparison's run is not repeated; its parts are checked."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from bench.runner.federation import to_tensor

from tests.scripts import load_script

SCRIPT = Path(__file__).resolve().parents[1] / "pipelines" / "dafkd" / "validation" / "released_code.py"
script: Any = load_script(SCRIPT, "dafkd_released_code")


@pytest.fixture(scope="module")
def workload(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any, Any]:
    from bench.data import load_dataset, prepare_dataset

    args = script.parse_args(["checkout", "--train-images", "96", "--clients", "3", "--batch-size", "8"])
    data_dir = tmp_path_factory.mktemp("data")
    script.register_digits32(args.train_images)
    prepare_dataset(script.DATASET, data_dir)
    data = load_dataset(script.DATASET, data_dir)
    return args, data, script.partition(data, args)


def test_the_shim_gives_each_client_its_own_images_in_full_batches_fixed_once(workload: tuple[Any, Any, Any]) -> None:
    """Each client's batches are full, hold only its images (as our runner normalises them) and leave out fewer than
    a batch (the code's ``drop_last``); the order is drawn once from the run seed, so another seed reorders them."""
    args, data, part = workload
    clients, n_train, n_test, train_global, test, counts, train_local, test_local, classes = script.released_data(
        data, part, args.batch_size, seed=0)
    x = to_tensor(data.train_x, data, torch.device("cpu"), "half")
    assert (clients, n_train, n_test, classes) == (3, sum(len(p) for p in part.train), 450, 10)
    for cid, indices in enumerate(part.train):
        assert counts[cid] == len(indices)
        batches = train_local[cid]
        assert all(len(bx) == len(by) == args.batch_size and by.dtype == torch.int64 for bx, by in batches)
        assert len(indices) - len(batches) * args.batch_size < args.batch_size
        for bx, by in batches:
            for image, label in zip(bx, by):
                hits = [i for i in indices if torch.equal(x[i], image)]
                assert hits and int(label) in {int(data.train_y[i]) for i in hits}
    assert sum(len(b) for b in train_local.values()) == len(train_global)
    again = script.released_data(data, part, args.batch_size, seed=0)[6]
    other = script.released_data(data, part, args.batch_size, seed=1)[6]
    assert all(torch.equal(a[0], b[0]) for a, b in zip(again[0], train_local[0]))
    assert not all(torch.equal(a[0], b[0]) for a, b in zip(other[0], train_local[0]))


def test_the_clients_local_test_sets_together_are_the_test_set_once(workload: tuple[Any, Any, Any]) -> None:
    """The code's logged test accuracy pools the clients' local test sets: dealt round-robin, they are the whole test
    set, each image once, so it is the accuracy on the test set."""
    args, data, part = workload
    test, test_local = (lambda t: (t[4], t[7]))(script.released_data(data, part, args.batch_size, seed=0))
    labels = torch.cat([y for _, y in test])
    assert torch.equal(labels, torch.from_numpy(data.test_y).long())
    position = {id(batch): i for i, batch in enumerate(test)}
    dealt = sorted(position[id(batch)] for batches in test_local.values() for batch in batches)
    assert dealt == list(range(len(test)))
    assert len(test[-1][1]) == 450 % args.batch_size  # the last partial batch is there (the code filters it itself)


def test_with_cuda_semantics_a_state_dict_snapshot_survives_the_next_move_and_step() -> None:
    """§1.7.19: on the CPU ``.cpu().state_dict()`` is a view of the live model; moved with ``.to(device)`` under the
    shim, the live model gets new tensors and the snapshot keeps its values, as on a GPU."""
    def snapshot_after_step(shim: bool) -> tuple[torch.Tensor, torch.Tensor]:
        model = torch.nn.Sequential(torch.nn.Linear(2, 1), torch.nn.BatchNorm1d(1))
        with torch.no_grad():
            model[0].weight.fill_(0.5)
            model[0].bias.fill_(0.0)
        with script.cuda_semantics(shim):
            snapshot = model.cpu().state_dict()
            before = snapshot["0.weight"].clone()
            model.to(torch.device("cpu"))
            with torch.no_grad():
                model[0].weight.add_(1.0)
            model.train()(torch.arange(8.0).view(4, 2))
        return snapshot["0.weight"] - before, snapshot["1.running_mean"]
    moved, mean = snapshot_after_step(shim=True)
    assert torch.equal(moved, torch.zeros_like(moved)) and torch.equal(mean, torch.zeros(1))
    moved, mean = snapshot_after_step(shim=False)
    assert torch.equal(moved, torch.ones_like(moved)) and not torch.equal(mean, torch.zeros(1))
    assert torch.nn.Module.to.__name__ == "to" and "cuda_semantics" not in torch.nn.Module.to.__qualname__


def test_the_released_log_gives_one_test_accuracy_per_round() -> None:
    log = ("INFO:root:{'training_acc': 0.5, 'training_loss': 1.2}\nINFO:root:{'test_acc': 0.25, 'test_loss': 2.1}\n"
           "INFO:root:{'training_acc': 0.6, 'training_loss': 1.0}\nINFO:root:{'test_acc': 0.3125, 'test_loss': 1.9}\n")
    assert script.parse_released(log) == [0.25, 0.3125]


def test_keys_are_matched_by_position_and_refused_when_shapes_differ() -> None:
    theirs = {"sharedlayer.0.weight": torch.zeros(4, 3), "sharedlayer.1.running_mean": torch.zeros(4),
              "classify.2.bias": torch.zeros(10)}
    ours = {"body.0.weight": torch.zeros(4, 3), "body.1.running_mean": torch.zeros(4), "classifier.bias": torch.zeros(10)}
    assert script.key_map(theirs, ours) == dict(zip(theirs, ours))
    from bench.errors import BenchError

    with pytest.raises(BenchError, match="does not match"):
        script.key_map(theirs, {**ours, "classifier.bias": torch.zeros(9)})
    with pytest.raises(BenchError, match="does not match"):  # same shape, another kind of tensor
        script.key_map(theirs, {"body.0.weight": torch.zeros(4, 3), "body.1.running_var": torch.zeros(4),
                                "classifier.bias": torch.zeros(10)})


def test_state_differences_split_parameters_buffers_and_the_share_off_by_half_a_step() -> None:
    theirs = {"w": torch.tensor([0.0, 1.0, 2.0, 3.0]), "m": torch.tensor([1.0]), "v": torch.tensor([0.5]),
              "n": torch.tensor(3)}
    ours = {"w": torch.tensor([0.0, 1.0 + 1e-4, 2.0, 3.0 + 1e-5]), "m": torch.tensor([1.25]), "v": torch.tensor([1.0]),
            "n": torch.tensor(2)}
    names = {"w": "w", "m": "m.running_mean", "v": "v.running_var", "n": "n.num_batches_tracked"}
    diff = script.compare_states(theirs, {names[k]: v for k, v in ours.items()}, names, {"w"}, step=1e-4)
    assert diff["params"] == pytest.approx(1e-4, rel=1e-3) and diff["params_off"] == 0.25
    assert (diff["bn_mean"], diff["bn_var"], diff["bn_count"]) == (0.25, 0.5, 1.0)
    assert diff["bn_rel"] == pytest.approx(0.5)


def one_round_result(**changes: Any) -> dict[str, Any]:
    distilled = {"params": 3e-4, "params_off": 0.02, "bn_mean": 7e-3, "bn_var": 1.3e-2, "bn_rel": 0.5, "bn_count": 1.0}
    result = {"seed": 0, "alpha": 3e-8, "teacher": 1.2e-7, "teacher_scale": 0.9, "generator": 0.0, "test_passes": 1e-7,
              "averaged": {"params": 1e-7, "bn_mean": 2e-7, "bn_var": 5e-7}, "distilled": distilled,
              "rounding_control": {**distilled, "params": 4e-4}, "distillation_moved": 8e-4,
              "accuracy": {"released": 0.2, "ours": 0.2, "ours_code_teacher": 0.2}}
    for key, value in changes.items():
        if isinstance(value, dict):
            result[key] = {**result[key], **value}
        else:
            result[key] = value
    return result


def test_one_round_agreement_holds_within_the_tolerances_and_fails_beyond_them() -> None:
    """Float tolerances for α̂, the teacher, ŵ, the test passes and the generator; the distilled state within twice
    the rounding control (ours against ours with the code's teacher)."""
    assert all(ok for *_, ok in script.agreement(one_round_result()))
    for change in ({"alpha": 2e-6}, {"teacher": 2e-5}, {"averaged": {"bn_var": 1e-4}}, {"generator": 1e-9},
                   {"test_passes": 1e-3}, {"distilled": {"params": 1e-3}}, {"distilled": {"bn_var": 0.05}},
                   {"distilled": {"params_off": 0.5}}):
        failed = [q for q, _, _, _, ok in script.agreement(one_round_result(**change)) if not ok]
        assert len(failed) == 1, change
    text = script.one_round_report([one_round_result(alpha=1.0)], script.parse_args(["c"]), "cmd")
    assert "| α̂ | 1.0e+00 | — | 1e-06 | **no** |" in text


def test_bad_arguments_are_refused_in_one_line() -> None:
    for bad in (["c", "--clients", "0"], ["c", "--train-images", "2000"],
                ["c", "--train-images", "32", "--clients", "4", "--batch-size", "16"]):
        with pytest.raises(SystemExit) as exit_info:
            script.parse_args(bad)
        assert exit_info.value.code == 2


def test_a_folder_that_is_not_the_released_code_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert script.main([str(tmp_path), "--one-round"]) == 2
    assert "is not a checkout of the released DaFKD code" in capsys.readouterr().err
