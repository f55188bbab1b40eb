"""Declared evaluations: which model is evaluated on which split, under which record name; and
:func:`eval_mode`, the one way any model is put in eval mode for a while.

A method declares its evaluations (:meth:`bench.algorithms.base.Algorithm.evaluations`); the runner
evaluates them on the scheduled rounds and writes one record per value (per client for client
models) to ``records.csv``.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal

from torch import nn


@contextmanager
def eval_mode(model: nn.Module) -> Iterator[nn.Module]:
    """``model`` in eval mode (BatchNorm's running statistics, no dropout) for the block; afterwards back in the
    mode it had (``model.train(was_training)``)."""
    was_training = model.training
    model.eval()
    try:
        yield model
    finally:
        model.train(was_training)

ModelRole = Literal["global", "client", "method"]
Split = Literal["global_test", "local_test", "validation", "local_all"]


@dataclass(frozen=True)
class Evaluation:
    """``metric``: the record name; ``model``: the global model (one value), each client's model (one
    value per client) or a model the method builds for this metric (one value:
    :meth:`~bench.algorithms.base.Algorithm.method_model`, e.g. an ensemble of the round's client models or
    the global model before server distillation); ``split``: the global test set, the client's local test
    split, its validation split, or all of its local data (train and local test splits: released code that
    evaluates on the data it trained on, pipelines/fedakd/NOTES.md §0.8); a ``method`` model: the global test set."""

    metric: str
    model: ModelRole
    split: Split


GLOBAL_ACC = Evaluation("global_acc", "global", "global_test")
LOCAL_ACC = Evaluation("local_acc", "client", "local_test")
CLIENT_GLOBAL_ACC = Evaluation("client_global_acc", "client", "global_test")
VAL_ACC = Evaluation("val_acc", "client", "validation")
