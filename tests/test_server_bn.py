"""The BatchNorm rule of the server-distillation methods (bench/algorithms/server_bn.py): the pooled statistics by hand,
the estimate as torch's update_bn makes it, and each reading in every method that has the rule (one mechanism)."""
from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
from torch import nn

from bench.engine.batchnorm import estimate_statistics, pooled_statistics, running_statistics
from bench.runner.federation import run_federation, sample_clients
from tests.conftest import small_config


def bn_config(rounds: int = 1, **algorithm: Any):  # type: ignore[no-untyped-def]
    """Digits at the DaFKD proxy's scale (the BatchNorm MTLResNet): 6 clients, 3 a round, 3 local steps."""
    defaults = {"feddf": {"distill_steps": 2}, "fedftg": {"iterations": 1, "student_steps": 2},
                "fedgen": {"generator_epochs": 1, "teacher_iters": 1},
                "dafkd": {"generator_width": 8, "distill_batches": 2, "distill_epochs": 1, "skip_first_distill": False}}
    return small_config(
        training={"rounds": rounds, "local_epochs": None, "local_steps": 3, "batch_size": 16},
        partition={"scheme": "dafkd", "alpha": 0.5, "num_clients": 6, "min_size": 20, "local_test_fraction": 0.0},
        participation={"fraction": 0.5}, dataset={"name": "digits", "normalize": "half"},
        model={"name": "dafkd_resnet11", "kwargs": {"width": 4, "blocks": [1, 1, 1]}},
        evaluation={"local_models": False}, public={"size": 32, "source": "overlap"},
        algorithm={**defaults[algorithm["name"]], **algorithm})


def test_pooled_statistics_are_those_of_the_pooled_data() -> None:
    """μ = Σ n_k μ_k / N and σ² = Σ n_k (σ_k² + (μ_k − μ)²) / N: with each holder's population mean and variance,
    exactly the mean and population variance of all their samples together (per channel)."""
    gen = torch.Generator().manual_seed(0)
    parts = [torch.randn(n, 3, generator=gen) * s + m for n, s, m in ((5, 1.0, 0.0), (12, 2.0, 3.0), (7, 0.5, -1.0))]
    stats = [{"bn.running_mean": p.mean(0), "bn.running_var": p.var(0, unbiased=False)} for p in parts]
    pooled = pooled_statistics(stats, [len(p) for p in parts])
    everything = torch.cat(parts)
    assert torch.allclose(pooled["bn.running_mean"], everything.mean(0), atol=1e-6)
    assert torch.allclose(pooled["bn.running_var"], everything.var(0, unbiased=False), atol=1e-5)
    naive = sum(len(p) * s["bn.running_var"] for p, s in zip(parts, stats)) / len(everything)
    assert not torch.allclose(pooled["bn.running_var"], naive)  # the spread between the means counts


def test_the_estimate_is_the_mean_of_the_batch_statistics_and_leaves_the_model() -> None:
    """update_bn's estimate: per layer the mean over batches of the batch means and unbiased batch variances."""
    model = nn.Sequential(nn.BatchNorm1d(2))
    before = running_statistics(model)
    batches = [torch.tensor([[0.0, 1.0], [2.0, 5.0]]), torch.tensor([[4.0, 1.0], [6.0, 3.0], [8.0, 2.0]])]
    estimate = estimate_statistics(model, batches)
    assert torch.allclose(estimate["0.running_mean"], torch.tensor([(1.0 + 6.0) / 2, (3.0 + 2.0) / 2]))
    assert torch.allclose(estimate["0.running_var"], torch.tensor([(2.0 + 4.0) / 2, (8.0 + 1.0) / 2]))
    assert all(torch.equal(v, before[k]) for k, v in running_statistics(model).items())


def pooled_on_clients(result: Any, round_index: int) -> dict[str, torch.Tensor]:
    """The ``clients`` reading recomputed: the round's clients' estimates on the final model, pooled by count."""
    ctx, model = result.state.algorithm.ctx, result.state.server.model
    estimates, counts = [], []
    for cid in sample_clients(result.config, round_index):
        data = result.state.clients[cid].data
        indices = list(ctx.shuffled_pass(data.num_samples, "bn-statistics", cid, round_index))
        estimates.append(estimate_statistics(model, [data.x[i] for i in indices]))
        counts.append(sum(len(i) for i in indices))
    return pooled_statistics(estimates, counts)


@pytest.mark.parametrize("name", ["feddf", "fedftg", "fedgen", "dafkd"])
def test_every_server_distillation_method_carries_the_rules_statistics(name: str) -> None:
    """One mechanism for FedDF, FedFTG, FedGen and DaFKD. ``clients``: after the round the global model's running
    statistics are the round's clients' estimates on their training data pooled by sample count, and its parameters
    are the ones the server's work left (the same as ``distilled``). ``averaged``: ŵ's buffers, the average of the
    uploads', the parameters again the same."""
    runs = {rule: run_federation(bn_config(name=name, student_bn_stats=rule))
            for rule in ("distilled", "clients", "averaged")}
    models = {rule: run.state.server.model for rule, run in runs.items()}
    for rule in ("clients", "averaged"):
        for (key, p), (_, q) in zip(models["distilled"].named_parameters(), models[rule].named_parameters()):
            assert torch.equal(p, q), (rule, key)
    estimated = running_statistics(models["clients"])
    assert estimated.keys() == pooled_on_clients(runs["clients"], 1).keys()
    for key, value in pooled_on_clients(runs["clients"], 1).items():
        assert torch.allclose(estimated[key], value, atol=1e-6), key
    distilled = running_statistics(models["distilled"])
    assert not all(torch.allclose(distilled[k], v) for k, v in estimated.items())
    algorithm, server = runs["averaged"].state.algorithm, runs["averaged"].state.server
    uploads = [runs["averaged"].state.clients[c].model.state_dict() for c in sample_clients(bn_config(name=name), 1)]
    sizes = [runs["averaged"].state.clients[c].data.num_samples for c in sample_clients(bn_config(name=name), 1)]
    for key, value in running_statistics(server.model).items():
        expected = sum(n * u[key] for n, u in zip(sizes, uploads)) / sum(sizes)
        assert torch.allclose(value, expected, atol=1e-6), key
    assert algorithm.params.student_bn_stats == "averaged"


def test_test_set_passes_move_the_statistics_towards_the_test_sets() -> None:
    """``test`` (the released DaFKD code, §1.7.17; test-data leakage): the distilled model's statistics after
    train-mode forwards of the test set's full batches in order; its parameters are the distilled ones. Not in a
    round without distillation."""
    plain = run_federation(bn_config(rounds=2, name="dafkd", skip_first_distill=True))
    leaked = run_federation(bn_config(rounds=2, name="dafkd", skip_first_distill=True, student_bn_stats="test"))
    expected = copy.deepcopy(plain.state.server.model).train()
    x = plain.state.algorithm.ctx.test_x
    with torch.no_grad():
        for start in range(0, len(x) - 16 + 1, 16):
            expected(x[start:start + 16])
    for key, value in leaked.state.server.model.state_dict().items():
        assert torch.equal(value, expected.state_dict()[key]), key
    assert plain.curves[0]["global_acc"] == leaked.curves[0]["global_acc"]  # round 1: no distillation, no passes
    assert plain.curves[1]["global_acc"] != leaked.curves[1]["global_acc"]


def test_a_clients_estimate_leaves_its_own_model_as_it_was() -> None:
    """``clients``: the client estimates the statistics of the model it was sent on a copy; its own model's parameters
    and running statistics stay as they were."""
    from bench.algorithms.feddf import FedDF, FedDFParams
    from bench.engine.context import Context
    from bench.engine.messages import ModelBroadcast
    from bench.engine.state import Client, ClientData, NoState

    class BatchNormNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bn, self.fc = nn.BatchNorm1d(2), nn.Linear(2, 2)

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            h = self.bn(x.flatten(1))
            return h, self.fc(h)

    ctx = Context(small_config(training={"batch_size": 4}), (1, 1, 2), 2, torch.device("cpu"))
    x = torch.randn(8, 1, 1, 2, generator=torch.Generator().manual_seed(0)) * 3 + 1
    own, sent = BatchNormNet(), BatchNormNet()
    with torch.no_grad():
        for p in sent.parameters():
            p.add_(1.0)
    before = copy.deepcopy(own.state_dict())
    client = Client(0, ClientData(x, torch.zeros(8, dtype=torch.long), x, torch.zeros(8, dtype=torch.long)), own,
                    NoState())
    algo = FedDF(FedDFParams(student_bn_stats="clients"), ctx)
    answer, _ = algo.client_statistics(1, client, ModelBroadcast(sent.state_dict(), None))
    assert answer.num_samples == 8 and not torch.equal(answer.statistics["bn.running_mean"], before["bn.running_mean"])
    assert all(torch.equal(v, before[k]) for k, v in own.state_dict().items())


@pytest.mark.parametrize("rule", ["distilled", "averaged", "test"])
def test_a_rule_that_sets_one_global_models_statistics_refuses_one_model_per_architecture(rule: str) -> None:
    """With ``model.candidates`` the server holds no single global model: ``distilled`` leaves each as it is and
    runs; a rule that sets one model's statistics stops with one line naming the fix."""
    from typing import cast

    from bench.algorithms.feddf import FedDF, FedDFParams
    from bench.engine.state import NoState, Server
    from bench.errors import BenchError

    algo = FedDF(FedDFParams(student_bn_stats=rule), cast(Any, None))
    setattr(algo, "aggregate", lambda round_index, server, updates: {"distill_loss": 0.5})  # the method's own round
    server: Server[Any] = Server(None, NoState())
    if rule == "distilled":
        assert algo.aggregate_with_rule(1, server, []) == {"distill_loss": 0.5}
    else:
        with pytest.raises(BenchError, match=f"student_bn_stats: {rule} sets the statistics of one global model.*"
                                             "set student_bn_stats: distilled"):
            algo.aggregate_with_rule(1, server, [])


@pytest.mark.parametrize("weighting", ["samples", "uniform"])
def test_averaged_restores_the_uploads_buffers_averaged_with_the_methods_weights(weighting: str) -> None:
    """``averaged``: after the server's work the global model's BatchNorm buffers are the uploads' averaged with the
    method's aggregation weights (n_k, or 1 each under ``weighting: uniform``); its parameters stay as the server's
    work left them. By hand: running means 0 and 4 from clients of 1 and 3 samples give 3 (samples) or 2 (uniform)."""
    from typing import cast

    from bench.algorithms.feddf import FedDF, FedDFParams
    from bench.engine.messages import Update
    from bench.engine.state import NoState, Server

    algo = FedDF(FedDFParams(student_bn_stats="averaged", weighting=weighting), cast(Any, None))
    setattr(algo, "aggregate", lambda round_index, server, updates: {})  # the method's own round: nothing
    model = nn.BatchNorm1d(2)
    weight = model.weight.detach().clone()
    uploads = []
    for cid, (mean, n) in enumerate([(0.0, 1), (4.0, 3)]):
        state = {k: v.clone() for k, v in model.state_dict().items()}
        state["running_mean"], state["running_var"] = torch.full((2,), mean), torch.full((2,), mean + 1.0)
        state["weight"] = torch.full((2,), 10.0)  # a parameter: not the rule's
        uploads.append(Update(cid, n, state, None))
    algo.aggregate_with_rule(1, Server(model, NoState()), uploads)
    expected = 3.0 if weighting == "samples" else 2.0
    assert torch.equal(model.running_mean, torch.full((2,), expected))
    assert torch.equal(model.running_var, torch.full((2,), expected + 1.0))
    assert torch.equal(model.weight.detach(), weight)
