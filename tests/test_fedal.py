"""FedAL (pipelines/fedal/NOTES.md §2): each loss term against a hand computation, the split-gradient equivalence
(§2.4 check 1), the reductions to FedMD-LF and FedMD (check 2), the communication it counts (check 3),
lockstep public batches, the architecture draw, resume with the discriminator and snapshots, the direction of the
game (clients descend their payoff) and the moment each stage freezes its snapshot."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from bench.algorithms.fedal import (FedAL, TeacherReply, adversarial_gradients, adversarial_term, discriminator_loss,
                                    discriminator_round, discriminator_state, DiscriminatorState, FedALParams,
                                    lf_loss, local_objective, payoffs, teacher_distribution, uses_local_lf)
from bench.algorithms.knowledge_transfer import LogitsUpload, PublicOutputs
from bench.engine.loop import Step
from bench.experiment import build_config
from bench.models import assign_architectures, build_model
from bench.runner.executor import RunRequest, run_experiment
from bench.runner.federation import run_federation
from tests.test_resume import assert_resumes_bitwise

K = 10


def fedal_config(**sections: Any):
    """4 heterogeneous digits clients (CNN/MLP), a public set of 64 of their images, τ = 2, 3 rounds."""
    raw: dict[str, Any] = {
        "dataset": {"name": "digits"}, "model": {"name": "cnn", "candidates": ["cnn", "mlp"]},
        "partition": {"scheme": "dirichlet", "alpha": 2.0, "mode": "per_client", "num_clients": 4,
                      "local_test_fraction": 0.0},
        "public": {"size": 64, "source": "overlap"},
        "training": {"rounds": 3, "local_steps": 2, "local_epochs": None, "batch_size": 16, "drop_last": True,
                     "optimizer": {"name": "adam", "lr": 0.001, "persistent": True}},
        "evaluation": {"every": 1, "global_model": False, "local_models": False, "clients_on_global_test": True},
        "algorithm": {"name": "fedal"}, "tracking": {"mlflow": False}}
    for key, value in sections.items():
        raw[key] = {**raw.get(key, {}), **value} if isinstance(value, dict) else value
    return build_config(raw)


class Identity(nn.Module):
    """A stub discriminator whose client-index scores are its input: h(p) = p (K = N = 2)."""

    def forward(self, p: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return p, p


# -- the loss terms, by hand ---------------------------------------------------------------------------


def test_lf_term_is_kl_from_the_frozen_snapshot_at_its_temperature() -> None:
    """r at E = 2: ψ([0, 2 ln 3] / 2) = [¼, ¾] against ψ([0, 0]) = [½, ½]: ¼ ln ½ + ¾ ln(3/2), no E² factor."""
    value = lf_loss(torch.tensor([[0.0, 0.0]]), torch.tensor([[0.0, 2 * math.log(3)]]), 2.0)
    assert value.item() == pytest.approx(0.25 * math.log(0.5) + 0.75 * math.log(1.5), abs=1e-6)


def test_teacher_is_the_others_mean_logits_then_softmax() -> None:
    """f = [0, 0], [1, 0], [3, 0]: client 0's leave-one-out mean is [2, 0] (eq. 5) from what the server
    sends, f̄ = [4/3, 0]; ``all`` is f̄ itself (Alg. 1 line 15); ``probabilities`` averages ψ(f_m)."""
    f = torch.tensor([[[0.0, 0.0]], [[1.0, 0.0]], [[3.0, 0.0]]])
    mean = f.mean(0)
    others = teacher_distribution(mean, f[0], 3, "others", "logits", 1.0)
    assert others[0, 0].item() == pytest.approx(math.exp(2) / (math.exp(2) + 1), abs=1e-6)
    everyone = teacher_distribution(mean, f[0], 3, "all", "logits", 1.0)
    assert everyone[0, 0].item() == pytest.approx(math.exp(4 / 3) / (math.exp(4 / 3) + 1), abs=1e-6)
    p = torch.softmax(f, dim=2)
    averaged = teacher_distribution(p.mean(0), p[0], 3, "others", "probabilities", 1.0)
    assert torch.allclose(averaged, (p[1] + p[2]) / 2, atol=1e-7)


def test_local_lf_applies_from_round_1_by_default_from_round_2_when_asked_and_never_at_weight_0() -> None:
    """A5: r_loc in round 1 is taken against the random initialisation (``lf_first_round: true``, the literal
    algorithm); ``false`` skips it there and only there; with ``lf_local_weight: 0`` there is no r_loc."""
    def applies(weight: float, first_round: bool) -> list[bool]:
        params = FedALParams(lf_local_weight=weight, lf_first_round=first_round)
        return [uses_local_lf(params, t) for t in (1, 2, 3)]

    assert applies(1.0, True) == [True, True, True]
    assert applies(0.5, False) == [False, True, True]
    assert applies(0.0, True) == applies(0.0, False) == [False, False, False]


def test_local_objective_is_ce_plus_the_weighted_lf_term() -> None:
    """V_loc = CE(y, f(x)) + w_loc·r_loc (eqs. 16-17), r_loc against the frozen snapshot; with
    ``lf_first_round: false`` round 1 has CE alone."""
    torch.manual_seed(0)
    model, snapshot = nn.Sequential(nn.Linear(6, K)), nn.Sequential(nn.Linear(6, K))

    class Pair(nn.Module):
        def __init__(self, net: nn.Module) -> None:
            super().__init__()
            self.net = net

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return x, self.net(x)

    x, y = torch.randn(5, 6), torch.tensor([0, 1, 2, 3, 4])
    ce = nn.functional.cross_entropy(model(x), y)
    r = lf_loss(model(x), snapshot(x), 2.0)
    assert r.item() > 0
    params = FedALParams(lf_local_weight=0.5, lf_temperature=2.0, lf_first_round=False)
    v = local_objective(Pair(model), Pair(snapshot), x, y, params, 2)
    assert v.item() == pytest.approx(ce.item() + 0.5 * r.item(), rel=1e-6)
    assert local_objective(Pair(model), Pair(snapshot), x, y, params, 1).item() == pytest.approx(ce.item(), rel=1e-6)


def test_the_discriminator_is_built_as_configured_from_the_run_seed() -> None:
    """A7, A8: K → hidden → N with the configured widths and activation; plain SGD at η_d by default (the paper's
    reading), or Adam at η_d; its initial weights come from the run's seed (another seed, other weights)."""
    ctx = run_federation(fedal_config(training={"rounds": 1})).state.algorithm.ctx
    default = discriminator_state(ctx, FedALParams(), 4)
    assert type(default.optimizer) is torch.optim.SGD and default.optimizer.param_groups[0]["lr"] == 1e-4
    assert default.optimizer.param_groups[0]["momentum"] == 0
    other = discriminator_state(ctx, FedALParams(disc_optimizer="adam", disc_lr=0.3, disc_hidden=(5, 7),
                                                 disc_activation="leaky_relu"), 3)
    assert type(other.optimizer) is torch.optim.Adam and other.optimizer.param_groups[0]["lr"] == 0.3
    assert other.discriminator is not None
    linears = [m for m in other.discriminator.modules() if isinstance(m, nn.Linear)]
    assert [(m.in_features, m.out_features) for m in linears] == [(K, 5), (5, 7), (7, 3)]
    assert any(isinstance(m, nn.LeakyReLU) for m in other.discriminator.modules())
    assert default.discriminator is not None
    ctx = run_federation(fedal_config(training={"rounds": 1}, seed=1)).state.algorithm.ctx
    reseeded = discriminator_state(ctx, FedALParams(), 4).discriminator
    assert reseeded is not None
    assert not torch.equal(next(reseeded.parameters()), next(default.discriminator.parameters()))
    assert discriminator_state(ctx, FedALParams(adv_weight=0.0), 4).discriminator is None


def test_discriminator_objective_and_payoffs_by_hand() -> None:
    """With h(p) = p, E = 1: client 0's ψ([0, 0]) = [½, ½] scores CE(0) = ln 2; client 1's ψ([ln 3, 0]) =
    [¾, ¼] scores CE(1) = ln(1 + e^½). U_n = −CE (eq. 7); the discriminator's loss is −𝒰 = their mean (eq. 8)."""
    logits = torch.tensor([[[0.0, 0.0]], [[math.log(3), 0.0]]])
    targets = torch.tensor([0, 1])
    u = payoffs(Identity(), logits, targets, 1.0)
    assert u.tolist() == pytest.approx([-math.log(2), -math.log(1 + math.exp(0.5))], abs=1e-6)
    loss = discriminator_loss(Identity(), logits, targets, 1.0)
    assert loss.item() == pytest.approx(-u.mean().item(), abs=1e-6)


def test_adversarial_gradient_by_hand() -> None:
    """∂U_0/∂f_0 at f_0 = [0, 0], E = 1, h(p) = p: dU/dp = e_0 − ψ(p) = [½, −½], dp/df = diag(p) − ppᵀ =
    [[¼, −¼], [−¼, ¼]], so ∂U/∂f = [¼, −¼]; client 1's gradient depends on its own logits only."""
    logits = torch.tensor([[[0.0, 0.0]], [[math.log(3), 0.0]]])
    gradients, values = adversarial_gradients(Identity(), logits, torch.tensor([0, 1]), 1.0)
    assert gradients[0, 0].tolist() == pytest.approx([0.25, -0.25], abs=1e-6)
    alone, _ = adversarial_gradients(Identity(), logits[1:], torch.tensor([1]), 1.0)
    assert torch.equal(alone[0], gradients[1])
    assert adversarial_term(torch.tensor([[2.0, 1.0]]), gradients[0]).item() == pytest.approx(0.25)


def test_split_gradient_equals_the_end_to_end_gradient() -> None:
    """§2.4 check 1: the client back-propagating the server's ∂U_n/∂f_n through its own model gives the
    autograd gradient of U_n through model → ψ(·/2) → the (updated, frozen) discriminator (eq. 21)."""
    torch.manual_seed(0)
    models = [nn.Linear(6, K), nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, K))]
    x = torch.randn(5, 6)
    discriminator = build_model("fedal_discriminator", (K,), 2, seed=3)
    targets = torch.tensor([0, 1])
    logits = torch.stack([m(x) for m in models])
    gradients, _ = adversarial_gradients(discriminator, logits, targets, 2.0)
    for n, model in enumerate(models):
        split = torch.autograd.grad(adversarial_term(model(x), gradients[n]), list(model.parameters()))
        z = torch.stack([m(x) if i == n else m(x).detach() for i, m in enumerate(models)])
        direct = torch.autograd.grad(payoffs(discriminator, z, targets, 2.0)[n], list(model.parameters()))
        for a, b in zip(split, direct):
            assert torch.allclose(a, b, atol=1e-7, rtol=1e-5)
    assert all(p.grad is None for p in discriminator.parameters())  # the server's gradient leaves w alone


def test_discriminator_step_is_ascent_on_the_objective() -> None:
    """Algorithm 1 line 13 with ``disc_optimizer: sgd``: w ← w + η_d ∇_w 𝒰; the gradient is then taken at
    the updated w (line 16)."""
    discriminator = build_model("fedal_discriminator", (K,), 3, seed=1)
    before = [p.detach().clone() for p in discriminator.parameters()]
    logits = torch.randn(3, 4, K, generator=torch.Generator().manual_seed(2))
    targets = torch.tensor([0, 1, 2])
    utility = payoffs(discriminator, logits, targets, 2.0).mean()
    ascent = torch.autograd.grad(utility, list(discriminator.parameters()))
    state = DiscriminatorState(discriminator, torch.optim.SGD(discriminator.parameters(), lr=0.5))
    gradients, values, loss = discriminator_round(state, 1, logits, targets, 2.0)
    assert loss == pytest.approx(-utility.item(), abs=1e-6)
    for old, new, g in zip(before, discriminator.parameters(), ascent):
        assert torch.allclose(new, old + 0.5 * g, atol=1e-6)
    assert torch.allclose(values, payoffs(discriminator, logits, targets, 2.0), atol=1e-7)  # the updated w


def test_discriminator_is_the_papers_mlp() -> None:
    """K → 32 → 265 → N (A7), ReLU by default, LeakyReLU(0.2) as the alternative."""
    model = build_model("fedal_discriminator", (10,), 20)
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    assert [(m.in_features, m.out_features) for m in linears] == [(10, 32), (32, 265), (265, 20)]
    leaky = build_model("fedal_discriminator", (10,), 20, activation="leaky_relu")
    assert any(isinstance(m, nn.LeakyReLU) and m.negative_slope == 0.2 for m in leaky.modules())


# -- the method ----------------------------------------------------------------------------------------


def _records(config, data_dir: Path, tmp_path: Path, name: str) -> bytes:
    run_experiment(RunRequest(config, tmp_path / name, data_dir))
    return (tmp_path / name / "records.csv").read_bytes()


def test_fedal_with_the_adversarial_weight_at_0_equals_fedmd_lf(data_dir: Path, tmp_path: Path) -> None:
    """§2.4 check 2: FedAL with W_ADV = 0 is FedMD-LF, bit for bit on the same seed; the adversarial term
    does change FedAL (so the equality is not vacuous)."""
    lf = _records(fedal_config(algorithm={"name": "fedmd_lf"}), data_dir, tmp_path, "lf")
    zero = _records(fedal_config(algorithm={"name": "fedal", "adv_weight": 0.0}), data_dir, tmp_path, "zero")
    assert zero == lf
    fedal = _records(fedal_config(), data_dir, tmp_path, "fedal")
    assert fedal != lf and b"disc_loss" in fedal and b"disc_loss" not in lf


def test_fedmd_as_fedal_runs_it_is_fedal_without_its_terms(data_dir: Path, tmp_path: Path) -> None:
    """§2.4 check 2: W_ADV = W_LFL = W_LFG = 0 and τ = 1 is FedMD (``fedmd_fedal``), bit for bit."""
    tau1 = {"local_steps": 1, "rounds": 4}
    fedmd = _records(fedal_config(algorithm={"name": "fedmd_fedal"}, training=tau1), data_dir, tmp_path, "md")
    zero = _records(fedal_config(algorithm={"name": "fedal", "adv_weight": 0.0, "lf_local_weight": 0.0,
                                            "lf_global_weight": 0.0}, training=tau1), data_dir, tmp_path, "zero")
    assert zero == fedmd


def test_communication_is_k_times_b_floats_up_and_2kb_down(data_dir: Path) -> None:
    """§2.4 check 3: per client and global iteration K·B float32 values up (logits) and 2K·B down (f̄ and
    ∂U_n/∂f_n); without the adversarial term K·B down. No bytes in the local stage."""
    n, tau, b = 4, 2, 16
    for name, down in (("fedal", 2), ("fedmd_lf", 1)):
        result = run_federation(fedal_config(algorithm={"name": name}, training={"rounds": 2}))
        sent = {(r, m): v for r, m, c, v in result.records if m in ("upload_bytes", "download_bytes")}
        for t in (1, 2):
            assert sent[t, "upload_bytes"] == n * tau * K * b * 4
            assert sent[t, "download_bytes"] == n * tau * down * K * b * 4


def test_a_client_step_on_its_transfer_loss_lowers_its_payoff() -> None:
    """Clients minimise U_n (eq. 18, the min-max as written): with the distillation and less-forgetting
    weights at 0, a client's transfer loss has the gradient adv_weight · ∂U_n/∂f_n in its logits (the
    server's vector, with a plus sign), so a small step on it lowers U_n at the server's discriminator."""
    result = run_federation(fedal_config(algorithm={"name": "fedal", "adv_weight": 0.5, "kd_weight": 0.0,
                                                    "lf_global_weight": 0.0}, training={"rounds": 1}))
    algorithm, client = result.state.algorithm, result.state.clients[2]
    assert isinstance(algorithm, FedAL)
    discriminator = result.state.server.state.discriminator
    logits = torch.randn(1, 8, K, generator=torch.Generator().manual_seed(5))
    targets = torch.tensor([client.cid])
    gradient, before = adversarial_gradients(discriminator, logits, targets, 2.0)
    own = logits[0].clone().requires_grad_(True)
    reply = TeacherReply(logits[0], gradient[0], 4)
    loss = algorithm.transfer_loss(Step(1, 0), client, torch.zeros(8, 1, 8, 8), PublicOutputs(own, own), reply)
    (descent,) = torch.autograd.grad(loss, own)
    assert torch.allclose(descent, 0.5 * gradient[0], atol=1e-7)
    after = payoffs(discriminator, (own - 1.0 * descent).detach()[None], targets, 2.0)
    assert after.item() < before.item()


def test_the_server_sends_the_mean_logits_or_the_mean_probabilities() -> None:
    """A2: the server's mean is f̄ = (1/N) Σ_m f_m (``teacher_average: logits``, the default) or the mean of
    ψ(f_m, E_KD) (``probabilities``), over the round's clients."""
    result = run_federation(fedal_config(algorithm={"name": "fedal", "adv_weight": 0.0}, training={"rounds": 1}))
    algorithm = result.state.algorithm
    assert isinstance(algorithm, FedAL)
    f = torch.randn(3, 4, K, generator=torch.Generator().manual_seed(9))
    uploads = [LogitsUpload(f[m]) for m in range(3)]
    replies, _ = algorithm.serve(1, result.state.server, [0, 1, 2], torch.zeros(4, 1, 8, 8), uploads)
    assert len(replies) == 3 and all(r.clients == 3 and r.adversarial is None for r in replies)
    assert torch.allclose(replies[0].mean, f.mean(0), atol=1e-7)
    algorithm.params = algorithm.params.model_copy(update={"teacher_average": "probabilities",
                                                           "kd_temperature": 2.0})
    replies, _ = algorithm.serve(1, result.state.server, [0, 1, 2], torch.zeros(4, 1, 8, 8), uploads)
    assert torch.allclose(replies[2].mean, torch.softmax(f / 2.0, dim=2).mean(0), atol=1e-7)


@pytest.mark.parametrize("readings", [{}, {"lf_first_round": False, "snapshot_mode": "eval"}],
                         ids=["default", "no-first-round-eval-mode"])
def test_each_stage_starts_its_less_forgetting_snapshot_from_the_model_as_it_stands(
        monkeypatch: pytest.MonkeyPatch, readings: dict[str, Any]) -> None:
    """r_loc's frozen model is θ_n^{t,0}, the model the round starts from, and r_glo's is θ_n^{t+½,0}, the
    model local training just produced (eqs. 13-14, Algorithm 1): each stage takes its snapshot at its start,
    in every round, for every client, in the BatchNorm mode ``snapshot_mode`` (A5); with ``lf_first_round:
    false`` the local stage takes none in round 1."""
    seen: list[tuple[str, int, bool | None]] = []
    train_mode = readings.get("snapshot_mode", "train") == "train"  # the paper's reading by default (A5)

    def same(client: Any) -> bool:
        snapshot, model = client.state.snapshot.state_dict(), client.model.state_dict()
        return (client.state.snapshot.training == train_mode and snapshot.keys() == model.keys()
                and all(torch.equal(snapshot[k], model[k]) for k in model))

    before_local, start_public = FedAL.before_local, FedAL.start_public

    def local_spy(self: FedAL, round_index: int, client: Any) -> None:
        before_local(self, round_index, client)
        seen.append(("local", round_index, None if client.state.snapshot is None else same(client)))

    def public_spy(self: FedAL, round_index: int, client: Any) -> Any:
        loop = start_public(self, round_index, client)
        seen.append(("global", round_index, same(client)))
        return loop

    monkeypatch.setattr(FedAL, "before_local", local_spy)
    monkeypatch.setattr(FedAL, "start_public", public_spy)
    run_federation(fedal_config(algorithm={"name": "fedal", **readings}, training={"rounds": 2}))
    first_local = None if readings else True  # no snapshot yet: the global stage takes the first
    assert sorted(seen, key=str) == sorted([(stage, t, first_local if (stage, t) == ("local", 1) else True)
                                            for stage in ("local", "global") for t in (1, 2) for _ in range(4)],
                                           key=str)


def test_lockstep_public_batches_are_identical_across_clients() -> None:
    """Every client forwards the same public batch in each global iteration (A10), and the batches run
    on across rounds (iteration g of the run is batch g of the shared stream)."""
    config = fedal_config(algorithm={"name": "fedmd_fedal"}, training={"rounds": 2})
    seen: dict[int, list[bytes]] = {}
    from bench.algorithms.knowledge_transfer import KnowledgeTransfer

    original = KnowledgeTransfer.forward_public

    def spy(self, client, x):  # type: ignore[no-untyped-def]
        seen.setdefault(client.cid, []).append(x.numpy().tobytes())
        return original(self, client, x)

    KnowledgeTransfer.forward_public = spy  # type: ignore[method-assign]
    try:
        result = run_federation(config)
    finally:
        KnowledgeTransfer.forward_public = original  # type: ignore[method-assign]
    public = {row.numpy().tobytes() for row in result.state.algorithm.ctx.public_x}
    batches = list(seen.values())
    assert len(batches) == 4 and all(b == batches[0] for b in batches)
    assert len(batches[0]) == 2 * 2 and len(set(batches[0])) == 4  # τ iterations per round, each a new batch
    first = torch.frombuffer(bytearray(batches[0][0]), dtype=torch.float32).view(16, 1, 8, 8)
    assert all(row.numpy().tobytes() in public for row in first)


def test_architecture_assignment_is_a_seeded_draw_recorded_with_the_run() -> None:
    """§4.1: each client draws its architecture uniformly from the candidates with the run seed."""
    candidates = ["wrn10_1", "wrn10_2", "wrn16_1"]
    first, again = assign_architectures(candidates, 20, 7), assign_architectures(candidates, 20, 7)
    assert first == again and set(first) == set(candidates)
    assert assign_architectures(candidates, 20, 8) != first
    result = run_federation(fedal_config(training={"rounds": 1}))
    assert result.architectures == assign_architectures(["cnn", "mlp"], 4, 0)
    assert [type(c.model).__name__ for c in result.state.clients] == [
        {"cnn": "SmallCNN", "mlp": "MLP"}[a] for a in result.architectures]


@pytest.mark.parametrize("algorithm", [
    {"name": "fedal"}, {"name": "fedal", "disc_optimizer": "adam", "snapshot_mode": "eval", "teacher": "all"},
], ids=["fedal", "fedal-adam-eval-all"])
def test_a_resumed_fedal_run_equals_an_uninterrupted_one(algorithm: dict, data_dir: Path, tmp_path: Path) -> None:
    """The discriminator, its optimiser, the snapshots and the clients' Adam states are checkpointed."""
    assert_resumes_bitwise(fedal_config(algorithm=algorithm, training={"rounds": 4}), data_dir, tmp_path)


# -- the direction of the game and the snapshots' moments ---------------------------------------------


def _states_equal(a: nn.Module, b: nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def test_clients_descend_their_payoff_the_adversarial_term_enters_v_glo_with_a_plus_sign() -> None:
    """Eqs. (18), (21): V_glo = … + U_n and clients minimise it, so the gradient of a client's global loss in its
    logits is +W_ADV·∂U_n/∂f_n (the server's vector as sent): the client moves to fool the discriminator, never
    to help it. With the KD and r_glo terms off the gradient is that vector alone; one small step on it lowers
    U_n under the discriminator that computed it."""
    from bench.algorithms.fedal import TeacherReply
    from bench.algorithms.knowledge_transfer import PublicOutputs
    from bench.engine.loop import Step

    result = run_federation(fedal_config(algorithm={"name": "fedal", "kd_weight": 0.0, "lf_global_weight": 0.0,
                                                    "adv_weight": 0.5}, training={"rounds": 1}))
    algorithm = result.state.algorithm
    discriminator = result.state.server.state.discriminator
    x = result.state.algorithm.ctx.public_x[:8]
    logits = torch.stack([c.model(x)[1].detach() for c in result.state.clients])  # N × B × K
    targets = torch.arange(len(result.state.clients))
    gradients, before = adversarial_gradients(discriminator, logits, targets, 2.0)
    own = logits[0].clone().requires_grad_(True)
    reply = TeacherReply(logits.mean(0), gradients[0], len(targets))
    loss = algorithm.transfer_loss(Step(1, 0), result.state.clients[0], x, PublicOutputs(own, own), reply)
    (grad,) = torch.autograd.grad(loss, own)
    assert torch.allclose(grad, 0.5 * gradients[0], atol=1e-7)
    stepped = logits.clone()
    stepped[0] = own.detach() - 10.0 * grad
    assert payoffs(discriminator, stepped, targets, 2.0)[0] < before[0]


@pytest.mark.parametrize("snapshot_mode", ["train", "eval"])
def test_each_stage_freezes_the_model_it_starts_from(snapshot_mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Algorithm 1: r_loc is measured from θ_n^{t,0}, the model at the local stage's start, and r_glo from
    θ_n^{t+½,0} = θ_n^{t,τ}, the model local training produced (line 7), refreshed at every stage of every
    round, in the BatchNorm mode ``snapshot_mode`` asks for."""
    from bench.algorithms.fedal import FedAL

    checked: list[tuple[str, int]] = []

    def check(stage: str, method):  # type: ignore[no-untyped-def]
        def wrapped(self, round_index, client):  # type: ignore[no-untyped-def]
            out = method(self, round_index, client)
            assert _states_equal(client.state.snapshot, client.model), (stage, round_index, client.cid)
            assert client.state.snapshot.training == (snapshot_mode == "train")
            checked.append((stage, round_index))
            return out
        return wrapped

    monkeypatch.setattr(FedAL, "before_local", check("local", FedAL.before_local))
    monkeypatch.setattr(FedAL, "start_public", check("global", FedAL.start_public))
    run_federation(fedal_config(algorithm={"name": "fedal", "snapshot_mode": snapshot_mode}))
    assert set(checked) == {(s, r) for r in (1, 2, 3) for s in ("global", "local")}


# -- the paper's readings by default, the pinned proxy's kept ------------------------------------------


def test_defaults_are_the_papers_sgd_discriminator_and_train_mode_snapshots() -> None:
    """A8: the server updates w "according to SGD" (Algorithm 1 line 13, a plain ascent step); A5: the snapshots
    are the models θ^{t,0}, θ^{t+½,0} themselves, computing as the live model does (train mode). FedDF-AL and
    the ablations inherit both."""
    from bench.algorithms.fedal import FedALParams, FedMDLFParams, discriminator_state
    from bench.algorithms.feddf_al import FedDFALParams

    for params in (FedALParams(), FedMDLFParams(), FedDFALParams()):
        assert (params.disc_optimizer, params.snapshot_mode) == ("sgd", "train")
    result = run_federation(fedal_config(training={"rounds": 1}))
    optimizer = result.state.server.state.optimizer
    assert type(optimizer) is torch.optim.SGD and optimizer.defaults["lr"] == 1e-4
    assert optimizer.defaults["momentum"] == 0 and optimizer.defaults["weight_decay"] == 0
    assert all(c.state.snapshot.training for c in result.state.clients)
    adam = discriminator_state(result.state.algorithm.ctx, FedALParams(disc_optimizer="adam"), 4)
    assert type(adam.optimizer) is torch.optim.Adam


def test_a_train_mode_snapshot_makes_the_regulariser_zero_at_a_stages_first_step() -> None:
    """With BatchNorm, a snapshot in train mode gives exactly the live model's outputs on the stage's first batch,
    so r = 𝒦(ψ(f(x; θ^{·,0})) ‖ ψ(f(x; θ))) = 0 there (up to rounding in the KL), as eqs. (13)-(14) have it at θ = θ^{·,0}; in eval mode it
    uses running statistics the batch does not have, and r > 0 before the model has moved (issue 26 item 3)."""
    from bench.engine.snapshots import refresh_snapshot

    model = build_model("cnn", (1, 8, 8), K, seed=0)
    x = torch.randn(16, 1, 8, 8, generator=torch.Generator().manual_seed(1))
    model.train()
    for _ in range(3):  # the running statistics move away from their initial values
        model(x + 1.0)
    assert any(isinstance(m, nn.BatchNorm2d) for m in model.modules())
    logits = model(x)[1]
    for mode, zero in (("train", True), ("eval", False)):
        snapshot = refresh_snapshot(None, model, mode)
        with torch.no_grad():
            frozen = snapshot(x)[1]
        value = lf_loss(logits, frozen, 1.0).item()
        assert torch.equal(frozen, logits.detach()) == zero, mode
        assert (abs(value) < 1e-6) if zero else (value > 1e-4), (mode, value)


def test_the_pinned_proxy_runs_the_papers_readings() -> None:
    """pipelines/fedal/params.yaml's proxy profile runs the FedAL family with the paper's readings (the defaults:
    discriminator by plain SGD, train-mode snapshots), and every pinned run's config (and its hash) is what the suite
    makes today."""
    import json

    from bench.suites import load_suite

    root = Path(__file__).resolve().parents[1] / "pipelines" / "fedal"
    suite = load_suite(root / "params.yaml", overrides=["profile=proxy"])
    pinned = json.loads((root / "reports" / "pinned" / "fedal-proxy.json").read_text())["values"]
    hashes = {(m, s, int(seed)): run["config_sha256"] for m, cells in pinned.items()
              for s, cell in cells.items() for seed, run in cell["seeds"].items()}
    assert {"fedal", "fedmd_lf", "fedmd_fedal", "feddf_al"} <= {m for m, _, _ in hashes}
    assert all(suite.config(*key).sha256 == sha for key, sha in hashes.items())
    params = suite.config("fedal", "het-a2", 0).algorithm.params
    assert (params["disc_optimizer"], params["snapshot_mode"], params["disc_lr"]) == ("sgd", "train", 1e-4)
