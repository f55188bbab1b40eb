"""FedGen and FedMD (pipelines/fedhkd/NOTES.md §4): objectives by hand, schedules, round 1, whole runs."""
from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from bench.algorithms.fedgen import FedGen, diversity_loss, kd_weight, label_weights, named_share, teacher_loss
from bench.algorithms.fedmd import FedMDParams, code_distillation_loss, distillation_loss
from bench.engine.context import Context
from bench.engine.loop import Step
from bench.runner.federation import run_federation
from bench.errors import BenchError
from bench.models import build_model
from bench.models.generators import EmbeddingFeatureGenerator, FeatureGenerator
from tests.conftest import small_config

FEDHKD_PARTITION = {"scheme": "fedhkd", "alpha": 0.5, "local_test_fraction": 0.0}  # leaves images for a public set


def _state_equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


# -- FedGen ---------------------------------------------------------------------------------------

def test_label_weights_and_qualified_labels() -> None:
    counts = torch.tensor([[1.0, 3.0, 1.0], [2.0, 1.0, 1.0]])  # 2 users x 3 labels, counts start at 1
    weights, qualified = label_weights(counts)
    assert torch.allclose(weights, torch.tensor([[1 / 3, 2 / 3], [3 / 4, 1 / 4], [1 / 2, 1 / 2]]))
    assert qualified.tolist() == [0, 1]  # label 2 was seen by no user


def test_teacher_loss_weights_each_users_ce_by_its_label_share() -> None:
    head = nn.Linear(2, 3)
    states = [{"weight": torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]), "bias": torch.zeros(3)},
              {"weight": torch.tensor([[0.0, 2.0], [1.0, 0.0], [0.0, 0.0]]), "bias": torch.tensor([0.0, 0.0, 1.0])}]
    latents, y = torch.tensor([[1.0, 2.0], [0.5, -1.0]]), torch.tensor([2, 0])
    weights = torch.tensor([[0.25, 0.75], [0.5, 0.5], [0.9, 0.1]])
    expected = 0.0
    for u, s in enumerate(states):
        for b in range(2):
            z = s["weight"] @ latents[b] + s["bias"]
            ce = -(z[y[b]] - torch.logsumexp(z, 0))
            expected += weights[y[b], u] * ce / 2
    assert torch.allclose(teacher_loss(head, states, latents, y, weights), expected)


def test_diversity_loss_by_hand() -> None:
    noise = torch.tensor([[0.0, 1.0], [1.0, 1.0]])
    latents = torch.tensor([[1.0, 2.0, 3.0], [1.0, 0.0, 6.0]])
    # off-diagonal pairs: mean (ε−ε')² = 0.5, mean |h−h'| = (0 + 2 + 3)/3; diagonal pairs are 0
    expected = math.exp(-(2 * 0.5 * 5 / 3) / 4)
    assert diversity_loss(noise, latents).item() == pytest.approx(expected)


def test_kd_weight_schedule() -> None:
    assert kd_weight(10.0, 0.98, 1) == 10.0  # glob_iter = 0: FedGen's 0-indexed round
    assert kd_weight(10.0, 0.98, 2) == pytest.approx(9.8)
    assert kd_weight(10.0, 0.98, 3) == pytest.approx(9.604)
    assert kd_weight(10.0, 0.98, 50) == pytest.approx(10 * 0.98 ** 49)
    assert kd_weight(10.0, 0.98, 1000) == 1e-4


def test_fedgen_resident_parameters_are_model_plus_generator(data_dir: Path) -> None:
    result = run_federation(small_config(algorithm={"name": "fedgen"}, training={"rounds": 1}), data_dir)
    algorithm, model = result.state.algorithm, result.state.server.model
    generator = build_model("fedgen_generator", (model.feature_dim,), 10)
    count = sum(p.numel() for p in model.parameters()) + sum(p.numel() for p in generator.parameters())
    assert algorithm.resident_parameters(model) == count
    assert sum(p.numel() for p in generator.parameters()) == (64 + 10) * 512 + 512 + 2 * 512 + 512 * 64 + 64


def test_named_share_is_the_share_of_rows_whose_argmax_is_the_label() -> None:
    teacher = torch.tensor([[0.7, 0.2, 0.1], [0.1, 0.3, 0.6], [0.5, 0.4, 0.1], [0.2, 0.2, 0.6]])
    assert named_share(teacher, torch.tensor([0, 2, 0, 1])) == 0.75  # rows 1-3 named, row 4 not


@pytest.mark.parametrize("generator,cls,name", [("fedgen", FeatureGenerator, "fedgen_generator"),
                                                ("embed", EmbeddingFeatureGenerator, "embed_feature_generator")])
def test_fedgen_generator_is_the_named_one_sized_by_its_params_from_the_runs_generator_stream(
        generator: str, cls: type, name: str) -> None:
    """``generator`` picks the model, ``noise_dim`` and ``hidden`` size it, and its weights come from the stream
    (run seed, "init", "generator")."""
    cfg = small_config(algorithm={"name": "fedgen", "generator": generator, "noise_dim": 8, "hidden": 16}, seed=3)
    fedgen = FedGen(FedGen.Params.model_validate(cfg.algorithm.params), Context(cfg, (1, 8, 8), 10, torch.device("cpu")))
    server = fedgen.init_server()
    built, d = server.state.generator, server.model.feature_dim
    assert type(built) is cls
    first = next(m for m in built.modules() if isinstance(m, nn.Linear))
    assert (first.in_features, first.out_features) == ((8 + 10, 16) if generator == "fedgen" else (8, 16))
    same = build_model(name, (d,), 10, seed=3, key=("init", "generator"), noise_dim=8, hidden=16)
    other = build_model(name, (d,), 10, seed=0, key=("init", "generator"), noise_dim=8, hidden=16)
    assert _state_equal(built.state_dict(), same.state_dict())
    assert not _state_equal(built.state_dict(), other.state_dict())


# -- FedMD ----------------------------------------------------------------------------------------

def test_distillation_loss_by_hand() -> None:
    logits = torch.tensor([[1.0, 0.0, -1.0], [0.5, 0.5, 2.0]])
    consensus = torch.tensor([[0.7, 0.2, 0.1], [0.1, 0.3, 0.6]])
    q = torch.softmax(logits / 0.5, dim=1)
    kl = (consensus * (consensus.log() - q.log())).sum() / 2  # KL(C ‖ Q), batch mean
    assert torch.allclose(distillation_loss(logits, consensus, 0.5), kl)
    code = -(consensus * (consensus.log() - q)).mean()  # −KLDivLoss()(Q, C) on probabilities
    assert torch.allclose(code_distillation_loss(logits, consensus, 0.5), code)


def test_fedmd_needs_public_data(data_dir: Path) -> None:
    with pytest.raises(BenchError, match="public.size"):
        run_federation(small_config(algorithm={"name": "fedmd"}, partition=FEDHKD_PARTITION), data_dir)


def test_fedmd_consensus_and_public_batch_matching(data_dir: Path) -> None:
    cfg = small_config(algorithm={"name": "fedmd"}, partition=FEDHKD_PARTITION, public={"size": 20},
                       training={"rounds": 1, "batch_size": 4, "drop_last": True})
    result = run_federation(cfg, data_dir)
    algorithm, clients = result.state.algorithm, result.state.clients
    public_x = algorithm.ctx.public_x
    consensus = result.state.server.state.consensus
    soft = []
    for c in clients:
        c.model.eval()
        soft.append(torch.softmax(c.model(public_x)[1] / 0.5, dim=1))
    assert torch.allclose(consensus, torch.stack(soft).mean(0), atol=1e-6)

    client = clients[0]  # 14 samples: 3 private batches of 4 per epoch; 5 public batches
    x, y = client.data.x[:4], client.data.y[:4]
    client.state.consensus = consensus
    step = Step(round=2, index=4)  # second batch of the second epoch -> public batch 1
    ce = F.cross_entropy(client.model(x)[1], y)
    kl = distillation_loss(client.model(public_x[4:8])[1], consensus[4:8], 0.5)
    assert torch.allclose(algorithm.local_loss(step, client, x, y), ce + 0.05 * kl)
    # a public set of 6: with drop_last one public batch of 4, and the partial second one is not distilled on
    algorithm.ctx.public_x = public_x[:6]
    assert torch.equal(algorithm.local_loss(Step(round=2, index=1), client, x, y), ce)


# -- both -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["fedgen", "fedmd"])
def test_round_one_is_cross_entropy_only(data_dir: Path, name: str) -> None:
    """Round 1 of either method trains exactly as FedAvg; round 2 does not."""
    common = {"partition": FEDHKD_PARTITION, "public": {"size": 50},
              "training": {"rounds": 1, "optimizer": {"name": "adam", "lr": 0.001}}}
    fedavg = run_federation(small_config(**common), data_dir)
    method = run_federation(small_config(algorithm={"name": name}, **common), data_dir)
    assert _state_equal(fedavg.state.server.model.state_dict(), method.state.server.model.state_dict())
    two = {**common, "training": {**common["training"], "rounds": 2}}
    fedavg = run_federation(small_config(**two), data_dir)
    method = run_federation(small_config(algorithm={"name": name}, **two), data_dir)
    assert not _state_equal(fedavg.state.server.model.state_dict(), method.state.server.model.state_dict())


@pytest.mark.parametrize("name,sections", [
    ("fedgen", {"partition": {"scheme": "dirichlet", "alpha": 0.5},
                "training": {"optimizer": {"name": "adam", "lr": 0.001}}}),
    ("fedmd", {"partition": FEDHKD_PARTITION, "public": {"size": 50},
               "training": {"optimizer": {"name": "adam", "lr": 0.003}, "local_epochs": 3}}),
])
def test_three_round_run_learns_and_is_reproducible(data_dir: Path, name: str, sections: dict) -> None:
    cfg = small_config(algorithm={"name": name}, **sections)
    first, second = run_federation(cfg, data_dir), run_federation(cfg, data_dir)
    assert first.curves[-1]["global_acc"] > 0.35  # chance is 0.1
    assert first.curves == second.curves
    assert _state_equal(first.state.server.model.state_dict(), second.state.server.model.state_dict())
    for key, value in vars(first.state.server.state).items():
        if isinstance(value, nn.Module):
            assert _state_equal(value.state_dict(), getattr(second.state.server.state, key).state_dict())
