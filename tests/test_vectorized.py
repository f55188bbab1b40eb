"""``training.vectorize_clients``: a round's clients trained together (one vmapped forward/backward per
step, bench/engine/vectorized.py) compute what the serial loop computes, to float32 rounding.

Not bitwise: vmap runs a group's convolutions as one grouped convolution and its matrix products as
one batched product, which sum in another order (a few float32 ulps per step). The tolerances below
are stated against parameters of magnitude ~1 after 3 rounds: parameters, BatchNorm statistics and
optimiser state within 1e-5 (measured: at most 1.5e-6, with Adam, which rescales small differences),
integer buffers and every accuracy record's client set equal, train losses within 1e-5 relative.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from bench.algorithms import register_algorithm
from bench.algorithms.fedavg import FedAvg
from bench.cli import main
from bench.engine.loop import Step
from bench.errors import BenchError
from bench.runner.checkpoint import CHECKPOINT, EVERY_ROUND, read_checkpoint
from bench.runner.executor import RunRequest, run_experiment
from tests.conftest import small_config

CASES = {
    "fedavg, uneven Dirichlet clients (groups by batch shape)": {
        "algorithm": {"name": "fedavg"}, "partition": {"scheme": "dirichlet", "alpha": 0.3, "num_clients": 6}},
    "fedprox, Adam persistent, partial participation, clipping": {
        "algorithm": {"name": "fedprox", "mu": 0.1}, "participation": {"fraction": 0.6},
        "partition": {"num_clients": 6},
        "training": {"optimizer": {"name": "adam", "lr": 0.003, "persistent": True}, "grad_clip": 1.0}},
    "standalone, SGD momentum": {
        "algorithm": {"name": "standalone"}, "partition": {"num_clients": 6},
        "training": {"optimizer": {"name": "sgd", "lr": 0.05, "momentum": 0.9}}},
}


def _run(sections: dict, vectorize: bool, out: Path, data_dir: Path):  # type: ignore[no-untyped-def]
    training = {**sections.get("training", {}), "vectorize_clients": vectorize}
    config = small_config(**{**sections, "training": {"rounds": 3, **training}})
    run_experiment(RunRequest(config, out, data_dir, checkpoint=EVERY_ROUND, keep_checkpoint=True))
    return read_checkpoint(out / CHECKPOINT, torch.device("cpu"))


def _curves(out: Path) -> list[list[str]]:
    return [line.split(",") for line in (out / "curves.csv").read_text().splitlines()]


@pytest.mark.parametrize("sections", CASES.values(), ids=CASES.keys())
def test_clients_trained_together_equal_the_serial_loop_to_float32_rounding(sections: dict, data_dir: Path,
                                                                            tmp_path: Path) -> None:
    serial = _run(sections, False, tmp_path / "serial", data_dir)
    together = _run(sections, True, tmp_path / "together", data_dir)
    for a, b in zip(serial.clients + [serial.server], together.clients + [together.server]):
        if a.model is None:
            continue  # Standalone has no global model
        for key, x in a.model.state_dict().items():
            y = b.model.state_dict()[key]
            if x.is_floating_point():
                torch.testing.assert_close(y, x, atol=1e-5, rtol=0, msg=key)
            else:
                assert torch.equal(x, y), key  # BatchNorm's num_batches_tracked
    for a, b in zip(serial.clients, together.clients):
        if a.optimizer is not None and b.optimizer is not None:
            for sa, sb in zip(a.optimizer.state_dict()["state"].values(), b.optimizer.state_dict()["state"].values()):
                for key in sa:
                    torch.testing.assert_close(sb[key], sa[key], atol=1e-5, rtol=0)
    header, *rows = _curves(tmp_path / "serial")
    loss = header.index("train_loss")
    together_rows = _curves(tmp_path / "together")[1:]
    assert [r[0] for r in rows] == [r[0] for r in together_rows]
    for a_row, b_row in zip(rows, together_rows):
        assert float(b_row[loss]) == pytest.approx(float(a_row[loss]), rel=1e-5)


def test_clients_trained_together_are_reproducible_and_resume_bitwise(data_dir: Path, tmp_path: Path) -> None:
    config = small_config(partition={"scheme": "dirichlet", "alpha": 0.3}, algorithm={"name": "fedprox", "mu": 0.1},
                          training={"rounds": 4, "vectorize_clients": True})
    run_experiment(RunRequest(config, tmp_path / "a", data_dir))
    run_experiment(RunRequest(config, tmp_path / "b", data_dir))

    def stop_after_round_2(t: int, row: dict[str, float]) -> None:
        if t == 2:
            raise KeyboardInterrupt  # after round 2's checkpoint, as a kill would find it

    with pytest.raises(KeyboardInterrupt):
        run_experiment(RunRequest(config, tmp_path / "cut", data_dir, checkpoint=EVERY_ROUND), stop_after_round_2)
    said: list[str] = []
    run_experiment(RunRequest(config, tmp_path / "cut", data_dir, checkpoint=EVERY_ROUND), say=said.append)
    assert said == [f"resuming {tmp_path / 'cut'} after round 2 of 4, from {CHECKPOINT}"]
    for name in ("metrics.json", "curves.csv", "records.csv"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes() \
            == (tmp_path / "cut" / name).read_bytes(), name


def test_the_switch_stays_out_of_the_config_and_its_hash_when_off() -> None:
    off, on = small_config(), small_config(training={"vectorize_clients": True})
    assert "vectorize_clients" not in off.to_dict()["training"]
    assert on.to_dict()["training"]["vectorize_clients"] is True and on.sha256 != off.sha256


@pytest.mark.parametrize(("overrides", "refusal"), [
    (["algorithm.name=moon"], "moon has its own local_update"),
    (["algorithm.name=fedhkd", "algorithm.mode=code"], "fedhkd has its own client_update"),
    (["algorithm.name=standalone", "model.candidates=[cnn, mlp]"], "clients of one architecture"),
], ids=["moon", "fedhkd-code", "heterogeneous"])
def test_methods_it_cannot_batch_are_refused_in_one_line(overrides: list[str], refusal: str, data_dir: Path,
                                                         tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("training: {rounds: 1, vectorize_clients: true}\ntracking: {mlflow: false}\n")
    sets = [arg for o in overrides for arg in ("-S", o)]
    code = main(["run", str(config), *sets, "--out", str(tmp_path / "o"), "--data-dir", str(data_dir), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and refusal in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "o" / "metrics.json").exists()


@register_algorithm("test-reads-cid")
class _ReadsClientId(FedAvg):
    def local_loss(self, step: Step, client, x: torch.Tensor,  # type: ignore[no-untyped-def]
                   y: torch.Tensor) -> torch.Tensor:
        return super().local_loss(step, client, x, y) * (1 + client.cid)


@register_algorithm("test-dropout")
class _Dropout(FedAvg):
    def local_loss(self, step: Step, client, x: torch.Tensor,  # type: ignore[no-untyped-def]
                   y: torch.Tensor) -> torch.Tensor:
        _, logits = client.model(x)
        return F.cross_entropy(F.dropout(logits, 0.5), y)


@dataclasses.dataclass
class _Tagged:
    tag: object = None


@register_algorithm("test-per-client-object")
class _PerClientObject(FedAvg):
    ClientState = _Tagged

    def init_client_state(self, cid: int) -> _Tagged:
        return _Tagged(object())  # differs per client and is no tensor


@pytest.mark.parametrize(("name", "refusal"), [
    ("test-reads-cid", "reads client.cid"), ("test-dropout", "random numbers"),
    ("test-per-client-object", "client state field 'tag' differs"),
])
def test_a_local_loss_that_cannot_be_batched_is_refused(name: str, refusal: str, data_dir: Path,
                                                         tmp_path: Path) -> None:
    config = small_config(algorithm={"name": name}, training={"rounds": 1, "vectorize_clients": True})
    with pytest.raises(BenchError, match=refusal):
        run_experiment(RunRequest(config, tmp_path / "o", data_dir))
