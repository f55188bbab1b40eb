"""FedHKD (pipelines/fedhkd/NOTES.md §3, §8) and FedProto as FedHKD adapts it (§4), checked by hand."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch
from scipy.stats import norm
from torch import nn

from bench.algorithms import Algorithm, get_algorithm
from bench.algorithms.fedhkd import (KNOWLEDGE_MOVES_LOSS, FedHKD, FedHKDParams, Knowledge, classifier_distillation,
                                    dp_noise_std, gaussian_sigma_threshold, tempered_softmax)
from bench.algorithms.fedproto import Prototypes
from bench.engine.context import Context
from bench.runner.federation import run_federation
from bench.engine.knowledge import (ClassStatistics, aggregate_class_statistics, feature_alignment,
                                    last_writer_class_statistics)
from bench.rng import numpy_stream, torch_stream
from bench.engine.loop import Step
from bench.engine.messages import ModelBroadcast, Update
from bench.engine.state import Client, ClientData, Server
from bench.errors import BenchError
from tests.conftest import small_config

T = 0.5


class Tiny(nn.Module):
    """features = x, logits = classifier(x) with a fixed bias-free weight (hand-checkable)."""

    def __init__(self, weight: torch.Tensor) -> None:
        super().__init__()
        self.classifier = nn.Linear(weight.shape[1], weight.shape[0], bias=False)
        self.classifier.weight.data.copy_(weight)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x, self.classifier(x)


W = torch.tensor([[1.0, 0.0], [0.0, 2.0], [1.0, -1.0]])  # 3 classes, d = 2
STEP = Step(round=2, index=0)


def _algorithm(name: str = "fedhkd", num_classes: int = 3, in_dim: int = 2, config: dict[str, Any] | None = None,
               **params: Any) -> Algorithm:
    """The method with ``params``, in a small config with the ``config`` sections merged in."""
    cfg = small_config(algorithm={"name": name, **params}, **(config or {}))
    cls = get_algorithm(name)
    ctx = Context(cfg, (in_dim,), num_classes, torch.device("cpu"))
    return cls(cls.Params.model_validate(cfg.algorithm.params), ctx)


def _client(model: nn.Module, x: torch.Tensor, y: torch.Tensor, knowledge: ClassStatistics | None = None,
            name: str = "fedhkd", cid: int = 0) -> Client:
    state = Knowledge(knowledge) if name == "fedhkd" else Prototypes(knowledge)
    return Client(cid, ClientData(x, y, x[:0], y[:0]), model, state)


def _stats(features: list[list[float]], counts: list[int], soft: list[list[float]] | None = None) -> ClassStatistics:
    f = torch.tensor(features)
    q = torch.zeros(len(f), len(f)) if soft is None else torch.tensor(soft, dtype=torch.float32)
    return ClassStatistics(f, q, torch.tensor(counts))


# -- hyper-knowledge (§3.1, §3.2) ---------------------------------------------------------------

def test_hyper_knowledge_is_per_class_means_and_tempered_soft_predictions() -> None:
    x = torch.tensor([[1.0, 0.0], [3.0, 2.0], [2.0, 2.0], [0.0, 1.0], [0.0, 4.0]])
    y = torch.tensor([0, 0, 0, 0, 2])
    hkd = _algorithm(noise="none")
    k = hkd.local_knowledge(_client(Tiny(W), x, y), round_index=1)
    torch.testing.assert_close(k.features, torch.tensor([[1.5, 1.25], [0.0, 0.0], [0.0, 4.0]]))
    soft0 = sum(torch.softmax(W @ xi / T, 0) for xi in x[:4]) / 4  # mean of softmaxes, not softmax of mean
    torch.testing.assert_close(k.soft[0], soft0)
    torch.testing.assert_close(k.soft[2], torch.softmax(W @ x[4] / T, 0))
    assert k.counts.tolist() == [4, 0, 1] and not k.soft[1].any()  # class 1 not held: zeros, count 0
    # nu_mode fraction: class 2 holds 1/5 = 0.2 < ν = 0.25, so it is not shared
    k = _algorithm(noise="none", nu_mode="fraction").local_knowledge(_client(Tiny(W), x, y), 1)
    assert k.counts.tolist() == [4, 0, 0] and not k.features[2].any() and not k.soft[2].any()


def test_nu_fraction_shares_a_class_holding_exactly_nu_of_the_samples() -> None:
    """nu_mode: fraction shares class j iff N_i^j/N_i ≥ ν: a class with 1 of 4 samples (ν = 0.25) is shared."""
    x = torch.tensor([[1.0, 0.0], [3.0, 2.0], [2.0, 2.0], [0.0, 4.0]])
    y = torch.tensor([0, 0, 0, 2])
    k = _algorithm(noise="none", nu_mode="fraction").local_knowledge(_client(Tiny(W), x, y), 1)
    assert k.counts.tolist() == [3, 0, 1]
    torch.testing.assert_close(k.features[2], torch.tensor([0.0, 4.0]))
    torch.testing.assert_close(k.soft[2], torch.softmax(W @ x[3] / T, 0))


# -- differential privacy (§3.3, §8) ------------------------------------------------------------

def test_privacy_numbers_of_section_8() -> None:
    assert round(2 * norm.cdf(3) - 1, 4) == 0.9973  # ζ = 3 covers a BN output with prob. 99.73%
    assert round(gaussian_sigma_threshold(epsilon=0.5, delta=0.01), 3) == 6.215
    var = dp_noise_std(7, 3, torch.tensor(256)) ** 2
    assert round(float(var), 4) == 0.0269 and math.isclose(float(var), (6 / 256) ** 2 * 49, rel_tol=1e-6)
    torch.testing.assert_close(dp_noise_std(7, 3, torch.tensor([500, 50, 5])), torch.tensor([0.084, 0.84, 8.4]))


def test_noise_scale_per_element_on_features_only() -> None:
    d = 20_000
    x = torch.ones(48, d)
    y = torch.tensor([0] * 42 + [1] * 6)
    clean = _algorithm(in_dim=d, noise="none").local_knowledge(_client(Tiny(torch.zeros(3, d)), x, y), 1)
    paper = _algorithm(in_dim=d).local_knowledge(_client(Tiny(torch.zeros(3, d)), x, y), 1)
    noise = paper.features - clean.features
    assert abs(noise[0].std().item() - 42 / 42) < 0.03 and abs(noise[1].std().item() - 42 / 6) < 0.2
    assert noise[2].abs().sum() == 0  # class not held: nothing shared
    torch.testing.assert_close(paper.soft, clean.soft, rtol=0, atol=0)  # q̄ is not noised
    const = _algorithm(in_dim=d, noise="const").local_knowledge(_client(Tiny(torch.zeros(3, d)), x, y), 1)
    noise = const.features - clean.features
    assert torch.equal(noise[0], noise[1]) and abs(noise[0].std().item() - 2.0) < 0.05  # code: one vector, std 2


def test_dp_noise_is_drawn_from_the_clients_stream_of_the_round() -> None:
    """Eq. 7: h̃_i^j = h̄_i^j + n, n ~ N(0, (σ·2ζ/N_i^j)²) per element, drawn (class by class) from the run's
    ("dp-noise", client, round) stream, so that two clients or two rounds get independent noise; the code's
    constant noise is one draw of std noise_std from the same stream, added to every shared class."""
    x = torch.tensor([[1.0, 0.0], [3.0, 2.0], [0.0, 4.0]])
    y = torch.tensor([0, 0, 2])  # N^0 = 2, N^2 = 1: std 7·6/2 = 21 and 7·6/1 = 42; class 1 not held
    hkd = _algorithm()
    k = hkd.local_knowledge(_client(Tiny(W), x, y, cid=3), round_index=5)
    draw = torch.randn(3, 2, generator=torch_stream(hkd.ctx.seed, "dp-noise", 3, 5))
    torch.testing.assert_close(k.features[0], torch.tensor([2.0, 1.0]) + 21 * draw[0])
    torch.testing.assert_close(k.features[2], torch.tensor([0.0, 4.0]) + 42 * draw[2])
    assert not k.features[1].any() and k.counts.tolist() == [2, 0, 1]
    const = _algorithm(noise="const").local_knowledge(_client(Tiny(W), x, y, cid=3), round_index=5)
    one = 2.0 * torch.randn(1, 2, generator=torch_stream(hkd.ctx.seed, "dp-noise", 3, 5))[0]
    torch.testing.assert_close(const.features[[0, 2]], torch.tensor([[2.0, 1.0], [0.0, 4.0]]) + one)
    assert not const.features[1].any()


# -- server aggregation (§3.4, Eq. 9) -----------------------------------------------------------

def _aggregate(hkd: Algorithm, round_index: int, local: list[ClassStatistics], previous: ClassStatistics | None = None
               ) -> ClassStatistics:
    server = Server(Tiny(W), Knowledge(previous))
    state = server.model.state_dict()
    hkd.aggregate(round_index, server, [Update(i, 10, state, k) for i, k in enumerate(local)])
    return server.state.knowledge


A = _stats([[1.0, 0.0], [0.0, 0.0], [2.0, 2.0]], [1, 0, 2], [[1, 0, 0], [0, 0, 0], [0, 0, 1]])
B = _stats([[4.0, 0.0], [0.0, 2.0], [0.0, 0.0]], [3, 5, 0], [[0, 1, 0], [0, 1, 0], [0, 0, 0]])
OLD = _stats([[9.0, 9.0]] * 3, [7, 7, 7], [[1 / 3] * 3] * 3)


def test_weighted_aggregation_by_hand() -> None:
    k = _aggregate(_algorithm(), 2, [A, B], previous=OLD)  # recomputed from scratch: OLD plays no part
    torch.testing.assert_close(k.features, torch.tensor([[13 / 4, 0.0], [0.0, 2.0], [2.0, 2.0]]))
    torch.testing.assert_close(k.soft[0], torch.tensor([0.25, 0.75, 0.0]))
    assert k.counts.tolist() == [4, 5, 2]
    empty = _aggregate(_algorithm(), 2, [_stats([[1.0, 1.0]] * 3, [0, 0, 0])])
    assert not empty.present.any()  # nobody shares: 𝒦^j = ∅


def test_last_writer_aggregation_by_hand() -> None:
    k = last_writer_class_statistics([A, B], previous=OLD)
    torch.testing.assert_close(k.features, torch.tensor([[4.0, 0.0], [0.0, 2.0], [2.0, 2.0]]))
    k = last_writer_class_statistics([B, A])  # no previous: a class nobody holds stays empty
    torch.testing.assert_close(k.features, torch.tensor([[1.0, 0.0], [0.0, 2.0], [2.0, 2.0]]))
    k = last_writer_class_statistics([_stats([[5.0, 5.0], [0, 0], [0, 0]], [1, 0, 0])], previous=OLD)
    torch.testing.assert_close(k.features[1:], OLD.features[1:])  # persists across rounds
    # taken in at the round's end (hk_update: round): the order is the round's seeded permutation
    code = _algorithm(mode="code", hk_update="round")
    order = numpy_stream(code.ctx.seed, "hk-order", 4).permutation(2).tolist()
    expected = last_writer_class_statistics([[A, B][i] for i in order], previous=OLD)
    k = _aggregate(code, 4, [A, B], previous=OLD)
    torch.testing.assert_close(k.features, expected.features)
    torch.testing.assert_close(k.soft, expected.soft)


def test_last_writer_aggregation_follows_the_rounds_seeded_order_and_keeps_classes_nobody_holds() -> None:
    """A4 (code): after the round the server takes the uploads in the ("hk-order", round) permutation, each class
    from the last client holding it; a class nobody holds keeps last round's knowledge. Four clients, each class
    held by one pair of them, so that every pair's order shows."""
    pairs = [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)]  # classes 0-5; class 6: nobody
    local = []
    for i in range(4):
        held = torch.tensor([i in pair for pair in pairs] + [False])
        rows = held.unsqueeze(1)
        local.append(ClassStatistics(torch.where(rows, torch.tensor([[float(i + 1), 0.0]] * 7), 0.0),
                                     torch.where(rows, torch.full((7, 7), i / 10), 0.0), held.long() * (i + 1)))
    old = ClassStatistics(torch.full((7, 2), 9.0), torch.full((7, 7), 1 / 7), torch.full((7,), 7))
    code = _algorithm(mode="code", hk_update="round", num_classes=7)
    for round_index in (4, 5):
        position = numpy_stream(code.ctx.seed, "hk-order", round_index).permutation(4).argsort()
        last = [max(pair, key=lambda i: position[i]) for pair in pairs]
        k = _aggregate(code, round_index, local, previous=old)
        assert k.features[:, 0].tolist() == [i + 1 for i in last] + [9.0]
        assert k.counts.tolist() == [i + 1 for i in last] + [7]
        torch.testing.assert_close(k.soft[:6], torch.stack([torch.full((7,), i / 10) for i in last]))
        torch.testing.assert_close(k.soft[6], old.soft[6])


def test_client_by_client_knowledge_is_taken_in_on_receipt_and_not_again_at_the_round_end() -> None:
    """hk_update: client (§3.9): each upload overwrites the classes it holds at once (the code's dict.update), the
    others keep what the server had; the round's aggregation then leaves the knowledge as it is."""
    code = _algorithm(mode="code")
    server = Server(Tiny(W), Knowledge(OLD))
    state = server.model.state_dict()
    first, second = Update(0, 10, state, A), Update(1, 10, state, _stats([[5.0, 5.0], [0, 0], [0, 0]], [1, 0, 0]))
    code.receive(2, server, first)  # A holds classes 0 and 2
    torch.testing.assert_close(server.state.knowledge.features, torch.tensor([[1.0, 0.0], [9.0, 9.0], [2.0, 2.0]]))
    code.receive(2, server, second)  # holds class 0 only
    expected = torch.tensor([[5.0, 5.0], [9.0, 9.0], [2.0, 2.0]])
    torch.testing.assert_close(server.state.knowledge.features, expected)
    assert server.state.knowledge.counts.tolist() == [1, 7, 2]
    code.aggregate(2, server, [first, second])
    torch.testing.assert_close(server.state.knowledge.features, expected)
    assert server.state.knowledge.counts.tolist() == [1, 7, 2]


# -- local objective (§3.5, Eq. 11) -------------------------------------------------------------

H = _stats([[1.0, 0.0], [0.0, 0.0], [0.0, 1.0]], [2, 0, 3], [[0.7, 0.2, 0.1], [0.0, 0.0, 0.0], [0.1, 0.1, 0.8]])


@pytest.mark.filterwarnings("ignore:reduction. 'mean' divides")
def test_classifier_distillation_by_hand() -> None:
    classifier = Tiny(W).classifier
    p0, p2 = torch.softmax(torch.tensor([1.0, 0.0, 1.0]) / T, 0), torch.softmax(torch.tensor([0.0, 2.0, -1.0]) / T, 0)
    l2 = (torch.linalg.vector_norm(p0 - H.soft[0]) + torch.linalg.vector_norm(p2 - H.soft[2])).item()
    assert math.isclose(classifier_distillation(classifier, H, T, "l2", "classes").item(), l2 / 3, rel_tol=1e-6)
    assert math.isclose(classifier_distillation(classifier, H, T, "l2", "present").item(), l2 / 2, rel_tol=1e-6)
    kl = sum(float((q * (q / p).log()).sum()) for p, q in ((p0, H.soft[0]), (p2, H.soft[2])))
    code = nn.KLDivLoss()(torch.log(torch.stack([p0, p2])), H.soft[[0, 2]]).item()  # the released code's loss2
    got = classifier_distillation(classifier, H, T, "kl", "present").item()
    assert math.isclose(got, kl / (2 * 3), rel_tol=1e-5) and math.isclose(got, code, rel_tol=1e-5)


def test_feature_term_by_hand() -> None:
    h = torch.tensor([[1.0, 1.0], [2.0, 0.0], [0.0, 0.0]])
    y = torch.tensor([0, 1, 2])  # class 1 has no global knowledge
    assert math.isclose(feature_alignment(h, y, H, "l2").item(), (1 + 0 + 1) / 3, rel_tol=1e-6)
    assert math.isclose(feature_alignment(h, y, H, "l2", "present").item(), 1.0, rel_tol=1e-6)
    assert math.isclose(feature_alignment(h, y, H, "sq_l2").item(), 2 / 3, rel_tol=1e-6)
    target = h.clone()
    target[[0, 2]] = H.features[[0, 2]]  # the code's target: h itself where the class is missing
    code = nn.MSELoss()(h, target).item()
    assert math.isclose(feature_alignment(h, y, H, "mse").item(), code, rel_tol=1e-6)


def test_local_loss_terms_and_fedhkd_star() -> None:
    x = torch.tensor([[1.0, 1.0], [2.0, 0.0], [0.0, 0.0]])
    y = torch.tensor([0, 1, 2])
    ce = nn.functional.cross_entropy(x @ W.T, y)
    kd = classifier_distillation(Tiny(W).classifier, H, T, "l2", "classes")
    feat = feature_alignment(x, y, H, "l2")
    full = _algorithm().local_loss(STEP, _client(Tiny(W), x, y, H), x, y)
    torch.testing.assert_close(full, ce + 0.05 * kd + 0.05 * feat)
    star = _algorithm(gamma=0).local_loss(STEP, _client(Tiny(W), x, y, H), x, y)
    assert torch.equal(star, ce + 0.05 * kd)  # γ = 0 removes the feature term exactly
    torch.testing.assert_close(_algorithm(lam=0).local_loss(STEP, _client(Tiny(W), x, y, H), x, y), ce + 0.05 * feat)
    present = _algorithm(kd_norm="present", feat_norm="present").local_loss(STEP, _client(Tiny(W), x, y, H), x, y)
    torch.testing.assert_close(present, ce + 0.05 * kd * 3 / 2 + 0.05 * feat * 3 / 2)  # |J| = 2 classes, 2 samples
    assert torch.equal(_algorithm().local_loss(STEP, _client(Tiny(W), x, y, None), x, y), ce)  # round 1: plain CE


@pytest.mark.parametrize("epochs", [1, 2])
def test_client_update_trains_on_eq_11_and_reports_the_knowledge_share(epochs: int) -> None:
    """A client takes the broadcast model and knowledge, takes full-batch SGD steps on Eq. 11 (computed here by
    hand), and answers with its id, its sample count, the trained model and its hyper-knowledge after training;
    ``train_loss`` is the mean loss over the steps and ``knowledge_share`` the mean over the steps of
    (λ·term 2 + γ·term 3)/loss."""
    x = torch.tensor([[1.0, 1.0], [2.0, 0.0], [0.0, 0.0]])
    y = torch.tensor([0, 1, 2])
    hkd = _algorithm(config={"training": {"local_epochs": epochs, "optimizer": {"name": "sgd", "lr": 0.5}}})
    feat = (torch.linalg.vector_norm(x[0] - H.features[0]) + torch.linalg.vector_norm(x[2] - H.features[2])) / 3
    w, losses, shares = W.clone().requires_grad_(), [], []
    for _ in range(epochs):
        kd = sum(torch.linalg.vector_norm(torch.softmax(w @ H.features[j] / T, 0) - H.soft[j]) for j in (0, 2)) / 3
        loss = nn.functional.cross_entropy(x @ w.T, y) + 0.05 * kd + 0.05 * feat
        losses.append(loss.item())
        shares.append((0.05 * kd + 0.05 * feat).item() / loss.item())
        w = (w - 0.5 * torch.autograd.grad(loss, w)[0]).detach().requires_grad_()
    client = _client(Tiny(torch.zeros(3, 2)), x, y, cid=1)
    update, metrics = hkd.client_update(2, client, ModelBroadcast(Tiny(W).state_dict(), H))
    assert client.state.knowledge is H
    torch.testing.assert_close(client.model.classifier.weight, w.detach())
    assert metrics["train_loss"] == pytest.approx(sum(losses) / epochs, rel=1e-5)
    assert metrics["knowledge_share"] == pytest.approx(sum(shares) / epochs, rel=1e-5)
    assert (update.cid, update.num_samples) == (1, 3)
    torch.testing.assert_close(update.state["classifier.weight"], w.detach())
    after = hkd.local_knowledge(client, 2)
    torch.testing.assert_close(update.payload.features, after.features)
    torch.testing.assert_close(update.payload.soft, after.soft)


def test_naive_softmax_overflows_and_its_log_underflows_as_the_released_code() -> None:
    z = torch.tensor([[1.0, 0.5, -2.0]])
    torch.testing.assert_close(tempered_softmax(z, T, "naive"), tempered_softmax(z, T, "stable"))
    over = tempered_softmax(torch.tensor([[50.0, 0.0, 0.0]]), T, "naive")  # e^100 = inf: inf/inf, 1/inf
    assert torch.isnan(over[0, 0]) and over[0, 1:].tolist() == [0.0, 0.0]
    assert torch.isfinite(tempered_softmax(torch.tensor([[50.0, 0.0, 0.0]]), T, "stable")).all()
    # G(𝓗^0) = (0, -60, 0): e^(-120) underflows to 0, so log Q = -inf where 𝓠 > 0 and KL = inf
    far = _stats([[0.0, -30.0], [0.0, 0.0], [0.0, 0.0]], [1, 0, 0], [[0.2, 0.6, 0.2], [0] * 3, [0] * 3])
    classifier = Tiny(W).classifier
    assert torch.isinf(classifier_distillation(classifier, far, T, "kl", "present", "naive"))
    stable = classifier_distillation(classifier, far, T, "kl", "present", "stable")
    assert torch.equal(classifier_distillation(classifier, far, T, "kl", "present"), stable)  # the default
    log_p = torch.tensor([-60.0, -180.0, 0.0]) - math.log1p(math.exp(-60) + math.exp(-180))  # log Q((0, -60, 30), 0.5)
    q = far.soft[0]
    assert math.isclose(stable.item(), float((q * (q.log() - log_p)).sum()) / 3, rel_tol=1e-5)


def test_tempered_softmax_by_hand_row_by_row() -> None:
    """Q(z, T)_c = exp(z_c/T)/Σ_c' exp(z_c'/T) (Eq. 2) for each row of a batch, both ways of computing it."""
    z = T * torch.log(torch.tensor([[1.0, 3.0, 4.0], [2.0, 1.0, 1.0]]))  # exp(z/T) = those numbers
    expected = torch.tensor([[1 / 8, 3 / 8, 4 / 8], [1 / 2, 1 / 4, 1 / 4]])
    torch.testing.assert_close(tempered_softmax(z, T, "stable"), expected)
    torch.testing.assert_close(tempered_softmax(z, T, "naive"), expected)


def test_local_loss_uses_the_configured_softmax() -> None:
    """Term 2 on prototypes with G(𝓗^0)/T = (100, 0, 100): the paper's stable softmax gives a finite objective,
    the released code's naive one (``softmax: naive``) exp(100) = inf and a NaN objective, as its runs diverge."""
    big = _stats([[50.0, 0.0], [0.0, 0.0], [0.0, 0.0]], [1, 0, 0], [[0.5, 0.0, 0.5], [0] * 3, [0] * 3])
    x = torch.tensor([[1.0, 1.0], [2.0, 0.0]])
    y = torch.tensor([0, 1])
    ce = nn.functional.cross_entropy(x @ W.T, y)
    feat = torch.linalg.vector_norm(x[0] - big.features[0]) / 2  # (1/B)Σ_k, class 1 has no knowledge
    stable = _algorithm().local_loss(STEP, _client(Tiny(W), x, y, big), x, y)
    torch.testing.assert_close(stable, ce + 0.05 * feat)  # term 2 is 0: Q(𝓗^0) = (1/2, 0, 1/2) = 𝓠^0
    naive = _algorithm(softmax="naive").local_loss(STEP, _client(Tiny(W), x, y, big), x, y)
    assert torch.isnan(naive)


def test_local_knowledge_uses_the_configured_softmax() -> None:
    """q̄ of a sample with G(h)/T = (100, 0, 100): (1/2, 0, 1/2) with the paper's stable softmax, NaN with the
    released code's naive one (``softmax: naive``)."""
    x, y = torch.tensor([[50.0, 0.0]]), torch.tensor([0])
    stable = _algorithm(noise="none").local_knowledge(_client(Tiny(W), x, y), 2)
    torch.testing.assert_close(stable.soft[0], torch.tensor([0.5, 0.0, 0.5]))
    naive = _algorithm(noise="none", softmax="naive").local_knowledge(_client(Tiny(W), x, y), 2)
    assert torch.isnan(naive.soft[0, 0])


def test_knowledge_over_one_pass_of_the_shuffled_drop_last_loader() -> None:
    """hk_data: loader (§3.1 [C]): the knowledge of the samples one pass of the client's shuffled train loader visits,
    the ("hk-batches", client, round) stream's permutation cut into batches, the last partial batch dropped: 8 of 10
    samples in batches of 4. The features are powers of 2, so the means tell which two samples were left out."""
    x = torch.tensor([[2.0 ** i, 0.0] for i in range(5)] + [[0.0, 2.0 ** i] for i in range(5)])
    y = torch.tensor([0] * 5 + [2] * 5)
    hkd = _algorithm(noise="none", hk_data="loader", config={"training": {"batch_size": 4, "drop_last": True}})
    k = hkd.local_knowledge(_client(Tiny(W), x, y, cid=3), round_index=2)
    kept = torch.randperm(10, generator=torch_stream(hkd.ctx.seed, "hk-batches", 3, 2))[:8]  # 2 batches of 4
    xk, yk = x[kept], y[kept]
    assert k.counts.tolist() == [int((yk == 0).sum()), 0, int((yk == 2).sum())] and k.counts.sum() == 8
    torch.testing.assert_close(k.features[[0, 2]], torch.stack([xk[yk == 0].mean(0), xk[yk == 2].mean(0)]))
    whole = _algorithm(noise="none").local_knowledge(_client(Tiny(W), x, y, cid=3), round_index=2)
    assert whole.counts.tolist() == [5, 0, 5]


def test_code_mode_round_one_is_plain_ce_even_with_knowledge_written_this_round() -> None:
    x = torch.tensor([[1.0, 1.0], [2.0, 0.0], [0.0, 0.0]])
    y = torch.tensor([0, 1, 2])
    ce = nn.functional.cross_entropy(x @ W.T, y)
    code = _algorithm(mode="code")
    assert torch.equal(code.local_loss(Step(round=1, index=0), _client(Tiny(W), x, y, H), x, y), ce)
    assert not torch.equal(code.local_loss(STEP, _client(Tiny(W), x, y, H), x, y), ce)


@pytest.mark.parametrize("mode", ["paper", "code"])
def test_code_mode_takes_in_knowledge_client_by_client_in_the_seeded_order(data_dir: Path, mode: str) -> None:
    """hk_update: client — after the round the server's knowledge is the last writer over the clients in
    Context.client_order; paper mode's (Eq. 9) is the count-weighted mean of the same uploads."""
    one = {**RUN, "training": {**RUN["training"], "rounds": 1}}
    result = run_federation(small_config(algorithm={"name": "fedhkd", "mode": mode, "noise": "none"}, **one), data_dir)
    algorithm, clients = result.state.algorithm, result.state.clients
    local = [algorithm.local_knowledge(c, 1) for c in clients]  # the models after round 1, as uploaded
    order = algorithm.ctx.client_order(1, len(clients))
    expected = (last_writer_class_statistics([local[i] for i in order]) if mode == "code"
                else aggregate_class_statistics(local, "counts"))
    torch.testing.assert_close(result.state.server.state.knowledge.features, expected.features)
    torch.testing.assert_close(result.state.server.state.knowledge.soft, expected.soft)


# -- FedProto (§4) ------------------------------------------------------------------------------

def test_fedproto_prototypes_and_loss_by_hand() -> None:
    proto = _algorithm("fedproto")
    server = Server(Tiny(W), Prototypes())
    state = server.model.state_dict()
    proto.aggregate(2, server, [Update(0, 10, state, A), Update(1, 10, state, B)])
    c = server.state.prototypes
    torch.testing.assert_close(c.features, torch.tensor([[13 / 4, 0.0], [0.0, 2.0], [2.0, 2.0]]))
    uniform = _algorithm("fedproto", proto_agg="uniform")
    uniform.aggregate(2, server, [Update(0, 10, state, A), Update(1, 10, state, B)])
    torch.testing.assert_close(server.state.prototypes.features[0], torch.tensor([2.5, 0.0]))

    x = torch.tensor([[1.0, 1.0], [2.0, 0.0], [0.0, 0.0]])
    y = torch.tensor([0, 1, 2])
    ce = nn.functional.cross_entropy(x @ W.T, y)
    by_hand = ((x - c.features[y]) ** 2).sum(1).mean()  # (1/B)Σ‖h − C^y‖²
    d = x.shape[1]
    torch.testing.assert_close(proto.local_loss(STEP, _client(Tiny(W), x, y, c, "fedproto"), x, y),
                               ce + 0.05 * by_hand / d)  # default: MSE, i.e. also over d
    sq_l2 = _algorithm("fedproto", distance="sq_l2").local_loss(STEP, _client(Tiny(W), x, y, c, "fedproto"), x, y)
    torch.testing.assert_close(sq_l2, ce + 0.05 * by_hand)


def test_fedproto_default_distance_is_the_references_mse_loss() -> None:
    """FedProto's and FedHKD's released code: nn.MSELoss()(features, target), target = the features
    (detached) with each row replaced by its class prototype where the class has one."""
    features = torch.tensor([[1.0, 2.0, 0.0], [0.5, -1.0, 3.0], [2.0, 2.0, 2.0], [0.0, 1.0, -1.0]], requires_grad=True)
    y = torch.tensor([0, 2, 1, 0])
    prototypes = ClassStatistics(torch.tensor([[1.0, 1.0, 1.0], [0.0, 0.0, 0.0], [0.0, -2.0, 1.0]]),
                                 torch.zeros(3, 3), torch.tensor([4, 0, 1]))  # class 1: no prototype
    target = features.detach().clone()
    for k, label in enumerate(y.tolist()):
        if prototypes.counts[label] > 0:
            target[k] = prototypes.features[label]
    reference = nn.MSELoss()(features, target)
    ours = _algorithm("fedproto", in_dim=3).local_loss(STEP, _client(Tiny(torch.zeros(3, 3)), features, y, prototypes,
                                                                     "fedproto"), features, y)
    ce = nn.functional.cross_entropy(torch.zeros(4, 3), y)
    torch.testing.assert_close(ours, ce + 0.05 * reference)
    grad_ours, = torch.autograd.grad(ours, features)
    grad_ref, = torch.autograd.grad(0.05 * reference, features)
    torch.testing.assert_close(grad_ours, grad_ref)  # zero logits: CE has no gradient wrt the features here


def test_fedproto_client_trains_towards_the_broadcast_prototypes_with_weight_lambda() -> None:
    """The prototypes the server broadcasts are the ones the client's loss pulls towards; λ = 1 adds the whole
    distance term, λ = 0 leaves plain CE."""
    c = _stats([[1.0, 0.0], [0.0, 2.0], [2.0, 2.0]], [1, 1, 1])
    x = torch.tensor([[1.0, 1.0], [2.0, 0.0], [0.0, 0.0]])
    y = torch.tensor([0, 1, 2])
    ce = nn.functional.cross_entropy(x @ W.T, y)
    term = ((x - c.features[y]) ** 2).sum(1).mean() / 2  # (1/(B·d))Σ‖h − C^y‖² = (1 + 8 + 8)/6
    assert term.item() == pytest.approx(17 / 6)
    for lam, expected in ((1.0, ce + term), (0.0, ce)):
        proto = _algorithm("fedproto", lam=lam)
        client = _client(Tiny(W), x, y, None, "fedproto")
        proto.receive_broadcast(client, ModelBroadcast(client.model.state_dict(), c))
        assert client.state.prototypes is c
        torch.testing.assert_close(proto.local_loss(STEP, client, x, y), expected)


def test_fedhkd_claims_its_mechanism_exactly_when_a_knowledge_term_is_weighed() -> None:
    """Hyper-knowledge distillation is claimed when λ or γ weighs a term of Eq. 11, not when both are 0."""
    for lam, gamma, claimed in ((0.05, 0.05, True), (0.05, 0.0, True), (0.0, 0.05, True), (0.0, 0.0, False)):
        params = FedHKDParams(lam=lam, gamma=gamma)
        assert FedHKD.mechanisms(params) == ((KNOWLEDGE_MOVES_LOSS,) if claimed else ())


# -- runs and config ----------------------------------------------------------------------------

RUN = {"training": {"rounds": 3, "optimizer": {"name": "adam", "lr": 0.001}, "local_epochs": 2},
       "partition": {"scheme": "dirichlet", "alpha": 0.5}}


@pytest.mark.parametrize("algorithm", [{"name": "fedhkd"}, {"name": "fedhkd", "mode": "code"}, {"name": "fedproto"}])
def test_digits_run_learns_and_is_reproducible(data_dir: Path, algorithm: dict) -> None:
    cfg = small_config(algorithm=algorithm, **RUN)
    first, second = run_federation(cfg, data_dir), run_federation(cfg, data_dir)
    assert first.curves[-1]["global_acc"] > 0.5 and first.curves[-1]["local_acc"] > 0.5  # chance: 0.1
    assert first.curves == second.curves
    if algorithm["name"] == "fedhkd":  # from round 2 each client trains with the knowledge the server sent it
        assert all(c.state.knowledge is not None and c.state.knowledge.present.any() for c in first.state.clients)
    a, b = first.state.server.model.state_dict(), second.state.server.model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_round_one_is_fedavg(data_dir: Path) -> None:
    one = {**RUN, "training": {**RUN["training"], "rounds": 1}}
    fedavg = run_federation(small_config(**one), data_dir)
    fedhkd = run_federation(small_config(algorithm={"name": "fedhkd"}, **one), data_dir)
    a, b = fedavg.state.server.model.state_dict(), fedhkd.state.server.model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_mode_sets_switch_defaults_and_explicit_switches_win() -> None:
    paper = small_config(algorithm={"name": "fedhkd"}).algorithm.params
    code = small_config(algorithm={"name": "fedhkd", "mode": "code"}).algorithm.params
    assert (paper["kd_dist"], paper["feat_dist"], paper["hk_agg"], paper["noise"], paper["weighting"]) == \
        ("l2", "l2", "weighted", "paper", "samples")
    assert (code["kd_dist"], code["feat_dist"], code["hk_agg"], code["noise"], code["weighting"]) == \
        ("kl", "mse", "last_writer", "const", "uniform")
    assert paper["nu_mode"] == code["nu_mode"] == "none" and paper["lam"] == code["gamma"] == 0.05
    assert not {"hk_update", "softmax", "hk_data"} & set(paper)  # left out at paper values: paper runs keep their hash
    resolved = FedHKDParams.model_validate(paper)
    assert (resolved.hk_update, resolved.softmax, resolved.hk_data) == ("round", "stable", "all")
    assert (code["hk_update"], code["softmax"], code["hk_data"]) == ("client", "naive", "loader")
    mixed = small_config(algorithm={"name": "fedhkd", "mode": "code", "hk_agg": "weighted",
                                    "hk_update": "round"}).algorithm.params
    assert mixed["hk_agg"] == "weighted" and mixed["noise"] == "const" and mixed["softmax"] == "naive"
    assert small_config(algorithm=mixed | {"name": "fedhkd"}).algorithm.params == mixed  # resolved config re-validates


@pytest.mark.parametrize("algorithm", [
    {"name": "fedhkd", "lam": -1}, {"name": "fedhkd", "gamma": -0.1}, {"name": "fedhkd", "temperature": 0},
    {"name": "fedhkd", "nu": 1.5}, {"name": "fedhkd", "mode": "released"}, {"name": "fedhkd", "noise": "laplace"},
    {"name": "fedhkd", "hk_agg": "mean"}, {"name": "fedhkd", "sigma": -7}, {"name": "fedhkd", "lambda": 0.1},
    {"name": "fedhkd", "mode": "code", "hk_agg": "weighted"}, {"name": "fedhkd", "softmax": "exact"},
    {"name": "fedproto", "lam": -1}, {"name": "fedproto", "proto_agg": "max"}])
def test_bad_hyperparameters_are_rejected(algorithm: dict) -> None:
    with pytest.raises(BenchError):
        small_config(algorithm=algorithm)
