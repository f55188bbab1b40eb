"""FedFTG (pipelines/dafkd/NOTES.md §2.5, bench/algorithms/fedftg.py), DaFKD's data-free baseline: the server's
fine-tuning round on tiny hand-set models (every generator and student step's loss, both optimisers' learning rate
and weight decay, the labels and noise of the round's stream), its divergence messages and metrics, the label
cut and weights, the client's label histogram, and the generator's initial draw."""
from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any, cast

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from bench.algorithms import fedftg as fedftg_module
from bench.algorithms.fedftg import FedFTG, class_client_weights, label_schedule
from bench.algorithms.fedgen import diversity_loss
from bench.engine.loop import Loop
from bench.engine.messages import Update
from bench.errors import Diverged
from bench.experiment import build_config
from bench.rng import torch_stream
from bench.runner.federation import run_federation
from tests.conftest import small_config

CLASSES, NOISE, SIZE = 3, 2, 4  # the tiny round: 3 classes, z ∈ R², 4 labels per iteration
COUNTS = torch.tensor([[3.0, 1.0, 0.0], [1.0, 2.0, 4.0]])  # the two clients' label histograms n_k^y


def fedftg_config():  # type: ignore[no-untyped-def]
    """FedFTG on digits, one round of 2 clients; the clients' weight decay 0.25, visible in the student's step."""
    return small_config(
        training={"rounds": 1, "local_epochs": None, "local_steps": 2, "batch_size": 16,
                  "optimizer": {"name": "sgd", "lr": 0.01, "weight_decay": 0.25}},
        partition={"scheme": "dafkd", "alpha": 0.5, "num_clients": 4, "min_size": 20, "local_test_fraction": 0.0},
        participation={"fraction": 0.5}, dataset={"name": "digits", "normalize": "half"},
        model={"name": "dafkd_resnet11", "kwargs": {"width": 4, "blocks": [1, 1, 1]}},
        evaluation={"local_models": False}, algorithm={"name": "fedftg", "iterations": 1, "student_steps": 1})


@pytest.fixture(scope="module")
def run() -> Any:
    return run_federation(fedftg_config())


class Tiny(nn.Module):
    """(features, logits) = (x, x·Wᵀ) with x ∈ R² and 3 classes: the student's and the teachers' architecture."""

    def __init__(self, weight: list[list[float]]) -> None:
        super().__init__()
        self.classifier = nn.Linear(2, CLASSES, bias=False)
        with torch.no_grad():
            self.classifier.weight.copy_(torch.tensor(weight))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x, self.classifier(x)


class TinyGenerator(nn.Module):
    """G(z, y) = A·z + E_y, z ∈ R², a conditional generator of 2-feature samples."""

    def __init__(self) -> None:
        super().__init__()
        self.noise = nn.Linear(NOISE, 2, bias=False)
        self.label = nn.Embedding(CLASSES, 2)
        with torch.no_grad():
            self.noise.weight.copy_(torch.tensor([[1.0, 0.5], [-0.5, 1.0]]))
            self.label.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, -1.0]]))

    def forward(self, z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.noise(z) + self.label(y)


STUDENT = [[0.5, 0.0], [0.0, 0.5], [0.5, 0.5]]
TEACHERS = ([[2.0, 0.0], [0.0, 1.0], [-1.0, -1.0]], [[0.0, 1.0], [1.0, 0.0], [1.0, 1.0]])


def tiny_round(algorithm: FedFTG, **params: Any) -> tuple[Any, list[Update[torch.Tensor]]]:
    """``algorithm`` with ``params`` over the tiny round's, its teacher template :class:`Tiny`; a server holding the
    student and :class:`TinyGenerator`; the two clients' uploads (their :data:`TEACHERS` and :data:`COUNTS`)."""
    algorithm.params = algorithm.params.model_copy(update={
        "iterations": 2, "generator_steps": 2, "student_steps": 2, "generator_lr": 0.1, "student_lr": 0.5,
        "lr_decay": 0.5, "batch_size": SIZE, "cls_weight": 0.5, "diversity_weight": 3.0, "noise_dim": NOISE,
        "student_weight_decay": None, "cls_weighting": "sample", **params})
    algorithm.__dict__["_teacher_template"] = Tiny(STUDENT).eval()
    server = SimpleNamespace(model=Tiny(STUDENT), state=fedftg_module.GeneratorServer(TinyGenerator()))
    updates = [Update(cid, 10, Tiny(w).state_dict(), counts) for cid, (w, counts) in enumerate(zip(TEACHERS, COUNTS))]
    return server, updates


def by_hand(algorithm: FedFTG, round_index: int, student: nn.Module, generator: nn.Module,
            weight_decay: float) -> tuple[list[float], list[float], float]:
    """The module docstring's round t, written out on the tiny models (which it trains): α_{k,y} = n_k^y/(n^y + 1e-6);
    from the stream ``("fedftg-server", t)`` the I·B labels, then each iteration's z; per iteration, for each client
    k the generator's steps on L_md + λ_cls·L_cls + λ_dis·L_div/K (Adam, lr 0.1·0.5^(t−1)), then the student's steps
    on −mean T·log softmax(s) (SGD, lr 0.5·0.5^(t−1), ``weight_decay``) against T = Σ_k α_{k,y} softmax(t_k(x̃)) from
    the stepped G. Returns the generator's and the student's step losses and the mean share of x̃ whose y T names."""
    p = algorithm.params
    teachers = [Tiny(w) for w in TEACHERS]
    alpha = COUNTS / (COUNTS.sum(0) + 1e-6)
    rng = torch_stream(algorithm.ctx.seed, "fedftg-server", round_index)
    labels = label_schedule(COUNTS.sum(0), 2 * SIZE, rng)
    g_opt = torch.optim.Adam(generator.parameters(), lr=0.1 * 0.5 ** (round_index - 1))
    s_opt = torch.optim.SGD(student.parameters(), lr=0.5 * 0.5 ** (round_index - 1), weight_decay=weight_decay)
    g_losses, s_losses, named = [], [], []
    for e in range(2):
        y, z = labels[e * SIZE:(e + 1) * SIZE], torch.randn(SIZE, NOISE, generator=rng)
        for k, teacher in enumerate(teachers):
            for _ in range(2):
                g_opt.zero_grad()
                fake = generator(z, y)
                t = teacher(fake)[1]
                md = -((student(fake)[1] - t.detach()).abs().mean(1) * alpha[k, y]).mean()
                cls = (F.cross_entropy(t, y, reduction="none") * alpha[k, y]).mean()
                loss = md + 0.5 * cls + 3.0 * diversity_loss(z, fake) / 2
                loss.backward(inputs=list(generator.parameters()))
                g_opt.step()
                g_losses.append(loss.item())
        with torch.no_grad():
            fake = generator(z, y)
            target = sum(alpha[k, y].unsqueeze(1) * torch.softmax(teacher(fake)[1], 1)
                         for k, teacher in enumerate(teachers))
            assert isinstance(target, torch.Tensor)
            named.append((target.argmax(1) == y).double().mean().item())
        for _ in range(2):
            s_opt.zero_grad()
            loss = -(target * F.log_softmax(student(fake)[1], 1)).mean()
            loss.backward()
            s_opt.step()
            s_losses.append(loss.item())
    return g_losses, s_losses, sum(named) / 2


@pytest.fixture
def losses(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, list[float]]]:
    """Every step loss of the method's loops, by trainer (``"generator"``, ``"server"``) and round."""
    seen: dict[str, list[float]] = {}

    class Recorded(Loop):
        def run(self, batches: Any, step_fn: Any) -> float:
            def recorded(step: Any, batch: Any) -> torch.Tensor:
                loss = step_fn(step, batch)
                seen.setdefault(f"{self.who} {self.round}", []).append(loss.item())
                return loss
            return super().run(batches, recorded)
    monkeypatch.setattr(fedftg_module, "Loop", Recorded)
    yield seen


@pytest.mark.parametrize("student_weight_decay", [None, 1.0])
def test_the_servers_fine_tuning_round_by_hand(run: Any, losses: dict[str, list[float]],
                                               student_weight_decay: float | None) -> None:
    """Round 3 of FedFTG's server on the tiny models (2 iterations of 4 labels; 2 generator steps per client, 2
    student steps; λ_cls = 0.5, λ_dis = 3, learning rates × 0.5^(t−1)): each step's loss, the stepped student and G,
    and the returned share equal the docstring's round written out by hand; the student's weight decay is the
    clients' (0.25) unless ``student_weight_decay`` is set."""
    algorithm: FedFTG = run.state.algorithm
    server, updates = tiny_round(algorithm, student_weight_decay=student_weight_decay)
    student, generator = copy.deepcopy(server.model), copy.deepcopy(server.state.generator)
    g_losses, s_losses, share = by_hand(algorithm, 3, student, generator,
                                        0.25 if student_weight_decay is None else student_weight_decay)
    assert algorithm.fine_tune(3, server, updates) == pytest.approx(share, abs=1e-12) and share > 0
    assert losses["generator 3"] == pytest.approx(g_losses, rel=1e-5) and len(g_losses) == 8
    assert losses["server 3"] == pytest.approx(s_losses, rel=1e-5) and len(s_losses) == 4
    for mine, theirs in ((server.model, student), (server.state.generator, generator)):
        for (name, a), b in zip(mine.state_dict().items(), theirs.state_dict().values()):
            assert torch.allclose(a, b, atol=1e-6), name
    assert not torch.allclose(server.model.classifier.weight, torch.tensor(STUDENT))


@pytest.mark.parametrize("where", ["generator", "server"])
def test_a_divergence_in_fine_tuning_names_its_round_and_its_trainer(run: Any, monkeypatch: pytest.MonkeyPatch,
                                                                     where: str) -> None:
    """A NaN generator loss (its diversity term) or student loss stops the round with one line naming the round and
    the trainer: the server's generator, or the server."""
    algorithm: FedFTG = run.state.algorithm
    server, updates = tiny_round(algorithm)
    name = "diversity_loss" if where == "generator" else "soft_cross_entropy"
    original = getattr(fedftg_module, name)
    monkeypatch.setattr(fedftg_module, name, lambda *args: original(*args) * float("nan"))
    with pytest.raises(Diverged, match=rf"diverged at round 4 \(client {where}\)"):
        algorithm.fine_tune(4, server, updates)


def test_a_round_logs_the_generated_labels_fidelity_against_chance(run: Any) -> None:
    """A round's metrics: ``gen_fidelity``, a share, against ``gen_chance`` = 1/C (C = 10 digits)."""
    (row,) = run.curves
    assert row["gen_chance"] == pytest.approx(0.1) and 0 <= row["gen_fidelity"] <= 1


def test_a_rounds_metrics_are_its_fine_tunings_fidelity_and_chance_one_over_c(monkeypatch: pytest.MonkeyPatch) -> None:
    """``aggregate``: the parameter average, then the server's fine-tuning, in that order; the round's metrics are the
    share ``fine_tune`` returns (``gen_fidelity``) and 1/C (``gen_chance``): 0.1 for C = 10, 0.25 for C = 4. (Checked
    apart from the module's shared run, which the mutation tool credits to the first test that builds it.)"""
    from bench.algorithms.base import ParameterAveraging

    calls: list[tuple[str, int]] = []
    monkeypatch.setattr(ParameterAveraging, "aggregate", lambda self, r, s, u: calls.append(("average", r)) or {})
    for classes in (10, 4):
        algo = FedFTG(fedftg_module.FedFTGParams(), cast(Any, SimpleNamespace(num_classes=classes)))
        monkeypatch.setattr(algo, "fine_tune", lambda r, s, u: calls.append(("fine_tune", r)) or 0.75)
        assert algo.aggregate(3, cast(Any, None), []) == {"gen_fidelity": 0.75, "gen_chance": 1 / classes}
    assert calls == [("average", 3), ("fine_tune", 3)] * 2


def test_discrepancy_and_class_terms_by_hand_where_sign_and_form_show() -> None:
    """L_md = −mean_i(α_i·mean_c|s_ic − t_ic|) on s = (1, 2), (0, 0), t = (3, 1), (0, 2), α = (1, 0.5): rows 1.5, 1
    give −(1.5 + 0.5)/2 = −1 (|s + t| would give −(3.5 + 0.5)/2). L_cls on t = (log 3, 0), (0, 0), y = (0, 1): CE
    log(4/3), log 2; per sample mean(α·CE) = (log(4/3) + ½·log 2)/2, the code's batch form mean CE · mean α =
    (log(4/3) + log 2)/2 · 0.75."""
    s, t, w = torch.tensor([[1.0, 2.0], [0.0, 0.0]]), torch.tensor([[3.0, 1.0], [0.0, 2.0]]), torch.tensor([1.0, 0.5])
    assert fedftg_module.discrepancy_loss(s, t, w).item() == pytest.approx(-1.0)
    t, y, ln = torch.tensor([[math.log(3.0), 0.0], [0.0, 0.0]]), torch.tensor([0, 1]), math.log
    assert fedftg_module.weighted_cross_entropy(t, y, w, "sample").item() == pytest.approx(
        (ln(4 / 3) + 0.5 * ln(2)) / 2)
    assert fedftg_module.weighted_cross_entropy(t, y, w, "batch").item() == pytest.approx((ln(4 / 3) + ln(2)) / 2 * 0.75)


def test_label_schedule_cuts_by_cumulative_shares_and_shuffles_with_its_stream() -> None:
    """n^y = (4, 3, 4) and 8 labels: the cumulative shares' cuts at int(8·4/11) = 2 and int(8·7/11) = 5 give
    2, 3, 3 labels of the classes, shuffled by the stream given (whatever the global RNG), which advances."""
    counts = torch.tensor([4.0, 3.0, 4.0])
    torch.manual_seed(0)
    labels = label_schedule(counts, 8, torch_stream(0, "cut"))
    assert torch.bincount(labels, minlength=3).tolist() == [2, 3, 3]
    torch.manual_seed(1)
    rng = torch_stream(0, "cut")
    assert torch.equal(label_schedule(counts, 8, rng), labels)
    assert not torch.equal(rng.get_state(), torch_stream(0, "cut").get_state())


def test_class_client_weights_keep_a_guard_below_one() -> None:
    """α_{k,y} = n_k^y / (n^y + 1e-6): a class only one client holds weighs 1/(1 + 1e-6) for it, below 1."""
    alpha = class_client_weights(torch.tensor([[1.0, 2.0], [0.0, 2.0]], dtype=torch.float64))
    assert alpha.flatten().tolist() == pytest.approx([1 / (1 + 1e-6), 2 / (4 + 1e-6), 0.0, 2 / (4 + 1e-6)], rel=1e-12)


def test_a_client_sends_its_label_histogram_over_every_class(run: Any) -> None:
    """The update's payload n_k^y over all C classes (0 for a class the client lacks, the last included), float32."""
    algorithm: FedFTG = run.state.algorithm
    client = SimpleNamespace(data=SimpleNamespace(y=torch.tensor([0, 2, 2])))
    payload = algorithm.update_payload(client)  # type: ignore[arg-type]
    assert payload.dtype == torch.float32 and payload.tolist() == [1.0, 0.0, 2.0] + [0.0] * 7


def test_the_generator_is_drawn_from_the_runs_seed_with_its_noise_dim(run: Any) -> None:
    """G's initial weights come from the run's seed (the same seed draws them again, another otherwise), and G takes
    z of ``noise_dim``."""
    algorithm: FedFTG = run.state.algorithm
    ctx = algorithm.ctx

    def weights() -> torch.Tensor:
        return torch.cat([v.flatten().float() for v in algorithm._build_generator().state_dict().values()])

    first = weights()
    assert torch.equal(first, weights())
    algorithm.ctx = dataclasses.replace(ctx, config=build_config({**ctx.config.to_dict(), "seed": 1}))
    try:
        assert not torch.equal(first, weights())
    finally:
        algorithm.ctx = ctx
    algorithm.params = algorithm.params.model_copy(update={"noise_dim": 8})
    generator = algorithm._build_generator().eval()
    assert generator(torch.zeros(2, 8), torch.tensor([0, 1])).shape == (2, *ctx.in_shape)
