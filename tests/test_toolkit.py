"""The training toolkit below the methods: the loop primitive, streams, two-optimiser loops, personal
parameters (docs/architecture.md "The engine")."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from bench.engine.aggregate import copy_state, load_state, state_tensors, weighted_average
from bench.engine.distillation import kd_loss, soft_target_kl
from bench.engine.evaluation import eval_mode
from bench.engine.loop import Loop, Step, parameters
from bench.engine.streams import NoiseStream, SharedBatches, batches_per_pass, epoch_batches
from bench.errors import Diverged
from bench.rng import torch_stream


def _model(seed: int = 0) -> nn.Module:
    gen = torch.Generator().manual_seed(seed)
    model = nn.Linear(3, 2)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen))
    return model


def test_loop_is_a_plain_training_loop_bitwise() -> None:
    """Loop.run = zero_grad, forward, backward, clip, step per batch; the mean loss over steps."""
    x, y = torch.arange(24.0).reshape(8, 3) / 10, torch.tensor([0, 1] * 4)
    batches = [slice(0, 4), slice(4, 8), slice(2, 6)]
    a, b = _model(), _model()
    opt_a, opt_b = torch.optim.SGD(a.parameters(), lr=0.1, momentum=0.9), torch.optim.SGD(b.parameters(), lr=0.1,
                                                                                         momentum=0.9)
    seen: list[Step] = []

    def step_fn(step: Step, s: slice) -> torch.Tensor:
        seen.append(step)
        return F.cross_entropy(a(x[s]), y[s])

    mean = Loop(opt_a, list(a.parameters()), round=7, who=0, grad_clip=0.5).run(batches, step_fn)
    losses = []
    for s in batches:
        loss = F.cross_entropy(b(x[s]), y[s])
        opt_b.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(b.parameters(), 0.5)
        opt_b.step()
        losses.append(loss.detach())
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    assert mean == float(sum(losses[1:], losses[0])) / 3
    assert [(s.round, s.index) for s in seen] == [(7, 0), (7, 1), (7, 2)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_loop_mean_loss_is_the_tensor_sum_of_step_losses_bitwise(dtype: torch.dtype) -> None:
    """The loop sums float32 CPU losses on the host: the same float32 additions, in the same order, as
    ``loss_0 + loss_1 + ...`` on 0-dim tensors (other dtypes and devices are summed as tensors)."""
    values = torch.rand(500, generator=torch.Generator().manual_seed(0), dtype=torch.float64).mul(3).to(dtype)
    weight = nn.Parameter(torch.zeros((), dtype=dtype))
    loop = Loop(torch.optim.SGD([weight], lr=0.0), [weight], round=1, who=0)
    mean = loop.run(range(len(values)), lambda step, i: weight * 0 + values[i])
    assert mean == float(sum(values[1:], values[0])) / len(values)


def test_a_non_finite_loss_raises_diverged_naming_round_and_trainer() -> None:
    model = _model()
    loop = Loop(torch.optim.SGD(model.parameters(), lr=0.1), list(model.parameters()), round=3, who="server")
    with pytest.raises(Diverged, match=r"round 3 \(client server\)"):
        loop.run(range(2), lambda step, _: model(torch.ones(1, 3)).sum() * (float("nan") if step.index else 1.0))


def test_backward_inputs_leaves_frozen_teachers_without_gradients() -> None:
    student, teacher = _model(0), _model(1)
    loop = Loop(torch.optim.SGD(student.parameters(), lr=0.1), list(student.parameters()), 1, "s",
                backward_inputs=True)
    loop.run(range(1), lambda step, _: teacher(student(torch.ones(1, 3)).repeat(1, 2)[:, :3]).sum())
    assert all(p.grad is None for p in teacher.parameters())
    assert all(p.grad is not None for p in student.parameters())


def test_epoch_batches_cover_each_epoch_once_or_stop_after_steps() -> None:
    batches = list(epoch_batches(10, 4, False, torch_stream(0, "b"), torch.device("cpu"), epochs=2))
    assert [len(b) for b in batches] == [4, 4, 2, 4, 4, 2]
    assert sorted(torch.cat(batches[:3]).tolist()) == list(range(10))
    steps = list(epoch_batches(10, 4, True, torch_stream(0, "b"), torch.device("cpu"), steps=5))
    assert [len(b) for b in steps] == [4] * 5


@pytest.mark.parametrize("n, batch_size, drop_last", [(10, 4, False), (10, 4, True), (3, 8, True), (8, 4, True)])
def test_batches_per_pass_counts_what_one_epoch_of_batches_holds(n: int, batch_size: int, drop_last: bool) -> None:
    batches = list(epoch_batches(n, batch_size, drop_last, torch.Generator().manual_seed(0), torch.device("cpu"),
                                 epochs=1))
    assert batches_per_pass(n, batch_size, drop_last) == len(batches)


def test_kd_loss_is_t_squared_kl_of_the_tempered_softmaxes_by_hand() -> None:
    """Teacher logits (ln 2, 0, 0) give p_t = (1/2, 1/4, 1/4); a zero student gives 1/3 each:
    KL = ½ln(3/2) + 2·¼ln(3/4) = ½ln(9/8). The batch mean over two equal rows is the same."""
    teacher = torch.tensor([[math.log(2), 0.0, 0.0]] * 2)
    student = torch.zeros(2, 3)
    assert float(kd_loss(student, teacher, 1.0)) == pytest.approx(0.5 * math.log(9 / 8), rel=1e-6)
    # T = 2: T²·KL(softmax(t/2) ‖ uniform), p_t ∝ (√2, 1, 1)
    p = [math.sqrt(2) / (math.sqrt(2) + 2), 1 / (math.sqrt(2) + 2), 1 / (math.sqrt(2) + 2)]
    assert float(kd_loss(student, teacher, 2.0)) == pytest.approx(4 * sum(q * math.log(3 * q) for q in p), rel=1e-5)
    assert float(kd_loss(teacher, teacher, 1.0)) == pytest.approx(0.0, abs=1e-7)


def test_kd_loss_trains_the_student_only() -> None:
    student, teacher = torch.zeros(1, 2, requires_grad=True), torch.tensor([[1.0, 0.0]], requires_grad=True)
    kd_loss(student, teacher, 2.0).backward()
    assert student.grad is not None and student.grad[0, 0] < 0 and teacher.grad is None


def test_soft_target_kl_has_the_target_first_and_no_t_squared() -> None:
    """KL([½, ½] ‖ ψ([0, ln 3])) = ½ ln(½ / ¼) + ½ ln(½ / ¾) = ½ ln(4/3); at T = 2 the student is ψ([0, ln 3] / 2)
    and nothing scales the result."""
    target, student = torch.tensor([[0.5, 0.5]]), torch.tensor([[0.0, math.log(3)]])
    assert soft_target_kl(student, target, 1.0).item() == pytest.approx(0.5 * math.log(4 / 3), abs=1e-6)
    q = 1 / (1 + math.sqrt(3))
    assert soft_target_kl(student, target, 2.0).item() == pytest.approx(
        0.5 * math.log(0.5 / q) + 0.5 * math.log(0.5 / (1 - q)), abs=1e-6)


def test_eval_mode_evaluates_and_restores_the_mode_it_found() -> None:
    model = nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2))
    for training in (True, False):
        model.train(training)
        with eval_mode(model) as inside:
            assert inside is model and not model.training and not model[1].training
        assert model.training is training and model[1].training is training
    with pytest.raises(RuntimeError), eval_mode(model.train()):
        raise RuntimeError("a failing evaluation")
    assert model.training


def test_shared_public_stream_gives_every_client_the_same_batch_in_lockstep() -> None:
    """Iteration i is the same mini-batch whoever asks and in whatever order (FedAL's lockstep public batches,
    pipelines/fedal/NOTES.md §2.2)."""
    public = torch.arange(10.0).unsqueeze(1)
    stream = SharedBatches(public, batch_size=4, seed=3)
    client_a = [stream.batch(i) for i in range(6)]
    client_b = [stream.batch(i) for i in reversed(range(6))][::-1]
    assert all(torch.equal(p, q) for p, q in zip(client_a, client_b))
    epoch0 = torch.cat(client_a[:2]).flatten().tolist()  # drop_last: 2 batches of 4 per epoch
    assert len(set(epoch0)) == 8
    assert not torch.equal(torch.cat(client_a[:2]), torch.cat(client_a[2:4]))  # a new permutation per epoch
    assert torch.equal(SharedBatches(public, 4, seed=3).batch(5), client_a[5])  # a pure function of (seed, i)


def test_noise_stream_is_reproducible() -> None:
    a = NoiseStream(torch_stream(0, "noise"), 5, torch.device("cpu"), "normal")
    b = NoiseStream(torch_stream(0, "noise"), 5, torch.device("cpu"), "normal")
    assert torch.equal(a.batch(3), b.batch(3)) and a.batch(2).shape == (2, 5)


class _WithHead(nn.Module):
    def __init__(self, seed: int) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        self.body = nn.Linear(2, 2)
        self.head = nn.Linear(2, 1)
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.randn(p.shape, generator=gen))


def test_personal_parameters_are_neither_averaged_nor_broadcast() -> None:
    server, client, other = _WithHead(0), _WithHead(1), _WithHead(2)
    head = client.head.weight.clone()
    shared = [k for k in server.state_dict() if not k.startswith("head.")]
    copy_state(client, server, shared)
    assert torch.equal(client.body.weight, server.body.weight) and torch.equal(client.head.weight, head)
    avg = weighted_average([client.state_dict(), other.state_dict()], [1.0, 3.0], shared)
    assert set(avg) == set(shared)
    torch.testing.assert_close(avg["body.weight"], (client.body.weight + 3 * other.body.weight) / 4)


def test_a_method_with_personal_parameters_keeps_each_clients_head(data_dir) -> None:  # type: ignore[no-untyped-def]
    """FL-bench's personal/shared split: heads declared personal stay with their clients; the server
    averages and broadcasts the rest."""
    from bench.algorithms import register_algorithm
    from bench.algorithms.fedavg import FedAvg
    from bench.runner.federation import run_federation
    from tests.conftest import small_config

    @register_algorithm("test-personal-head")
    class PersonalHead(FedAvg):
        personal_parameters = ("classifier.",)

    result = run_federation(small_config(algorithm={"name": "test-personal-head"}, training={"rounds": 2}), data_dir)
    server, clients, algorithm = result.state.server, result.state.clients, result.state.algorithm
    initial = algorithm.ctx.build_model("server")
    assert torch.equal(server.model.classifier.weight, initial.classifier.weight)  # never averaged
    heads = [c.model.classifier.weight.clone() for c in clients]
    assert not torch.equal(heads[0], heads[1])  # each client trains its own head
    message = algorithm.broadcast(3, server, 0)
    assert message.state and not any(k.startswith("classifier.") for k in message.state)  # never sent
    algorithm.receive_broadcast(clients[0], message)
    assert torch.equal(clients[0].model.classifier.weight, heads[0])  # the broadcast leaves it alone
    body = [k for k in server.model.state_dict() if not k.startswith("classifier.")]
    assert all(torch.equal(clients[0].model.state_dict()[k], server.model.state_dict()[k]) for k in body)


def _reference_average(states, weights, keys=None):  # type: ignore[no-untyped-def]
    """weighted_average as it was written: key by key, client by client."""
    total, out = float(sum(weights)), {}
    for key, first in states[0].items():
        if keys is not None and key not in keys:
            continue
        if not first.is_floating_point():
            out[key] = first.clone()
            continue
        acc = torch.zeros_like(first)
        for state, w in zip(states, weights):
            acc.add_(state[key], alpha=w / total)
        out[key] = acc
    return out


def test_weighted_average_is_the_key_by_key_sum_bitwise() -> None:
    from bench.models import build_model

    states = [build_model("cnn", (1, 8, 8), 10, seed=s).state_dict() for s in range(7)]
    weights = [float(w) for w in (13, 101, 7, 64, 64, 3, 250)]
    for keys in (None, [k for k in states[0] if not k.startswith("classifier.")]):
        got, expected = weighted_average(states, weights, keys), _reference_average(states, weights, keys)
        assert list(got) == list(expected)
        assert all(torch.equal(got[k], expected[k]) and got[k].dtype == expected[k].dtype for k in got)


def test_state_tensors_are_the_state_dicts_tensors_for_every_model() -> None:
    from bench.models import build_model, get_model_entry, model_names

    for name in model_names():
        model = build_model(name, *get_model_entry(name).example_input)
        fast, slow = state_tensors(model, loading=True), model.state_dict()
        assert fast is not None and list(fast) == list(slow), name
        assert all(fast[k].data_ptr() == slow[k].data_ptr() and fast[k].shape == slow[k].shape for k in slow), name


def test_state_tensors_defer_to_state_dict_when_a_model_customises_it() -> None:
    class Extra(nn.Linear):
        def get_extra_state(self) -> int:
            return 1

    hooked = nn.Sequential(nn.Linear(2, 2))
    hooked[0].register_state_dict_post_hook(lambda module, state, prefix, local: None)
    assert state_tensors(Extra(2, 2)) is None and state_tensors(hooked) is None
    loaded = nn.Sequential(nn.Linear(2, 2))
    loaded.register_load_state_dict_post_hook(lambda module, keys: None)
    assert state_tensors(loaded) is not None and state_tensors(loaded, loading=True) is None


@pytest.mark.parametrize("personal", [False, True])
def test_load_state_is_load_state_dict(personal: bool) -> None:
    from bench.models import build_model

    source = build_model("cnn", (1, 8, 8), 10, seed=1)
    state = {k: v for k, v in source.state_dict().items() if not (personal and k.startswith("classifier."))}
    a, b = build_model("cnn", (1, 8, 8), 10, seed=2), build_model("cnn", (1, 8, 8), 10, seed=2)
    load_state(a, state, strict=not personal)
    b.load_state_dict(state, strict=not personal)
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    with pytest.raises(RuntimeError):  # what load_state_dict refuses, load_state refuses
        load_state(a, {**state, "extra": torch.zeros(1)})


# -- evaluation and input options; the sequential communication pattern -------------------------

class _Fixed(nn.Module):
    """logits = x itself (prediction: argmax of the input row)."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x, x


def test_batch_mean_accuracy_is_the_mean_of_per_batch_accuracies_over_a_seeded_pass() -> None:
    from bench.engine.context import Context
    from tests.conftest import small_config

    ctx = Context(small_config(training={"batch_size": 2}), (2,), 2, torch.device("cpu"))
    x = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.0, 1.0], [1.0, 0.0]])
    y = torch.tensor([0, 1, 1, 1, 1])  # predictions 0 0 1 1 0: correct, wrong, right, right, wrong
    perm = torch.randperm(5, generator=torch_stream(ctx.seed, "k", 3))
    correct = (x.argmax(1) == y).float()[perm]
    by_hand = [correct[0:2].mean().item(), correct[2:4].mean().item()]
    assert ctx.batch_mean_accuracy(_Fixed(), x, y, True, "k", 3) == pytest.approx(sum(by_hand) / 2, abs=1e-12)
    kept = by_hand + [correct[4:].mean().item()]  # the last batch of one sample weighs as much as a full one
    assert ctx.batch_mean_accuracy(_Fixed(), x, y, False, "k", 3) == pytest.approx(sum(kept) / 3, abs=1e-12)
    assert ctx.accuracy(_Fixed(), x, y) == 3 / 5


def test_batch_accuracy_evaluation_and_half_normalisation_in_a_run(data_dir) -> None:  # type: ignore[no-untyped-def]
    from bench.data import load_dataset
    from bench.runner.federation import run_federation, to_tensor
    from tests.conftest import small_config

    data = load_dataset("digits", data_dir)
    half = to_tensor(data.train_x[:4], data, torch.device("cpu"), "half")
    torch.testing.assert_close(half, torch.from_numpy(data.train_x[:4]).float() / 127.5 - 1)
    plain = run_federation(small_config(training={"rounds": 1}), data_dir)
    batches = run_federation(small_config(training={"rounds": 1}, evaluation={"accuracy": "batches"}), data_dir)
    models = plain.state.server.model.state_dict(), batches.state.server.model.state_dict()
    assert all(torch.equal(models[0][k], models[1][k]) for k in models[0])  # evaluation changes no training
    assert plain.curves[0]["global_acc"] != batches.curves[0]["global_acc"]  # 450 test images in batches of 32
    again = run_federation(small_config(training={"rounds": 1}, evaluation={"accuracy": "batches"}), data_dir)
    assert again.curves == batches.curves
    shifted = run_federation(small_config(training={"rounds": 1}, dataset={"normalize": "half"}), data_dir)
    assert shifted.curves != plain.curves


def test_sequential_method_trains_clients_in_a_seeded_order_and_takes_in_each_update() -> None:
    """A method declaring ``sequential()`` trains its clients one after another in the order of
    ``Context.client_order``; each client's broadcast sees the updates taken in before it; the round's
    aggregation gets the updates in client-id order."""
    from dataclasses import dataclass

    from bench.algorithms.base import Algorithm
    from bench.engine.context import Context
    from bench.engine.ledger import Ledger
    from bench.engine.protocol import Metrics
    from bench.engine.state import Client, ClientData, NoState, Server
    from bench.runner.rounds import run_round
    from tests.conftest import small_config

    @dataclass
    class Seen(NoState):
        writers: tuple[int, ...] = ()

    @dataclass
    class Writers:
        cids: tuple[int, ...]

    @dataclass
    class Written:
        cid: int

    class Relay(Algorithm[Seen, Seen, Writers, Written]):
        has_global_model = False
        ClientState = ServerState = Seen
        log: list[tuple[int, tuple[int, ...]]] = []
        aggregated: list[int] = []

        def sequential(self) -> bool:
            return True

        def broadcast(self, round_index: int, server: Server[Seen], cid: int) -> Writers:
            return Writers(server.state.writers)

        def receive_broadcast(self, client: Client[Seen], message: Writers) -> None:
            client.state.writers = message.cids

        def local_update(self, round_index: int, client: Client[Seen]) -> tuple[Written, float]:
            self.log.append((client.cid, client.state.writers))
            return Written(client.cid), float(client.cid)

        def receive(self, round_index: int, server: Server[Seen], update: Written) -> None:
            server.state.writers = (*server.state.writers, update.cid)

        def aggregate(self, round_index: int, server: Server[Seen], updates: list[Written]) -> Metrics:
            self.aggregated[:] = [u.cid for u in updates]
            return {}

    ctx = Context(small_config(), (2,), 2, torch.device("cpu"))
    relay = Relay(Relay.Params(), ctx)
    server = relay.init_server()
    data = ClientData(torch.zeros(1, 2), torch.zeros(1, dtype=torch.long), torch.zeros(0, 2), torch.zeros(0))
    clients = [Client(cid, data, nn.Linear(2, 2), Seen()) for cid in range(5)]
    metrics = run_round(relay, 4, server, clients, Ledger())
    order = ctx.client_order(4, 5)
    assert sorted(order) == list(range(5)) and order != list(range(5))  # a permutation, here not the id order
    assert [cid for cid, _ in relay.log] == order
    assert all(seen == tuple(order[:k]) for k, (_, seen) in enumerate(relay.log))  # each sees those before it
    assert relay.aggregated == list(range(5)) and metrics["train_loss"] == 2.0
    assert ctx.client_order(5, 5) != order and Context(small_config(), (2,), 2, torch.device("cpu")).client_order(
        4, 5) == order
