"""Training a round's clients together (``training.vectorize_clients``): one vectorised forward and
backward pass over all same-architecture clients per local step (``torch.func.vmap`` of
``torch.func.grad``), instead of one client after another.

Each client keeps everything the serial loop gives it: its own batches (``Context.client_batches``),
its own optimiser with its own state, learning rate and clipping (``Context.client_loop``), its own
step count, loss sum and divergence check (:class:`~bench.engine.loop.LossTally`,
:meth:`~bench.engine.loop.Loop.finish`). Only the arithmetic of the forward and backward passes is
batched: at each step the clients that have a batch are grouped by batch shape (clients with fewer
samples, or a partial last batch, form their own group), their parameters and buffers (BatchNorm
statistics, updated in place) are stacked, and the method's ``local_loss`` runs once per group under
``vmap``, seeing as its client a :class:`ClientView` whose model has this client's parameters
(``torch.func.functional_call``) and whose state has this client's tensors. Each client's parameters
are views of the stacked tensors, so its optimiser's in-place step updates them there.

Equivalence: the same updates in exact arithmetic; in float32, vmap runs a group's convolutions as one
grouped convolution and its matrix products as one batched product, which sum in another order, so
results agree with the serial loop to rounding (about 1e-7 per step on the CPU; ``tests/test_vectorized.py``
states the tolerances), not bit for bit. Hence off by default, and a config switch that enters the
run's config hash. On the CPU it is slower than the loop (``benchmarks/test_vectorized.py``); it is
meant for a GPU, where many small clients otherwise leave it idle.

What the method's ``local_loss`` may use: ``client.model`` (called, or its ``parameters()``) and
``client.state`` fields that are tensors, lists of tensors, or values equal for all clients of the
round; anything else differs per client and is refused with a :class:`~bench.errors.BenchError`.
Models with random layers (dropout) are refused too (each client would need its own stream).
"""
from __future__ import annotations

import dataclasses
import itertools
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn
from torch.func import functional_call, grad, vmap

from bench.engine.loop import Loop, LossTally, Step, apply_step
from bench.engine.state import Client, NoState
from bench.errors import BenchError

LossFn = Callable[[Step, Any, torch.Tensor, torch.Tensor], torch.Tensor]
"""``(step, client, x, y) -> loss``: a method's per-batch local objective (``Algorithm.local_loss``)."""


class ClientView:
    """The client a method's ``local_loss`` sees under ``vmap``: this client's model and state."""

    def __init__(self, model: nn.Module, state: NoState) -> None:
        self.model = model
        self.state = state

    def __getattr__(self, name: str) -> Any:
        raise BenchError(f"training.vectorize_clients: the local loss reads client.{name}, which differs per "
                         "client and cannot be batched; train this method with training.vectorize_clients: false")


class _Objective(nn.Module):
    """``loss_fn`` as a module around the clients' shared architecture, so that ``functional_call``
    gives the model one client's parameters for the whole of ``loss_fn`` (forward and ``parameters()``)."""

    def __init__(self, model: nn.Module, loss_fn: LossFn) -> None:
        super().__init__()
        self.model = model
        self.loss_fn = loss_fn

    def forward(self, step: Step, state: NoState, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.loss_fn(step, ClientView(self.model, state), x, y)


def _equal(a: Any, b: Any) -> bool:
    try:
        return a is b or bool(a == b)
    except (TypeError, ValueError, RuntimeError):  # arrays and tensors compare elementwise
        return False


def _stacked_state(clients: list[Client]) -> tuple[NoState, dict[str, Any]]:
    """The clients' states as one template (the fields equal for all) and the stacked tensor fields."""
    template = clients[0].state
    stacked: dict[str, Any] = {}
    for f in dataclasses.fields(template):
        values = [getattr(c.state, f.name) for c in clients]
        first = values[0]
        if isinstance(first, torch.Tensor):
            stacked[f.name] = torch.stack(values)
        elif isinstance(first, (list, tuple)) and first and all(isinstance(v, torch.Tensor) for v in first):
            stacked[f.name] = [torch.stack(parts) for parts in zip(*values)]
        elif not all(_equal(v, first) for v in values[1:]):
            raise BenchError(f"training.vectorize_clients: client state field {f.name!r} differs between clients "
                             "and is not made of tensors, so it cannot be batched; train this method with "
                             "training.vectorize_clients: false")
    return template, stacked


def _bind(tensors: list[torch.Tensor]) -> torch.Tensor:
    """Stack the clients' tensors and make each client's tensor a view of its row."""
    stacked = torch.stack([t.detach() for t in tensors])
    for row, tensor in zip(stacked, tensors):
        tensor.data = row
    return stacked


Batches = Iterator[tuple[torch.Tensor, torch.Tensor]]


def train_together(clients: list[Client], loops: list[Loop], batches: list[Batches], round_index: int,
                   loss_fn: LossFn) -> list[float]:
    """Each client's local training (``loops[k]``: its :class:`~bench.engine.loop.Loop`, ``batches[k]``: its
    batch stream) minimising ``loss_fn``, the clients' steps batched; returns each client's mean loss as
    its loop would (raising :class:`~bench.errors.Diverged` for the first client, in order, that diverged)."""
    named_params = [dict(c.model.named_parameters()) for c in clients]
    named_buffers = [dict(c.model.named_buffers()) for c in clients]
    params = {n: _bind([named[n] for named in named_params]) for n in named_params[0]}
    buffers = {n: _bind([named[n] for named in named_buffers]) for n in named_buffers[0]}
    template, state = _stacked_state(clients)
    objective = _Objective(clients[0].model, loss_fn)
    tallies = [LossTally(first_needed=loop.guard is not None and loop.guard.reference is None) for loop in loops]

    def loss_and_value(p: dict[str, torch.Tensor], b: dict[str, torch.Tensor], s: dict[str, Any], x: torch.Tensor,
                       y: torch.Tensor, step: Step) -> tuple[torch.Tensor, torch.Tensor]:
        loss = functional_call(objective, ({f"model.{n}": v for n, v in p.items()},
                                           {f"model.{n}": v for n, v in b.items()}),
                               (step, dataclasses.replace(template, **s), x, y))
        return loss, loss.detach()

    def group_step(rows: list[int], xs: list[torch.Tensor], ys: list[torch.Tensor], step: Step) -> None:
        index = None if len(rows) == len(clients) else torch.tensor(rows, device=xs[0].device)

        def pick(t: torch.Tensor) -> torch.Tensor:  # the group's rows (all clients: the stacked tensor itself)
            return t if index is None else t.index_select(0, index)

        group_buffers = {n: pick(t) for n, t in buffers.items()}
        group_state = {n: [pick(t) for t in v] if isinstance(v, list) else pick(v) for n, v in state.items()}
        batched = vmap(grad(loss_and_value, has_aux=True), in_dims=(0, 0, 0, 0, 0, None), randomness="error")
        try:
            grads, losses = batched({n: pick(t) for n, t in params.items()}, group_buffers, group_state,
                                    torch.stack(xs), torch.stack(ys), step)
        except RuntimeError as exc:
            if "randomness" not in str(exc):
                raise
            raise BenchError("training.vectorize_clients: the model draws random numbers in training (dropout), "
                             "which batched clients cannot draw from their own streams; train with "
                             "training.vectorize_clients: false") from None
        if index is not None:  # BatchNorm statistics were updated on the gathered copies
            for n, t in group_buffers.items():
                buffers[n].index_copy_(0, index, t)
        for j, k in enumerate(rows):
            for p, g in zip(loops[k].params, grads.values()):
                p.grad = g[j]
            tallies[k].add(losses[j])
            apply_step(None, loops[k].optimizer, loops[k].params, loops[k].grad_clip)

    streams: list[Batches | None] = list(batches)
    for step_index in itertools.count():
        groups: dict[tuple[int, ...], list[tuple[int, torch.Tensor, torch.Tensor]]] = defaultdict(list)
        for k, stream in enumerate(streams):
            batch = None if stream is None else next(stream, None)
            if batch is None:
                streams[k] = None
            else:
                groups[tuple(batch[0].shape)].append((k, *batch))
        if not groups:
            break
        for members in groups.values():
            group_step([k for k, _, _ in members], [x for _, x, _ in members], [y for _, _, y in members],
                       Step(round_index, step_index))
    return [loop.finish(tally) for loop, tally in zip(loops, tallies)]
