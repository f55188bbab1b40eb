from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from bench.algorithms import register_algorithm
from bench.algorithms.fedavg import FedAvg
from bench.cli import main
from bench.data import load_dataset
from bench.engine.context import Context
from bench.engine.loop import Step
from bench.runner.executor import RunRequest, run_experiment
from bench.runner.federation import run_federation, sample_clients, to_tensor
from bench.engine.state import Client
from bench.errors import BenchError, Diverged
from bench.fileio import write_text
from tests.conftest import small_config


def _state_equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("optimizer", [{"name": "sgd", "momentum": 0.9, "persistent": True},
                                       {"name": "adam", "lr": 0.01, "persistent": True}])
def test_fedavg_with_one_client_is_centralised_training(data_dir: Path, optimizer: dict) -> None:
    """One client holding all the data: FedAvg's global model equals a plain training loop over the
    same batches, bitwise, after every round (BatchNorm buffers included)."""
    cfg = small_config(partition={"num_clients": 1, "local_test_fraction": 0.0},
                       training={"rounds": 3, "local_epochs": 2, "optimizer": optimizer})
    result = run_federation(cfg, data_dir)
    server = result.state.server

    data = load_dataset("digits", data_dir)
    x, y = to_tensor(data.train_x, data, torch.device("cpu")), torch.from_numpy(data.train_y)
    ctx = Context(cfg, data.image_shape, data.num_classes, torch.device("cpu"))
    model = ctx.build_model("server")
    opt = ctx.make_optimizer(model.parameters())
    model.train()
    for t in range(1, cfg.training.rounds + 1):
        for idx in ctx.batch_indices(len(y), 0, t):
            loss = F.cross_entropy(model(x[idx])[1], y[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    assert _state_equal(server.model.state_dict(), model.state_dict())


def test_fedprox_with_mu_zero_is_fedavg(data_dir: Path) -> None:
    common = {"partition": {"scheme": "dirichlet", "alpha": 0.5}, "training": {"rounds": 2}}
    fedavg = run_federation(small_config(**common), data_dir)
    fedprox = run_federation(small_config(algorithm={"name": "fedprox", "mu": 0.0}, **common), data_dir)
    assert fedavg.curves == fedprox.curves
    assert _state_equal(fedavg.state.server.model.state_dict(), fedprox.state.server.model.state_dict())
    # and a positive mu changes the result
    other = run_federation(small_config(algorithm={"name": "fedprox", "mu": 1.0}, **common), data_dir)
    assert not _state_equal(fedavg.state.server.model.state_dict(), other.state.server.model.state_dict())


def test_one_full_batch_round_is_one_large_batch_sgd_step(data_dir: Path) -> None:
    """Σ_k (n_k/n) (w - lr g_k) = w - lr Σ_k (n_k/n) g_k = one SGD step on the union (BN-free model). A batch of
    the dataset's 1347 training images is each client's whole split (a larger one is refused)."""
    cfg = small_config(partition={"scheme": "iid", "num_clients": 5, "local_test_fraction": 0.0},
                       model={"name": "mlp"},
                       training={"rounds": 1, "local_epochs": None, "local_steps": 1, "batch_size": 1347,
                                 "optimizer": {"name": "sgd", "lr": 0.5}})
    result = run_federation(cfg, data_dir)
    data = load_dataset("digits", data_dir)
    ctx = Context(cfg, data.image_shape, data.num_classes, torch.device("cpu"))
    model = ctx.build_model("server")
    x, y = to_tensor(data.train_x, data, torch.device("cpu")), torch.from_numpy(data.train_y)
    loss = F.cross_entropy(model(x)[1], y)
    loss.backward()
    with torch.no_grad():
        for p in model.parameters():
            p -= 0.5 * p.grad
    fed = result.state.server.model.state_dict()
    for key, value in model.state_dict().items():
        torch.testing.assert_close(fed[key], value, rtol=0, atol=2e-6)
    assert not torch.equal(fed["classifier.weight"], ctx.build_model("server").state_dict()["classifier.weight"])


def test_same_run_twice_is_bitwise_identical(data_dir: Path, tmp_path: Path) -> None:
    cfg = small_config(partition={"scheme": "dirichlet", "alpha": 0.3}, participation={"fraction": 0.5},
                       training={"optimizer": {"momentum": 0.9, "persistent": True}})
    first = run_experiment(RunRequest(cfg, tmp_path / "a", data_dir))
    second = run_experiment(RunRequest(cfg, tmp_path / "b", data_dir))
    assert first == second
    for name in ("metrics.json", "curves.csv", "config.yaml"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    other_seed = run_experiment(RunRequest(small_config(**{**cfg.to_dict(), "seed": 1}), tmp_path / "c", data_dir))
    assert other_seed["final"] != first["final"]


def test_partial_participation_is_seeded_and_sized() -> None:
    cfg = small_config(participation={"fraction": 0.3})
    rounds = [sample_clients(cfg, t) for t in range(1, 6)]
    assert all(len(r) == 3 and r == sorted(set(r)) for r in rounds)
    assert rounds == [sample_clients(cfg, t) for t in range(1, 6)]
    assert len({tuple(r) for r in rounds}) > 1


def test_local_steps_and_epochs_count_optimizer_steps(data_dir: Path) -> None:
    cfg = small_config(training={"local_epochs": None, "local_steps": 7, "batch_size": 16})
    ctx = Context(cfg, (1, 8, 8), 10, torch.device("cpu"))
    assert len(list(ctx.batch_indices(40, 0, 1))) == 7
    cfg = small_config(training={"local_epochs": 2, "batch_size": 16, "drop_last": True})
    ctx = Context(cfg, (1, 8, 8), 10, torch.device("cpu"))
    batches = list(ctx.batch_indices(40, 0, 1))
    assert [len(b) for b in batches] == [16, 16, 16, 16]
    assert len(set(torch.cat(batches[:2]).tolist())) == 32  # one permutation per epoch


@register_algorithm("test-nan")
class _NaNAtRoundTwo(FedAvg):
    """FedAvg whose client 3 produces a NaN loss in round 2 (for the divergence test)."""

    def local_loss(self, step: Step, client: Client, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        loss = super().local_loss(step, client, x, y)
        return loss * float("nan") if (step.round, client.cid) == (2, 3) else loss


def test_divergence_stops_with_round_and_client_and_no_metrics(data_dir: Path, tmp_path: Path) -> None:
    import mlflow

    cfg = small_config(algorithm={"name": "test-nan"}, tracking={"mlflow": True, "experiment": "diverge"})
    out = tmp_path / "run"
    write_text(out / "metrics.json", "{}")  # a stale file from an earlier run must not survive
    with pytest.raises(Diverged, match=r"diverged at round 2 \(client 3\)"):
        run_experiment(RunRequest(cfg, out, data_dir))
    assert not (out / "metrics.json").exists()
    assert json.loads((out / "failure.json").read_text())["status"] == "failed"
    runs = mlflow.search_runs(experiment_names=["diverge"], output_format="list")
    assert [r.info.status for r in runs] == ["FAILED"]


def test_cli_diverging_run_exits_1(data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("training: {rounds: 3, optimizer: {lr: 1.0e+30}}\ntracking: {mlflow: false}\n")
    code = main(["run", str(path), "--out", str(tmp_path / "o"), "--data-dir", str(data_dir), "--no-progress"])
    assert code == 1
    assert "diverged at round 1 (client 0)" in capsys.readouterr().err
    assert not (tmp_path / "o" / "metrics.json").exists()


def test_training_on_after_a_divergence_records_it_and_still_fails_the_run(data_dir: Path, tmp_path: Path) -> None:
    """training.on_divergence: train_on (a released code's behaviour): the run trains to its last round with NaN
    weights, keeps its curves and names the first divergence; it ends as failed, never with metrics.json."""
    cfg = small_config(algorithm={"name": "test-nan"}, training={"on_divergence": "train_on"})
    result = run_federation(cfg, data_dir)
    assert (result.diverged.round_index, result.diverged.client) == (2, 3)
    assert [row["round"] for row in result.curves] == [1, 2, 3]
    assert np.isfinite(result.curves[0]["train_loss"]) and np.isnan(result.curves[2]["train_loss"])
    assert np.isfinite(result.curves[2]["global_acc"])  # NaN weights still predict: a chance-level accuracy
    out = tmp_path / "run"
    with pytest.raises(Diverged, match=r"diverged at round 2 \(client 3\).*trained on to round 3"):
        run_experiment(RunRequest(cfg, out, data_dir))
    assert not (out / "metrics.json").exists()
    assert json.loads((out / "failure.json").read_text())["status"] == "failed"
    assert (out / "curves.csv").read_text().count("\n") == 4  # header and every round


def test_training_on_is_left_out_of_the_resolved_config_at_its_default_and_refused_in_paper_mode() -> None:
    assert "on_divergence" not in small_config().to_dict()["training"]
    assert small_config(algorithm={"name": "fedhkd", "mode": "code"},
                        training={"on_divergence": "train_on"}).training.on_divergence == "train_on"
    with pytest.raises(BenchError, match="needs algorithm.mode: code"):
        small_config(algorithm={"name": "fedhkd"}, training={"on_divergence": "train_on"})


def test_a_run_that_trains_on_resumes_with_its_divergence(data_dir: Path, tmp_path: Path) -> None:
    """Killed after its divergence and resumed, a run that trains on still names the round it diverged."""
    from bench.runner.checkpoint import EVERY_ROUND

    class Killed(Exception):
        pass

    def kill_after_round_2(t: int, row: dict[str, float]) -> None:
        if t == 2:
            raise Killed

    cfg = small_config(algorithm={"name": "test-nan"}, training={"on_divergence": "train_on"})
    out = tmp_path / "cut"
    with pytest.raises(Killed):
        run_experiment(RunRequest(cfg, out, data_dir, checkpoint=EVERY_ROUND), progress=kill_after_round_2)
    said: list[str] = []
    with pytest.raises(Diverged, match=r"diverged at round 2 \(client 3\)"):
        run_experiment(RunRequest(cfg, out, data_dir, checkpoint=EVERY_ROUND), say=said.append)
    assert said and said[-1].startswith(f"resuming {out} after round 2")
    with pytest.raises(Diverged):
        run_experiment(RunRequest(cfg, tmp_path / "whole", data_dir))
    assert (out / "curves.csv").read_bytes() == (tmp_path / "whole" / "curves.csv").read_bytes()


def test_run_records_provenance_and_mlflow(data_dir: Path, tmp_path: Path) -> None:
    import mlflow

    cfg = small_config(tracking={"mlflow": True, "experiment": "records"})
    metrics = run_experiment(RunRequest(cfg, tmp_path / "run", data_dir))
    prov = json.loads((tmp_path / "run" / "provenance.json").read_text())
    assert prov["config_sha256"] == cfg.sha256 == metrics["config_sha256"]
    for key in ("dataset_sha256", "partition_sha256", "git_commit", "uv_lock_sha256", "torch", "device", "seed"):
        assert prov[key] not in ("", None)
    (run,) = mlflow.search_runs(experiment_names=["records"], output_format="list")
    assert run.info.status == "FINISHED"
    assert run.data.tags["partition_sha256"] == prov["partition_sha256"]
    history = mlflow.MlflowClient().get_metric_history(run.info.run_id, "global_acc")
    assert [m.step for m in history] == [1, 2, 3]
    assert history[-1].value == metrics["final"]["global_acc"]


def test_interrupted_write_leaves_no_truncated_file(tmp_path: Path) -> None:
    from bench.fileio import atomic_write

    target = tmp_path / "metrics.json"
    target.write_text('{"old": true}')

    def half_then_crash(handle):  # type: ignore[no-untyped-def]
        handle.write(b'{"new": ')
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        atomic_write(target, half_then_crash)
    assert target.read_text() == '{"old": true}'
    assert list(tmp_path.iterdir()) == [target]


def test_saved_partition_must_match_the_config(data_dir: Path, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["partition", "-S", "partition.scheme=iid", "--out", str(tmp_path / "p"),
                 "--data-dir", str(data_dir)]) == 0
    cfg_path = tmp_path / "c.yaml"
    cfg_path.write_text("training: {rounds: 1}\ntracking: {mlflow: false}\npartition: {scheme: shards}\n")
    assert main(["run", str(cfg_path), "--partition", str(tmp_path / "p"), "--data-dir", str(data_dir),
                 "--no-progress", "--out", str(tmp_path / "o")]) == 2
    assert "re-create it with `bench partition`" in capsys.readouterr().err


def test_heterogeneous_architectures_are_seeded_and_recorded(data_dir: Path, tmp_path: Path) -> None:
    cfg = small_config(model={"name": "cnn", "candidates": ["cnn", "mlp"]}, algorithm={"name": "standalone"},
                       training={"rounds": 1})
    result = run_federation(cfg, data_dir)
    assert set(result.architectures) == {"cnn", "mlp"} and len(result.architectures) == 10
    assert [type(c.model).__name__ for c in result.state.clients] == \
        [{"cnn": "SmallCNN", "mlp": "MLP"}[a] for a in result.architectures]
    assert run_federation(cfg, data_dir).architectures == result.architectures
    run_experiment(RunRequest(cfg, tmp_path / "run", data_dir))
    assert json.loads((tmp_path / "run" / "provenance.json").read_text())["architectures"] == result.architectures
    with pytest.raises(BenchError, match="fedavg averages parameters"):
        run_federation(small_config(model={"name": "cnn", "candidates": ["cnn", "mlp"]}), data_dir)
    with pytest.raises(BenchError, match="is a generator, not a classifier"):
        small_config(model={"name": "fedgen_generator"})


def test_model_kwargs_are_the_named_models_and_other_candidates_keep_their_defaults(data_dir: Path) -> None:
    """FedAL's proxy: ``model.kwargs`` shape ``model.name`` (mlp with hidden (32, 16)); a candidate of another name
    (mlp_deep, which has no such argument in common use) is built with its own defaults."""
    cfg = small_config(model={"name": "mlp", "kwargs": {"hidden": [32, 16]}, "candidates": ["mlp", "mlp_deep"]},
                       algorithm={"name": "standalone"}, training={"rounds": 1})
    result = run_federation(cfg, data_dir)
    widths = {a: [m.out_features for m in c.model.modules() if isinstance(m, torch.nn.Linear)]
              for a, c in zip(result.architectures, result.state.clients)}
    assert widths == {"mlp": [32, 16, 10], "mlp_deep": [256, 128, 84, 10]}


def test_lr_step_decay_and_grad_clip(data_dir: Path) -> None:
    cfg = small_config(training={"optimizer": {"lr": 0.1}, "lr_decay": {"every": 10, "factor": 0.5}})
    ctx = Context(cfg, (1, 8, 8), 10, torch.device("cpu"))
    assert [ctx.lr_at(t) for t in (1, 10, 11, 21)] == [0.1, 0.1, 0.05, 0.025]
    cfg = small_config(partition={"num_clients": 1, "local_test_fraction": 0.0},
                       training={"rounds": 1, "local_epochs": None, "local_steps": 1, "grad_clip": 0.01,
                                 "optimizer": {"lr": 1.0}})
    result = run_federation(cfg, data_dir)
    start = Context(cfg, (1, 8, 8), 10, torch.device("cpu")).build_model("server")
    step = torch.cat([(a - b).flatten() for a, b in zip(result.state.server.model.parameters(),
                                                         start.parameters())])
    assert 0 < step.norm() <= 0.01 + 1e-6  # lr 1 x gradient clipped to norm 0.01


def test_public_set_is_unused_fixed_and_checked(data_dir: Path) -> None:
    from bench.runner.federation import public_indices

    cfg = small_config(partition={"scheme": "fedhkd", "alpha": 0.5, "local_test_fraction": 0.0}, public={"size": 50})
    result = run_federation(cfg, data_dir)
    partition = result.state.partition
    public = public_indices(cfg, partition, 1347)
    assert len(set(public.tolist())) == 50
    assert not set(public.tolist()) & set(np.concatenate(partition.train).tolist())
    assert public.tolist() == public_indices(small_config(**{**cfg.to_dict(), "seed": 5}), partition, 1347).tolist()
    with pytest.raises(BenchError, match="training images are held by no client"):
        run_federation(small_config(public={"size": 10}, partition={"local_test_fraction": 0.0}), data_dir)


def test_overlapping_public_set_is_drawn_from_what_clients_hold(data_dir: Path) -> None:
    """``public.source: overlap`` (FedAL A12: 𝒫 ⊂ ∪𝒟_n; DaFKD's FedDF proxy set): the clients keep every image,
    the public set is a fixed draw from their train images, and a size beyond what they hold is refused."""
    from bench.runner.federation import public_indices

    cfg = small_config(partition={"scheme": "dirichlet", "alpha": 1.0}, public={"size": 60, "source": "overlap"})
    partition = run_federation(cfg, data_dir).state.partition
    public = public_indices(cfg, partition, 1347)
    held = set(np.concatenate(partition.train).tolist())
    assert len(set(public.tolist())) == 60 and set(public.tolist()) <= held
    assert sum(len(t) for t in partition.train) + sum(len(t) for t in partition.local_test) == 1347  # nothing carved
    assert public.tolist() == public_indices(small_config(**{**cfg.to_dict(), "seed": 5}), partition, 1347).tolist()
    with pytest.raises(BenchError, match="the clients hold only"):
        public_indices(small_config(**{**cfg.to_dict(), "public": {"size": 5000, "source": "overlap"}}), partition, 1347)


def test_carved_public_set_is_part_of_the_partition(data_dir: Path, tmp_path: Path) -> None:
    cfg = small_config(public={"size": 100, "source": "carve"}, partition={"scheme": "dirichlet", "alpha": 0.5})
    partition = run_federation(cfg, data_dir).state.partition
    held = np.concatenate([*partition.train, *partition.local_test])
    assert len(partition.public) == 100 and len(held) == 1347 - 100
    assert not set(partition.public.tolist()) & set(held.tolist())
    from bench.data.partition import load_partition

    assert load_partition(partition.save(tmp_path / "p")).public.tolist() == partition.public.tolist()
    run_federation(cfg, data_dir, tmp_path / "p")  # the saved artifact matches the config
    with pytest.raises(BenchError, match="re-create it"):
        run_federation(small_config(**{**cfg.to_dict(), "public": {"size": 0}}), data_dir, tmp_path / "p")


def test_run_many_parallel_logs_every_run_in_order(data_dir: Path, tmp_path: Path) -> None:
    import mlflow

    from bench.runner.parallel import run_many

    configs = [small_config(seed=s, training={"rounds": 1}, tracking={"mlflow": True, "experiment": "many"})
               for s in (3, 1, 2)]
    requests = [RunRequest(c, tmp_path / f"s{c.seed}", data_dir) for c in configs]
    metrics = run_many(requests, 2)
    assert [m["seed"] for m in metrics] == [3, 1, 2]
    runs = mlflow.search_runs(experiment_names=["many"], output_format="list", order_by=["attributes.start_time"])
    assert [(r.data.tags["seed"], r.info.status) for r in runs] == [("3", "FINISHED"), ("1", "FINISHED"),
                                                                      ("2", "FINISHED")]
    serial = [run_experiment(RunRequest(c, tmp_path / f"r{c.seed}", data_dir), mlflow=False) for c in configs]
    assert metrics == serial  # results do not depend on the executor


def test_fedprox_proximal_term_by_hand() -> None:
    """local_loss = CE + (μ/2)·Σ‖w − w^t‖² over the trainable parameters (pipelines/dafkd/NOTES.md §2.2)."""
    from bench.algorithms.fedprox import FedProx, FedProxParams
    from bench.engine.loop import Step
    from bench.engine.state import ClientData

    cfg = small_config(model={"name": "mlp", "kwargs": {"hidden": [3]}})
    ctx = Context(cfg, (1, 8, 8), 10, torch.device("cpu"))
    method = FedProx(FedProxParams(mu=0.3), ctx)
    server = method.init_server()
    client = Client(0, ClientData(*(torch.zeros(0),) * 4), ctx.build_model("client", 0), method.init_client_state(0))
    method.receive_broadcast(client, method.broadcast(1, server, 0))
    with torch.no_grad():
        for p in client.model.parameters():
            p.add_(0.5)  # every weight moves by 0.5 from the global model
    x, y = torch.randn(4, 1, 8, 8), torch.tensor([0, 1, 2, 3])
    n = sum(p.numel() for p in client.model.parameters())
    expected = F.cross_entropy(client.model(x)[1], y) + 0.3 / 2 * n * 0.25
    torch.testing.assert_close(method.local_loss(Step(1, 0), client, x, y), expected)


def test_an_exploding_but_finite_loss_fails_the_run(data_dir: Path, tmp_path: Path) -> None:
    """lr = 1e6 gives CE losses of ~1e26 in round 1: finite, yet divergence — the run fails, writes
    failure.json and no metrics.json (training.divergence_factor)."""
    cfg = small_config(training={"rounds": 2, "optimizer": {"lr": 1e6}})
    with pytest.raises(Diverged, match=r"round 1 \(client 0\).*exceeds 1000 x the first step"):
        run_experiment(RunRequest(cfg, tmp_path / "run", data_dir))
    assert (tmp_path / "run" / "failure.json").exists() and not (tmp_path / "run" / "metrics.json").exists()
    calm = small_config(training={"rounds": 2, "divergence_factor": None, "optimizer": {"lr": 1e6}})
    run_experiment(RunRequest(calm, tmp_path / "unchecked", data_dir))  # the check can be switched off


@register_algorithm("test-inf-params")
class _InfParameters(FedAvg):
    """FedAvg whose aggregation leaves an infinite weight in round 2 while every loss stays finite."""

    def aggregate(self, round_index, server, updates):  # type: ignore[no-untyped-def]
        super().aggregate(round_index, server, updates)
        if round_index == 2:
            with torch.no_grad():
                next(server.model.parameters()).view(-1)[0] = float("inf")
        return {}


def test_non_finite_parameters_fail_the_run(data_dir: Path) -> None:
    with pytest.raises(Diverged, match=r"round 2 \(client server\): its parameters became NaN or inf"):
        run_federation(small_config(algorithm={"name": "test-inf-params"}), data_dir)


def test_a_reused_out_folder_never_mixes_two_runs_files(data_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    run_experiment(RunRequest(small_config(training={"rounds": 1}), out, data_dir))
    with pytest.raises(Diverged):
        run_experiment(RunRequest(small_config(algorithm={"name": "test-nan"}), out, data_dir))
    assert sorted(p.name for p in out.iterdir()) == ["failure.json"]


def test_record_files_respect_the_umask(data_dir: Path, tmp_path: Path) -> None:
    import os

    old = os.umask(0o022)
    try:
        run_experiment(RunRequest(small_config(training={"rounds": 1}), tmp_path / "run", data_dir))
    finally:
        os.umask(old)
    assert {oct(p.stat().st_mode & 0o777) for p in (tmp_path / "run").iterdir()} == {"0o644"}


def test_parallel_runs_into_a_new_store_lose_nothing_and_sync_logs_what_mlflow_lacks(data_dir: Path,
                                                                                      tmp_path: Path) -> None:
    """Four `bench run` processes at once against a store that does not exist yet: four FINISHED
    runs. Runs recorded without MLflow are logged by `bench mlflow sync`, once."""
    import os
    import subprocess
    import sys

    import mlflow

    config = Path(__file__).resolve().parents[1] / "examples" / "fedavg_digits.yaml"
    uri = f"sqlite:///{tmp_path / 'fresh' / 'mlflow.db'}"
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri}
    (tmp_path / "fresh").mkdir()
    procs = [subprocess.Popen([sys.executable, "-m", "bench.cli", "run", str(config), "--no-progress", "--data-dir",
                               str(data_dir), "-S", "training.rounds=1", "-S", f"seed={s}", "-S",
                               "tracking.experiment=par", "--out", str(tmp_path / f"r{s}")], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for s in range(4)]
    outcomes = [(p.wait(), p.stderr.read()) for p in procs]  # type: ignore[union-attr]
    assert all(code == 0 for code, _ in outcomes), outcomes
    mlflow.set_tracking_uri(uri)
    runs = mlflow.search_runs(experiment_names=["par"], output_format="list")
    assert sorted((r.data.tags["seed"], r.info.status) for r in runs) == [(str(s), "FINISHED") for s in range(4)]

    for s in (7, 8):
        run_experiment(RunRequest(small_config(seed=s, training={"rounds": 1},
                                               tracking={"mlflow": True, "experiment": "par"}),
                                  tmp_path / "quiet" / f"r{s}", data_dir), mlflow=False)
    sync = [sys.executable, "-m", "bench.cli", "mlflow", "sync", str(tmp_path)]
    first = subprocess.run(sync, env=env, capture_output=True, text=True, check=True)
    assert "6 finished or failed runs found, 2 logged" in first.stdout
    again = subprocess.run(sync, env=env, capture_output=True, text=True, check=True)
    assert "0 logged" in again.stdout
    assert len(mlflow.search_runs(experiment_names=["par"], output_format="list")) == 6


def test_run_many_reports_every_round_and_every_run_in_this_process(data_dir: Path, tmp_path: Path) -> None:
    from bench.runner.parallel import run_many

    requests = [RunRequest(small_config(seed=s, training={"rounds": 2}), tmp_path / f"s{s}", data_dir) for s in (0, 1)]
    for jobs in (1, 2):
        rounds: list[tuple[int, int]] = []
        ended: list[int] = []
        run_many(requests, jobs, lambda i, t: rounds.append((i, t)), lambda i, outcome: ended.append(i))
        assert sorted(rounds) == [(0, 1), (0, 2), (1, 1), (1, 2)] and ended == [0, 1]


@pytest.mark.parametrize("name", ["fedavg", "fedsac", "fedakd", "cffl", "cgsv", "fedave"])
def test_a_method_that_averages_its_clients_models_refuses_other_architectures(name: str, data_dir: Path) -> None:
    """The FedAvg family, FedSAC's submodels, FedAKD's global model and the rewarded methods' uploads are
    combined entry by entry, so clients drawn from ``model.candidates`` are refused in one line before training."""
    with pytest.raises(BenchError, match=f"^{name} averages parameters, so every client needs the architecture "
                                         "'cnn'; drop model.candidates$"):
        run_federation(small_config(model={"name": "cnn", "candidates": ["cnn", "mlp"]}, algorithm={"name": name}),
                       data_dir)
