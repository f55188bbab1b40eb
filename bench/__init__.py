"""fkd-bench: a reproducibility benchmark suite for federated knowledge distillation.

CPU kernels come at two levels (docs/determinism.md "CPU kernels"; their cost: docs/performance.md):

- ``native`` (the default): torch, oneDNN and MKL pick the fastest kernels of the processor.
- ``portable``: ATen's and oneDNN's kernels at the AVX2 level and MKL in its ``COMPATIBLE``
  conditional-numerical-reproducibility branch. It was meant to make every x86-64 machine with AVX2
  compute the same bits; it does not (two AMD hosts differ from round 1), and it costs 1.3-1.7x. The
  pinned suites were pinned under it, so they keep training under it: ``bench suite train`` runs a
  suite at the level its pinned file records (:func:`bench.runner.parallel.run_many`), and ``bench
  audit --rerun`` re-runs a run at the level it recorded.

``BENCH_CPU_KERNELS=portable|native`` chooses the level of a process (and of what it starts), set on
import here, before torch computes anything; variables already set are kept. The variables in force
are recorded in every run's provenance (``cpu_kernels``: ``native`` when none is set).

:func:`exit_without_teardown` ends the project's own processes (the ``bench`` command, its helpers).
"""
import atexit
import contextlib
import os
import sys
import threading
from collections.abc import Iterator, Mapping
from typing import NoReturn

CPU_KERNELS = {"portable": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_CBWR": "COMPATIBLE"},
               "native": {}}
CPU_KERNEL_VARIABLES = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_CBWR", "MKL_ENABLE_INSTRUCTIONS")
"""The variables that choose CPU kernels: passed on to workers and recorded in provenance when set."""


def _pin_cpu_kernels() -> None:
    level = os.environ.get("BENCH_CPU_KERNELS", "native").strip().lower()
    for key, value in CPU_KERNELS.get(level, {}).items():
        os.environ.setdefault(key, value)


_pin_cpu_kernels()


def describe_cpu_kernels(variables: Mapping[str, str]) -> str:
    """The kernel variables as provenance records them: ``A=a B=b`` sorted, ``native`` when none is set."""
    return " ".join(f"{k}={variables[k]}" for k in sorted(variables) if k in CPU_KERNEL_VARIABLES) or "native"


def parse_cpu_kernels(text: str) -> dict[str, str] | None:
    """The kernel variables a provenance's or pinned file's ``cpu_kernels`` names (inverse of
    :func:`describe_cpu_kernels`); None when it names none (``unknown``: recorded before they were)."""
    if text.strip() == "native":
        return {}
    items = [item.split("=", 1) for item in text.split()]
    return {k: v for k, v in items} if items and all(len(i) == 2 and i[0] in CPU_KERNEL_VARIABLES
                                                     for i in items) else None


def cpu_kernels_in_force() -> dict[str, str]:
    """The kernel variables of this process's environment (what the processes it starts inherit)."""
    return {k: os.environ[k] for k in CPU_KERNEL_VARIABLES if k in os.environ}


def kernel_level_name(text: str) -> str:
    """``native``, ``portable`` or the variables themselves, for a ``cpu_kernels`` value."""
    variables = parse_cpu_kernels(text)
    return next((name for name, level in CPU_KERNELS.items() if level == variables), text)


@contextlib.contextmanager
def cpu_kernels_for_children(variables: Mapping[str, str]) -> Iterator[None]:
    """Processes started inside the block run at exactly these kernel variables (``BENCH_CPU_KERNELS`` set
    to ``native`` so that their import of ``bench`` adds none); this process's own kernels, chosen when
    torch first computed, do not change."""
    keys = (*CPU_KERNEL_VARIABLES, "BENCH_CPU_KERNELS")
    saved = {k: os.environ[k] for k in keys if k in os.environ}
    for k in keys:
        os.environ.pop(k, None)
    os.environ.update({**variables, "BENCH_CPU_KERNELS": "native"})
    try:
        yield
    finally:
        for k in keys:
            os.environ.pop(k, None)
        os.environ.update(saved)


def exit_without_teardown(code: int) -> NoReturn:
    """Exit this process with ``code`` without the interpreter's teardown of its modules.

    Freeing the objects of torch's and MLflow's modules one by one took 0.8-0.9 s at the end of every
    ``bench`` process, measured (benchmarks/test_fixed_cost.py); the operating system frees that memory
    at once. Nothing is lost: the files the project writes are closed (and renamed into place) when
    written, atexit handlers still run and output is flushed. The normal exit is kept while another
    non-daemon thread runs (the interpreter would wait for it)."""
    if any(t.is_alive() and not t.daemon for t in threading.enumerate() if t is not threading.main_thread()):
        sys.exit(code)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe: as the interpreter's own exit
            stream.flush()
    os._exit(code)
