"""What the engine gives an algorithm: models, optimisers, batch streams, the training loop,
evaluation.

Algorithms call these; they never seed, load data, pick devices or log (docs/architecture.md,
room ``engine``). The runner (:mod:`bench.runner`) builds one :class:`Context` per run.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

import torch
from torch import nn

from bench.config import ExperimentConfig
from bench.engine.chunks import chunk_size
from bench.engine.evaluation import eval_mode
from bench.engine.loop import Loop, LossGuard, Step
from bench.engine.state import Client, ClientData
from bench.engine.streams import SharedBatches, epoch_batches
from bench.engine.validation import ValidationSource, server_validation
from bench.models import assign_architectures, build_model
from bench.rng import numpy_stream, torch_stream

LossFn = Callable[[Step, Client, torch.Tensor, torch.Tensor], torch.Tensor]
"""``(step, client, x, y) -> loss``: a method's per-batch local objective."""


@dataclass
class Context:
    config: ExperimentConfig
    in_shape: tuple[int, ...]
    num_classes: int
    device: torch.device
    public_x: torch.Tensor | None = None  # the unlabelled public set, when the config asks for one
    client_data: list[ClientData] = field(default_factory=list)  # every client's data, in client-id order
    test_x: torch.Tensor | None = None  # the test images: read only by a reading that reproduces a released code's
    # use of them (DaFKD's test-set BatchNorm passes, bench/algorithms/server_bn.py), which leaks test data

    @property
    def seed(self) -> int:
        return self.config.seed

    @cached_property
    def loss_guard(self) -> LossGuard:
        """The run's divergence guard for client training losses (``training.divergence_factor``,
        ``training.on_divergence``)."""
        training = self.config.training
        return LossGuard(training.divergence_factor, train_on=training.on_divergence == "train_on")

    @cached_property
    def architectures(self) -> list[str]:
        """Each client's architecture: ``model.name`` for all, or a seeded draw from ``model.candidates``."""
        model, n = self.config.model, self.config.partition.num_clients
        return assign_architectures(model.candidates, n, self.seed) if model.candidates else [model.name] * n

    def model_kwargs(self, name: str) -> dict[str, Any]:
        """The arguments architecture ``name`` is built with: ``model.kwargs`` are ``model.name``'s, so a candidate
        architecture of another name is built with its own defaults."""
        configured = self.config.model
        return configured.kwargs if name == configured.name else {}

    def build_model(self, *key: int | str, name: str | None = None) -> nn.Module:
        """The configured model (or ``name``) with its :meth:`model_kwargs`, initialised from the stream
        ``("init", *key)``."""
        name = name or self.config.model.name
        model = build_model(name, self.in_shape, self.num_classes, seed=self.seed, key=("init", *key),
                            **self.model_kwargs(name))
        return model.to(self.device)

    # -- streams -------------------------------------------------------------------------------

    def stream(self, *key: int | str) -> torch.Generator:
        """The run's torch RNG stream ``key`` (e.g. ``("fedgen-client", cid, round)``)."""
        return torch_stream(self.seed, *key)

    def batch_indices(self, n: int, *key: int | str) -> Iterator[torch.Tensor]:
        """Mini-batch index tensors for one local training pass over ``n`` samples from the stream
        ``("batches", *key)``: ``local_epochs`` seeded permutations (or as many as ``local_steps``
        needs), cut into batches of ``batch_size``."""
        train = self.config.training
        return epoch_batches(n, train.batch_size, train.drop_last, torch_stream(self.seed, "batches", *key),
                             self.device, epochs=None if train.local_steps is not None else train.local_epochs,
                             steps=train.local_steps)

    def shuffled_pass(self, n: int, *key: int | str) -> Iterator[torch.Tensor]:
        """One seeded shuffled pass over ``n`` samples (stream ``key``) in batches of ``training.batch_size``,
        the last partial batch dropped when ``training.drop_last``: what one pass of a shuffled train loader
        visits."""
        train = self.config.training
        return epoch_batches(n, train.batch_size, train.drop_last, torch_stream(self.seed, *key), self.device, epochs=1)

    def client_batches(self, client: Client, round_index: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """The client's train batches ``(x, y)`` of ``round_index``."""
        data = client.data
        yield from self.batches(data.x, data.y, client.cid, round_index)

    def batches(self, x: torch.Tensor, y: torch.Tensor, *key: int | str) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Batches ``(x, y)`` of one local training pass over the given samples (:meth:`batch_indices` of the
        stream ``("batches", *key)``): a method training on other data than the train split (a selected
        subset, the train and local test splits together)."""
        for idx in self.batch_indices(len(y), *key):
            yield x[idx], y[idx]

    def server_validation(self, source: ValidationSource) -> tuple[torch.Tensor, torch.Tensor]:
        """The server's validation set, from every client's data (:func:`~bench.engine.validation.server_validation`)."""
        return server_validation(self.client_data, source)

    def shared_public(self, batch_size: int | None = None, *key: int | str) -> SharedBatches:
        """The public set as a lockstep stream: iteration i gives every client the same batch."""
        if self.public_x is None:
            raise ValueError("this run has no public set (public.size is 0)")
        return SharedBatches(self.public_x, batch_size or self.config.training.batch_size, self.seed,
                             ("public", *key), self.config.training.drop_last)

    # -- optimisation --------------------------------------------------------------------------

    def make_optimizer(self, params: Iterator[nn.Parameter] | list[nn.Parameter],
                       lr: float | None = None) -> torch.optim.Optimizer:
        opt = self.config.training.optimizer
        lr = opt.lr if lr is None else lr
        if opt.name == "sgd":
            return torch.optim.SGD(params, lr=lr, momentum=opt.momentum, weight_decay=opt.weight_decay)
        return torch.optim.Adam(params, lr=lr, weight_decay=opt.weight_decay)

    def lr_at(self, round_index: int) -> float:
        """The local learning rate in ``round_index`` (1-based): constant, or step-decayed."""
        train = self.config.training
        if train.lr_decay.every is None:
            return train.optimizer.lr
        return train.optimizer.lr * train.lr_decay.factor ** ((round_index - 1) // train.lr_decay.every)

    def client_optimizer(self, client: Client, round_index: int) -> torch.optim.Optimizer:
        """The client's optimiser at this round's learning rate: its state (momentum, Adam moments)
        kept across rounds when ``optimizer.persistent``, else reset — which is a fresh optimiser
        over the same parameters, without the cost of building one every round."""
        lr = self.lr_at(round_index)
        if client.optimizer is None:
            client.optimizer = self.make_optimizer(client.model.parameters(), lr)
        elif not self.config.training.optimizer.persistent:
            client.optimizer.state.clear()
        for group in client.optimizer.param_groups:
            group["lr"] = lr
        return client.optimizer

    def client_loop(self, client: Client, round_index: int, rng: torch.Generator | None = None,
                    grad_clip: float | None | Literal["config"] = "config") -> Loop:
        """The loop training the client's model with its optimiser this round (``training.grad_clip``
        unless ``grad_clip`` is given; None: no clipping); the model is put in train mode."""
        client.model.train()
        return Loop(self.client_optimizer(client, round_index), list(client.model.parameters()), round_index,
                    client.cid, self.config.training.grad_clip if grad_clip == "config" else grad_clip, rng,
                    guard=self.loss_guard)

    def local_train(self, client: Client, round_index: int, loss_fn: LossFn,
                    rng: torch.Generator | None = None,
                    data: tuple[torch.Tensor, torch.Tensor] | None = None) -> float:
        """The client's local epochs/steps minimising ``loss_fn(step, client, x, y)`` over its train split (or
        over ``data``, in the same batch stream); the mean batch loss. Raises :class:`~bench.errors.Diverged`
        when the loss is not finite."""
        batches = self.client_batches(client, round_index) if data is None else \
            self.batches(*data, client.cid, round_index)
        return self.client_loop(client, round_index, rng).run(batches, lambda step, batch: loss_fn(step, client, *batch))

    def train_together(self, clients: list[Client], round_index: int, loss_fn: LossFn) -> list[float]:
        """:meth:`local_train` of every client in ``clients`` (one architecture), their steps batched
        (``training.vectorize_clients``, :func:`~bench.engine.vectorized.train_together`); each client's
        mean batch loss."""
        from bench.engine.vectorized import train_together  # imports torch.func only when asked for

        loops = [self.client_loop(client, round_index) for client in clients]
        return train_together(clients, loops, [self.client_batches(c, round_index) for c in clients], round_index,
                              loss_fn)

    # -- evaluation ----------------------------------------------------------------------------

    @torch.no_grad()
    def accuracy(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
        """Exact sample-level accuracy of ``model`` in eval mode (pipelines/fedhkd/NOTES.md §3.7 [R]), forwarding
        ``evaluation.batch_size`` samples at a time (fewer on the CPU when their activations would be
        mmapped: :func:`~bench.engine.chunks.chunk_size`)."""
        if len(y) == 0:
            return float("nan")
        correct = torch.zeros((), dtype=torch.int64, device=self.device)
        with eval_mode(model):
            size = chunk_size(model, x, self.config.evaluation.batch_size)
            for start in range(0, len(y), size):
                _, logits = model(x[start:start + size])
                correct += (logits.argmax(1) == y[start:start + size]).sum()
        return int(correct) / len(y)

    @torch.no_grad()
    def batch_mean_accuracy(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, drop_last: bool,
                            *key: int | str) -> float:
        """The mean of per-batch accuracies over one seeded shuffled pass (stream ``key``) in batches of
        ``training.batch_size``, the last partial batch dropped when ``drop_last`` (a split smaller than
        one batch is one batch): FedHKD's released code (pipelines/fedhkd/NOTES.md §3.7 [C], ``evaluation.accuracy:
        batches``). Eval mode."""
        if len(y) == 0:
            return float("nan")
        accuracies = []
        with eval_mode(model):
            for idx in epoch_batches(len(y), self.config.training.batch_size, drop_last, torch_stream(self.seed, *key),
                                     self.device, epochs=1):
                _, logits = model(x[idx])
                accuracies.append(int((logits.argmax(1) == y[idx]).sum()) / len(idx))
        return sum(accuracies) / len(accuracies)

    def client_order(self, round_index: int, count: int) -> list[int]:
        """A seeded random order of ``count`` selected clients for ``round_index`` (stream
        ``("client-order", round)``): the order of a method whose clients train one after another."""
        return [int(i) for i in numpy_stream(self.seed, "client-order", round_index).permutation(count)]
