"""Exchange of per-class statistics (docs/architecture.md "The engine"): prototypes and soft labels.

A client summarises its data per class j as the mean feature h̄_j, the mean temperature-softened
prediction q̄_j = mean softmax(z/T) and the count n_j (FedHKD Eq. 4, FedProto's prototypes); the
server combines the clients' summaries class by class (FedHKD Eq. 9).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from bench.engine.chunks import chunk_size
from bench.engine.evaluation import eval_mode


@dataclass
class ClassStatistics:
    features: torch.Tensor  # C x d, mean feature per class (zeros where count is 0)
    soft: torch.Tensor  # C x C, mean softened prediction per class (zeros where count is 0)
    counts: torch.Tensor  # C, samples per class (int64)

    @property
    def present(self) -> torch.Tensor:
        return self.counts > 0


@torch.no_grad()
def class_statistics(model: nn.Module, x: torch.Tensor, y: torch.Tensor, num_classes: int,
                     temperature: float = 1.0, batch_size: int = 1024,
                     soft: Callable[[torch.Tensor], torch.Tensor] | None = None) -> ClassStatistics:
    """Per-class means of the features and of softmax(logits / T) (or of ``soft(logits)``) over ``(x, y)``,
    in eval mode, forwarding ``batch_size`` samples at a time (fewer on the CPU when their activations
    would be mmapped: :func:`~bench.engine.chunks.chunk_size`)."""
    feature_sum: torch.Tensor | None = None
    soft_sum = torch.zeros(num_classes, num_classes, device=x.device)
    with eval_mode(model):
        batch_size = chunk_size(model, x, batch_size)
        for start in range(0, len(y), batch_size):
            features, logits = model(x[start:start + batch_size])
            onehot = nn.functional.one_hot(y[start:start + batch_size], num_classes).to(features.dtype)
            if feature_sum is None:
                feature_sum = torch.zeros(num_classes, features.shape[1], device=x.device)
            feature_sum += onehot.T @ features
            soft_sum += onehot.T @ (torch.softmax(logits / temperature, dim=1) if soft is None else soft(logits))
    counts = torch.bincount(y, minlength=num_classes)
    if feature_sum is None:  # no samples at all
        raise ValueError("class_statistics needs at least one sample")
    denom = counts.clamp(min=1).unsqueeze(1).to(feature_sum.dtype)
    return ClassStatistics(feature_sum / denom, soft_sum / denom, counts)


def aggregate_class_statistics(stats: Sequence[ClassStatistics],
                               weighting: Literal["counts", "uniform"] = "counts") -> ClassStatistics:
    """Class-wise combination over clients, in the given (client-id) order: weighted by each client's
    class count (FedHKD Eq. 9) or the unweighted mean over the clients holding the class (original
    FedProto). A class no client holds keeps zeros and count 0."""
    counts = torch.stack([s.counts for s in stats])  # K x C
    weights = counts.to(stats[0].features.dtype) if weighting == "counts" else (counts > 0).to(stats[0].features.dtype)
    total = weights.sum(0)  # C
    norm = torch.where(total > 0, total, torch.ones_like(total))
    features = sum(w.unsqueeze(1) * s.features for w, s in zip(weights, stats)) / norm.unsqueeze(1)
    soft = sum(w.unsqueeze(1) * s.soft for w, s in zip(weights, stats)) / norm.unsqueeze(1)
    return ClassStatistics(features, soft, counts.sum(0))


def last_writer_class_statistics(stats: Sequence[ClassStatistics],
                                 previous: ClassStatistics | None = None) -> ClassStatistics:
    """Class-wise "last writer wins" over ``stats`` in the given order, starting from ``previous``:
    each class takes the statistics of the last client holding it, and a class no client holds keeps
    its previous value. This is ``dict.update`` per client, as FedHKD's released code aggregates
    (pipelines/fedhkd/NOTES.md §3.4 [C], §3.9)."""
    features, soft, counts = ((previous.features.clone(), previous.soft.clone(), previous.counts.clone())
                              if previous is not None else
                              (torch.zeros_like(stats[0].features), torch.zeros_like(stats[0].soft),
                               torch.zeros_like(stats[0].counts)))
    for s in stats:
        held = s.present
        features[held], soft[held], counts[held] = s.features[held], s.soft[held], s.counts[held]
    return ClassStatistics(features, soft, counts)


def feature_alignment(features: torch.Tensor, labels: torch.Tensor, centres: ClassStatistics,
                      distance: Literal["l2", "sq_l2", "mse"],
                      normalise: Literal["batch", "present"] = "batch") -> torch.Tensor:
    """Pull each feature h_k towards its class centre C^{y_k} (FedHKD Eq. 11 term 3, FedProto):
    Σ_k dist(h_k, C^{y_k}) / B, with dist the Euclidean norm (``l2``), its square (``sq_l2``) or the
    squared norm over d (``mse``). Samples whose class has no centre contribute 0; ``normalise:
    present`` divides by their count instead of the batch size B."""
    valid = centres.present[labels]
    diff = features[valid] - centres.features[labels[valid]]
    if distance == "l2":
        per_sample = torch.linalg.vector_norm(diff, dim=1)
    else:
        per_sample = diff.pow(2).sum(1) / (diff.shape[1] if distance == "mse" else 1)
    denom = len(labels) if normalise == "batch" else max(int(valid.sum()), 1)
    return per_sample.sum() / denom
