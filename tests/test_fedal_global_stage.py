"""FedAL's global stage by hand (pipelines/fedal/NOTES.md §2): the temperatures of the teacher and of the
discriminator's input, the distillation gradient the diagnostics use, the client's objective V_glo (eq. 15)
term by term in both of A2's readings, what the server reports each round, and the declarations a suite
reads (mechanisms, the fewest clients a round needs). Written to kill the mutants that the mutation command
(docs/testing.md) found surviving ``tests/test_fedal.py``."""
from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from torch import nn

from bench.algorithms.fedal import (ADVERSARIAL_MECHANISMS, FedAL, FedALClient, FedALParams, TeacherReply,
                                    adversarial_share, adversarial_term, discriminator_scores,
                                    distillation_gradient, lf_loss, teacher_distribution)
from bench.algorithms.knowledge_transfer import LogitsUpload, PublicOutputs
from bench.engine.distillation import soft_target_kl
from bench.engine.loop import Step
from bench.errors import BenchError
from bench.runner.federation import run_federation
from tests.test_fedal import K, fedal_config


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


class Scores(nn.Module):
    """A stub discriminator returning (features, scores) = (p, p·W) for a fixed W (K → 3 clients)."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.randn(K, 3, generator=_generator(11))

    def forward(self, p: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return p, p @ self.weight


def test_the_teacher_softens_the_leave_one_out_mean_by_its_temperature() -> None:
    """ψ(((N·f̄ − f_n)/(N − 1)) / E) at E = 2: client 0's others' mean [2, 0] gives ψ([1, 0])."""
    f = torch.tensor([[[0.0, 0.0]], [[1.0, 0.0]], [[3.0, 0.0]]])
    others = teacher_distribution(f.mean(0), f[0], 3, "others", "logits", 2.0)
    assert others[0, 0].item() == pytest.approx(math.exp(1) / (math.exp(1) + 1), abs=1e-6)


def test_the_discriminator_reads_the_tempered_softmax_of_each_clients_logits() -> None:
    """h(ψ(f_n(x), E)) at E = 2, every client's batch in turn: the scores of the softmax of f/2."""
    logits = torch.randn(3, 4, K, generator=_generator(1))
    scores = discriminator_scores(Scores(), logits, 2.0)
    assert torch.allclose(scores, torch.softmax(logits / 2.0, dim=2).reshape(12, K) @ Scores().weight, atol=1e-6)


def test_the_distillation_gradient_is_autograds_gradient_of_the_batch_mean_kl() -> None:
    """∂𝒦(target ‖ ψ(f, E))/∂f = (ψ(f, E) − target)/(E·B): at E = 2 over a batch of 5, as autograd gives it."""
    logits = torch.randn(5, K, generator=_generator(2), requires_grad=True)
    target = torch.softmax(torch.randn(5, K, generator=_generator(3)), dim=1)
    (expected,) = torch.autograd.grad(soft_target_kl(logits, target, 2.0), logits)
    assert torch.allclose(distillation_gradient(logits.detach(), target, 2.0), expected, atol=1e-7)


def test_the_adversarial_share_is_the_ratio_of_the_two_gradients_norms() -> None:
    """‖[3, 4]‖ / ‖[0, 10]‖ = 5 / 10."""
    assert adversarial_share(torch.tensor([[3.0, 4.0]]), torch.tensor([[0.0, 10.0]])) == pytest.approx(0.5)


def test_the_adversarial_mechanisms_are_declared_only_with_the_adversarial_term() -> None:
    """FedAL at any positive adversarial weight declares the discriminator's two mechanisms; at weight 0
    (FedMD-LF) none."""
    assert FedAL.mechanisms(FedALParams(adv_weight=0.5)) == ADVERSARIAL_MECHANISMS
    assert FedAL.mechanisms(FedALParams(adv_weight=0.0)) == ()


class Snapshot(nn.Module):
    """A frozen model returning (features, logits) as the clients' models do: a fixed linear map of the image."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.randn(64, K, generator=_generator(13))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        features = x.flatten(1)
        return features, features @ self.weight


@pytest.fixture(scope="module")
def trained() -> Any:
    """A one-round FedAL federation of 4 clients, whose algorithm, clients and server the tests below reuse."""
    return run_federation(fedal_config(algorithm={"name": "fedal", "adv_weight": 0.5}, training={"rounds": 1}))


def _with(algorithm: FedAL, **update: Any) -> FedAL:
    algorithm.params = algorithm.params.model_copy(update=update)
    return algorithm


@pytest.mark.parametrize("teacher,fewest", [("others", 2), ("all", 1)])
def test_a_round_needs_two_clients_for_a_leave_one_out_teacher_and_one_otherwise(
        trained: Any, teacher: str, fewest: int) -> None:
    assert _with(trained.state.algorithm, teacher=teacher).min_clients() == fewest


@pytest.mark.parametrize("method,clients,refused", [("fedal", 1, True), ("fedal", 2, False), ("cfd", 1, False)])
def test_a_knowledge_transfer_round_with_fewer_clients_than_its_teacher_needs_is_refused_in_one_line(
        method: str, clients: int, refused: bool) -> None:
    """FedAL's leave-one-out teacher needs two clients in a round; a baseline without one (CFD)
    trains with one. The run stops before training with one line naming the count and the method."""
    config = fedal_config(algorithm={"name": method}, training={"rounds": 1},
                          participation={"fraction": clients / 4})  # of fedal_config's 4 clients
    if refused:
        with pytest.raises(BenchError, match=f"^{method} needs at least 2 clients in a round, got 1"):
            run_federation(config)
    else:
        assert run_federation(config).curves


def test_a_knowledge_transfer_method_without_a_public_set_is_refused_in_one_line() -> None:
    with pytest.raises(BenchError, match=r"cfd transfers knowledge on an unlabelled public set: set public.size "
                                         r"\(FedAL: 1000\)$"):
        run_federation(fedal_config(algorithm={"name": "cfd"}, public={"size": 0}))


@pytest.mark.parametrize("average", ["logits", "probabilities"])
def test_the_global_objective_is_kd_plus_lf_plus_the_adversarial_surrogate_by_hand(
        trained: Any, average: str) -> None:
    """V_glo (eq. 15, its gradient eq. 21) for client n: w_KD·𝒦(p̄_{−n} ‖ ψ(f_n, E_KD)) + w_LF·r_glo +
    w_adv·Σ f_n ⊙ ∂U_n/∂f_n, with p̄_{−n} the leave-one-out teacher in A2's reading ``average`` and r_glo
    against the client's frozen snapshot; each weight and temperature away from 1 so that none cancels."""
    algorithm = _with(trained.state.algorithm, teacher="others", teacher_average=average, kd_weight=0.7,
                      kd_temperature=2.0, lf_global_weight=0.3, lf_temperature=3.0, adv_weight=0.5)
    client = trained.state.clients[1]
    snapshot = Snapshot()
    client.state = FedALClient(snapshot=snapshot)
    x = torch.randn(6, 1, 8, 8, generator=_generator(4))
    logits = torch.randn(6, K, generator=_generator(5), requires_grad=True)
    others = torch.randn(3, 6, K, generator=_generator(6))
    soften = (lambda z: z) if average == "logits" else (lambda z: torch.softmax(z / 2.0, dim=-1))
    mean = (soften(logits.detach()) + soften(others).sum(0)) / 4
    adversarial = torch.randn(6, K, generator=_generator(7))
    loss = algorithm.transfer_loss(Step(1, 0), client, x, PublicOutputs(logits, logits),
                                   TeacherReply(mean, adversarial, 4))

    teacher = soften(others).mean(0)
    if average == "logits":
        teacher = torch.softmax(teacher / 2.0, dim=1)
    with torch.no_grad():
        _, frozen = snapshot(x)
    expected = (0.7 * soft_target_kl(logits, teacher, 2.0) + 0.3 * lf_loss(logits, frozen, 3.0)
                + 0.5 * adversarial_term(logits, adversarial))
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5)
    (got,) = torch.autograd.grad(loss, logits)
    (want,) = torch.autograd.grad(expected, logits)
    assert torch.allclose(got, want, atol=1e-6)


def test_without_the_adversarial_weight_the_servers_gradient_is_ignored(trained: Any) -> None:
    """w_adv = 0 drops the surrogate even when the reply carries a gradient (the FedMD-LF reduction)."""
    algorithm = _with(trained.state.algorithm, kd_weight=1.0, kd_temperature=1.0, lf_global_weight=0.0,
                      adv_weight=0.0, teacher_average="logits")
    logits = torch.randn(6, K, generator=_generator(8), requires_grad=True)
    mean = torch.randn(6, K, generator=_generator(9))
    reply = TeacherReply(mean, torch.randn(6, K, generator=_generator(10)), 4)
    loss = algorithm.transfer_loss(Step(1, 0), trained.state.clients[0], torch.zeros(6, 1, 8, 8),
                                   PublicOutputs(logits, logits), reply)
    expected = soft_target_kl(logits, teacher_distribution(mean, logits.detach(), 4, "others", "logits", 1.0), 1.0)
    assert loss.item() == pytest.approx(expected.item(), rel=1e-6)


@pytest.mark.parametrize("average", ["logits", "probabilities"])
def test_the_server_reports_its_discriminator_and_the_adversarial_share_by_hand(trained: Any, average: str) -> None:
    """What a round records (the mechanism diagnostics of docs/verdicts.md): −𝒰, the mean payoff, the share of
    client outputs recognised, chance 1/N, and ‖w_adv·∂U/∂f‖ / ‖w_KD·∂𝒦/∂f‖ over the round's clients, the
    distillation gradient taken at each client's logits towards its leave-one-out teacher."""
    algorithm = _with(trained.state.algorithm, teacher="others", teacher_average=average, kd_weight=0.7,
                      kd_temperature=2.0, adv_weight=0.5, lf_global_weight=0.0)
    f = torch.randn(3, 4, K, generator=_generator(12))
    replies, metrics = algorithm.serve(1, trained.state.server, [0, 1, 2], torch.zeros(4, 1, 8, 8),
                                       [LogitsUpload(f[m]) for m in range(3)])
    assert set(metrics) == {"disc_loss", "adv_payoff", "disc_acc", "disc_chance", "adv_share"}
    assert metrics["disc_chance"] == pytest.approx(1 / 3)
    own = f if average == "logits" else torch.softmax(f / 2.0, dim=2)
    kd = torch.stack([0.7 * distillation_gradient(f[n], teacher_distribution(
        own.mean(0), own[n], 3, "others", average, 2.0), 2.0) for n in range(3)])
    adversarial = torch.stack([0.5 * r.adversarial for r in replies])
    expected = (torch.linalg.vector_norm(adversarial.double()) / torch.linalg.vector_norm(kd.double())).item()
    assert metrics["adv_share"] == pytest.approx(expected, rel=1e-6)
