"""Model states as flat vectors: the toolkit of methods that exchange sparsified updates and give each
client a different share of the aggregate (CFFL, CGSV, FedAVE; pipelines/fedakd/NOTES.md §4).

A *view* is an ordered list of state-dict keys; :func:`flatten` concatenates those entries (as float32)
into one vector and :func:`unflatten` cuts a vector back into them. :func:`largest_entries` is the top-k
sparsification by magnitude the fairness methods upload and download with, a :class:`SparseVector` on the wire
(:func:`keep_largest` its dense form); :func:`clip_norm` bounds a vector's L2 norm.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
from torch import nn


def parameter_keys(model: nn.Module) -> list[str]:
    """The keys of ``model``'s parameters (``named_parameters``: no BatchNorm buffers), in order."""
    return [name for name, _ in model.named_parameters()]


def state_keys(model: nn.Module, integers: bool = False) -> list[str]:
    """Every state-dict key of ``model`` (parameters and buffers); integer buffers (BatchNorm's
    ``num_batches_tracked``) only with ``integers`` (released code that flattens the whole state dict)."""
    return [k for k, v in model.state_dict().items() if integers or v.is_floating_point()]


def flatten(state: Mapping[str, torch.Tensor], keys: Sequence[str]) -> torch.Tensor:
    """The entries ``keys`` of ``state`` concatenated into one float32 vector."""
    return torch.cat([state[k].detach().reshape(-1).to(torch.float32) for k in keys])


def unflatten(vector: torch.Tensor, like: Mapping[str, torch.Tensor], keys: Sequence[str]) -> dict[str, torch.Tensor]:
    """``vector`` cut into the shapes (and dtypes) of ``like``'s entries ``keys``, in that order."""
    out, start = {}, 0
    for key in keys:
        ref = like[key]
        out[key] = vector[start:start + ref.numel()].reshape(ref.shape).to(ref.dtype)
        start += ref.numel()
    if start != len(vector):
        raise ValueError(f"unflatten: the vector has {len(vector)} entries, the keys hold {start}")
    return out


def model_vector(model: nn.Module, keys: Sequence[str]) -> torch.Tensor:
    """The model's entries ``keys`` as one float32 vector."""
    return flatten(model.state_dict(), keys)


@torch.no_grad()
def load_vector(model: nn.Module, vector: torch.Tensor, keys: Sequence[str]) -> None:
    """Write ``vector`` into the model's entries ``keys`` in place (integer entries are truncated, as
    ``load_state_dict`` of a float tensor into an integer buffer does)."""
    state = model.state_dict()
    for key, value in unflatten(vector, state, keys).items():
        state[key].copy_(value)


@dataclass(frozen=True)
class SparseVector:
    """Some entries of a flat vector of ``size`` entries, as sent: their positions (int32, ascending; None: every
    entry, in order) and their values. On the wire 4 bytes a position and the values' own bytes."""

    indices: torch.Tensor | None
    values: torch.Tensor
    size: int

    def dense(self) -> torch.Tensor:
        """The vector, zeros where no entry was sent."""
        if self.indices is None:
            return self.values
        out = torch.zeros(self.size, dtype=self.values.dtype, device=self.values.device)
        out[self.indices.long()] = self.values
        return out


def largest_entries(vector: torch.Tensor, count: int) -> SparseVector:
    """The ``count`` largest-magnitude entries of ``vector``; every entry whose magnitude equals the ``count``-th
    largest is kept too (the released code's ``abs >= topk(...)[-1]``), and entries that are 0 need not be sent
    (-0.0 is, so that the dense vector is the same bit for bit). ``count`` ≤ 0 keeps none, ``count`` ≥ the length
    all of them (sent without positions)."""
    if count <= 0:
        return SparseVector(torch.zeros(0, dtype=torch.int32, device=vector.device), vector[:0].clone(), vector.numel())
    if count >= vector.numel():
        return SparseVector(None, vector.clone(), vector.numel())
    magnitude = vector.abs()
    kept = (magnitude >= torch.topk(magnitude, count).values[-1]) & ((vector != 0) | torch.signbit(vector))
    return SparseVector(kept.nonzero().flatten().to(torch.int32), vector[kept], vector.numel())


def largest_fraction(vector: torch.Tensor, fraction: float) -> SparseVector:
    """:func:`largest_entries` with ``count = ⌊fraction · length⌋`` (``int(len * fraction)`` in the released code)."""
    return largest_entries(vector, int(vector.numel() * fraction))


def keep_largest(vector: torch.Tensor, count: int) -> torch.Tensor:
    """``vector`` with all but its :func:`largest_entries` set to 0."""
    return largest_entries(vector, count).dense()


def keep_fraction(vector: torch.Tensor, fraction: float) -> torch.Tensor:
    """``vector`` with all but its :func:`largest_fraction` set to 0."""
    return largest_fraction(vector, fraction).dense()


def weighted_sum(vectors: Sequence[torch.Tensor], weights: Sequence[float]) -> torch.Tensor:
    """Σ_k w_k · v_k, summed in the given (client-id) order."""
    total = torch.zeros_like(vectors[0])
    for weight, vector in zip(weights, vectors):
        total = total + weight * vector
    return total


def clip_norm(vector: torch.Tensor, max_norm: float) -> torch.Tensor:
    """``vector`` scaled down to L2 norm ``max_norm`` if it is longer (unchanged otherwise)."""
    norm = torch.linalg.vector_norm(vector)
    return vector * (max_norm / norm) if norm > max_norm else vector
