"""FedAKD's baselines (pipelines/fedakd/NOTES.md §4): each reward mechanism and loss term by hand, each method's
recorded reward checked against its formula on a tiny federation, and the flat-vector toolkit."""
from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any, cast

import pytest
import torch
from torch import nn

from bench.algorithms.cffl import adaptive_threshold, download, download_then_remove, reputation_update as cffl_reputation
from bench.algorithms.cgsv import (CGSV, CGSVParams, cosine_values, normalised, reputation_update as cgsv_reputation,
                                  reward_count)
from bench.algorithms.rewards import RewardedClient, Reputations, VectorUpload
from bench.algorithms.fedas import alignment_loss, class_prototypes, fisher_trace
from bench.algorithms.fedave import (batch_losses, distribution_factors, download_fraction, kl_divergence,
                                    reputation_update as fedave_reputation)
from bench.algorithms.feddc import correction_term, corrected_state, drift_penalty
from bench.algorithms.fedmpr import FedMPR, FedMPRParams, l2_penalty, magnitude_prune
from bench.algorithms.fedsac import Submodel, apply_mask, conv_filters, filter_importance, reputations, submodel_mask
from bench.algorithms.pfedck import cluster_updates, mutual_losses
from bench.engine.ledger import payload_bytes
from bench.engine.state import Client, Server
from bench.engine.vectors import (SparseVector, clip_norm, flatten, keep_fraction, keep_largest, largest_entries,
                                  unflatten)
from bench.suites.statistics import Records
from tests.conftest import DiagonalLinear, small_config

# -- the toolkit ------------------------------------------------------------------------------------


def test_keep_largest_keeps_ties_at_the_threshold_as_the_released_code() -> None:
    v = torch.tensor([0.5, -3.0, 2.0, -2.0, 0.1])
    assert keep_largest(v, 2).tolist() == [0.0, -3.0, 2.0, -2.0, 0.0]  # |2| ties with |-2|: both kept
    assert keep_largest(v, 0).tolist() == [0.0] * 5 and torch.equal(keep_largest(v, 9), v)
    assert keep_fraction(v, 0.5).tolist() == [0.0, -3.0, 2.0, -2.0, 0.0]  # int(5·0.5) = 2
    assert clip_norm(torch.tensor([3.0, 4.0]), 1.0).tolist() == pytest.approx([0.6, 0.8])
    assert clip_norm(torch.tensor([3.0, 4.0]), 10.0).tolist() == [3.0, 4.0]


def test_a_sparse_vector_sends_its_kept_nonzero_entries_at_8_bytes_each() -> None:
    """Positions (int32) and values (float32) of the kept entries; zeros tied at the threshold are not sent, -0.0
    is (the dense vector is keep_largest's bit for bit); keeping everything sends the values alone."""
    v = torch.tensor([0.5, -3.0, 2.0, -2.0, 0.1])
    top = largest_entries(v, 2)
    assert top.indices.tolist() == [1, 2, 3] and top.values.tolist() == [-3.0, 2.0, -2.0] and payload_bytes(top) == 24
    assert payload_bytes(largest_entries(v, 5)) == 20 and largest_entries(v, 5).indices is None
    assert payload_bytes(largest_entries(v, 0)) == 0 and torch.equal(largest_entries(v, 0).dense(), torch.zeros(5))
    zeros = torch.tensor([0.0, -0.0, 1.0, 0.0, 0.0])
    tied = largest_entries(zeros, 3)  # threshold 0: every entry ties, but only 1.0 and -0.0 need sending
    assert tied.indices.tolist() == [1, 2] and payload_bytes(tied) == 16
    assert torch.equal(tied.dense(), zeros) and torch.signbit(tied.dense()[1])  # the vector itself, -0.0 too


def test_flatten_and_unflatten_round_trip_with_dtypes() -> None:
    state = {"a": torch.arange(6.0).reshape(2, 3), "n": torch.tensor(7), "b": torch.tensor([1.5])}
    vector = flatten(state, ["a", "n", "b"])
    assert vector.tolist() == [0, 1, 2, 3, 4, 5, 7, 1.5] and vector.dtype == torch.float32
    back = unflatten(vector + 0.6, state, ["a", "n", "b"])
    assert back["n"].dtype == torch.int64 and int(back["n"]) == 7  # truncated as load_state_dict does
    assert back["a"].shape == (2, 3) and float(back["b"]) == pytest.approx(2.1)


# -- CFFL ---------------------------------------------------------------------------------------------


def test_cffl_reputation_by_hand() -> None:
    """r = (¼ ¼ ¼ ¼), acc = (.6 .2 .2 0) (client 3 not scored): c = sinh(acc/1)/Σ, r ← ½r + ½c normalised; a
    client under c_th = .2 leaves and the others are normalised again."""
    rep = torch.full((4,), 0.25, dtype=torch.float64)
    acc = torch.tensor([0.6, 0.2, 0.2, 0.0], dtype=torch.float64)
    c = torch.sinh(acc / acc.sum())
    c = c / (c.sum() + 1e-9)
    expected = 0.5 * rep + 0.5 * c
    expected = expected / (expected.sum() + 1e-9)
    assert torch.allclose(cffl_reputation(rep, acc, 1.0, 0.0), expected / expected.sum())
    pruned = cffl_reputation(rep, acc, 1.0, 0.2)
    assert pruned[3] == 0 and pruned[1] > 0 and float(pruned.sum()) == pytest.approx(1.0)
    assert float(expected[3]) < 0.2 < float(expected[1])


def test_cffl_download_by_hand() -> None:
    """Code: g_k = u − (n_k/max n)·u_k, all of it; paper: the others' share u − (n_k/Σn)·u_k, its top q_k part."""
    aggregate, own = torch.tensor([1.0, -2.0, 0.5, 4.0]), torch.tensor([2.0, 0.0, 0.0, 4.0])
    everything = download(aggregate, own, 0.5, None)
    assert everything.indices is None and everything.dense().tolist() == [0.0, -2.0, 0.5, 2.0]  # sent whole
    top = download(aggregate, own, 0.25, 0.5)  # (.5 -2 .5 3): its top 2, sent as positions and values
    assert top.indices.tolist() == [1, 3] and top.values.tolist() == [-2.0, 3.0]
    assert top.dense().tolist() == [0.0, -2.0, 0.0, 3.0]


def test_cffl_authors_download_chooses_from_the_whole_aggregate_then_removes_the_own_upload() -> None:
    """CFFL's authors: the top half of u = (1 -2 .5 4) is (0 -2 0 4); then (n_k/Σn)·u_k = .5·(2 0 0 4) comes off
    every entry, chosen or not: (-1 -2 0 2). The paper reading removes it first and picks from (0 -2 .5 2)."""
    aggregate, own = torch.tensor([1.0, -2.0, 0.5, 4.0]), torch.tensor([2.0, 0.0, 0.0, 4.0])
    assert download_then_remove(aggregate, own, 0.5, 0.5).dense().tolist() == [-1.0, -2.0, 0.0, 2.0]
    assert download(aggregate, own, 0.5, 0.5).dense().tolist() == [0.0, -2.0, 0.0, 2.0]
    assert download_then_remove(aggregate, own, 0.0, 0.0).dense().tolist() == [0.0] * 4


def test_cffl_adaptive_threshold_is_a_third_of_an_equal_share() -> None:
    assert adaptive_threshold(10) == pytest.approx(1 / 30) and adaptive_threshold(3) == pytest.approx(1 / 9)
    rep = torch.tensor([0.25, 0.25, 0.25, 0.25], dtype=torch.float64)
    acc = torch.tensor([0.9, 0.9, 0.9, 0.01], dtype=torch.float64)
    fixed = cffl_reputation(rep, acc, 1.0, 0.2)  # the weak client (r ≈ .15) is below c_th = .2
    adaptive = cffl_reputation(rep, acc, 1.0, adaptive_threshold(4))  # but above (1/3)/4
    assert fixed[3] == 0 and adaptive[3] > 0


# -- CGSV ---------------------------------------------------------------------------------------------


def test_cgsv_normalises_each_upload_to_gamma() -> None:
    """Γ·Δ/(‖Δ‖ + 1e-7): (3, 4) with Γ = .5 → (.3, .4); a zero update stays zero."""
    assert normalised(torch.tensor([3.0, 4.0]), 0.5).tolist() == pytest.approx([0.3, 0.4])
    assert normalised(torch.zeros(3), 0.5).tolist() == [0.0, 0.0, 0.0]


def test_cgsv_values_reputation_and_reward_by_hand() -> None:
    """ψ = max(0, cos(Δ_k, u)): (1,0)·(1,1)/√2 = 1/√2; (-1,0) → 0. r ← .9r + .1ψ normalised; client k gets
    ⌊D·tanh(r_k)/max tanh⌋ entries: the most reputed all of them."""
    values = cosine_values([torch.tensor([1.0, 0.0]), torch.tensor([-1.0, 0.0]), torch.tensor([0.0, 2.0])],
                           torch.tensor([1.0, 1.0]))
    assert values.tolist() == pytest.approx([1 / math.sqrt(2), 0.0, 1 / math.sqrt(2)], rel=1e-6)
    rep = cgsv_reputation(torch.full((3,), 1 / 3, dtype=torch.float64), values, 0.9)
    raw = 0.9 / 3 + 0.1 * values
    assert rep.tolist() == pytest.approx((raw / raw.sum()).tolist())
    counts = reward_count(rep, 1.0, 1000)
    t = torch.tanh(rep)
    assert counts == [int(1000 * float(v) / (float(t.max()) + 1e-9)) for v in t]
    assert counts[0] == counts[2] == 999 and counts[1] < counts[0]  # ⌊1000·(1 − 1e-9·…)⌋; the misaligned gets less
    quarter = torch.full((4,), 0.25, dtype=torch.float64)
    assert cgsv_reputation(quarter, torch.zeros(4, dtype=torch.float64), 0.9).tolist() == pytest.approx([0.25] * 4)
    assert cgsv_reputation(quarter, torch.zeros(4, dtype=torch.float64), 0.0).tolist() == [0.0] * 4  # sum 0: kept


@pytest.mark.parametrize("aggregate", ["reputation", "mean"])
def test_cgsv_server_round_by_hand(aggregate: str) -> None:
    """One server round from unequal reputations (.1, .2, .3, .4), clients 0, 1 and 3 uploading: u = Σ_k r_k·Δ_k/Σ r_k
    over the uploaders (equal weights with ``aggregate: mean``); the global model moves by +u; the uploaders'
    reputations become .9r + .1ψ normalised over all clients, then every reputation is renormalised to sum 1; each
    uploader is rewarded with the ⌊D·tanh(r_k)/max tanh⌋ largest entries of u."""
    model = nn.Linear(3, 1, bias=False)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[1.0, -1.0, 0.5]]))
    deltas = {0: torch.tensor([1.0, 0.0, 0.0]), 1: torch.tensor([0.0, 2.0, 0.0]), 3: torch.tensor([1.0, 1.0, -3.0])}
    rep0 = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64)
    server = Server(model, Reputations(rep0.clone()))
    algorithm = CGSV(CGSVParams(aggregate=aggregate), cast(Any, None))
    algorithm.aggregate(1, server, [VectorUpload(k, 10, SparseVector(None, d, d.numel())) for k, d in deltas.items()])

    weights = [float(rep0[k]) for k in deltas] if aggregate == "reputation" else [1.0] * 3
    u = sum(w / sum(weights) * d for w, d in zip(weights, deltas.values()))
    assert isinstance(u, torch.Tensor)
    assert model.weight.detach().flatten().tolist() == pytest.approx((torch.tensor([1.0, -1.0, 0.5]) + u).tolist())
    psi = torch.zeros(4, dtype=torch.float64)
    for k, d in deltas.items():
        psi[k] = max(0.0, float(d @ u / (d.norm() * u.norm())))
    moved = 0.9 * rep0 + 0.1 * psi
    moved = moved / moved.sum()
    expected = rep0.clone()
    expected[[0, 1, 3]] = moved[[0, 1, 3]]
    expected = expected / expected.sum()
    assert server.state.reputation is not None
    assert server.state.reputation.tolist() == pytest.approx(expected.tolist(), rel=1e-6)
    counts = reward_count(expected, 1.0, 3)
    assert server.state.share == pytest.approx({k: counts[k] / 3 for k in deltas})
    for k in deltas:
        assert torch.equal(server.state.rewards[k].dense(), largest_entries(u, counts[k]).dense())


@pytest.mark.parametrize("reward", ["own", "trained"])
def test_cgsv_reward_is_added_to_the_personal_model_before_training_or_to_the_trained_copy(reward: str) -> None:
    model = nn.Linear(2, 1, bias=False)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[5.0, 6.0]]))  # the model as local training left it
    start = torch.tensor([1.0, 2.0])  # the personal model before training
    client = Client(0, cast(Any, None), model, RewardedClient(start=start))
    CGSV(CGSVParams(reward=reward), cast(Any, None)).take_reward(client, torch.tensor([0.5, -1.0]), ["weight"])
    base = [1.0, 2.0] if reward == "own" else [5.0, 6.0]
    assert model.weight.detach().flatten().tolist() == [base[0] + 0.5, base[1] - 1.0]


# -- FedAVE -------------------------------------------------------------------------------------------


def test_fedave_reputation_and_download_fraction_by_hand() -> None:
    rep = fedave_reputation(torch.tensor([0.5, 0.5], dtype=torch.float64), torch.tensor([0.8, 0.4],
                                                                                        dtype=torch.float64), 0.9)
    assert rep.tolist() == pytest.approx([0.53 / 1.02, 0.49 / 1.02])
    assert download_fraction(0.0, 0.3, 1.0) == pytest.approx(0.3)
    assert download_fraction(0.1, 0.3, 1.0) == pytest.approx(0.3 + 0.7 * math.tanh(0.1))
    assert download_fraction(-5.0, 0.3, 1.0) == 0.0  # clipped to [0, 1]
    quarter, zeros = torch.full((4,), 0.25, dtype=torch.float64), torch.zeros(4, dtype=torch.float64)
    assert fedave_reputation(quarter, zeros, 0.9).tolist() == pytest.approx([0.25] * 4)
    assert fedave_reputation(quarter, zeros, 0.0).tolist() == [0.0] * 4  # sums to 0: left as it is, no 0/0


def test_fedave_distribution_factor_by_hand() -> None:
    """KL of (1 1 2)/4 from (1 1 1 …)/3 truncated to 3 entries: Σ p·log(3p); κ = (1/KL)/Σ(1/KL), divided by its
    max: the client whose losses look most like the validation set's gets 1, the other KL_a/KL_b."""
    a, b = torch.tensor([1.0, 1.0, 2.0], dtype=torch.float64), torch.tensor([1.0, 3.0, 1.0], dtype=torch.float64)
    validation = torch.tensor([1.0, 1.0, 1.0, 5.0], dtype=torch.float64)
    kl_a = sum(p * math.log(p * 3) for p in (0.25, 0.25, 0.5))
    kl_b = sum(p * math.log(p * 3) for p in (0.2, 0.6, 0.2))
    assert kl_divergence(a, validation) == pytest.approx(kl_a) and kl_divergence(b, validation) == pytest.approx(kl_b)
    kappa = distribution_factors([a, b], [validation, validation])
    assert kappa.tolist() == pytest.approx([1.0, kl_a / kl_b]) and kl_a < kl_b
    net = nn.Linear(2, 3)

    class FeaturesAndLogits(nn.Module):  # the models' (features, logits) convention
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return x, net(x)

    x, y = torch.randn(5, 2, generator=torch.Generator().manual_seed(0)), torch.tensor([0, 1, 2, 0, 1])
    losses = batch_losses(FeaturesAndLogits(), x, y, batch=2)
    with torch.no_grad():
        by_hand = [float(nn.functional.cross_entropy(net(x[i:i + 2]), y[i:i + 2])) for i in (0, 2, 4)]
    assert losses.tolist() == pytest.approx(by_hand)


# -- FedSAC -------------------------------------------------------------------------------------------


def test_fedsac_reputations_and_submodels_by_hand() -> None:
    """r_k = 100·exp(2c_k)/max: c = (.9, .8) → (100, 100e^{-.2} = 81.87); the code keeps ⌊r⌋ filters of 96,
    the paper ⌊r·N/100⌋; ties by filter order."""
    r = reputations(torch.tensor([0.9, 0.8], dtype=torch.float64), 2.0)
    assert r.tolist() == pytest.approx([100.0, 100 * math.exp(-0.2)])
    importance = torch.tensor([1.0, 5.0, 5.0, 0.0, 3.0])
    assert submodel_mask(60.0, importance, "share").tolist() == [False, True, True, False, True]  # ⌊3⌋ filters
    assert submodel_mask(2.0, importance, "count").tolist() == [False, True, True, False, False]
    assert submodel_mask(0.0, importance, "count").sum() == 1  # at least one filter
    tied = submodel_mask(10.0, torch.zeros(96), "count")  # filter_importance's all-zero case: every filter ties
    assert tied.nonzero().flatten().tolist() == list(range(10))


def test_fedsac_filter_importance_and_masks_on_a_tiny_convnet() -> None:
    """Zeroing a filter the classifier ignores costs nothing (importance 0); the others share 100."""
    net = nn.Sequential(nn.Conv2d(1, 3, 1), nn.Flatten(), nn.Linear(3, 2))

    class Wrapped(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = net

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return x, self.net(x)

    model = Wrapped()
    with torch.no_grad():
        net[0].weight.copy_(torch.tensor([1.0, 2.0, 3.0]).view(3, 1, 1, 1))
        net[0].bias.zero_()
        net[2].weight.copy_(torch.tensor([[1.0, 0.0, 0.5], [-1.0, 0.0, -0.5]]))
        net[2].bias.zero_()
    filters = conv_filters(model)
    assert filters == [("net.0.weight", "net.0.bias", i) for i in range(3)]
    x = torch.ones(4, 1, 1, 1)
    y = torch.zeros(4, dtype=torch.long)
    scores = filter_importance(model, filters, x, y)
    assert float(scores[1]) == 0.0 and float(scores.sum()) == pytest.approx(100.0)
    assert torch.equal(net[0].weight.view(-1), torch.tensor([1.0, 2.0, 3.0]))  # restored
    masked = apply_mask(model.state_dict(), filters, torch.tensor([True, False, True]))
    assert masked["net.0.weight"].view(-1).tolist() == [1.0, 0.0, 3.0]


class _TwoConvNet(nn.Module):
    """conv1 (2 filters) → BN → ReLU → conv2 (3 filters) → spatial mean → fc: five filters for FedSAC to allocate."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1, self.bn, self.conv2, self.fc = nn.Conv2d(1, 2, 1), nn.BatchNorm2d(2), nn.Conv2d(2, 3, 1), nn.Linear(3, 2)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.conv2(torch.relu(self.bn(self.conv1(x)))).mean((2, 3))
        return h, self.fc(h)


def _two_conv_net(value: float) -> _TwoConvNet:
    """The net with every parameter and BN statistic at ``value`` except fc's second row (−``value``) and the conv
    filters: filter i (in :func:`conv_filters`' order) has weights and bias ``value + i``."""
    net = _TwoConvNet()
    with torch.no_grad():
        for tensor in net.state_dict().values():
            tensor.fill_(value)
        net.fc.weight[1] = -value  # class 1's logit the opposite of class 0's: the filters get gradients
        for i, (weight, bias, channel) in enumerate(conv_filters(net)):
            net.state_dict()[weight][channel] = value + i
            assert bias is not None
            net.state_dict()[bias][channel] = value + i
    return net


def _random_two_conv_net(seed: int) -> _TwoConvNet:
    """The net with standard normal parameters from its own generator."""
    net, generator = _TwoConvNet(), torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in net.parameters():
            param.copy_(torch.randn(param.shape, generator=generator))
    return net


def _filter_values(state: dict[str, torch.Tensor]) -> list[float]:
    """Each filter's first weight."""
    return [float(state[weight][channel].flatten()[0]) for weight, _, channel in conv_filters(_TwoConvNet())]


def test_fedsac_first_allocation_round_and_which_rounds_allocate() -> None:
    """R = 20: paper ⌊0.75·20⌋ + 1 = 16, the code ⌊20/2⌋ + 1 = 11, ``allocation_round`` wins; ``every`` allocates
    from it on, ``once`` only then. R = 5: ⌊3.75⌋ + 1 = 4 and ⌊2.5⌋ + 1 = 3."""
    from types import SimpleNamespace

    from bench.algorithms.fedsac import FedSAC, FedSACParams

    def rounds(total: int = 20, **params: Any) -> list[int]:
        ctx = SimpleNamespace(config=SimpleNamespace(training=SimpleNamespace(rounds=total)))
        algo = FedSAC(FedSACParams(**params), cast(Any, ctx))
        return [r for r in range(1, total + 1) if algo.allocates(r)]

    assert rounds() == list(range(16, 21))
    assert rounds(mode="code") == [11]
    assert rounds(first_allocation="half") == list(range(11, 21))
    assert rounds(allocation="once") == [16]
    assert rounds(allocation_round=3) == list(range(3, 21)) and rounds(mode="code", allocation_round=3) == [3]
    assert rounds(5) == [4, 5] and rounds(5, mode="code") == [3] and rounds(5, first_allocation="half") == [3, 4, 5]


@pytest.mark.parametrize(("allocation", "keep"), [("every", "share"), ("once", "share"), ("every", "count")])
def test_fedsac_allocates_by_reputation_and_the_global_models_filter_importance(allocation: str, keep: str) -> None:
    """Round 1 sets the reputations (β = 1 here) from the contributions and allocates nothing; at the first
    allocation (round 2) each of the federation's clients gets :func:`submodel_mask` of its reputation over the
    global model's filter importance on the server's validation set (its source the ``validation`` reading);
    in round 3 ``every`` allocates again and ``once`` drops the masks (every client: the full model). ``keep: count``
    gives each ⌊r⌋ ≥ 5 filters: all five."""
    from types import SimpleNamespace

    from bench.algorithms.fedsac import Contribution, FedSAC, FedSACParams, FedSACServer

    x = torch.rand(6, 1, 2, 2, generator=torch.Generator().manual_seed(1))
    y = torch.tensor([0, 1, 0, 1, 1, 0])
    sources: list[str] = []

    def server_validation(source: str) -> tuple[torch.Tensor, torch.Tensor]:
        sources.append(source)
        return x, y

    ctx = SimpleNamespace(config=SimpleNamespace(training=SimpleNamespace(rounds=3),
                                                 partition=SimpleNamespace(num_clients=3)),
                          server_validation=server_validation)
    net = _random_two_conv_net(4)
    server = Server(net, FedSACServer())
    algo = FedSAC(FedSACParams(beta=1.0, allocation_round=2, allocation=allocation, keep=keep,
                               validation="head"), cast(Any, ctx))
    contributions = [Contribution(torch.tensor(c, dtype=torch.float64)) for c in (0.9, 0.5, 0.2)]
    assert algo.allocate(1, server, contributions) == {}
    assert server.state.contribution is not None and server.state.contribution.tolist() == [0.9, 0.5, 0.2]
    assert server.state.reputation is not None
    assert server.state.reputation.tolist() == pytest.approx([100.0, 100 * math.exp(-0.4), 100 * math.exp(-0.7)])
    assert server.state.masks == {} and sources == []
    algo.allocate(2, server, [])
    importance = filter_importance(net, conv_filters(net), x, y)
    assert sources == ["head"] and server.state.importance is not None
    assert torch.equal(server.state.importance, importance) and float(importance.sum()) == pytest.approx(100.0)
    expected = {cid: submodel_mask(100 * math.exp(c - 0.9), importance, cast(Any, keep))
                for cid, c in enumerate((0.9, 0.5, 0.2))}
    assert {cid: m.tolist() for cid, m in server.state.masks.items()} == {cid: m.tolist() for cid, m in expected.items()}
    assert [int(m.sum()) for m in server.state.masks.values()] == ([5, 3, 2] if keep == "share" else [5, 5, 5])
    # ⌊r·5/100⌋: 5, 3.35, 2.48; ⌊r⌋: 100, 67, 49
    algo.allocate(3, server, [])
    assert len(server.state.masks) == (3 if allocation == "every" else 0)


def test_fedsac_sends_each_client_its_submodel_to_train_and_as_its_reward() -> None:
    """Client 0 keeps filters 0, 3 and 4, client 1 has no mask (the full model). The paper sends client 0 the global
    model with filters 1 and 2 zeroed, to train and as its reward; the code's ``layer_freeze`` trains the full global
    model (with the mask, for the freezing) and rewards with the zeroed one."""
    from bench.algorithms.fedsac import FedSAC, FedSACClient, FedSACParams, FedSACServer

    mask = torch.tensor([True, False, False, True, True])
    global_net = _two_conv_net(1.0)
    server = Server(global_net, FedSACServer(masks={0: mask}))
    for mode, trained in (("paper", [1.0, 0.0, 0.0, 4.0, 5.0]), ("code", [1.0, 2.0, 3.0, 4.0, 5.0])):
        algo = FedSAC(FedSACParams(mode=mode), cast(Any, None))
        sent, reward = algo.broadcast(1, server, 0), algo.reward(1, server, 0)
        assert _filter_values(sent.state) == trained and sent.mask is mask
        assert _filter_values(reward.state) == [1.0, 0.0, 0.0, 4.0, 5.0] and reward.mask is mask
        assert float(reward.state["conv1.weight"][1].sum()) == 0.0 == float(reward.state["conv1.bias"][1]) and float(reward.state["fc.weight"][0].sum()) == 3.0
        full = algo.reward(1, server, 1)
        assert _filter_values(full.state) == [1.0, 2.0, 3.0, 4.0, 5.0] and full.mask is None
        client = Client(0, cast(Any, None), _two_conv_net(7.0), FedSACClient())
        algo.receive_reward(1, client, reward)
        assert _filter_values(client.model.state_dict()) == [1.0, 0.0, 0.0, 4.0, 5.0]
    assert _filter_values(global_net.state_dict()) == [1.0, 2.0, 3.0, 4.0, 5.0]  # the global model untouched


@pytest.mark.parametrize("aggregate", ["dynamic", "masked_mean"])
def test_fedsac_aggregate_by_hand(aggregate: str) -> None:
    """Global filters 9..13, every other entry 9; client 0 (n = 1) uploads filters 1..5 and 1 elsewhere, keeping
    filters 0 and 2; client 1 (n = 3) uploads 5..9 and 5, keeping 0–2 (client 2, n = 4, uploads 2..6 and 2 and has
    no mask: all). Dynamic: each filter the size-weighted mean of its holders' (filter 0: (1 + 3·5 + 4·2)/8 = 3,
    filter 3: client 2's 5), every other entry over all clients, (1 + 15 + 8)/8 = 3. Without client 2 filters 3
    and 4 have no holder and keep the global values. The code: the uniform mean of conv and fc weights and biases
    with the un-kept filters as zeros; BN (its weights and statistics) stays the global model's."""
    from bench.algorithms.fedsac import FedSAC, FedSACParams, FedSACServer, TrainedModel

    def upload(cid: int, value: float, n: int) -> TrainedModel:
        return TrainedModel(cid, _two_conv_net(value).state_dict(), n)

    masks = {0: torch.tensor([True, False, True, False, False]), 1: torch.tensor([True, True, True, False, False])}
    algo = FedSAC(FedSACParams(aggregate=aggregate), cast(Any, None))

    def aggregated(*updates: TrainedModel) -> dict[str, torch.Tensor]:
        server = Server(_two_conv_net(9.0), FedSACServer(masks=dict(masks)))
        assert algo.aggregate(1, server, list(updates)) == {}
        assert server.model is not None
        return server.model.state_dict()

    three = aggregated(upload(0, 1.0, 1), upload(1, 5.0, 3), upload(2, 2.0, 4))
    two = aggregated(upload(0, 1.0, 1), upload(1, 5.0, 3))
    if aggregate == "dynamic":
        assert _filter_values(three) == pytest.approx([3.0, (3 * 6 + 4 * 3) / 7, (3 + 3 * 7 + 4 * 4) / 8, 5.0, 6.0])
        assert float(three["fc.weight"][0, 0]) == pytest.approx(3.0) and float(three["bn.weight"][0]) == pytest.approx(3.0)
        assert float(three["bn.running_mean"][0]) == pytest.approx(3.0)
        assert float(three["conv2.bias"][0]) == pytest.approx(5.0) and float(three["conv1.bias"][1]) == pytest.approx(30 / 7)
        assert _filter_values(two) == pytest.approx([4.0, 6.0, (3 + 3 * 7) / 4, 12.0, 13.0])
        assert float(two["fc.bias"][1]) == pytest.approx(4.0)
    else:
        assert _filter_values(three) == pytest.approx([8 / 3, 3.0, 14 / 3, 5 / 3, 2.0])
        assert float(three["fc.weight"][0, 0]) == pytest.approx(8 / 3) and float(three["conv2.weight"][0, 1]) == pytest.approx(14 / 3)
        assert float(three["bn.weight"][0]) == 9.0 and float(three["bn.running_mean"][0]) == 9.0
        assert float(three["conv1.bias"][1]) == pytest.approx(3.0) and float(three["conv2.bias"][2]) == pytest.approx(2.0)
        assert _filter_values(two) == pytest.approx([3.0, 3.0, 5.0, 0.0, 0.0])
        assert float(two["fc.bias"][1]) == pytest.approx(3.0)


@pytest.mark.parametrize("train", ["submodel", "layer_freeze"])
def test_fedsac_trains_the_submodel_or_freezes_each_layer_by_its_last_filter(train: str) -> None:
    """Client 0 keeps filters 0, 2 and 3 (conv1's first; conv2's first two), client 1 filters 1 and 4 (the last of
    each layer); each trains one SGD step. The paper: its submodel, the un-kept filters zeroed and left at 0, every
    kept filter moving. The code: the full model, each conv layer frozen whole iff its last filter is un-kept
    (client 0: both layers, client 1: neither). Afterwards every parameter trains again: a step with no mask moves
    every filter."""
    from bench.algorithms.fedsac import FedSAC, FedSACClient, FedSACParams, FedSACServer
    from bench.engine.context import Context
    from bench.engine.state import ClientData

    ctx = Context(small_config(training={"optimizer": {"name": "sgd", "lr": 0.5}, "batch_size": 8},
                               model={"name": "mlp"}), (1, 2, 2), 2, torch.device("cpu"))
    x = torch.rand(8, 1, 2, 2, generator=torch.Generator().manual_seed(2))
    y = torch.tensor([0, 1, 1, 0, 1, 0, 0, 1])
    masks = {0: torch.tensor([True, False, True, True, False]), 1: torch.tensor([False, True, False, False, True])}
    server = Server(_two_conv_net(0.3), FedSACServer(masks=masks))
    client = Client(0, ClientData(x, y, x, y), _TwoConvNet(), FedSACClient())
    algo = FedSAC(FedSACParams(train=train), ctx)
    for cid, mask in masks.items():
        sent = algo.broadcast(1, server, cid)
        before = _filter_values(sent.state)
        loss = algo.train(1, client, sent)
        after = _filter_values(client.model.state_dict())
        assert loss > 0 and float(client.model.state_dict()["fc.bias"][0]) != 0.3
        moved = [a != b for a, b in zip(after, before)]
        if train == "submodel":
            assert moved == mask.tolist() and all(a == 0.0 for a, kept in zip(after, mask.tolist()) if not kept)
        else:
            assert moved == [cid == 1] * 5
        assert all(p.requires_grad for p in client.model.parameters())
    full = _two_conv_net(0.3).state_dict()
    algo.train(2, client, Submodel(full, None))
    assert all(a != b for a, b in zip(_filter_values(client.model.state_dict()), _filter_values(full)))


def test_fedsac_client_uploads_its_trained_model_and_records_its_submodel_share() -> None:
    """The upload: a copy of the trained model, the client's id and train size, its loss as ``train_loss``; the
    client keeps the mask it was sent (``submodel_share`` = 3 of 5 filters; no mask: 1), and the records carry each
    client's contribution and reputation once they are known."""
    from types import SimpleNamespace

    from bench.algorithms.fedsac import FedSAC, FedSACClient, FedSACParams, FedSACServer, Submodel

    algo = FedSAC(FedSACParams(), cast(Any, None))
    setattr(algo, "train", lambda round_index, c, submodel: 0.25)  # the training itself: the test above
    mask = torch.tensor([True, False, False, True, True])
    clients = [Client(cid, cast(Any, SimpleNamespace(num_samples=5 + cid)), _two_conv_net(1.0), FedSACClient())
               for cid in range(2)]
    update, metrics = algo.client_update(1, clients[0], Submodel(clients[0].model.state_dict(), mask))
    assert (update.cid, update.num_samples, metrics) == (0, 5, {"train_loss": 0.25})
    assert torch.equal(update.state["fc.weight"], clients[0].model.state_dict()["fc.weight"])
    assert update.state["fc.weight"].data_ptr() != clients[0].model.state_dict()["fc.weight"].data_ptr()
    assert clients[0].state.mask is mask
    algo.client_update(1, clients[1], Submodel(clients[1].model.state_dict(), None))
    server = Server(None, FedSACServer())
    assert algo.client_records(server, clients) == {"submodel_share": {0: pytest.approx(0.6), 1: 1.0}}
    server.state.contribution = torch.tensor([0.5, 0.25], dtype=torch.float64)
    server.state.reputation = torch.tensor([100.0, 60.0], dtype=torch.float64)
    assert algo.client_records(server, clients) == {"submodel_share": {0: pytest.approx(0.6), 1: 1.0},
                                                     "contribution": {0: 0.5, 1: 0.25}, "reputation": {0: 100.0, 1: 60.0}}


def _recorded_loops(monkeypatch: pytest.MonkeyPatch, module: Any) -> list[Any]:
    """The engine ``Loop`` objects ``module`` runs from now on, in the order they run."""
    from bench.engine.loop import Loop

    loops: list[Loop] = []

    class Recording(Loop):
        def run(self, batches: Any, step_fn: Any) -> float:
            loops.append(self)
            return super().run(batches, step_fn)

    monkeypatch.setattr(module, "Loop", Recording)
    return loops


@pytest.mark.parametrize("split", ["validation", "test"])
def test_fedsac_measures_the_contribution_on_the_validation_or_local_test_split(
        split: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The validation split holds the test split's images with the other label, so its accuracy is 1 − the test
    split's (7 images: never ½); without a validation split, the paper's reading stops with the fix named. Each of
    the ``contribution_epochs`` = 2 epochs trains as Standalone's round of that index: the client's own model, its
    id naming it, ``training.grad_clip`` and the run's loss guard."""
    import bench.algorithms.fedsac as fedsac
    from bench.engine.context import Context
    from bench.engine.state import ClientData
    from bench.errors import BenchError

    loops = _recorded_loops(monkeypatch, fedsac)
    ctx = Context(small_config(model={"name": "mlp"}, training={"grad_clip": 5.0}), (1, 2, 2), 2, torch.device("cpu"))
    x = torch.rand(7, 1, 2, 2, generator=torch.Generator().manual_seed(3))
    y = torch.tensor([0, 1, 1, 0, 1, 0, 0])
    algo = fedsac.FedSAC(fedsac.FedSACParams(contribution_split=split, contribution_epochs=2), ctx)
    client = Client(4, ClientData(x, y, x, y, x, 1 - y), ctx.build_model("unused"), fedsac.FedSACClient())
    measured = algo.contribution(client)
    assert [(loop.round, loop.who, loop.grad_clip) for loop in loops] == [(1, 4, 5.0), (2, 4, 5.0)]
    assert all(loop.guard is ctx.loss_guard for loop in loops)
    assert loops[0].params and loops[0].params == loops[1].params
    assert all(p.shape == q.shape for p, q in zip(loops[0].params, client.model.parameters()))
    other = fedsac.FedSAC(fedsac.FedSACParams(contribution_split="test" if split == "validation" else "validation",
                                              contribution_epochs=2), ctx).contribution(client)
    assert measured == pytest.approx(1 - other) and measured * 7 == pytest.approx(round(measured * 7))
    if split == "validation":
        with pytest.raises(BenchError, match="partition.validation_fraction > 0, or contribution_split: test"):
            algo.contribution(Client(4, ClientData(x, y, x, y), ctx.build_model("unused"), fedsac.FedSACClient()))

# -- pFedCK, FedDC, FedAS, FedMPR ---------------------------------------------------------------------


def test_pfedck_mutual_losses_and_clusters() -> None:
    """L_P = CE(P) + λKD(P; I); L_I adds μ·MSE of the features; identical models distil nothing. Updates in
    two directions fall in two clusters, relabelled by first appearance."""
    h, z = torch.ones(2, 4), torch.zeros(2, 3)
    y = torch.tensor([0, 1])
    loss_p, loss_i = mutual_losses((h, z), (h + 1, z), y, 1.0, 2.0, 1.0)
    assert float(loss_p) == pytest.approx(math.log(3), rel=1e-6)
    assert float(loss_i) == pytest.approx(math.log(3) + 2.0 * 1.0, rel=1e-6)
    updates = [torch.tensor([1.0, 0.0]), torch.tensor([0.0, 1.0]), torch.tensor([2.0, 0.1]), torch.tensor([0.1, 3.0])]
    assert cluster_updates(updates, 2) == [0, 1, 0, 1]
    assert cluster_updates(updates[:2], 3) == [0, 1]


def test_pfedck_mutual_losses_by_hand() -> None:
    """Each model adds λ times its KD from the other and I adds μ·MSE(h_I, h_P): one sample of class 0, P's logits
    (0, 0) and I's (ln 3, 0), so softmax(P) = (1/2, 1/2) and softmax(I) = (3/4, 1/4); λ = 2, μ = 3, τ = 1.
    KD(P; I) = KL(I ‖ P) = ¾ ln(3/2) + ¼ ln(1/2), KD(I; P) = KL(P ‖ I) = ½ ln(2/3) + ½ ln 2 = ½ ln(4/3);
    MSE((2, 0), (1, 2)) = (1 + 4)/2."""
    p_out = (torch.tensor([[1.0, 2.0]]), torch.tensor([[0.0, 0.0]]))
    i_out = (torch.tensor([[2.0, 0.0]]), torch.tensor([[math.log(3), 0.0]]))
    loss_p, loss_i = mutual_losses(p_out, i_out, torch.tensor([0]), 2.0, 3.0, 1.0)
    assert float(loss_p) == pytest.approx(math.log(2) + 2 * (0.75 * math.log(1.5) + 0.25 * math.log(0.5)), rel=1e-6)
    assert float(loss_i) == pytest.approx(math.log(4 / 3) + 2 * 0.5 * math.log(4 / 3) + 3 * 2.5, rel=1e-6)


def test_pfedck_clusters_into_the_configured_number_and_no_more_clients_than_clusters_need_none() -> None:
    """Updates in three directions fall in ``clusters`` = 3 groups. With as many clients as clusters each is its own
    cluster without clustering, even a client whose model did not move (cosine distance cannot place a zero update)."""
    e1, e2, e3 = torch.eye(3)
    assert cluster_updates([e1, e2, e3, 2 * e1 + 0.1 * e3], 3) == [0, 1, 2, 0]
    assert cluster_updates([torch.zeros(3), e1, e2], 3) == [0, 1, 2]


@pytest.mark.parametrize("persistent", [False, True])
def test_pfedck_interactive_optimiser_is_fresh_each_round_unless_persistent_and_follows_the_lr_schedule(
        persistent: bool) -> None:
    """I_k's optimiser, like the personal model's: rebuilt every round (persistent: kept, its moments too), at
    the round's learning rate (.01 halved every round: .005 in round 2)."""
    from bench.algorithms.pfedck import PFedCK, PFedCKClient, PFedCKParams
    from bench.engine.context import Context
    from bench.engine.state import ClientData

    cfg = small_config(training={"optimizer": {"name": "adam", "lr": 0.01, "persistent": persistent},
                                 "lr_decay": {"every": 1, "factor": 0.5}}, model={"name": "mlp"})
    ctx = Context(cfg, (1, 8, 8), 10, torch.device("cpu"))
    x, y = torch.rand(8, 1, 8, 8, generator=torch.Generator().manual_seed(0)), torch.arange(8)
    client = Client(0, ClientData(x, y, x, y), ctx.build_model("personal"),
                    PFedCKClient(interactive=ctx.build_model("interactive")))
    algo = PFedCK(PFedCKParams(), ctx)
    algo.local_pass(1, client)
    first = client.state.optimizer
    assert first is not None and first.param_groups[0]["lr"] == 0.01
    algo.local_pass(2, client)
    second = client.state.optimizer
    assert second is not None and (second is first) == persistent and second.param_groups[0]["lr"] == 0.005


def _pfedck_client(batch_size: int, **training: Any) -> tuple[Any, Client]:
    """A pFedCK client of 8 samples on the MLP, its context at ``training.batch_size`` = ``batch_size``."""
    from bench.algorithms.pfedck import PFedCKClient
    from bench.engine.context import Context
    from bench.engine.state import ClientData

    cfg = small_config(training={"batch_size": batch_size, **training}, model={"name": "mlp"})
    ctx = Context(cfg, (1, 8, 8), 10, torch.device("cpu"))
    x, y = torch.rand(8, 1, 8, 8, generator=torch.Generator().manual_seed(0)), torch.arange(8)
    return ctx, Client(3, ClientData(x, y, x, y), ctx.build_model("personal"),
                       PFedCKClient(interactive=ctx.build_model("interactive")))


@pytest.mark.parametrize("batch_size", [8, 3])
def test_pfedck_local_pass_reports_the_mean_of_the_personal_models_batch_losses(
        batch_size: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The pass's loss is the mean over its batches (one batch, or three of 3, 3 and 2) of L_P as P's loop took it."""
    from bench.algorithms.pfedck import PFedCK, PFedCKParams
    from bench.engine.loop import Loop

    ctx, client = _pfedck_client(batch_size)
    taken: list[float] = []
    run = Loop.run

    def personal_run(loop: Loop, batches: Any, step_fn: Any) -> float:
        loss = run(loop, batches, step_fn)
        if loop.params and loop.params[0] is next(client.model.parameters()):
            taken.append(loss)
        return loss

    monkeypatch.setattr(Loop, "run", personal_run)
    loss = PFedCK(PFedCKParams(), ctx).local_pass(1, client)
    assert len(taken) == (1 if batch_size == 8 else 3)
    assert loss == pytest.approx(sum(taken) / len(taken), rel=1e-12)


def test_pfedck_interactive_model_trains_as_the_personal_one_clipped_and_guarded(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """I_k's loop is P_k's in all but its model: its own parameters, the round, the client's id (a divergence
    message names it), ``training.grad_clip`` and the run's loss guard."""
    import bench.algorithms.pfedck as pfedck

    ctx, client = _pfedck_client(8, grad_clip=0.5)
    loops = _recorded_loops(monkeypatch, pfedck)
    personal = ctx.client_loop(client, 2)
    pfedck.PFedCK(pfedck.PFedCKParams(), ctx).local_pass(2, client)
    assert client.state.interactive is not None and len(loops) == 1
    interactive = loops[0]
    assert [id(p) for p in interactive.params] == [id(p) for p in client.state.interactive.parameters()]
    assert (interactive.round, interactive.who, interactive.grad_clip) == (2, 3, 0.5)
    assert (personal.round, personal.who, personal.grad_clip) == (2, 3, 0.5)
    assert interactive.guard is ctx.loss_guard and personal.guard is ctx.loss_guard


def test_pfedck_server_rounds_by_hand() -> None:
    """Two clusters, clients 0–3 of sizes 1, 3, 2, 2, all taking part twice; client 4 never does.
    Round 1, everyone sent the global model w = (10, 0), updates ΔI = (1, 0), (2, .2), (0, 1), (.1, 3): clusters
    {0, 1} and {2, 3}, each the size-weighted mean of its members' I_k, the global model the mean over all.
    Round 2, each client sent its cluster's model (client 4 the global one), updates ΔI from those = (1, 0), (0, 1),
    (2, .1), (.1, 3): clusters {0, 2} and {1, 3} (against the global model, or with I_k + sent, they differ)."""
    from types import SimpleNamespace

    from bench.algorithms.pfedck import Clusters, InteractiveUpdate, PFedCK, PFedCKParams
    from bench.engine.protocol import Metrics

    model = nn.Linear(2, 1, bias=False)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[10.0, 0.0]]))
    server = Server(model, Clusters())
    algo = PFedCK(PFedCKParams(clusters=2), cast(Any, None))
    sizes = (1, 3, 2, 2)
    clients = [SimpleNamespace(cid=cid) for cid in range(5)]

    def sent(cid: int) -> list[float]:
        return algo.broadcast(1, server, cid).state["weight"].flatten().tolist()

    def round_(index: int, deltas: list[list[float]]) -> Metrics:
        updates = [InteractiveUpdate(cid, n, {"weight": torch.tensor([sent(cid)]) + torch.tensor([d])})
                   for cid, (n, d) in enumerate(zip(sizes, deltas))]
        return algo.aggregate(index, server, updates)

    def weight(state: dict[str, torch.Tensor]) -> list[float]:
        return state["weight"].flatten().tolist()

    assert all(sent(cid) == [10.0, 0.0] for cid in range(5))
    assert round_(1, [[1.0, 0.0], [2.0, 0.2], [0.0, 1.0], [0.1, 3.0]]) == {"clusters": 2.0}
    # I_k = (11, 0), (12, .2), (10, 1), (10.1, 3)
    assert [weight(m) for m in server.state.models] == [pytest.approx([11.75, 0.15]), pytest.approx([10.05, 2.0])]
    assert weight(model.state_dict()) == pytest.approx([10.9, 1.075])  # (11, 0) + 3(12, .2) + 2(10, 1) + 2(10.1, 3), /8
    assert algo.client_records(server, cast(Any, clients)) == {"cluster": {0: 0.0, 1: 0.0, 2: 1.0, 3: 1.0}}
    assert [sent(cid) for cid in range(5)] == [pytest.approx(w) for w in
                                               ([11.75, 0.15], [11.75, 0.15], [10.05, 2.0], [10.05, 2.0], [10.9, 1.075])]

    assert round_(2, [[1.0, 0.0], [0.0, 1.0], [2.0, 0.1], [0.1, 3.0]]) == {"clusters": 2.0}
    # I_k = (12.75, .15), (11.75, 1.15), (12.05, 2.1), (10.15, 5)
    assert [weight(m) for m in server.state.models] == [pytest.approx([36.85 / 3, 1.45]), pytest.approx([11.11, 2.69])]
    assert weight(model.state_dict()) == pytest.approx([11.55, 2.225])
    assert algo.client_records(server, cast(Any, clients)) == {"cluster": {0: 0.0, 1: 1.0, 2: 0.0, 3: 1.0}}
    assert sent(1) == pytest.approx([11.11, 2.69]) and sent(4) == pytest.approx([11.55, 2.225])


def test_pfedck_uploads_a_copy_of_the_trained_interactive_model_with_the_clients_id_and_size() -> None:
    from types import SimpleNamespace

    from bench.algorithms.pfedck import PFedCK, PFedCKClient, PFedCKParams

    interactive = nn.Linear(2, 1, bias=False)
    client = SimpleNamespace(cid=7, data=SimpleNamespace(num_samples=5), state=PFedCKClient(interactive=interactive))
    algo = PFedCK(PFedCKParams(), cast(Any, None))
    setattr(algo, "local_pass", lambda round_index, c: 0.25)  # local training itself: the interactive-optimiser test
    update, loss = algo.local_update(1, cast(Client, client))
    assert (update.cid, update.num_samples, loss) == (7, 5, 0.25)
    assert torch.equal(update.state["weight"], interactive.weight.detach())
    assert update.state["weight"].data_ptr() != interactive.weight.data_ptr()


def test_feddc_terms_by_hand() -> None:
    θ, h, w = [torch.tensor([1.0, 2.0])], [torch.tensor([0.5, 0.0])], [torch.tensor([1.0, 1.0])]
    assert float(drift_penalty(θ, h, w)) == pytest.approx(0.25 + 1.0)  # ‖θ + h − w‖² = .5² + 1²
    assert float(drift_penalty(θ, h, [torch.tensor([0.0, 1.0])])) == pytest.approx(2.25 + 1.0)  # 1.5² + 1²
    g, gk = [torch.tensor([1.0, -1.0])], [torch.tensor([0.0, 1.0])]
    assert float(correction_term(θ, g, gk)) == pytest.approx(1.0 * 1.0 + 2.0 * -2.0)  # ⟨θ, g − g_k⟩
    new = corrected_state(gk, g, [torch.tensor([0.2, -0.4])], steps=2, lr=0.1)
    assert new[0].tolist() == pytest.approx([0.0 - 1.0 - 1.0, 1.0 + 1.0 + 2.0])  # g_k − g − Δ/(Kη)


def _feddc_client(**state: list[torch.Tensor]) -> Client:
    from types import SimpleNamespace

    from bench.algorithms.feddc import FedDCClient

    return cast(Client, SimpleNamespace(cid=0, model=DiagonalLinear(), data=SimpleNamespace(num_samples=5),
                                        state=FedDCClient(**state)))


def test_feddc_local_loss_by_hand() -> None:
    """θ = W = diag(1, 2), w = I, h = 0, g − g_k = 1 (all ones): CE + (α/2)‖θ + h − w‖² + ⟨θ, g − g_k⟩ =
    CE + (2/2)·1 + 3 with α = 2; without the correction (code) CE + 1."""
    from bench.algorithms.feddc import FedDC, FedDCParams
    from bench.engine.loop import Step

    x, y = torch.tensor([[1.0, 0.0], [0.0, 1.0]]), torch.tensor([0, 0])
    client = _feddc_client(drift=[torch.zeros(2, 2)], global_params=[torch.eye(2)],
                           server_correction=[torch.ones(2, 2)], correction=[torch.zeros(2, 2)])
    ce = float(torch.nn.functional.cross_entropy(x * torch.tensor([1.0, 2.0]), y))
    for correction, extra in ((True, 1.0 + 3.0), (False, 1.0)):
        loss = FedDC(FedDCParams(alpha=2.0, correction=correction), cast(Any, None)).local_loss(
            Step(1, 0), client, x, y)
        assert float(loss.detach()) == pytest.approx(ce + extra, rel=1e-6)


def test_feddc_local_update_by_hand() -> None:
    """Training moves θ from w = I by Δ = diag(.3, −.6) in K = 3 steps at η = .1: h ← h + Δ = .1 + Δ; the
    upload is θ + h; g_k ← g_k − g − Δ/(Kη) = .2 − .5 − diag(1, −2), and how much it moved is sent."""
    from types import SimpleNamespace

    from bench.algorithms.feddc import FedDC, FedDCParams

    step = torch.tensor([[0.3, 0.0], [0.0, -0.6]])

    def train(client: Client, round_index: int, loss_fn: Any) -> float:
        with torch.no_grad():
            client.model.classifier.weight.copy_(torch.eye(2) + step)
        return 0.25

    ctx = SimpleNamespace(batch_indices=lambda n, *key: iter([0, 1, 2]), local_train=train, lr_at=lambda r: 0.1)
    client = _feddc_client(drift=[torch.full((2, 2), 0.1)], global_params=[torch.eye(2)],
                           server_correction=[torch.full((2, 2), 0.5)], correction=[torch.full((2, 2), 0.2)])
    update, loss = FedDC(FedDCParams(), cast(Any, ctx)).local_update(1, client)
    assert loss == 0.25 and update.num_samples == 5
    assert torch.allclose(client.state.drift[0], torch.tensor([[0.4, 0.1], [0.1, -0.5]]))
    assert torch.allclose(update.state["classifier.weight"], torch.tensor([[1.7, 0.1], [0.1, -0.1]]))
    moved = torch.tensor([[-1.5, -0.5], [-0.5, 1.5]])
    assert torch.allclose(client.state.correction[0], 0.2 + moved) and torch.allclose(update.payload[0], moved)


@pytest.mark.parametrize("correction", [True, False])
def test_feddc_aggregate_takes_the_unweighted_mean_and_moves_g_by_the_size_weighted_changes(correction: bool) -> None:
    """Two clients with n = 1 and 3 upload θ + h = 0 and 4, g_k moved by 4 and 8: the model becomes the unweighted
    mean 2 (not the size-weighted 3), and g (from .5) moves by ¼·4 + ¾·8 = 7 to 7.5; without the correction
    (code) g stays at .5."""
    from bench.algorithms.feddc import FedDC, FedDCParams, FedDCServer
    from bench.engine.messages import Update

    server = Server(nn.Linear(1, 1, bias=False), FedDCServer([torch.full((1, 1), 0.5)]))
    updates = [Update(cid, n, {"weight": torch.full((1, 1), w)}, [torch.full((1, 1), moved)] if correction else [])
               for cid, (n, w, moved) in enumerate(((1, 0.0, 4.0), (3, 4.0, 8.0)))]
    FedDC(FedDCParams(correction=correction), cast(Any, None)).aggregate(1, cast(Server, server), updates)
    assert float(server.model.weight.detach()) == pytest.approx(2.0)
    assert float(server.state.correction[0]) == pytest.approx(7.5 if correction else 0.5)


def test_fedas_prototypes_alignment_and_fisher_trace() -> None:
    class Linear(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.classifier = nn.Linear(2, 2, bias=False)
            with torch.no_grad():
                self.classifier.weight.copy_(torch.eye(2))

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return x, self.classifier(x)

    x = torch.tensor([[1.0, 0.0], [3.0, 0.0], [0.0, 2.0]])
    y = torch.tensor([0, 0, 1])
    protos = class_prototypes(Linear(), x, y, 3)
    assert protos[:2].tolist() == [[2.0, 0.0], [0.0, 2.0]] and torch.isnan(protos[2]).all()
    # batch class means (2, 0) and (0, 2) match exactly; shifting class 1's by (1, 1) costs MSE 1
    assert float(alignment_loss(x, y, protos)) == 0.0
    assert float(alignment_loss(x + torch.tensor([[0.0, 0.0], [0.0, 0.0], [1.0, 1.0]]), y, protos)) == 1.0
    # FIM trace: one sample, logits = x = (1, 0), label 0: ∂NLL/∂W = (softmax − onehot) xᵀ
    p = torch.softmax(torch.tensor([1.0, 0.0]), 0)
    grad = torch.outer(p - torch.tensor([1.0, 0.0]), torch.tensor([1.0, 0.0]))
    assert fisher_trace(Linear(), [(x[:1], y[:1])]) == pytest.approx(float((grad ** 2).sum()), rel=1e-6)
    assert fisher_trace(Linear(), [(x[:1], y[:1])] * 2) == pytest.approx(2 * float((grad ** 2).sum()), rel=1e-6)


class _Body(nn.Module):
    """features = B·x (B = b·I), logits = classifier(features)."""

    def __init__(self, b: float) -> None:
        super().__init__()
        self.body = nn.Linear(2, 2, bias=False)
        self.classifier = nn.Linear(2, 2)
        with torch.no_grad():
            self.body.weight.copy_(b * torch.eye(2))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        features = self.body(x)
        return features, self.classifier(features)


@pytest.mark.parametrize(("epochs", "mean_loss", "body"), [(0, 0.0, 1.0), (1, 1.0, 1.1), (2, (1.0 + 0.81) / 2, 1.19)])
def test_fedas_alignment_moves_the_feature_extractor_towards_the_previous_models_prototypes(
        epochs: int, mean_loss: float, body: float) -> None:
    """x = (1 0), (0 1) of classes 0, 1; the previous model's body 2I gives prototypes (2 0), (0 2); the
    received body I gives features (1 0), (0 1): loss ½·1 + ½·1, gradient −I, so one SGD step at lr .1 makes the
    body 1.1·I; a second epoch (loss .9², gradient −.9·I) 1.19·I; the loss returned is the epochs' mean. The
    classifier is not aligned; no epochs align nothing."""
    from types import SimpleNamespace

    from bench.algorithms.fedas import FedAS, FedASClient, FedASParams

    x, y = torch.eye(2), torch.tensor([0, 1])
    ctx = SimpleNamespace(num_classes=2, batches=lambda x_, y_, *key: [(x_, y_)])
    client = cast(Client, SimpleNamespace(cid=0, model=_Body(1.0), data=SimpleNamespace(x=x, y=y),
                                          state=FedASClient(previous=_Body(2.0))))
    classifier = copy.deepcopy(client.model.classifier.state_dict())
    loss = FedAS(FedASParams(alignment_lr=0.1, alignment_epochs=epochs), cast(Any, ctx)).align(1, client)
    assert loss == pytest.approx(mean_loss)
    assert torch.allclose(client.model.body.weight.detach(), torch.eye(2) * body)
    assert all(torch.equal(v, classifier[k]) for k, v in client.model.classifier.state_dict().items())


def test_fedas_aggregates_with_fisher_trace_weights_or_equal_ones_when_all_are_zero() -> None:
    """Traces .1 and .2 (summing under 1): w = (.1·0 + .2·3)/.3 = 2; all traces 0: the plain mean 1.5. Only the
    clients with a trace record one."""
    from types import SimpleNamespace

    from bench.algorithms.fedas import FedAS, FedASClient, FedASParams
    from bench.engine.messages import Update

    fedas = FedAS(FedASParams(), cast(Any, None))
    for traces, expected in (((0.1, 0.2), 2.0), ((0.0, 0.0), 1.5)):
        server = Server(nn.Linear(1, 1, bias=False), None)
        updates = [Update(cid, 1, {"weight": torch.full((1, 1), w)}, trace)
                   for cid, (w, trace) in enumerate(zip((0.0, 3.0), traces))]
        fedas.aggregate(1, cast(Server, server), updates)
        assert float(server.model.weight.detach()) == pytest.approx(expected)
    clients = [SimpleNamespace(cid=0, state=FedASClient(fisher=2.0)), SimpleNamespace(cid=1, state=FedASClient())]
    assert fedas.client_records(cast(Server, None), cast(Any, clients)) == {"fisher_trace": {0: 2.0}}


def test_fedmpr_prunes_the_smallest_tenth_over_all_parameters() -> None:
    net = nn.Linear(5, 2)  # 10 weights + 2 biases
    with torch.no_grad():
        net.weight.copy_(torch.arange(1.0, 11.0).view(2, 5))
        net.bias.copy_(torch.tensor([0.05, -20.0]))
    threshold = magnitude_prune(net, 0.1)
    values = torch.cat([net.weight.view(-1), net.bias])
    assert threshold == pytest.approx(float(torch.quantile(torch.tensor(
        [0.05, 20.0, *range(1, 11)], dtype=torch.float32), 0.1)))
    assert int((values == 0).sum()) == 2 and float(net.bias[0].detach()) == 0.0 and float(net.weight[0, 0].detach()) == 0.0


def test_fedmpr_l2_term_is_half_the_squared_norm() -> None:
    assert float(l2_penalty([torch.tensor([1.0, 2.0]), torch.tensor([[2.0]])])) == 4.5  # ½(1 + 4 + 4)


def test_fedmpr_local_loss_is_ce_of_noised_inputs_and_inverted_dropout_plus_half_lambda_norm() -> None:
    """x̃ = x + σ·ε (ε ~ N(0, 1)), then features·m/(1 − p) with m = [u ≥ p] (u ~ U(0, 1)), both drawn in this
    order from the step's stream; loss = CE(W·that, y) + λ·½‖θ‖² (‖W‖² = 5). Without noise and dropout it is
    CE(W·x, y) + λ·2.5."""
    from bench.engine.loop import Step

    x, y = torch.tensor([[1.0, 0.0], [0.0, 1.0], [2.0, 1.0]]), torch.tensor([0, 1, 1])
    client = cast(Client, type("C", (), {"model": DiagonalLinear()})())
    σ, p, λ = 0.5, 0.25, 0.1
    algo = FedMPR(FedMPRParams(input_noise=σ, dropout=p, weight_decay=λ), ctx=cast(Any, None))
    loss = algo.local_loss(Step(1, 0, torch.Generator().manual_seed(7)), client, x, y)
    draws = torch.Generator().manual_seed(7)
    noised = x + σ * torch.randn(x.shape, generator=draws)
    kept = noised * (torch.rand(x.shape, generator=draws) >= p) / 0.75
    assert 0 < int((kept == 0).sum()) < 6  # the seed drops some features and keeps others
    expected = torch.nn.functional.cross_entropy(kept * torch.tensor([1.0, 2.0]), y) + λ * 2.5
    assert float(loss.detach()) == pytest.approx(float(expected), rel=1e-6)
    plain = FedMPR(FedMPRParams(input_noise=0.0, dropout=0.0, weight_decay=λ), ctx=cast(Any, None))
    expected = torch.nn.functional.cross_entropy(x * torch.tensor([1.0, 2.0]), y) + λ * 2.5
    assert float(plain.local_loss(Step(1, 0, None), client, x, y).detach()) == pytest.approx(float(expected), rel=1e-6)


@pytest.mark.parametrize(("noise", "dropout"), [(0.1, 0.2), (0.1, 0.0), (0.0, 0.2), (0.0, 0.0)])
def test_fedmpr_draws_noise_and_dropout_from_each_clients_own_stream_each_round(noise: float, dropout: float) -> None:
    """Local training gets the stream of (client, round) whenever noise or dropout is on, and none otherwise."""
    asked: list[tuple] = []
    given: list[torch.Generator | None] = []

    class Ctx:
        def stream(self, *key: int | str) -> torch.Generator:
            asked.append(key)
            return torch.Generator()

        def local_train(self, client: Client, round_index: int, loss_fn: Any, rng: torch.Generator | None = None) -> float:
            given.append(rng)
            return 0.0

    algo = FedMPR(FedMPRParams(input_noise=noise, dropout=dropout, prune_fraction=0.0), ctx=cast(Any, Ctx()))
    algo.update = lambda client: None  # type: ignore[method-assign,assignment,return-value]
    for cid, round_index in ((3, 2), (1, 2), (3, 1)):
        algo.local_update(round_index, cast(Client, type("C", (), {"cid": cid, "model": nn.Linear(1, 1)})()))
    if noise or dropout:
        assert [key[1:] for key in asked] == [(3, 2), (1, 2), (3, 1)] and len(set(asked)) == 3
        assert all(isinstance(rng, torch.Generator) for rng in given)
    else:
        assert asked == [] and given == [None, None, None]


def test_a_rewarded_method_trains_on_its_train_split_or_with_data_all_on_all_its_local_data() -> None:
    """``data: train`` (paper) trains on the train split and scores local_acc on the local test split; ``data:
    all`` (the released code) trains on train and local test splits together and scores the personal model on
    them too; the other evaluations stay."""
    from types import SimpleNamespace

    from bench.engine.evaluation import LOCAL_ACC, VAL_ACC, Evaluation

    data = SimpleNamespace(x=torch.zeros(2, 1), y=torch.zeros(2), with_test=(torch.ones(3, 1), torch.ones(3)))
    client = cast(Client, SimpleNamespace(data=data))
    ctx = cast(Any, SimpleNamespace(config=small_config(partition={"num_clients": 4, "validation_fraction": 0.1})))
    train, everything = CGSV(CGSVParams(data="train"), ctx), CGSV(CGSVParams(data="all"), ctx)
    assert train.pool(client) == (data.x, data.y) and everything.pool(client) is data.with_test
    assert LOCAL_ACC in train.evaluations() and VAL_ACC in train.evaluations()
    assert everything.evaluations() == [Evaluation("local_acc", "client", "local_all") if e == LOCAL_ACC else e
                                        for e in train.evaluations()]


def test_only_the_clients_taking_part_train_and_upload() -> None:
    """The round's exchange asks :meth:`taking_part` which clients train (CFFL: not those that have left)."""
    from bench.algorithms.cffl import CFFL, CFFLParams

    cffl = CFFL(CFFLParams(), cast(Any, None))
    assert cffl.phases(1)[0].who == cffl.taking_part


def test_only_the_clients_with_a_reward_are_sent_one() -> None:
    """The reward exchange goes to the clients the server computed a reward for this round (not to one that left)."""
    server = Server(None, Reputations(rewards={0: SparseVector(None, torch.zeros(2), 2),
                                               2: SparseVector(None, torch.ones(2), 2)}))
    cgsv = CGSV(CGSVParams(), cast(Any, None))
    assert cgsv.rewarded(server, [0, 1, 2]) == [0, 2] and cgsv.phases(1)[1].who == cgsv.rewarded


def test_a_rewarded_method_starts_from_its_own_model_or_the_broadcast_global_one() -> None:
    """``start: own`` sends nothing and the client trains its personal model; ``global`` sends the global model."""
    model = DiagonalLinear()
    server = Server(model, Reputations())
    assert CGSV(CGSVParams(start="own"), cast(Any, None)).broadcast(1, server, 0) is None
    sent = CGSV(CGSVParams(start="global"), cast(Any, None)).broadcast(1, server, 0)
    assert sent is not None and torch.equal(sent.state["classifier.weight"], model.classifier.weight)


@pytest.mark.parametrize("data", ["train", "all"])
def test_a_rewarded_client_trains_on_its_pool_and_reports_the_loss(data: str) -> None:
    from types import SimpleNamespace

    trained_on: list[Any] = []

    def local_train(client: Client, round_index: int, loss_fn: Any, data: Any = None) -> float:
        trained_on.append(data)
        return 0.5

    split = SimpleNamespace(x=torch.zeros(2, 2), y=torch.zeros(2), with_test=(torch.ones(3, 2), torch.ones(3)))
    client = cast(Client, SimpleNamespace(cid=0, model=DiagonalLinear(), data=split, state=RewardedClient()))
    cgsv = CGSV(CGSVParams(data=data), cast(Any, SimpleNamespace(local_train=local_train)))
    upload, metrics = cgsv.client_update(1, client, None)
    assert metrics == {"train_loss": 0.5} and trained_on == [cgsv.pool(client)]
    assert upload.num_samples == (2 if data == "train" else 3)


# -- the recorded rewards on a tiny federation ----------------------------------------------------------


def tiny_run(data_dir: Path, name: str, tmp_path: Path, model: str = "mlp", **params: object) -> Records:
    from bench.runner.executor import RunRequest, run_experiment

    cfg = small_config(algorithm={"name": name, **params}, training={"rounds": 2, "optimizer": {"name": "adam",
                                                                                                  "lr": 0.003}},
                       partition={"num_clients": 4, "local_test_fraction": 0.2, "validation_fraction": 0.1},
                       model={"name": model})
    out = tmp_path / f"{name}-{len(list(tmp_path.iterdir()))}"
    run_experiment(RunRequest(cfg, out, data_dir))
    return Records.from_csv((out / "records.csv").read_text(), name)


def test_the_recorded_reward_is_each_methods_formula_of_its_recorded_reputation(data_dir: Path, tmp_path: Path) -> None:
    """Every round, per client: CGSV's share = ⌊D·tanh(r)/max tanh⌋/D; FedAVE's = .3 + .7·tanh(r); CFFL (paper)
    q = r/max r; FedSAC's submodel share follows its reputation (⌊r·96/100⌋ of the filters from the
    allocation round on); reputations sum to 1 where they are a distribution."""
    for name, params in (("cgsv", {}), ("cgsv", {"mode": "code"}), ("fedave", {"distribution": "none"}),
                         ("cffl", {})):
        records = tiny_run(data_dir, name, tmp_path, **params)
        for round_ in (1, 2):
            rep = torch.tensor(list(records.clients("reputation", round_).values()), dtype=torch.float64)
            share = list(records.clients("reward_share", round_).values())
            assert float(rep.sum()) == pytest.approx(1.0)
            if name == "cgsv":  # ⌊D·tanh(r)/max tanh⌋/D: within 1/D of the ratio
                t = torch.tanh(rep)
                assert share == pytest.approx([float(v / (t.max() + 1e-9)) for v in t], abs=1e-4)
            elif name == "fedave":
                assert share == pytest.approx([0.3 + 0.7 * math.tanh(float(r)) for r in rep])
            else:
                assert share == pytest.approx([float(r / rep.max()) for r in rep])
    sac = tiny_run(data_dir, "fedsac", tmp_path, model="cnn", contribution_epochs=2, allocation_round=2)
    contribution = torch.tensor(list(sac.clients("contribution", 2).values()), dtype=torch.float64)
    assert list(sac.clients("reputation", 2).values()) == pytest.approx(reputations(contribution, 2.0).tolist())
    assert set(sac.clients("submodel_share", 1).values()) == {1.0}  # before the allocation: the full model
    for r, share in zip(sac.clients("reputation", 2).values(), sac.clients("submodel_share", 2).values()):
        assert share == pytest.approx(max(1, int(r * 48 / 100)) / 48)  # the cnn's 16 + 32 filters


def test_fedsac_contribution_is_the_standalone_runs_accuracy_bit_for_bit(data_dir: Path, tmp_path: Path) -> None:
    """FedSAC measures c_k as Standalone trains: with Standalone's protocol (persistent optimiser, lr factor,
    epochs = Standalone's rounds) the two are the same numbers."""
    from bench.runner.executor import RunRequest, run_experiment

    common = {"partition": {"num_clients": 3, "local_test_fraction": 0.2}, "model": {"name": "cnn"}}
    alone = small_config(algorithm={"name": "standalone"}, training={"rounds": 3, "optimizer": {
        "name": "adam", "lr": 0.0005, "persistent": True}}, **common)
    sac = small_config(algorithm={"name": "fedsac", "mode": "code", "contribution_epochs": 3,
                                  "contribution_lr_factor": 0.1},
                       training={"rounds": 1, "optimizer": {"name": "adam", "lr": 0.005}}, **common)
    run_experiment(RunRequest(alone, tmp_path / "alone", data_dir))
    run_experiment(RunRequest(sac, tmp_path / "sac", data_dir))
    standalone = Records.from_csv((tmp_path / "alone" / "records.csv").read_text(), "alone").clients("local_acc", 3)
    contribution = Records.from_csv((tmp_path / "sac" / "records.csv").read_text(), "sac").clients("contribution", 1)
    assert list(contribution.values()) == list(standalone.values())


def _captured_round(monkeypatch: pytest.MonkeyPatch, data_dir: Path, tmp_path: Path, name: str,
                    rounds: int = 1, **readings: Any) -> tuple[dict, Records]:
    """``rounds`` rounds of ``name`` (paper mode, or the given ``readings``) on a tiny federation, with what its
    server saw at the last aggregation: the global vector before it (and after it, ``after``), each client's dense update and sample
    count, the validation set, and a model to score candidate parameters with."""
    from bench.algorithms import get_algorithm
    from bench.engine.vectors import model_vector

    cls = get_algorithm(name)
    seen: dict = {}
    original = cls.aggregate

    def capture(self, round_index, server, updates):  # type: ignore[no-untyped-def]
        keys = self.keys(server.model)
        seen.update(start=model_vector(server.model, keys).double(), keys=keys, model=self.ctx.build_model("hand"),
                    cids=[u.cid for u in updates], sizes=[float(u.num_samples) for u in updates],
                    deltas=[u.vector.dense().double() for u in updates], validation=self.validation(),
                    states=[{k: v.clone() for k, v in u.model.items()} if hasattr(u, "model") else None
                            for u in updates],
                    starts=[getattr(u, "start", None) for u in updates],
                    train_losses=[getattr(u, "train_losses", None) for u in updates])
        metrics = original(self, round_index, server, updates)
        seen.update(after=model_vector(server.model, keys).double(), share=dict(server.state.share),
                    rewards={cid: v.dense().double() for cid, v in server.state.rewards.items()})
        return metrics

    monkeypatch.setattr(cls, "aggregate", capture)
    cfg = small_config(algorithm={"name": name, **readings}, training={"rounds": rounds, "optimizer": {"name": "adam", "lr": 0.003}},
                       partition={"num_clients": 4, "local_test_fraction": 0.2, "validation_fraction": 0.1},
                       model={"name": "mlp"})
    from bench.runner.executor import RunRequest, run_experiment

    run_experiment(RunRequest(cfg, tmp_path / name, data_dir))
    return seen, Records.from_csv((tmp_path / name / "records.csv").read_text(), name)


@pytest.mark.parametrize("distribution", ["none", "kl"])
def test_fedave_from_the_global_model_moves_it_by_the_size_weighted_mean_update(
        monkeypatch: pytest.MonkeyPatch, data_dir: Path, tmp_path: Path, distribution: str) -> None:
    """``start: global`` (FedAKD's script), round 2: every client trains from the broadcast global model (its trained
    model minus its update is that model; with the distribution term, the start model it reports is it too), and the
    server's global model moves by +Σ_k n_k/N · Δ_k."""
    from bench.engine.vectors import flatten

    seen, _ = _captured_round(monkeypatch, data_dir, tmp_path, "fedave", rounds=2, start="global",
                              distribution=distribution, upload_fraction=1.0)
    total = sum(seen["sizes"])
    expected = seen["start"] + sum(n / total * d for n, d in zip(seen["sizes"], seen["deltas"]))
    assert float((seen["after"] - seen["start"]).abs().max()) > 1e-4  # the round moved the model
    torch.testing.assert_close(seen["after"], expected, rtol=0, atol=1e-6)
    for state, delta in zip(seen["states"], seen["deltas"]):
        torch.testing.assert_close(flatten(state, seen["keys"]).double() - delta, seen["start"], rtol=0, atol=1e-6)
    if distribution == "kl":
        for start in seen["starts"]:
            torch.testing.assert_close(flatten(start, seen["keys"]).double(), seen["start"], rtol=0, atol=0)


@pytest.mark.parametrize("download,threshold_rule", [("reputation", "fixed"), ("size", "fixed"),
                                                     ("authors", "adaptive")])
def test_cffl_server_round_by_hand(monkeypatch: pytest.MonkeyPatch, data_dir: Path, tmp_path: Path, download: str,
                                   threshold_rule: str) -> None:
    """Round 1 recomputed from what the server saw: u = Σ n_k/N · u_k moves the global model; acc_k of w_g + u_k on
    the validation set gives the reputations (c_th 0.05, or (1/3)/|R| adaptive); each client's reward:
    ``reputation`` the top r_k/max r share of u − (n_k/N)·u_k; ``size`` all of u − (n_k/max n)·u_k (share 1);
    ``authors`` the top (r_k/max r)(n_k/max n) share of u, less (n_k/N)·u_k."""
    from bench.algorithms.cffl import adaptive_threshold
    from bench.engine.vectors import largest_fraction, load_vector

    seen, _ = _captured_round(monkeypatch, data_dir, tmp_path, "cffl", download=download,
                              threshold_rule=threshold_rule, upload_fraction=1.0)
    sizes, deltas = seen["sizes"], seen["deltas"]
    total = sum(sizes)
    u = sum(n / total * d for n, d in zip(sizes, deltas))
    torch.testing.assert_close(seen["after"], seen["start"] + u, rtol=0, atol=1e-6)
    acc = []
    for delta in deltas:
        load_vector(seen["model"], (seen["start"] + u + delta).float(), seen["keys"])
        acc.append(_hand_accuracy(seen["model"], *seen["validation"]))
    threshold = 0.05 if threshold_rule == "fixed" else adaptive_threshold(len(deltas))
    rep = cffl_reputation(torch.full((4,), 0.25, dtype=torch.float64), torch.tensor(acc, dtype=torch.float64), 1.0,
                          threshold)
    top = float(rep.max())
    for cid, n, d in zip(seen["cids"], sizes, deltas):
        if download == "size":
            expected, share = u - n / max(sizes) * d, 1.0
        elif download == "authors":
            share = float(rep[cid]) / top * n / max(sizes)
            expected = largest_fraction(u, share).dense() - (n / total if share > 0 else 0.0) * d
        else:
            share = float(rep[cid]) / top
            expected = largest_fraction(u - n / total * d, share).dense()
        assert seen["share"][cid] == pytest.approx(share, abs=1e-6)
        torch.testing.assert_close(seen["rewards"][cid], expected, rtol=0, atol=1e-6)
    assert len({round(v, 6) for v in seen["share"].values()}) > 1 or download == "size"  # the clients differ


@pytest.mark.parametrize("download", ["size", "reputation"])
def test_cffl_takes_its_reward_into_the_trained_copy_with_its_own_upload_or_into_the_personal_model(
        download: str) -> None:
    """``size`` (the code): the trained copy of w_g plus its own upload u_k and the others' aggregate g_k;
    otherwise the reward is added to the personal model as it stands."""
    from bench.algorithms.cffl import CFFL, CFFLParams

    model = nn.Linear(2, 1, bias=False)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[5.0, 6.0]]))
    client = Client(0, cast(Any, None), model, RewardedClient(sent=torch.tensor([0.25, 0.5])))
    CFFL(CFFLParams(download=download), cast(Any, None)).take_reward(client, torch.tensor([1.0, -1.0]), ["weight"])
    own = [0.25, 0.5] if download == "size" else [0.0, 0.0]
    assert model.weight.detach().flatten().tolist() == [5.0 + own[0] + 1.0, 6.0 + own[1] - 1.0]


def _cffl_aggregate(params: dict[str, Any], reputation: list[float], accuracies: list[float],
                    clients: int = 4) -> tuple[Reputations, dict[str, float]]:
    """One CFFL aggregation of the first ``clients`` of four uploads (sizes 10, 20, 30, 40) whose validation accuracies
    are ``accuracies``: the server's state after it and the round's metrics."""
    from types import SimpleNamespace

    from bench.algorithms.cffl import CFFL, CFFLParams

    scores = iter(accuracies)
    ctx = SimpleNamespace(accuracy=lambda model, x, y: next(scores), build_model=lambda name: nn.Linear(3, 1, bias=False),
                          server_validation=lambda source: (torch.zeros(1, 3), torch.zeros(1, dtype=torch.long)))
    server = Server(nn.Linear(3, 1, bias=False), Reputations(torch.tensor(reputation, dtype=torch.float64)))
    uploads = [torch.tensor([1.0, 0.0, 0.0]), torch.tensor([0.0, 2.0, 0.0]), torch.tensor([0.0, 0.0, 3.0]),
               torch.tensor([1.0, 1.0, 1.0])]
    metrics = CFFL(CFFLParams(**params), cast(Any, ctx)).aggregate(
        1, server, [VectorUpload(k, 10 * (k + 1), SparseVector(None, u, 3)) for k, u in enumerate(uploads[:clients])])
    return server.state, dict(metrics)


@pytest.mark.parametrize("rule,left", [("fixed", False), ("adaptive", True)])
def test_cffl_a_client_under_the_threshold_leaves_with_nothing(rule: str, left: bool) -> None:
    """Reputations (.86/3 ×3, .14), accuracies (.5, .5, .5, 0): client 3's new reputation is .07, above the fixed
    c_th = .05 and under the adaptive (1/3)/4; a client that leaves gets share 0 and a zero reward (its own upload
    is not subtracted either)."""
    state, metrics = _cffl_aggregate({"download": "authors", "threshold_rule": rule}, [0.86 / 3] * 3 + [0.14],
                                     [0.5] * 3 + [0.0])
    assert metrics == {"clients_left": 4.0}  # the clients that took part in the round
    assert state.reputation is not None
    assert (float(state.reputation[3]) == 0.0) == left
    assert (state.share[3] == 0.0) == left
    assert torch.count_nonzero(state.rewards[3].dense()) == (0 if left else 3)


@pytest.mark.parametrize("download", ["reputation", "authors"])
def test_cffl_when_every_client_leaves_nobody_is_rewarded(download: str) -> None:
    state, _ = _cffl_aggregate({"download": download, "threshold": 1.0}, [0.25] * 4, [0.5] * 4)
    assert state.reputation is not None and float(state.reputation.sum()) == 0.0
    assert state.share == {0: 0.0, 1: 0.0, 2: 0.0, 3: 0.0}
    assert all(torch.count_nonzero(r.dense()) == 0 for r in state.rewards.values())


def test_cffl_a_round_without_clients_trains_and_scores_nothing() -> None:
    state, metrics = _cffl_aggregate({}, [0.0] * 4, [], clients=0)
    assert metrics == {"train_loss": 0.0, "clients_left": 0.0} and state.share == {} and state.rewards == {}
    assert state.reputation is not None and state.reputation.tolist() == [0.0] * 4


def test_cffl_reputations_stay_when_no_client_scores_above_zero() -> None:
    """All accuracies 0: no contribution to weigh (sinh(0/0) would be NaN), so only the threshold applies."""
    rep = cffl_reputation(torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64), torch.zeros(3, dtype=torch.float64), 1.0,
                          0.05)
    assert rep.tolist() == pytest.approx([0.5, 0.3, 0.2])


def test_cffl_clients_whose_reputation_fell_to_zero_have_left() -> None:
    from bench.algorithms.cffl import CFFL, CFFLParams

    server = Server(None, Reputations(torch.tensor([0.5, 0.0, 0.5], dtype=torch.float64)))
    assert CFFL(CFFLParams(), cast(Any, None)).taking_part(server, [0, 1, 2]) == [0, 2]


def _hand_accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    model.eval()
    with torch.no_grad():
        return float((model(x)[1].argmax(1) == y).double().mean())


def test_recorded_rewards_equal_hand_computations_from_what_the_server_saw(monkeypatch: pytest.MonkeyPatch,
                                                                        data_dir: Path, tmp_path: Path) -> None:
    """Round 1 from equal reputations 1/4, recomputed here from the uploads and the validation set alone:
    FedAVE: s_k = validation accuracy of client k's trained model, r = (0.9/4 + 0.1·s_k)/Σ, share .3 + .7·tanh r;
    CFFL: acc_k of w_g + u + u_k (u the size-weighted mean update), c = sinh(acc/Σacc)/Σ, r = (½/4 + ½c)/Σ, none
    under 0.05, share r/max r; CGSV: u the reputation-weighted (equal) mean update, ψ_k = max(0, cos(Δ_k, u)),
    r = (0.9/4 + 0.1ψ)/Σ, share ⌊D·tanh r / max tanh⌋/D."""
    from bench.engine.aggregate import load_state
    from bench.engine.vectors import load_vector

    def recorded(records: Records) -> tuple[list[float], list[float]]:
        return (list(records.clients("reputation", 1).values()), list(records.clients("reward_share", 1).values()))

    seen, records = _captured_round(monkeypatch, data_dir, tmp_path, "fedave")
    scores, inverse_kl = [], []
    for state, start, train_losses in zip(seen["states"], seen["starts"], seen["train_losses"]):
        load_state(seen["model"], state)
        scores.append(_hand_accuracy(seen["model"], *seen["validation"]))
        load_state(seen["model"], start)  # κ: the start model's per-64 losses, train against validation
        seen["model"].eval()
        val_x, val_y = seen["validation"]
        with torch.no_grad():
            val = [float(nn.functional.cross_entropy(seen["model"](val_x[i:i + 64])[1], val_y[i:i + 64]))
                   for i in range(0, len(val_y), 64)]
        n = min(len(val), len(train_losses))
        p = [float(v) / float(train_losses[:n].sum()) for v in train_losses[:n]]
        q = [v / sum(val[:n]) for v in val[:n]]
        inverse_kl.append(1 / sum(a * math.log(a / b) for a, b in zip(p, q)))
    kappa = [v / max(inverse_kl) for v in inverse_kl]
    raw = [0.9 / 4 + 0.1 * s * k ** 2 for s, k in zip(scores, kappa)]
    rep = [v / sum(raw) for v in raw]
    assert len(set(scores)) > 1 and min(kappa) < 1  # the clients differ, so the check has something to tell apart
    assert recorded(records) == (pytest.approx(rep, abs=1e-9),
                                 pytest.approx([(0.3 + 0.7 * math.tanh(r)) * k for r, k in zip(rep, kappa)]))

    seen, records = _captured_round(monkeypatch, data_dir, tmp_path, "cffl")
    total = sum(seen["sizes"])
    mean_update = sum(n / total * d for n, d in zip(seen["sizes"], seen["deltas"]))
    acc = []
    for delta in seen["deltas"]:
        load_vector(seen["model"], (seen["start"] + mean_update + delta).float(), seen["keys"])
        acc.append(_hand_accuracy(seen["model"], *seen["validation"]))
    c = [math.sinh(a / sum(acc)) for a in acc]
    c = [v / (sum(c) + 1e-9) for v in c]
    r = [0.5 / 4 + 0.5 * v for v in c]
    r = [v / (sum(r) + 1e-9) for v in r]
    r = [0.0 if v < 0.05 else v for v in r]
    r = [v / sum(r) for v in r]
    assert recorded(records) == (pytest.approx(r, abs=1e-6), pytest.approx([v / max(r) for v in r], abs=1e-6))

    seen, records = _captured_round(monkeypatch, data_dir, tmp_path, "cgsv")
    assert [float(d.norm()) for d in seen["deltas"]] == pytest.approx([0.5] * 4, rel=1e-5)  # uploads at norm Γ
    u = sum(seen["deltas"]) / len(seen["deltas"])
    psi = [max(0.0, float(d @ u / ((d.norm() + 1e-9) * (u.norm() + 1e-9)))) for d in seen["deltas"]]
    raw = [0.9 / 4 + 0.1 * p for p in psi]
    rep = [v / sum(raw) for v in raw]
    dim = len(u)
    share = [int(dim * math.tanh(v) / (max(math.tanh(w) for w in rep) + 1e-9)) / dim for v in rep]
    assert recorded(records) == (pytest.approx(rep, abs=1e-6), pytest.approx(share, abs=1.5 / dim))


@pytest.mark.parametrize("source", ["split", "stored"])
def test_a_rewarded_methods_validation_set_is_the_one_its_params_name(source: str) -> None:
    """``validation: split`` (the paper) scores on the clients' validation splits, ``stored`` (the released code) on
    the first tenth of each client's stored data; the two differ, and the method asks for the one it names."""
    from bench.runner.federation import run_federation

    result = run_federation(small_config(algorithm={"name": "cgsv", "validation": source}, training={"rounds": 1},
                                         partition={"num_clients": 4, "local_test_fraction": 0.2,
                                                    "validation_fraction": 0.1}))
    algorithm = result.state.algorithm
    x, y = algorithm.validation()
    other_x, _ = algorithm.ctx.server_validation("stored" if source == "split" else "split")
    expected_x, expected_y = algorithm.ctx.server_validation(source)
    assert torch.equal(x, expected_x) and torch.equal(y, expected_y)
    assert x.shape != other_x.shape or not torch.equal(x, other_x)
