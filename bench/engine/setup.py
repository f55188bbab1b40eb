"""Process-level settings for a run: threads, determinism flags, allocator tuning."""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

import torch

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_MALLOC_TUNED = False
MMAP_THRESHOLD_BYTES = 32 * 1024 * 1024
"""glibc's ``M_MMAP_THRESHOLD`` as :func:`tune_malloc` sets it (glibc's maximum on 64-bit): blocks at
least this large are still mmapped, and page-faulted in afresh every time they are allocated."""


def tune_malloc() -> bool:
    """Stop glibc from returning freed tensor memory to the OS after every step.

    By default glibc serves large blocks with ``mmap`` and unmaps them on free, so every training
    step page-faults its activations in again (millions of minor faults per run on small CNNs).
    Raising the mmap and trim thresholds keeps that memory in the heap for reuse. A no-op off glibc.
    """
    global _MALLOC_TUNED
    if _MALLOC_TUNED or not sys.platform.startswith("linux"):
        return _MALLOC_TUNED
    name = ctypes.util.find_library("c")
    if not name:
        return False
    try:
        libc = ctypes.CDLL(name)
        ok = libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) == 1
        ok &= libc.mallopt(_M_TRIM_THRESHOLD, 512 * 1024 * 1024) == 1
    except (OSError, AttributeError):
        return False
    _MALLOC_TUNED = ok
    return ok


def set_deterministic(mode: bool) -> None:
    """``torch.use_deterministic_algorithms(mode)`` without its import of ``torch._inductor``
    (5-11 s per process here): set the ATen flag, and inductor's only if inductor is loaded."""
    torch._C._set_deterministic_algorithms(mode, warn_only=False)
    inductor_config = sys.modules.get("torch._inductor.config")
    if inductor_config is not None:
        inductor_config.deterministic = mode  # type: ignore[attr-defined]  # typeshed: ModuleType declares no attributes


def configure_torch(threads: int, deterministic: bool, device: str) -> torch.device:
    """Set intra-op threads and PyTorch's determinism flags (deterministic algorithms, no cuDNN autotuning, no TF32); return the device."""
    if device.startswith("cuda"):
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # before CUDA initialises
        if not torch.cuda.is_available():
            from bench.errors import BenchError

            raise BenchError(f"device={device!r} but CUDA is not available here; set device=cpu")
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    set_deterministic(deterministic)
    torch.backends.cudnn.benchmark = not deterministic
    torch.backends.cudnn.deterministic = deterministic
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    tune_malloc()
    return torch.device(device)
