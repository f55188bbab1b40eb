"""Evaluation-time forward passes in chunks whose activations stay in the heap.

Evaluation forwards many samples without gradients (accuracy, class statistics, soft predictions on a
public set) in chunks of ``evaluation.batch_size``. On the CPU a chunk whose largest activation reaches
glibc's mmap threshold (:data:`~bench.engine.setup.MMAP_THRESHOLD_BYTES`, 32 MiB) is served by
``mmap`` and page-faulted in afresh on every chunk: FedAvgCNN's first conv output at 1024 MNIST images
is 72 MiB, and such an evaluation cost more than the training it interleaves with. :func:`chunk_size`
caps a chunk so that its largest activation stays within :data:`ACTIVATION_BUDGET`; models whose chunks
already fit (every pinned suite: digits at 8 KiB a sample, synthetic32 with at most 400 samples per
pass) keep exactly the chunks, and so exactly the arithmetic, they had. On other devices the chunk is
``batch_size``.
"""
from __future__ import annotations

import weakref

import torch
from torch import nn

from bench.engine.setup import MMAP_THRESHOLD_BYTES

ACTIVATION_BUDGET = MMAP_THRESHOLD_BYTES // 4
"""Bytes the largest single activation of one evaluation chunk may take on the CPU: a quarter of the mmap
threshold, leaving room for the temporaries a kernel allocates beside its output. On FedAvgCNN (72 KiB
a sample: chunks of 113) three sweeps here put a quarter and a half of the threshold within 1 % of each
other, 0.88-0.91x the time of a bare forward at batch 32; chunks of 1024 took 1.19-1.25x (docs/performance.md "Speed")."""

_PEAK: weakref.WeakKeyDictionary[nn.Module, dict[tuple[tuple[int, ...], torch.dtype], int]] = (
    weakref.WeakKeyDictionary())


def _tensor_bytes(value: object) -> int:
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, (tuple, list)):
        return max((_tensor_bytes(v) for v in value), default=0)
    if isinstance(value, dict):
        return max((_tensor_bytes(v) for v in value.values()), default=0)
    return 0


@torch.no_grad()
def peak_activation_bytes(model: nn.Module, sample: torch.Tensor) -> int:
    """The largest tensor that a forward pass of the one-sample batch ``sample`` holds (its input or any
    module's output), in bytes: measured once per model and sample shape with forward hooks, in the
    model's current mode. The probe draws no random numbers and changes no state in eval mode."""
    key = (tuple(sample.shape[1:]), sample.dtype)
    cached = _PEAK.setdefault(model, {})
    if key not in cached:
        peak = _tensor_bytes(sample)

        def record(module: nn.Module, inputs: object, output: object) -> None:
            nonlocal peak
            peak = max(peak, _tensor_bytes(output))

        handles = [m.register_forward_hook(record) for m in model.modules()]
        try:
            model(sample)
        finally:
            for handle in handles:
                handle.remove()
        cached[key] = max(peak // len(sample), 1)
    return cached[key]


def chunk_size(model: nn.Module, x: torch.Tensor, batch_size: int) -> int:
    """How many samples of ``x`` one evaluation forward of ``model`` takes: ``batch_size``, or on the CPU
    fewer when a chunk's largest activation would exceed :data:`ACTIVATION_BUDGET` (at least 1). Call it
    with the model in the mode it evaluates in (eval)."""
    if x.device.type != "cpu" or len(x) <= 1:
        return batch_size
    per_sample = peak_activation_bytes(model, x[:1])
    return max(1, min(batch_size, ACTIVATION_BUDGET // per_sample))
