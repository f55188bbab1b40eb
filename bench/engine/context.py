"""What the engine gives an algorithm: batches, optimisers, the local training loop, evaluation.

Algorithms call these; they never seed, load data, pick devices or log (DESIGN.md, room
``engine``).
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cached_property

import torch
from torch import nn

from bench.config import ExperimentConfig
from bench.engine.rng import torch_stream
from bench.engine.state import Client
from bench.errors import Diverged
from bench.models import assign_architectures, build_model

LossFn = Callable[[Client, torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass
class Context:
    config: ExperimentConfig
    in_shape: tuple[int, ...]
    num_classes: int
    device: torch.device
    public_x: torch.Tensor | None = None  # the unlabelled public set, when the config asks for one

    @property
    def seed(self) -> int:
        return self.config.seed

    @cached_property
    def architectures(self) -> list[str]:
        """Each client's architecture: ``model.name`` for all, or a seeded draw from ``model.candidates``."""
        model, n = self.config.model, self.config.partition.num_clients
        return assign_architectures(model.candidates, n, self.seed) if model.candidates else [model.name] * n

    def build_model(self, *key: int | str, name: str | None = None) -> nn.Module:
        """The configured model (or ``name``), initialised from the stream ``("init", *key)``."""
        model = build_model(name or self.config.model.name, self.in_shape, self.num_classes, seed=self.seed,
                            key=("init", *key), **self.config.model.kwargs)
        return model.to(self.device)

    # -- batches -------------------------------------------------------------------------------

    def batch_indices(self, n: int, *key: int | str) -> Iterator[torch.Tensor]:
        """Mini-batch index tensors for one local training pass: ``local_epochs`` seeded permutations
        (or as many as ``local_steps`` needs), cut into batches of ``batch_size``. A client with fewer
        samples than one batch trains on all of them as one batch even with ``drop_last``."""
        train = self.config.training
        gen = torch_stream(self.seed, "batches", *key)
        size = min(train.batch_size, n)
        steps_left = train.local_steps
        epochs_left = train.local_epochs if steps_left is None else None
        while (steps_left is None or steps_left > 0) and (epochs_left is None or epochs_left > 0):
            perm = torch.randperm(n, generator=gen).to(self.device)
            stop = n - n % size if train.drop_last else n
            for start in range(0, stop, size):
                yield perm[start:start + size]
                if steps_left is not None:
                    steps_left -= 1
                    if steps_left == 0:
                        return
            if epochs_left is not None:
                epochs_left -= 1

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

    def local_train(self, client: Client, round_index: int, loss_fn: LossFn) -> float:
        """Run the client's local epochs/steps minimising ``loss_fn(client, x, y)``; return the mean
        batch loss. Raises :class:`Diverged` when the loss is not finite."""
        model, data = client.model, client.data
        optimizer = self.client_optimizer(client, round_index)
        clip = self.config.training.grad_clip
        model.train()
        total = torch.zeros((), device=self.device)
        steps = 0
        for idx in self.batch_indices(data.num_samples, client.cid, round_index):
            loss = loss_fn(client, data.x[idx], data.y[idx])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if clip is not None:
                torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            optimizer.step()
            total += loss.detach()
            steps += 1
        mean = float(total) / max(steps, 1)
        if not torch.isfinite(total):
            raise Diverged(round_index, client.cid)
        return mean

    # -- evaluation ----------------------------------------------------------------------------

    @torch.no_grad()
    def accuracy(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
        """Exact sample-level accuracy of ``model`` in eval mode (spec fedhkd.md §3.7 [R])."""
        if len(y) == 0:
            return float("nan")
        was_training = model.training
        model.eval()
        correct = torch.zeros((), dtype=torch.int64, device=self.device)
        size = self.config.evaluation.batch_size
        for start in range(0, len(y), size):
            _, logits = model(x[start:start + size])
            correct += (logits.argmax(1) == y[start:start + size]).sum()
        model.train(was_training)
        return int(correct) / len(y)
