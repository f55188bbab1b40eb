"""FedGen and FedMD (pipelines/fedhkd/NOTES.md §4): objectives by hand, schedules, round 1, whole runs."""
from __future__ import annotations

import copy
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
from bench.engine.messages import Update
from bench.runner.federation import run_federation
from bench.engine.state import Client, ClientData, Server
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
    # qualified is per label (max over users), not per user: only label 3 was seen, by user 0
    assert label_weights(torch.tensor([[1.0, 1.0, 1.0, 5.0], [1.0, 1.0, 1.0, 1.0]]))[1].tolist() == [3]


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


def _fedgen(local_epochs: int = 1, **params: object) -> tuple[FedGen, Server]:
    cfg = small_config(algorithm={"name": "fedgen", **params}, training={"batch_size": 8, "local_epochs": local_epochs})
    fedgen = FedGen(FedGen.Params.model_validate(cfg.algorithm.params), Context(cfg, (1, 8, 8), 10, torch.device("cpu")))
    return fedgen, fedgen.init_server()


def _digits_client(fedgen: FedGen, server: Server, cid: int, n: int) -> Client:
    gen = torch.Generator().manual_seed(cid)
    x, y = torch.rand(n, 1, 8, 8, generator=gen), torch.arange(n) % 10
    return Client(cid, ClientData(x, y, x, y), fedgen.init_client_model(cid, server), fedgen.init_client_state(cid))


class LabelLatents(nn.Module):
    """A stand-in generator: latent = a fixed row per label (the noise ignored), recording what it is asked for."""

    noise_dim = 3

    def __init__(self, feature_dim: int) -> None:
        super().__init__()
        self.table = torch.randn(10, feature_dim, generator=torch.Generator().manual_seed(7))
        self.calls: list[tuple[torch.Tensor, torch.Tensor]] = []

    def forward(self, noise: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        self.calls.append((noise, y))
        return self.table[y]


def test_fedgen_client_objective_from_round_two_by_hand() -> None:
    """Round t = 3, batch B = 8, B_gen = 4, α = 2, β = 3, decay 1/2: α_t = 2/4, β_t = 3/4, and the objective is
    CE(x, y) + (4/8)·α_t·CE(G_ω(G_w(ε̂, ŷ)), ŷ) + β_t·KL(softmax(G_ω(G_w(ε, y))) ‖ softmax(logits(x))); the batch's
    labels are counted; every draw (ε, ŷ, ε̂, each U(0,1)^noise_dim or U{0..9}) comes from the step's stream."""
    fedgen, server = _fedgen(alpha=2.0, beta=3.0, kd_decay=0.5, gen_batch_size=4)
    client = _digits_client(fedgen, server, 0, 8)
    client.model.eval()
    generator = LabelLatents(client.model.feature_dim)
    client.state.generator, client.state.label_counts = generator, torch.ones(10)
    x, y = client.data.x, torch.tensor([0, 1, 1, 2, 3, 3, 3, 9])
    global_rng = torch.random.get_rng_state()
    loss = fedgen.local_loss(Step(round=3, index=0, rng=torch.Generator().manual_seed(5)), client, x, y)
    assert torch.equal(torch.random.get_rng_state(), global_rng)

    (noise, labels), (gen_noise, gen_labels) = generator.calls
    assert torch.equal(labels, y) and noise.shape == (8, 3) and gen_noise.shape == (4, 3) and gen_labels.shape == (4,)
    assert 0 <= float(torch.cat([noise, gen_noise]).min()) and float(torch.cat([noise, gen_noise]).max()) < 1
    assert 0 <= int(gen_labels.min()) and int(gen_labels.max()) < 10
    head, logits = client.model.classifier, client.model(x)[1]
    with torch.no_grad():
        target = F.softmax(head(generator.table[y]), dim=1)
    kl = (target * (target.log() - F.log_softmax(logits, dim=1))).sum() / 8
    gen_ce = F.cross_entropy(head(generator.table[gen_labels]), gen_labels)
    expected = F.cross_entropy(logits, y) + 0.5 * 0.5 * gen_ce + 0.75 * kl
    torch.testing.assert_close(loss, expected)
    assert client.state.label_counts.tolist() == [2, 3, 2, 4, 1, 1, 1, 1, 1, 2]  # 1 + the labels 0, 1, 1, 2, 3, 3, 3, 9


def test_fedgen_client_uploads_one_plus_the_label_counts_of_every_batch_it_trained_on() -> None:
    fedgen, server = _fedgen(local_epochs=2)
    client = _digits_client(fedgen, server, 0, 12)  # labels 0..9, 0, 1; two epochs of batches of 8
    fedgen.receive_payload(client, fedgen.broadcast_payload(1, server, 0))
    update, _ = fedgen.local_update(1, client)
    assert update.payload.tolist() == [5, 5, 3, 3, 3, 3, 3, 3, 3, 3]
    assert client.state.generator is None and client.state.label_counts is None


def test_fedgen_server_step_minimises_the_weighted_teacher_and_diversity_losses_on_the_uploaded_heads() -> None:
    """Adam with ``generator_weight_decay``; in round t: lr = 3e-4·0.98^(t−1); ``generator_epochs × teacher_iters`` = 2·2 steps, each on labels drawn from the
    qualified ones (max_u c_{u,y} > 1: 0, 1, 4) with fresh U(0,1) noise, whose gradient is that of
    2·Σ_u mean_b[w_{y_b,u}·CE(G_ω^u(h_b), y_b)] + 3·L_div with the clients' uploaded heads G_ω^u (read, not trained);
    the fidelity is the share of the last step's latents whose label Σ_u w_{y,u}·softmax(G_ω^u(h)) names."""
    fedgen, server = _fedgen(generator_epochs=2, teacher_iters=2, server_batch_size=6, teacher_weight=2.0,
                             diversity_weight=3.0, noise_dim=4, hidden=8, generator_weight_decay=0.05)
    generator = server.state.generator
    assert type(server.state.optimizer) is torch.optim.Adam  # one Adam for the whole run, its state kept
    assert server.state.optimizer.param_groups[0]["weight_decay"] == 0.05
    counts = torch.ones(2, 10)
    counts[0, 0], counts[1, 1], counts[1, 4] = 3.0, 2.0, 5.0
    heads = []
    updates = []
    for cid in range(2):
        model = _digits_client(fedgen, server, cid, 8).model
        with torch.no_grad():
            for p in model.classifier.parameters():
                p.normal_(generator=torch.Generator().manual_seed(10 + cid))
        heads.append({k: v.clone() for k, v in model.classifier.state_dict().items()})
        updates.append(Update(cid, 8, model.state_dict(), counts[cid]))
    weights = (counts / counts.sum(0)).T  # w_{y,u}

    steps: list[tuple[dict[str, torch.Tensor], torch.Tensor, torch.Tensor]] = []  # (state, ε, y) of each forward
    outputs: list[torch.Tensor] = []
    grads: list[list[torch.Tensor | None]] = []
    generator.register_forward_pre_hook(
        lambda m, args: steps.append(({k: v.clone() for k, v in m.state_dict().items()}, args[0].clone(), args[1].clone())))
    generator.register_forward_hook(lambda m, args, out: outputs.append(out.detach().clone()))
    server.state.optimizer.register_step_pre_hook(
        lambda opt, *_: grads.append([None if p.grad is None else p.grad.clone() for p in generator.parameters()]))
    fresh = copy.deepcopy(generator)
    global_rng = torch.random.get_rng_state()
    first_noise = []
    for t in (2, 3):
        steps.clear(), outputs.clear(), grads.clear()
        metrics = fedgen.aggregate(t, server, updates)
        assert torch.equal(torch.random.get_rng_state(), global_rng)
        assert server.state.optimizer.param_groups[0]["lr"] == pytest.approx(3e-4 * 0.98 ** (t - 1))
        assert len(steps) == 4 and len(grads) == 4
        for (state, eps, y), grad in zip(steps, grads):
            assert set(y.tolist()) <= {0, 1, 4} and eps.shape == (6, 4) and 0 <= float(eps.min()) <= float(eps.max()) < 1
            fresh.load_state_dict(state)
            fresh.train()
            latents = fresh(eps, y)
            teacher = sum((F.cross_entropy(latents @ h["weight"].T + h["bias"], y, reduction="none") * weights[y, u]).mean()
                          for u, h in enumerate(heads))
            loss = 2.0 * teacher + 3.0 * diversity_loss(eps, latents)
            for g, e in zip(grad, torch.autograd.grad(loss, list(fresh.parameters()))):
                assert g is not None
                torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-7)
        (_, _, y), latents = steps[-1], outputs[-1]
        mixture = sum(weights[y, u, None] * F.softmax(latents @ h["weight"].T + h["bias"], dim=1)
                      for u, h in enumerate(heads))
        assert metrics["gen_fidelity"] == pytest.approx((mixture.argmax(1) == y).double().mean().item())
        assert metrics["gen_chance"] == pytest.approx(0.1)
        first_noise.append(steps[0][1])
    assert not torch.equal(*first_noise)  # each round draws its own noise
    for update, head in zip(updates, heads):  # the uploaded heads are read, not trained
        assert all(torch.equal(update.state[f"classifier.{k}"], v) for k, v in head.items())


class _FeaturesOnly(nn.Module):
    feature_dim = 4


class _HeadOnly(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.classifier = nn.Linear(4, 10)


@pytest.mark.parametrize("model", [_FeaturesOnly(), _HeadOnly()], ids=["no head", "no feature_dim"])
def test_fedgen_refuses_a_model_without_a_classifier_head_or_feature_dim(model: nn.Module) -> None:
    fedgen, _ = _fedgen()
    with pytest.raises(BenchError, match="fedgen needs a model with a `classifier` head and a `feature_dim`; 'cnn'"):
        fedgen.init_server_state(model)


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
