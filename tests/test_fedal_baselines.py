"""The FedAL paper's baselines (pipelines/fedal/NOTES.md §3.2): each loss term against a hand computation (CFD's
quantisation, FCCL's cross-correlation, FCCL+'s instance similarity and non-target distillation, FD's
targets, FedDF's AVGLOGITS), the communication each counts, the readings they refuse, and resume."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, cast

import pytest
import torch
from torch import nn

from bench.algorithms.cfd import CFD, QuantizedSoftLabels, ServerLogits, dequantize, quantize
from bench.algorithms.fccl import FCCL, FCCLClient, FCCLParams, cosine_lr, cross_correlation_loss, FreshAdam
from bench.algorithms.fcclplus import FCCLPlus, FCCLPlusParams, non_target_kd, similarity_logits
from bench.algorithms.fd import (FD, FDClient, FDParams, FDServer, LabelLogits, distillation_term, label_means,
                                teacher_targets)
from bench.engine.messages import Update
from bench.engine.state import Client, Server
from bench.algorithms.fedproto_fedal import FedProtoFedAL, FedProtoFedALParams, FeatureReply, feature_distance
from bench.algorithms.knowledge_transfer import LogitsUpload, PublicOutputs
from bench.engine.distillation import soft_target_kl
from bench.engine.ledger import payload_bytes
from bench.errors import BenchError
from bench.runner.federation import run_federation
from tests.conftest import DiagonalLinear
from tests.test_fedal import fedal_config
from tests.test_resume import assert_resumes_bitwise


def test_cfd_quantisation_by_hand() -> None:
    """b = 2: levels k/3; [0.1, 0.2, 0.7] → codes [0, 1, 2] → [0, ⅓, ⅔] (renormalised: already sums to 1);
    on the wire 2 bits an entry; a row of zeros decodes to uniform."""
    codes = quantize(torch.tensor([[0.1, 0.2, 0.7], [0.1, 0.1, 0.1]]), 2)
    assert codes.tolist() == [[0, 1, 2], [0, 0, 0]] and codes.dtype == torch.uint8
    decoded = dequantize(codes, 2)
    assert decoded[0].tolist() == pytest.approx([0, 1 / 3, 2 / 3]) and decoded[1].tolist() == pytest.approx([1 / 3] * 3)
    assert QuantizedSoftLabels(codes, 2).wire_bytes() == 2 and payload_bytes(QuantizedSoftLabels(codes, 2)) == 2
    assert dequantize(quantize(torch.tensor([[0.25, 0.75]]), 8), 8)[0, 1].item() == pytest.approx(191 / 255, abs=1e-6)


def test_cfd_codes_past_8_bits_are_not_wrapped_and_decoding_renormalises_each_row() -> None:
    """b = 9: 1.0 → code 511 (a byte would wrap it), 8-bit codes still fit a byte; b = 2: [½, ½, 0] → codes [2, 2,
    0] → [⅔, ⅔, 0], renormalised to [½, ½, 0]; [0.15, 0.15, 0.7] → [0, 0, 2] → [0, 0, ⅔], renormalised to [0, 0, 1];
    b = 1: [0.2, 0.8] → [0, 1] → [0, 1]; on the wire ⌈9 · 1 / 8⌉ = 2 bytes for nine 1-bit codes."""
    assert quantize(torch.tensor([[0.0, 1.0]]), 9).tolist() == [[0, 511]]
    assert quantize(torch.tensor([[0.0, 1.0]]), 8).dtype == torch.uint8
    decoded = dequantize(quantize(torch.tensor([[0.5, 0.5, 0.0], [0.15, 0.15, 0.7]]), 2), 2)
    assert decoded.tolist() == [pytest.approx([0.5, 0.5, 0.0]), pytest.approx([0.0, 0.0, 1.0])]
    assert dequantize(quantize(torch.tensor([[0.2, 0.8]]), 1), 1).tolist() == [[0.0, 1.0]]
    assert QuantizedSoftLabels(torch.zeros(3, 3, dtype=torch.uint8), 1).wire_bytes() == 2


@pytest.fixture(scope="module")
def cfd_run() -> Any:
    """A one-round CFD federation of 4 clients (CNN/MLP, K = 10), whose algorithm and server the tests reuse."""
    return run_federation(fedal_config(algorithm={"name": "cfd"}, training={"rounds": 1}))


def _cfd(run: Any, **update: Any) -> tuple[CFD, Any]:
    """The run's CFD with ``update`` to its params, and a copy of its server (model and Adam state)."""
    import copy

    algorithm = run.state.algorithm
    algorithm.params = algorithm.params.model_copy(update=update)
    return algorithm, copy.deepcopy(run.state.server)


@pytest.mark.parametrize("reply_mode", ["eval", "train"])
def test_cfd_server_distils_the_mean_of_the_clients_logits_and_replies_with_its_updated_logits(
        cfd_run: Any, reply_mode: str) -> None:
    """Steps 2-3 at E = 2: the server's loss is 𝒦(ψ(f̄, E) ‖ ψ(f_S(x), E)), f̄ the mean over the 3 clients of
    their logits, taken before its one Adam step (train mode); its reply is f_S(x) after the step, computed in
    ``reply_mode`` (eval: the running BatchNorm statistics, unchanged by the reply), the same for every client."""
    algorithm, server = _cfd(cfd_run, temperature=2.0, reply_mode=reply_mode, quantization_bits=None)
    import copy

    x = algorithm.ctx.public_x[:4]
    f = torch.randn(3, 4, 10, generator=torch.Generator().manual_seed(0))
    before = copy.deepcopy(server.state.model).train()
    expected = soft_target_kl(before(x)[1], torch.softmax(f.mean(0) / 2.0, dim=1), 2.0)
    replies, metrics = algorithm.serve(2, server, [0, 1, 2], x, [LogitsUpload(z) for z in f])
    assert metrics["server_loss"] == pytest.approx(expected.item(), rel=1e-5)
    model = server.state.model
    assert model.training == (reply_mode == "train") and len(replies) == 3
    after = copy.deepcopy(model)
    with torch.no_grad():
        assert all(torch.allclose(r.logits, after(x)[1], atol=1e-6) for r in replies)
        assert not torch.allclose(replies[0].logits, before.eval()(x)[1], atol=1e-4)  # the step moved f_S


def test_cfd_quantised_soft_labels_go_up_and_down_and_the_client_distils_their_decoding(cfd_run: Any) -> None:
    """``quantization_bits: 4`` at E = 2: a client uploads the 4-bit codes of ψ(f_n, E); the server distils the mean
    of the decoded uploads and replies with the codes of ψ(f_S(x), E); a client's loss is 𝒦(decoded reply ‖
    ψ(f_n, E)). Full precision: the client distils ψ(f_S(x), E) itself."""
    algorithm, server = _cfd(cfd_run, temperature=2.0, reply_mode="eval", quantization_bits=4)
    import copy

    x = algorithm.ctx.public_x[:4]
    f = torch.randn(3, 4, 10, generator=torch.Generator().manual_seed(1))
    uploads = [algorithm.upload(cast(Any, None), PublicOutputs(torch.zeros(4, 1), z)) for z in f]
    for upload, z in zip(uploads, f):
        assert isinstance(upload, QuantizedSoftLabels) and upload.bits == 4
        assert torch.equal(upload.codes, quantize(torch.softmax(z / 2.0, dim=1), 4))
    before = copy.deepcopy(server.state.model).train()
    target = torch.stack([dequantize(u.codes, 4) for u in uploads]).mean(0)
    replies, metrics = algorithm.serve(2, server, [0, 1, 2], x, uploads)
    assert metrics["server_loss"] == pytest.approx(soft_target_kl(before(x)[1], target, 2.0).item(), rel=1e-5)
    with torch.no_grad():
        server_logits = server.state.model(x)[1]
    reply = replies[0]
    assert isinstance(reply, QuantizedSoftLabels) and reply.bits == 4
    assert torch.equal(reply.codes, quantize(torch.softmax(server_logits / 2.0, dim=1), 4))
    student = f[0]
    loss = algorithm.transfer_loss(cast(Any, None), cast(Any, None), x, PublicOutputs(torch.zeros(4, 1), student),
                                   reply)
    assert loss.item() == pytest.approx(soft_target_kl(student, dequantize(reply.codes, 4), 2.0).item(), rel=1e-6)
    algorithm.params = algorithm.params.model_copy(update={"quantization_bits": None})
    loss = algorithm.transfer_loss(cast(Any, None), cast(Any, None), x, PublicOutputs(torch.zeros(4, 1), student),
                                   ServerLogits(server_logits))
    expected = soft_target_kl(student, torch.softmax(server_logits / 2.0, dim=1), 2.0)
    assert loss.item() == pytest.approx(expected.item(), rel=1e-6)


def test_cfd_server_model_and_learning_rate_are_the_configured_ones() -> None:
    """``server_model: mlp`` (clients CNN/MLP, model.name cnn) gives an MLP server; ``server_lr`` its Adam's lr."""
    result = run_federation(fedal_config(algorithm={"name": "cfd", "server_model": "mlp", "server_lr": 0.01},
                                         training={"rounds": 1}))
    server = result.state.server.state
    assert type(server.model).__name__ == "MLP" and server.optimizer.param_groups[0]["lr"] == 0.01


def test_fccl_cross_correlation_by_hand() -> None:
    """Z = [[1, 2], [2, 4], [3, 6]] against itself: both columns standardise to [−1, 0, 1] (unbiased std), so
    M = ẐᵀẐ/3 = ⅔ everywhere and L = 2(⅔ − 1)² + λ·2(⅔ + 1)² = 2/9 + λ·50/9."""
    z = torch.tensor([[1.0, 2.0], [2.0, 4.0], [3.0, 6.0]])
    assert cross_correlation_loss(z, z, 0.0051).item() == pytest.approx(2 / 9 + 0.0051 * 50 / 9, rel=1e-6)
    assert cross_correlation_loss(z, z, 0.0).item() == pytest.approx(2 / 9, rel=1e-6)
    # Z = [[1, 0], [2, 1], [3, 0]]: the columns standardise to [−1, 0, 1] and [−1, 2, −1]/√3, so M = diag(⅔, ⅔) off 0:
    # the diagonal term stays 2/9 and the off-diagonal one is λ·2(0 + 1)² = 2λ
    z = torch.tensor([[1.0, 0.0], [2.0, 1.0], [3.0, 0.0]])
    assert cross_correlation_loss(z, z, 0.5).item() == pytest.approx(2 / 9 + 1.0, rel=1e-6)


def test_fccl_plus_instance_similarity_by_hand() -> None:
    """Features [1, 0], [0, 1], [1, 1]: cosine similarities without the diagonal, over temp."""
    s = similarity_logits(torch.tensor([[1.0, 0.0], [0.0, 2.0], [3.0, 3.0]]), 0.5)
    r = 1 / math.sqrt(2)
    assert s.tolist() == [pytest.approx([0, 2 * r]), pytest.approx([0, 2 * r]), pytest.approx([2 * r, 2 * r])]


def test_fccl_plus_non_target_distillation_by_hand() -> None:
    """Label 0, T = 1: the student ψ([0, 0, 0]) keeps [⅓, ⅓], the teacher ψ([0, ln 2, 0]) keeps [½, ¼], not
    renormalised: ½ ln(1.5) + ¼ ln(0.75). At T = 2 with logits doubled the same distributions: T² = 4 times it."""
    labels = torch.tensor([0])
    student, teacher = torch.zeros(1, 3), torch.tensor([[0.0, math.log(2), 0.0]])
    expected = 0.5 * math.log(1.5) + 0.25 * math.log(0.75)
    assert non_target_kd(student, teacher, labels, 1.0).item() == pytest.approx(expected, rel=1e-6)
    assert non_target_kd(2 * student, 2 * teacher, labels, 2.0).item() == pytest.approx(4 * expected, rel=1e-6)
    # the student's logits are divided by T too: ψ([0, 2 ln 2, 0]/2) keeps [½, ¼], the teacher ψ(0) keeps [⅓, ⅓]
    student = torch.tensor([[0.0, 2 * math.log(2), 0.0]])
    expected = 4 * (math.log((1 / 3) / 0.5) + math.log((1 / 3) / 0.25)) / 3
    assert non_target_kd(student, torch.zeros(1, 3), labels, 2.0).item() == pytest.approx(expected, rel=1e-6)


def test_fccl_public_step_is_a_fresh_adam_and_pretraining_anneals() -> None:
    """A fresh Adam's first step moves each weight by lr·g/(|g| + ε) ≈ lr·sign(g), at every step."""
    w = torch.nn.Parameter(torch.tensor([1.0, -1.0]))
    optimizer = FreshAdam([w], lr=0.1)
    for grad in ([0.5, -2.0], [3.0, 0.01]):
        before = w.detach().clone()
        w.grad = torch.tensor(grad)
        optimizer.step()
        assert (w.detach() - before).tolist() == pytest.approx([-0.1 * math.copysign(1, g) for g in grad], abs=1e-6)
    assert [cosine_lr(e, 4, 1e-3, 1e-6) for e in (0, 2)] == pytest.approx([1e-3, (1e-3 + 1e-6) / 2])


class Fixed(nn.Module):
    """A frozen teacher returning (x, the same logits for every sample)."""

    def __init__(self, logits: list[float]) -> None:
        super().__init__()
        self.logits = torch.tensor(logits)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x, self.logits.expand(len(x), -1)


def _kl_by_hand(target: torch.Tensor, student_logits: torch.Tensor) -> float:
    """(1/B) Σ_i Σ_c t_ic (log t_ic − log softmax(s_i)_c)."""
    return float((target * (target.log() - torch.log_softmax(student_logits, dim=1))).sum(1).mean())


def test_fccl_local_loss_is_ce_plus_the_inter_and_intra_distillations_by_hand() -> None:
    """CE + 𝒦(ψ(f^inter) ‖ ψ(f_n)) + 𝒦(ψ(f^intra) ‖ ψ(f_n)), unit weights, T = 1: the student's logits x·diag(1, 2)
    on x = [1, 1], [2, 0]; θ^inter says [0, ln 3] (ψ = [¼, ¾]), θ^intra [ln 3, 0] (ψ = [¾, ¼])."""
    algorithm = FCCL(FCCLParams(), cast(Any, None))
    client = Client(0, cast(Any, None), DiagonalLinear(), FCCLClient(intra=Fixed([math.log(3), 0.0]),
                                                             inter=Fixed([0.0, math.log(3)])))
    x, y = torch.tensor([[1.0, 1.0], [2.0, 0.0]]), torch.tensor([1, 0])
    logits = torch.tensor([[1.0, 2.0], [2.0, 0.0]])
    expected = (float(nn.functional.cross_entropy(logits, y)) + _kl_by_hand(torch.tensor([[0.25, 0.75]] * 2), logits)
                + _kl_by_hand(torch.tensor([[0.75, 0.25]] * 2), logits))
    assert algorithm.local_loss(cast(Any, None), client, x, y).item() == pytest.approx(expected, rel=1e-6)


def test_fccl_plus_local_loss_is_ce_plus_the_non_target_distillation_at_its_temperature() -> None:
    """CE + T²·𝒦(q^inter ‖ q_n) over the non-target entries, T = ``local_dis_power`` (2 here, not its default 3)."""
    algorithm = FCCLPlus(FCCLPlusParams(local_dis_power=2.0), cast(Any, None))
    client = Client(0, cast(Any, None), DiagonalLinear(), FCCLClient(inter=Fixed([0.0, math.log(3)])))
    x, y = torch.tensor([[1.0, 1.0], [2.0, 0.0]]), torch.tensor([1, 0])
    logits = torch.tensor([[1.0, 2.0], [2.0, 0.0]])
    teacher = torch.tensor([[0.0, math.log(3)]] * 2)
    expected = nn.functional.cross_entropy(logits, y) + non_target_kd(logits, teacher, y, 2.0)
    assert algorithm.local_loss(cast(Any, None), client, x, y).item() == pytest.approx(expected.item(), rel=1e-6)


def test_fccl_plus_transfer_loss_is_the_cross_correlation_plus_dis_power_times_the_similarity_kl() -> None:
    """L_col(Z_n, Z̄) + dis_power · 𝒦(ψ(S̄) ‖ ψ(S_n)) at T = 1, S the instance-similarity logits (temp 0.5), with
    dis_power = 0.5 (not 1, so that a product and a quotient differ)."""
    algorithm = FCCLPlus(FCCLPlusParams(dis_power=0.5, temp=0.5), cast(Any, None))
    features = torch.tensor([[1.0, 0.0], [0.0, 2.0], [3.0, 3.0]])
    logits = torch.tensor([[1.0, 2.0], [2.0, 0.0], [0.0, 1.0]])
    mean_logits, mean_similarity = torch.tensor([[0.0, 1.0], [1.0, 1.0], [3.0, 0.0]]), torch.tensor(
        [[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]])
    from bench.algorithms.fcclplus import LogitsAndSimilarity

    loss = algorithm.transfer_loss(cast(Any, None), cast(Any, None), torch.zeros(3, 1),
                                   PublicOutputs(features, logits), LogitsAndSimilarity(mean_logits, mean_similarity))
    own = similarity_logits(features, 0.5)
    expected = (cross_correlation_loss(logits, mean_logits, 0.0051).item()
                + 0.5 * _kl_by_hand(torch.softmax(mean_similarity, dim=1), own))
    assert _kl_by_hand(torch.softmax(mean_similarity, dim=1), own) > 0.1
    assert loss.item() == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("method", ["fccl", "fcclplus"])
@pytest.mark.parametrize("teacher_mode", ["train", "eval"])
def test_fccl_teachers_are_frozen_in_teacher_mode(method: str, teacher_mode: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """θ^intra (FCCL) and θ^inter, taken at the client's first round and refreshed after each local update, run in
    the BatchNorm mode ``teacher_mode`` (train: the official code's, by default) at every local step."""
    cls = {"fccl": FCCL, "fcclplus": FCCLPlus}[method]
    modes: list[bool] = []
    original = cls.local_loss

    def spy(self, step, client, x, y):  # type: ignore[no-untyped-def]
        modes.extend(t.training for t in (client.state.intra, client.state.inter) if t is not None)
        return original(self, step, client, x, y)

    monkeypatch.setattr(cls, "local_loss", spy)
    extra = {"pretrain_epochs": 1} if method == "fccl" else {}
    result = run_federation(fedal_config(algorithm={"name": method, "teacher_mode": teacher_mode, **extra},
                                         training={"rounds": 2, "local_steps": 1}))
    modes.extend(t.training for c in result.state.clients for t in (c.state.intra, c.state.inter) if t is not None)
    per_client = 2 if method == "fccl" else 1
    assert modes == [teacher_mode == "train"] * 4 * per_client * 3  # 2 rounds' local steps and the run's end


@pytest.mark.parametrize("public_pass, batches", [("tau", 1), ("epoch", 4)])
def test_fccl_public_stage_is_tau_batches_or_one_pass_over_the_public_set(public_pass: str, batches: int,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """``public_pass: tau`` (FedAL's lockstep stage): τ = 1 public batch a round; ``epoch`` (the authors' code,
    ``col_update`` over the whole public loader): every public image once a round (64 images, batches of 16)."""
    from bench.algorithms.knowledge_transfer import KnowledgeTransfer

    seen: list[torch.Tensor] = []
    original = KnowledgeTransfer.forward_public

    def spy(self, client, x):  # type: ignore[no-untyped-def]
        if client.cid == 0:
            seen.append(x.clone())
        return original(self, client, x)

    monkeypatch.setattr(KnowledgeTransfer, "forward_public", spy)
    result = run_federation(fedal_config(algorithm={"name": "fccl", "pretrain_epochs": 1, "public_pass": public_pass},
                                         training={"rounds": 2, "local_steps": 1}))
    assert len(seen) == 2 * batches
    public = result.state.algorithm.ctx.public_x
    if public_pass == "epoch":
        for r in range(2):
            rows = torch.cat(seen[r * batches:(r + 1) * batches])
            assert sorted(row.numpy().tobytes() for row in rows) == sorted(row.numpy().tobytes() for row in public)


@pytest.mark.parametrize("budget, cap", [("run", 3), ("epochs", None)])
def test_fccl_pretraining_is_capped_at_the_runs_local_budget_or_runs_all_its_epochs(
        budget: str, cap: int | None, monkeypatch: pytest.MonkeyPatch) -> None:
    """``pretrain_budget: run``: at most rounds × τ steps (3 × 1); ``epochs`` (the authors' code): every step of
    its epochs, here 2 passes over each client's data in batches of 16."""
    import bench.algorithms.fccl as fccl

    counted: dict[str, int] = {}

    class Counting(fccl.Loop):  # type: ignore[misc]
        def run(self, batches, step_fn):  # type: ignore[no-untyped-def]
            batches = list(batches)
            if "pre-training" in str(self.who):
                counted[str(self.who)] = counted.get(str(self.who), 0) + len(batches)
            return super().run(batches, step_fn)

    monkeypatch.setattr(fccl, "Loop", Counting)
    result = run_federation(fedal_config(algorithm={"name": "fccl", "pretrain_epochs": 2, "pretrain_budget": budget},
                                         training={"rounds": 3, "local_steps": 1}))
    epochs = {f"{c.cid} (pre-training)": 2 * (c.data.num_samples // 16) for c in result.state.clients}
    assert min(epochs.values()) > 3
    assert counted == {who: steps if cap is None else min(cap, steps) for who, steps in epochs.items()}


def test_fccl_pretraining_anneals_each_epoch_and_its_step_cap_spans_epochs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each pre-training epoch e of E = 3 trains at cosine_lr(e, 3, pretrain_lr, pretrain_min_lr) (a non-default
    0.02 → 0.001), and ``pretrain_steps`` counts steps across epochs: with the cap one step past the smallest
    client's epoch, that client trains a whole epoch, then one step, then stops; a larger one stops inside its first
    or second epoch."""
    import bench.algorithms.fccl as fccl

    calls: dict[str, list[tuple[float, int]]] = {}

    class Recording(fccl.Loop):  # type: ignore[misc]
        def run(self, batches, step_fn):  # type: ignore[no-untyped-def]
            batches = list(batches)
            if "pre-training" in str(self.who):
                calls.setdefault(str(self.who), []).append((self.optimizer.param_groups[0]["lr"], len(batches)))
            return super().run(batches, step_fn)

    monkeypatch.setattr(fccl, "Loop", Recording)
    sizes = {c.cid: c.data.num_samples // 16 for c in run_federation(fedal_config(
        algorithm={"name": "fccl", "pretrain_epochs": 0}, training={"rounds": 1, "local_steps": 1})).state.clients}
    cap = min(sizes.values()) + 1
    assert min(sizes.values()) > 1
    calls.clear()
    run_federation(fedal_config(algorithm={"name": "fccl", "pretrain_epochs": 3, "pretrain_steps": cap,
                                           "pretrain_lr": 0.02, "pretrain_min_lr": 0.001},
                                training={"rounds": 1, "local_steps": 1}))
    expected: dict[str, list[tuple[float, int]]] = {}
    for cid, per_epoch in sizes.items():
        done, epochs = 0, []
        for epoch in range(3):
            if done >= cap:
                break
            lr = 0.001 + 0.5 * (0.02 - 0.001) * (1 + math.cos(math.pi * epoch / 3))
            epochs.append((lr, min(per_epoch, cap - done)))
            done += epochs[-1][1]
        expected[f"{cid} (pre-training)"] = epochs
    assert any(len(epochs) == 2 for epochs in expected.values())  # a client whose pre-training spans two epochs
    assert {who: [(pytest.approx(lr), n) for lr, n in e] for who, e in expected.items()} == calls


@pytest.mark.parametrize("public_optimizer", ["fresh", "client"])
def test_fccl_public_steps_take_a_fresh_adam_at_public_lr_or_the_clients_optimiser(
        public_optimizer: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``public_optimizer: fresh`` (the authors' code): each client's public loop steps a FreshAdam at ``public_lr``
    (here 0.02, not Adam's default); ``client``: the loop the knowledge-transfer base builds with the client's own
    optimiser, so FCCL builds none of its own."""
    import bench.algorithms.fccl as fccl

    built: list[tuple[str, float]] = []

    class Recording(fccl.Loop):  # type: ignore[misc]
        def __init__(self, optimizer, *args, **kwargs):  # type: ignore[no-untyped-def]
            super().__init__(optimizer, *args, **kwargs)
            if "pre-training" not in str(self.who):
                built.append((type(optimizer).__name__, optimizer.param_groups[0]["lr"]))

    monkeypatch.setattr(fccl, "Loop", Recording)
    result = run_federation(fedal_config(algorithm={"name": "fccl", "pretrain_epochs": 0, "public_lr": 0.02,
                                                    "public_optimizer": public_optimizer},
                                         training={"rounds": 1, "local_steps": 1}))
    clients = len(result.state.clients)
    assert built == ([("FreshAdam", 0.02)] * clients if public_optimizer == "fresh" else [])


@pytest.mark.parametrize("phase", ["pre-training", "public"])
def test_fccl_pretraining_and_public_steps_stop_at_an_exploding_finite_loss(
        phase: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both of FCCL's own loops carry the run's loss guard: a loss that stays finite but grows past
    ``training.divergence_factor`` (1000) times the run's first step stops the run there, as in any other loop."""
    import bench.algorithms.fccl as fccl
    from bench.errors import Diverged

    calls = [0]

    def exploding(original):  # type: ignore[no-untyped-def]
        def loss(*args, **kwargs):  # type: ignore[no-untyped-def]
            calls[0] += 1
            return original(*args, **kwargs) * (1.0 if calls[0] == 1 else 1e12)
        return loss

    if phase == "pre-training":
        monkeypatch.setattr(fccl.F, "cross_entropy", exploding(fccl.F.cross_entropy))  # pre-training runs first
    else:
        monkeypatch.setattr(fccl, "cross_correlation_loss", exploding(fccl.cross_correlation_loss))
    with pytest.raises(Diverged, match="exceeds 1000 x the first step") as stopped:
        run_federation(fedal_config(algorithm={"name": "fccl", "pretrain_epochs": 1 if phase == "pre-training" else 0},
                                    training={"rounds": 1, "local_steps": 1}))
    assert ("pre-training" in str(stopped.value)) == (phase == "pre-training")


def test_fccl_pretraining_drops_the_partial_last_batch_under_drop_last(monkeypatch: pytest.MonkeyPatch) -> None:
    """With ``training.drop_last`` a pre-training epoch is ⌊n/B⌋ full batches (B = 5 here, and each client holds 336
    images, so its last batch is partial and left out)."""
    import bench.algorithms.fccl as fccl

    sizes: dict[str, list[int]] = {}

    class Recording(fccl.Loop):  # type: ignore[misc]
        def run(self, batches, step_fn):  # type: ignore[no-untyped-def]
            batches = list(batches)
            if "pre-training" in str(self.who):
                sizes.setdefault(str(self.who), []).extend(len(b) for b in batches)
            return super().run(batches, step_fn)

    monkeypatch.setattr(fccl, "Loop", Recording)
    result = run_federation(fedal_config(algorithm={"name": "fccl", "pretrain_epochs": 1, "pretrain_budget": "epochs"},
                                         training={"rounds": 1, "local_steps": 1, "batch_size": 5}))
    samples = {f"{c.cid} (pre-training)": c.data.num_samples for c in result.state.clients}
    assert any(n % 5 for n in samples.values())
    assert sizes == {who: [5] * (n // 5) for who, n in samples.items()}


def test_fccl_refuses_two_public_step_counts() -> None:
    with pytest.raises(BenchError, match="global_steps and public_pass: epoch"):
        run_federation(fedal_config(algorithm={"name": "fccl", "public_pass": "epoch", "global_steps": 2}))


def test_fd_targets_by_hand() -> None:
    """Per-label mean logits; the leave-one-out over the clients holding a label: clients A, B hold label 0
    with means [2, 0] and [4, 0], only A holds label 1 → G_0 = [3, 0] (|S_0| = 2), so A's target for label 0
    is B's [4, 0] and A has none for label 1; a client holding neither label gets G."""
    sums, counts = label_means(torch.tensor([[1.0, 0.0], [3.0, 0.0], [0.0, 5.0]]), torch.tensor([0, 0, 1]), 2)
    assert sums.tolist() == [[4.0, 0.0], [0.0, 5.0]] and counts.tolist() == [2.0, 1.0]
    g, holders = torch.tensor([[3.0, 0.0], [0.0, 5.0]]), torch.tensor([2.0, 1.0])
    own, own_counts = torch.tensor([[2.0, 0.0], [0.0, 5.0]]), torch.tensor([4.0, 1.0])
    targets, valid = teacher_targets(g, holders, own, own_counts, "others")
    assert targets[0].tolist() == [4.0, 0.0] and valid.tolist() == [True, False]
    targets, valid = teacher_targets(g, holders, None, None, "others")
    assert torch.equal(targets, g) and valid.tolist() == [True, True]
    # β-term: CE(ψ(F̂_y), ψ(f)) per sample, zero for labels without a teacher, over the batch size
    logits = torch.zeros(2, 2)
    term = distillation_term(logits, torch.tensor([0, 1]), torch.tensor([[4.0, 0.0], [0.0, 0.0]]),
                             torch.tensor([True, False]), 1.0)
    assert term.item() == pytest.approx(math.log(2) / 2, rel=1e-6)


def test_fd_teacher_all_is_the_mean_over_every_holder_and_the_temperature_softens_both_sides() -> None:
    g, holders = torch.tensor([[3.0, 0.0], [0.0, 5.0]]), torch.tensor([2.0, 0.0])
    own, own_counts = torch.tensor([[2.0, 0.0], [0.0, 0.0]]), torch.tensor([4.0, 0.0])
    targets, valid = teacher_targets(g, holders, own, own_counts, "all")
    assert torch.equal(targets, g) and valid.tolist() == [True, False]  # a label nobody holds has no teacher
    logits = torch.tensor([[2.0, 0.0]])
    term = distillation_term(logits, torch.tensor([0]), torch.tensor([[4.0, 0.0], [0.0, 0.0]]),
                             torch.tensor([True, False]), 2.0)
    soft = torch.softmax(torch.tensor([2.0, 0.0]), 0)  # ψ(F̂, T = 2) = softmax([4, 0] / 2)
    assert term.item() == pytest.approx(float(-(soft * torch.log_softmax(torch.tensor([1.0, 0.0]), 0)).sum()))


def _fd(beta: float = 1.0) -> tuple[FD, Client[FDClient]]:
    """FD with a one-layer model on 2 classes and a stand-in context (2 classes, the CPU)."""
    from types import SimpleNamespace

    ctx = SimpleNamespace(num_classes=2, device=torch.device("cpu"))
    return FD(FDParams(beta=beta), cast(Any, ctx)), Client(0, cast(Any, None), DiagonalLinear(), FDClient())


@pytest.mark.parametrize("beta", [0.5, 1.0])
def test_fd_local_loss_is_ce_plus_beta_times_the_distillation_term_and_accumulates_the_label_logits(
        beta: float) -> None:
    """Round 1 (no targets): CE alone; later: CE + β·distillation toward the leave-one-out targets. Each step adds
    its per-label logit sums and counts to the round's accumulators."""
    algorithm, client = _fd(beta=beta)
    x1, y1 = torch.tensor([[1.0, 1.0], [2.0, 0.0]]), torch.tensor([0, 1])
    x2, y2 = torch.tensor([[1.0, 0.0], [0.0, 1.0]]), torch.tensor([0, 1])
    client.state.sums, client.state.counts = torch.zeros(2, 2), torch.zeros(2)
    first = algorithm.local_loss(cast(Any, None), client, x1, y1)
    logits1 = torch.tensor([[1.0, 2.0], [2.0, 0.0]])
    assert first.item() == pytest.approx(nn.functional.cross_entropy(logits1, y1).item())
    # the client held label 0 last round (its mean [1, 0]) with two others, and not label 1, which one other held
    g, holders = torch.tensor([[3.0, 0.0], [0.0, 1.0]]), torch.tensor([3.0, 1.0])
    client.state.global_means, client.state.holders = g, holders
    client.state.own, client.state.own_counts = torch.tensor([[1.0, 0.0], [0.0, 0.0]]), torch.tensor([1.0, 0.0])
    second = algorithm.local_loss(cast(Any, None), client, x2, y2)
    logits2 = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    targets = torch.tensor([[4.0, 0.0], [0.0, 1.0]])  # label 0: (3·[3, 0] − [1, 0]) / 2; label 1: G_1
    expected = nn.functional.cross_entropy(logits2, y2) + beta * distillation_term(
        logits2, y2, targets, torch.tensor([True, True]), 1.0)
    assert second.item() == pytest.approx(expected.item())
    assert client.state.sums.tolist() == [[2.0, 2.0], [2.0, 2.0]] and client.state.counts.tolist() == [2.0, 2.0]


def test_fd_uploads_the_rounds_per_label_mean_logits_and_the_server_averages_them_over_the_holders() -> None:
    """The client's upload: per label, the round's summed logits over its count (a label it lacks: zeros); the
    server: G_k = the mean of the uploads of the clients holding k, |S_k| those clients."""
    algorithm, client = _fd()
    batches = [(torch.tensor([[1.0, 1.0], [3.0, 1.0]]), torch.tensor([0, 0])),
               (torch.tensor([[0.0, 1.0]]), torch.tensor([1]))]

    def local_train(client_: Any, round_index: int, loss: Any) -> float:
        return sum(loss(None, client_, x, y).item() for x, y in batches)

    algorithm.ctx.local_train = local_train
    update, _ = algorithm.local_update(1, client)
    assert update.means.tolist() == [[2.0, 2.0], [0.0, 2.0]] and update.counts.tolist() == [2.0, 1.0]
    assert torch.equal(client.state.own, update.means) and client.state.sums is None
    other = LabelLogits(torch.tensor([[4.0, 0.0], [1.0, 3.0]]), torch.tensor([1.0, 5.0]))
    lacking = LabelLogits(torch.tensor([[0.0, 0.0], [9.0, 9.0]]), torch.tensor([0.0, 0.0]))  # holds nothing
    server = Server(None, FDServer())
    algorithm.aggregate(1, server, [update, other, lacking])
    assert server.state.global_means is not None and server.state.holders is not None
    assert server.state.global_means.tolist() == [[3.0, 1.0], [0.5, 2.5]]
    assert server.state.holders.tolist() == [2.0, 2.0]


def test_fedproto_fedal_feature_distance_is_the_mse() -> None:
    assert feature_distance(torch.tensor([[1.0, 3.0]]), torch.tensor([[0.0, 0.0]])).item() == 5.0


@pytest.mark.parametrize("teacher, target", [("others", [2.5, 1.0]), ("all", [2.0, 1.0])])
def test_fedproto_fedal_transfer_loss_is_lambda_times_the_mse_to_the_leave_one_out_mean_by_hand(
        teacher: str, target: list[float]) -> None:
    """λ · MSE(φ_n, φ̄_{−n}), φ̄_{−n} = (N·φ̄ − φ_n)/(N − 1): N = 3, φ̄ = [2, 1], φ_n = [1, 1] → φ̄_{−n} = [5, 2]/2 =
    [2.5, 1], MSE = (1.5² + 0)/2 = 1.125; ``teacher: all``: φ̄ itself, MSE = (1² + 0)/2 = 0.5; λ = 0.5 (not 1, so
    that λ·d and λ/d differ)."""
    algorithm = FedProtoFedAL(FedProtoFedALParams(weight=0.5, teacher=cast(Any, teacher)), cast(Any, None))
    features = torch.tensor([[1.0, 1.0]])
    reply = FeatureReply(torch.tensor([[2.0, 1.0]]), 3)
    loss = algorithm.transfer_loss(cast(Any, None), cast(Any, None), torch.zeros(1, 1),
                                   PublicOutputs(features, torch.zeros(1, 2)), reply)
    distance = ((features - torch.tensor([target])) ** 2).mean().item()
    assert distance == {"others": 1.125, "all": 0.5}[teacher]
    assert loss.item() == pytest.approx(0.5 * distance)


@pytest.mark.parametrize("teacher, fewest", [("others", 2), ("all", 1)])
def test_fedproto_fedal_needs_two_clients_a_round_for_a_leave_one_out_teacher_and_one_otherwise(
        teacher: str, fewest: int) -> None:
    params = FedProtoFedALParams(teacher=cast(Any, teacher))
    assert FedProtoFedAL(params, cast(Any, None)).min_clients() == fewest


def test_feddf_with_one_architecture_and_no_distillation_is_fedavg(data_dir: Path, tmp_path: Path) -> None:
    """FedDF is FedAvg plus server ensemble distillation: with 0 steps, the same global model, bit for bit."""
    common = {"model": {"name": "cnn", "candidates": []}, "training": {"local_steps": 3},
              "evaluation": {"global_model": True, "clients_on_global_test": False}}
    values = {}
    for name in ("fedavg", "feddf"):
        algorithm = {"name": name, **({"distill_steps": 0} if name == "feddf" else {})}
        result = run_federation(fedal_config(algorithm=algorithm, **common))
        values[name] = [(r, m, v) for r, m, c, v in result.records if m in ("global_acc", "train_loss")]
    assert values["feddf"] == values["fedavg"]


def test_feddf_teacher_is_the_mean_of_the_received_models() -> None:
    """The ensemble teacher: the mean logits of every received client model (eval mode, its uploaded weights)."""
    result = run_federation(fedal_config(algorithm={"name": "feddf", "distill_steps": 1},
                                         training={"rounds": 1, "local_steps": 1}))
    algorithm, server, clients = result.state.algorithm, result.state.server, result.state.clients
    x = algorithm.ctx.public_x[:8]
    from bench.engine.messages import Update

    updates = [Update(c.cid, 1, {k: v.clone() for k, v in c.model.state_dict().items()}, None) for c in clients]
    expected = torch.stack([c.model.eval()(x)[1] for c in clients]).mean(0)
    assert torch.allclose(algorithm.ensemble_logits(server, updates, x), expected, atol=1e-6)
    assert len(server.state.models) == 2 and server.model is None  # two groups (CNN, MLP): no single global model


def test_feddf_client_holds_its_group_model_once_it_took_part_and_distils_with_the_named_optimiser() -> None:
    """Before its first broadcast a client's model is its own initial copy; from then on its group's θ_g. The server
    distils with a fresh Adam (FedDF) or SGD (``distill_optimizer``) at ``distill_lr``."""
    result = run_federation(fedal_config(algorithm={"name": "feddf", "distill_steps": 1},
                                         training={"rounds": 1, "local_steps": 1}))
    algorithm, server = result.state.algorithm, result.state.server
    client = Client(0, result.state.clients[0].data, algorithm.init_client_model(0, server),
                    algorithm.init_client_state(0))
    assert algorithm.client_model(server, client) is client.model
    algorithm.receive_broadcast(client, algorithm.broadcast(2, server, 0))
    assert algorithm.client_model(server, client) is algorithm.group_model(server, 0)
    model = algorithm.group_model(server, 0)
    for name, kind in (("adam", torch.optim.Adam), ("sgd", torch.optim.SGD)):
        feddf = type(algorithm)(type(algorithm).Params(distill_optimizer=name, distill_lr=0.02), algorithm.ctx)
        optimizer = feddf.make_distill_optimizer(model)
        assert type(optimizer) is kind and optimizer.param_groups[0]["lr"] == 0.02


def test_feddf_refuses_a_run_without_a_public_set_naming_the_setting() -> None:
    with pytest.raises(BenchError, match=r"feddf distils on unlabelled proxy data: set public.size"):
        run_federation(fedal_config(algorithm={"name": "feddf"}, public={"size": 0}))


@pytest.mark.parametrize("weighting, expected", [("samples", 3.0), ("uniform", 2.0)])
def test_feddf_averages_each_group_by_sample_counts_or_uniformly(weighting: str, expected: float) -> None:
    """θ_g = Σ n_k θ_k / Σ n_k over the group's received clients (``weighting: samples``), or their plain mean
    (``uniform``): clients of 1 and 3 samples sending every float weight at 0 and 4 give 3 and 2."""
    result = run_federation(fedal_config(algorithm={"name": "feddf", "distill_steps": 0},
                                         training={"rounds": 1, "local_steps": 1}))
    algorithm, server = result.state.algorithm, result.state.server
    feddf = type(algorithm)(type(algorithm).Params(distill_steps=0, weighting=weighting), algorithm.ctx)
    arch = algorithm.ctx.architectures[0]
    a, b = [cid for cid, name in enumerate(algorithm.ctx.architectures) if name == arch][:2]
    model = server.state.models[arch]
    floats = [k for k, v in model.state_dict().items() if v.is_floating_point()]
    updates = [Update(cid, n, {k: torch.full_like(v, value) for k, v in model.state_dict().items()}, None)
               for cid, n, value in ((a, 1, 0.0), (b, 3, 4.0))]
    feddf.aggregate(2, server, updates)
    assert {k: model.state_dict()[k].unique().tolist() for k in floats} == {k: [expected] for k in floats}


def test_feddf_round_r_distils_on_the_next_distill_steps_batches_of_its_public_stream(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Round r's i-th distillation step takes batch (r − 1)·τ + i of the lockstep stream ("public", "distill") in
    batches of ``distill_batch_size`` (8 here, not training.batch_size's 16): round 1 batches 0..τ−1, round 2 the
    next τ, so no round repeats the previous one's batches."""
    from bench.algorithms.feddf import FedDF
    from bench.engine.streams import SharedBatches

    seen: list[tuple[int, torch.Tensor]] = []
    original = FedDF.distill_step

    def spy(self, round_index, server, groups, loops, x, teacher):  # type: ignore[no-untyped-def]
        seen.append((round_index, x.clone()))
        original(self, round_index, server, groups, loops, x, teacher)

    monkeypatch.setattr(FedDF, "distill_step", spy)
    steps = 3
    result = run_federation(fedal_config(algorithm={"name": "feddf", "distill_steps": steps, "distill_batch_size": 8},
                                         training={"rounds": 2, "local_steps": 1}))
    ctx = result.state.algorithm.ctx
    stream = SharedBatches(ctx.public_x, 8, ctx.seed, ("public", "distill"), True)
    assert [r for r, _ in seen] == [1] * steps + [2] * steps
    for i, (_, x) in enumerate(seen):
        assert torch.equal(x, stream.batch(i))
    assert not torch.equal(seen[0][1], seen[steps][1])


def test_feddf_divergence_in_the_server_distillation_names_the_round_and_the_server(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A NaN distillation loss stops the run with one line naming the round and the trainer (the server)."""
    import bench.algorithms.feddf as feddf
    from bench.errors import Diverged

    monkeypatch.setattr(feddf, "kd_loss", lambda student, teacher, t: student.sum() * float("nan"))
    with pytest.raises(Diverged, match=r"diverged at round 1 \(client server\)"):
        run_federation(fedal_config(algorithm={"name": "feddf", "distill_steps": 1},
                                    training={"rounds": 1, "local_steps": 1}))


def test_feddf_al_without_its_adversarial_and_less_forgetting_terms_is_feddf() -> None:
    """FedDF-AL's reading (pipelines/fedal/NOTES.md §3.2.8, a design of ours): FedDF's groups, averaging and ensemble
    teacher, with FedAL's terms added, so with W_ADV = W_LFL = W_LFG = 0 it is FedDF bit for bit; with them it is
    not (the equality is not vacuous)."""
    common = {"training": {"rounds": 2, "local_steps": 2}}
    runs = {}
    for key, algorithm in (("feddf", {"name": "feddf", "distill_steps": 2}),
                           ("bare", {"name": "feddf_al", "distill_steps": 2, "adv_weight": 0.0,
                                     "lf_local_weight": 0.0, "lf_global_weight": 0.0}),
                           ("feddf_al", {"name": "feddf_al", "distill_steps": 2})):
        result = run_federation(fedal_config(algorithm=algorithm, **common))
        runs[key] = [(r, m, c, v) for r, m, c, v in result.records if m in ("client_global_acc", "train_loss")]
    assert runs["bare"] == runs["feddf"]
    assert runs["feddf_al"] != runs["feddf"]


def test_feddf_al_discriminator_tells_the_architecture_groups_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    """The game is played by the G group students after averaging, not by the N clients: a G-way discriminator
    (CNN and MLP: 2 outputs for 4 clients), fed each student's logits on the distillation batch, a student's class
    its group's index among the sorted architectures; one discriminator step per distillation step, told
    its round (which names it in a divergence message)."""
    import bench.algorithms.feddf_al as feddf_al

    seen: list[tuple[int, tuple[int, ...], list[int]]] = []
    original = feddf_al.discriminator_round

    def spy(state, round_index, logits, targets, temperature):  # type: ignore[no-untyped-def]
        seen.append((round_index, tuple(logits.shape), targets.tolist()))
        return original(state, round_index, logits, targets, temperature)

    monkeypatch.setattr(feddf_al, "discriminator_round", spy)
    result = run_federation(fedal_config(algorithm={"name": "feddf_al", "distill_steps": 3},
                                         training={"rounds": 2, "local_steps": 1}))
    discriminator = result.state.server.state.discriminator
    assert discriminator.classifier.out_features == 2 and len(result.state.clients) == 4
    assert seen == [(r, (2, 16, 10), [0, 1]) for r in (1, 2) for _ in range(3)]  # cnn 0, mlp 1; B = 16, K = 10


def test_feddf_al_student_step_is_kd_plus_weighted_r_glo_plus_the_weighted_adversarial_surrogate(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Each group student θ̂_g's distillation step minimises T²·𝒦(ψ(teacher) ‖ ψ(f_g)) + w_LF·r_glo + w_adv·Σ f_g ⊙
    ∂U_g/∂f_g, r_glo against θ̂_g frozen at the distillation's start and ∂U_g/∂f_g the discriminator's (a fixed
    stand-in here); weights 0.5 and 0.25 (not 1, so that a product and a quotient differ), T = 2."""
    import bench.algorithms.feddf_al as feddf_al
    from bench.algorithms.fedal import lf_loss
    from bench.engine.distillation import kd_loss
    from bench.engine.loop import Step

    result = run_federation(fedal_config(algorithm={"name": "feddf_al", "distill_steps": 1},
                                         training={"rounds": 1, "local_steps": 1}))
    algorithm, server = result.state.algorithm, result.state.server
    algorithm.params = algorithm.params.model_copy(update={"lf_global_weight": 0.5, "adv_weight": 0.25,
                                                           "temperature": 2.0})
    groups, x = sorted(server.state.models), algorithm.ctx.public_x[:4]
    gradient = torch.randn(2, 4, 10, generator=torch.Generator().manual_seed(0))
    monkeypatch.setattr(feddf_al, "discriminator_round", lambda *args: (gradient, None, None))
    teacher = torch.randn(4, 10, generator=torch.Generator().manual_seed(1))

    class Recorder:
        def run(self, batches: list[torch.Tensor], fn: Any) -> None:
            self.loss = fn(Step(1, 0), batches[0]).item()

    loops = [Recorder(), Recorder()]
    algorithm.distill_step(1, server, groups, cast(Any, loops), x, teacher)
    for g, loop, grad in zip(groups, loops, gradient):
        with torch.no_grad():
            z, frozen = server.state.models[g].train()(x)[1], server.state.snapshots[g](x)[1]
        r_glo = lf_loss(z, frozen, 1.0).item()
        assert r_glo > 1e-4  # the students moved since their snapshots: r_glo is not 0
        expected = kd_loss(z, teacher, 2.0).item() + 0.5 * r_glo + 0.25 * float((z * grad).sum())
        assert loop.loss == pytest.approx(expected, rel=1e-5)


@pytest.mark.parametrize("readings", [{}, {"lf_first_round": False, "snapshot_mode": "eval"}],
                         ids=["default", "no-first-round-eval-mode"])
def test_feddf_al_tells_its_local_objective_the_round_and_freezes_its_snapshots_in_snapshot_mode(
        readings: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """r_loc applies from round 1 or, with ``lf_first_round: false``, from round 2 (A5), so V_loc is told each
    step's round; r_loc's θ_g (each client) and r_glo's θ̂_g (each group) are frozen in the BatchNorm mode
    ``snapshot_mode`` (A5: train by default)."""
    import bench.algorithms.feddf_al as feddf_al

    rounds: list[int] = []
    original = feddf_al.local_objective

    def spy(model, snapshot, x, y, params, round_index):  # type: ignore[no-untyped-def]
        rounds.append(round_index)
        return original(model, snapshot, x, y, params, round_index)

    monkeypatch.setattr(feddf_al, "local_objective", spy)
    result = run_federation(fedal_config(algorithm={"name": "feddf_al", "distill_steps": 1, **readings},
                                         training={"rounds": 2, "local_steps": 2}))
    assert rounds == [1] * 4 * 2 + [2] * 4 * 2  # 4 clients, τ = 2 steps each round
    train_mode = readings.get("snapshot_mode", "train") == "train"
    snapshots = [c.state.snapshot for c in result.state.clients] + list(result.state.server.state.snapshots.values())
    assert len(snapshots) == 4 + 2 and all(s.training == train_mode for s in snapshots)


def test_the_fedal_report_says_feddf_al_is_a_design_of_ours() -> None:
    """Wherever FedDF-AL has rows, the report says its design is ours (the paper gives τ and E_adv only)."""
    from bench.suites import load_suite
    from bench.suites.plugins import import_paper_module

    params = Path(__file__).resolve().parents[1] / "pipelines" / "fedal" / "params.yaml"
    paper = import_paper_module(params.with_name("paper.py")).PAPER
    suite = load_suite(params, overrides=["profile=proxy"])
    [section] = paper.sections(suite, paper.printed())
    assert "design of ours" in section.title and "τ = 15 and E_adv = 2" in section.note
    from types import SimpleNamespace
    assert paper.sections(SimpleNamespace(methods=["fedal", "fedmd_fedal"]), paper.printed()) == []


def test_fedproto_fedal_needs_one_feature_dimension() -> None:
    """SVHN's WRN mix has 64- and 128-d features: FedAL does not run FedProto there, and we refuse it."""
    with pytest.raises(BenchError, match="one feature dimension"):
        run_federation(fedal_config(algorithm={"name": "fedproto_fedal"}, dataset={"name": "synthetic32"},
                                    model={"name": "wrn10_1", "candidates": ["wrn10_1", "wrn10_2", "wrn16_1"]}))
    # model.kwargs are model.name's only (the CNN's 32-d features here); the MLP keeps its 64-d defaults
    with pytest.raises(BenchError, match=r"one feature dimension; the clients' architectures have \{'(cnn': 32, "
                                         r"'mlp': 64|mlp': 64, 'cnn': 32)\}"):
        run_federation(fedal_config(algorithm={"name": "fedproto_fedal"}, model={"kwargs": {"feature_dim": 32}}))


@pytest.mark.parametrize("algorithm", [
    {"name": "fccl", "pretrain_epochs": 2}, {"name": "fcclplus"}, {"name": "cfd"}, {"name": "fd"},
    {"name": "feddf_al", "distill_steps": 2}, {"name": "fedproto_fedal"},
], ids=["fccl", "fcclplus", "cfd", "fd", "feddf_al", "fedproto_fedal"])
def test_a_resumed_run_equals_an_uninterrupted_one(algorithm: dict, data_dir: Path, tmp_path: Path) -> None:
    """FCCL's pre-trained and previous-round teachers, CFD's server model and optimiser, FD's label means,
    FedDF-AL's group models, discriminator and snapshots: all in the checkpoint."""
    assert_resumes_bitwise(fedal_config(algorithm=algorithm, training={"rounds": 4}), data_dir, tmp_path)
