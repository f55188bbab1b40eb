"""The training loop primitive every method trains with: clients' local updates, server-side
distillation, generator training.

A loop runs a *step function* over a batch stream; the step function receives the step's
:class:`Step` (round, index, the loop's RNG stream) and a batch and returns the loss to minimise.
:func:`apply_step` is the one place where gradients are applied (zero, backward, clip, step), and the
loop is the one place where divergence is detected: a non-finite loss raises
:class:`~bench.errors.Diverged` naming the round and who was training.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

import numpy as np
import torch
from torch import nn

from bench.engine import eager
from bench.errors import Diverged

B = TypeVar("B")


@dataclass(frozen=True)
class Step:
    """What a step function knows about its step: the communication round (1-based), the step's index
    within this loop (0-based) and the loop's own seeded RNG stream, if it was given one."""

    round: int
    index: int
    rng: torch.Generator | None = None


StepFn = Callable[[Step, B], torch.Tensor]
"""``(step, batch) -> loss``: the loss to minimise (the loop backpropagates it)."""
GradientFn = Callable[[Step, B], float]
"""``(step, batch) -> loss value`` for methods that compute their own gradients (several backward
passes, FedAlign): the gradients are in ``.grad`` when it returns."""


def apply_step(loss: torch.Tensor | None, optimizer: torch.optim.Optimizer, params: Sequence[torch.Tensor],
               grad_clip: float | None = None, backward_inputs: Sequence[torch.Tensor] | None = None) -> None:
    """One optimiser step: backpropagate ``loss`` (None: ``.grad`` is already filled), clip the
    gradient norm of ``params`` to ``grad_clip``, step. Gradients were zeroed before the forward pass."""
    if loss is not None:
        loss.backward(inputs=list(backward_inputs) if backward_inputs is not None else None)
    if grad_clip is not None:
        torch.nn.utils.clip_grad_norm_(params, grad_clip)
    eager.step(optimizer)  # optimizer.step() without importing torch's compiler


@dataclass
class LossGuard:
    """Divergence beyond NaN: a loop whose mean loss exceeds ``factor`` times the *reference* — the
    loss of the run's very first step, before any update — has exploded (an lr of 1e6 gives CE losses
    of 1e26 that stay finite). One guard per run and per kind of loss; ``factor`` None: NaN/inf only.

    A divergence stops the run (raises :class:`~bench.errors.Diverged`); with ``train_on``
    (``training.on_divergence: train_on``) the guard keeps the run's first one in ``diverged`` and the run
    trains on, NaN weights and all, as a released code without a guard does."""

    factor: float | None
    reference: float | None = None
    train_on: bool = False
    diverged: Diverged | None = None

    def check(self, first: float, mean: float, round_index: int, who: int | str) -> None:
        if mean != mean or mean in (float("inf"), float("-inf")):
            self.diverge(Diverged(round_index, who))
            return
        if self.reference is None:
            self.reference = abs(first)
        if self.factor is not None and abs(mean) > self.factor * max(self.reference, 1e-12):
            self.diverge(Diverged(round_index, who, f"the mean loss {mean:.4g} exceeds {self.factor:g} x the first "
                                                    f"step's {self.reference:.4g} (training.divergence_factor)"))

    def diverge(self, divergence: Diverged) -> None:
        """Raise ``divergence``; with ``train_on``, keep it if it is the run's first, and return."""
        if not self.train_on:
            raise divergence
        if self.diverged is None:
            self.diverged = divergence


@dataclass
class Loop(Generic[B]):
    """Trains ``params`` with ``optimizer`` over ``batches``; ``who`` names the trainer in a
    divergence message (a client id, ``"server"``, ``"generator"``)."""

    optimizer: torch.optim.Optimizer
    params: list[torch.Tensor]
    round: int
    who: int | str
    grad_clip: float | None = None
    rng: torch.Generator | None = None
    backward_inputs: bool = False  # backpropagate into ``params`` only (frozen teachers get no .grad)
    guard: LossGuard | None = None  # None: only a non-finite loss is divergence

    def run(self, batches: Iterable[B], step_fn: StepFn[B]) -> float:
        """Minimise ``step_fn`` over ``batches``; return the mean loss over steps."""
        return self._run(batches, step_fn, own_gradients=False)

    def run_gradients(self, batches: Iterable[B], gradient_fn: GradientFn[B]) -> float:
        """As :meth:`run`, for a step function that fills ``.grad`` itself and returns the loss value."""
        return self._run(batches, gradient_fn, own_gradients=True)

    def _run(self, batches: Iterable[B], fn: Callable[[Step, B], torch.Tensor | float], own_gradients: bool) -> float:
        tally = LossTally(first_needed=self.guard is not None and self.guard.reference is None)
        inputs = self.params if self.backward_inputs else None
        optimised = [p for group in self.optimizer.param_groups for p in group["params"]]
        for batch in batches:
            for p in optimised:  # optimizer.zero_grad(set_to_none=True) without its profiler and dynamo wrappers
                p.grad = None
            loss = fn(Step(self.round, tally.steps, self.rng), batch)
            tally.add(float(loss) if own_gradients else loss)
            if own_gradients:
                apply_step(None, self.optimizer, self.params, self.grad_clip)
            else:
                assert isinstance(loss, torch.Tensor)
                apply_step(loss, self.optimizer, self.params, self.grad_clip, inputs)
        return self.finish(tally)

    def finish(self, tally: LossTally) -> float:
        """The loop's mean loss over its steps, checked for divergence (:class:`LossGuard`)."""
        mean = float(tally.total) / max(tally.steps, 1)
        (self.guard or LossGuard(None)).check(tally.first, mean, self.round, self.who)
        return mean


@dataclass
class LossTally:
    """A loop's losses in step order: the first step's (when the divergence guard needs it as its
    reference) and their sum. A loss tensor is summed as the float32 running sum loss_0 + loss_1 + ...;
    a float32 loss on the CPU is added as a numpy float32 (one IEEE single-precision addition, rounded
    exactly as the 0-dim tensor addition rounds it) instead of two tensor ops a step; elsewhere the sum
    stays a tensor, so that no step waits for the device. Loss values (own-gradient loops) are summed as
    Python floats."""

    first_needed: bool = False
    steps: int = 0
    first: float = 0.0
    total: torch.Tensor | np.float32 | float = 0.0
    on_host: bool = False

    def add(self, loss: torch.Tensor | float) -> None:
        if self.steps == 0 and self.first_needed:
            self.first = float(loss.detach()) if isinstance(loss, torch.Tensor) else float(loss)
        if not isinstance(loss, torch.Tensor):
            self.total += loss
        elif self.steps == 0:
            self.on_host = loss.is_cpu and loss.dtype == torch.float32
            self.total = np.float32(loss.item()) if self.on_host else loss.detach()
        elif self.on_host and loss.is_cpu and loss.dtype == torch.float32:
            self.total = self.total + np.float32(loss.item())
        else:
            if self.on_host:
                self.total, self.on_host = torch.tensor(self.total, dtype=torch.float32), False
            self.total = self.total + loss.detach()
        self.steps += 1


def parameters(*models: nn.Module) -> list[torch.Tensor]:
    """The trainable parameters of ``models``, in order."""
    return [p for m in models for p in m.parameters() if p.requires_grad]
