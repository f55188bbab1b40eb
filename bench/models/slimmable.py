"""Width-sliced ("slimmable") execution of a network's final block, for FedAlign's sub-network pass
(pipelines/fedhkd/NOTES.md §4 FedAlign; Mendieta et al., CVPR 2022, after Yu et al.'s slimmable networks).

**Final block.** A model takes part by exposing ``final_block``: a module its ``forward`` runs once,
or an ``nn.Sequential`` view on modules its ``forward`` runs consecutively (``cnn``: its second conv
block; ``fedhkd_resnet18``: ``layer4``; ``fedhkd_shufflenetv2``: ``conv5``). :func:`capture_block_io`
records the block's input and output during an ordinary forward pass.

**Width slicing.** :func:`slim_forward` runs a block at width w on an input holding the first
⌈w·C⌉ channels: every layer uses the first ⌈w·C_out⌉ x ⌈w·C_in⌉ entries of its own weights (the same
tensors, so gradients reach the shared weights). Supported module types: ``Conv2d`` (groups = 1, zero
padding), ``BatchNorm2d``, ``Sequential``, torchvision's ``BasicBlock`` (with its ``downsample``), and
the parameter-free ``ReLU``, ``MaxPool2d``, ``AvgPool2d``, ``Identity``. BatchNorm never updates its
running statistics here: ``bn_stats="batch"`` normalises with the sub-batch's own statistics (what
FedAlign's ``USBatchNorm2d`` does at sub-widths: it tracks none), ``"running"`` with the first channels
of the running statistics (a BatchNorm that tracks none uses batch statistics, as in PyTorch).
"""
from __future__ import annotations

import contextlib
import math
import sys
from collections.abc import Iterator
from typing import Any, Literal, TypeGuard

import torch
import torch.nn.functional as F
from torch import nn

from bench.errors import BenchError

BNStats = Literal["batch", "running"]
_PARAMETER_FREE = (nn.ReLU, nn.MaxPool2d, nn.AvgPool2d, nn.Identity)
_SUPPORTED = (nn.Sequential, nn.Conv2d, nn.BatchNorm2d, *_PARAMETER_FREE)


def _is_basic_block(module: nn.Module) -> TypeGuard[Any]:
    """torchvision's ResNet ``BasicBlock``, without importing torchvision (a model holding one has); Any:
    torchvision ships no type information."""
    resnet = sys.modules.get("torchvision.models.resnet")
    return resnet is not None and isinstance(module, resnet.BasicBlock)


def sliced_channels(channels: int, width: float) -> int:
    """⌈w·C⌉, at least 1 (a hair below the product, so 0.3 x 10 gives 3, not 4)."""
    return max(1, math.ceil(width * channels - 1e-9))


def final_block(model: nn.Module, model_name: str) -> nn.Module:
    """The model's final block, checked to be sliceable; a :class:`BenchError` naming the model if not."""
    block = getattr(model, "final_block", None)
    if block is None:
        raise BenchError(f"model {model_name!r} defines no final_block, which FedAlign needs; "
                         "see bench/models/slimmable.py for how a model declares one")
    bad = sorted({type(m).__name__ for m in block.modules() if not (isinstance(m, _SUPPORTED) or _is_basic_block(m))
                  or (isinstance(m, nn.Conv2d) and (m.groups != 1 or m.padding_mode != "zeros"))})
    if bad:
        raise BenchError(f"the final block of model {model_name!r} contains module types that cannot be "
                         f"width-sliced: {', '.join(bad)} (supported: see bench/models/slimmable.py)")
    return block


@contextlib.contextmanager
def capture_block_io(block: nn.Module) -> Iterator[dict[str, torch.Tensor]]:
    """While active, a forward pass through ``block`` stores its ``"input"`` and ``"output"`` in the
    yielded dict (for a Sequential view: the input of its first module and the output of its last)."""
    parts = list(block) if isinstance(block, nn.Sequential) else [block]
    seen: dict[str, torch.Tensor] = {}
    handles = [parts[0].register_forward_pre_hook(lambda _m, args: seen.__setitem__("input", args[0])),
               parts[-1].register_forward_hook(lambda _m, _args, out: seen.__setitem__("output", out))]
    try:
        yield seen
    finally:
        for handle in handles:
            handle.remove()


def slim_forward(module: nn.Module, x: torch.Tensor, width: float, bn_stats: BNStats = "batch") -> torch.Tensor:
    """``module`` at width ``width`` on ``x``, which holds the first ⌈w·C_in⌉ input channels."""
    def run(*parts: nn.Module, inp: torch.Tensor = x) -> torch.Tensor:
        for part in parts:
            inp = slim_forward(part, inp, width, bn_stats)
        return inp

    if isinstance(module, nn.Sequential):
        return run(*module)
    if _is_basic_block(module):  # torchvision's forward, layer by layer
        out = run(module.conv1, module.bn1, module.relu, module.conv2, module.bn2)
        identity = x if module.downsample is None else run(module.downsample)
        return run(module.relu, inp=out + identity)
    if isinstance(module, nn.Conv2d) and module.groups == 1 and module.padding_mode == "zeros":
        if x.shape[1] != sliced_channels(module.in_channels, width):
            raise ValueError(f"{module} at width {width} expects {sliced_channels(module.in_channels, width)} "
                             f"input channels, got {x.shape[1]}")
        out_channels = sliced_channels(module.out_channels, width)
        bias = None if module.bias is None else module.bias[:out_channels]
        return F.conv2d(x, module.weight[:out_channels, :x.shape[1]], bias, module.stride, module.padding,
                        module.dilation)
    if isinstance(module, nn.BatchNorm2d):
        c = x.shape[1]
        weight = None if module.weight is None else module.weight[:c]
        bias = None if module.bias is None else module.bias[:c]
        if bn_stats == "running" and module.running_mean is not None and module.running_var is not None:
            return F.batch_norm(x, module.running_mean[:c], module.running_var[:c], weight, bias, False, 0.0,
                                module.eps)
        return F.batch_norm(x, None, None, weight, bias, True, 0.0, module.eps)
    if isinstance(module, _PARAMETER_FREE):
        return module(x)
    raise BenchError(f"cannot width-slice a {type(module).__name__} (supported: see bench/models/slimmable.py)")
