"""fkd-bench: a reproducibility benchmark suite for federated knowledge distillation.

Importing the package pins the CPU kernels torch, oneDNN and MKL may use — before torch computes
anything — so that every x86-64 machine with AVX2, Intel or AMD, computes the same bits: ATen's and
oneDNN's kernels at the AVX2 level (an AVX-512 machine otherwise rounds differently), and MKL in its
``COMPATIBLE`` conditional-numerical-reproducibility branch. MKL's AVX2 branch is not enough: it runs
other code on AMD than on Intel processors (measured: the default suite's linear layers and their
gradients differ between an emulated EPYC and an emulated Haswell; in the COMPATIBLE branch the two
and this project's AVX-512 Xeon agree bitwise; docs/determinism.md "CPU kernels"). ``BENCH_CPU_KERNELS=native``
leaves the libraries to pick; variables already set are kept. The level in force is recorded in every
run's provenance (``cpu_capability``, ``cpu_kernels``).

:func:`exit_without_teardown` ends the project's own processes (the ``bench`` command, its helpers).
"""
import atexit
import contextlib
import os
import sys
import threading
from typing import NoReturn

CPU_KERNELS = {"portable": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_CBWR": "COMPATIBLE"},
               "native": {}}
CPU_KERNEL_VARIABLES = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_CBWR", "MKL_ENABLE_INSTRUCTIONS")
"""The variables that choose CPU kernels: passed on to workers and recorded in provenance when set."""


def _pin_cpu_kernels() -> None:
    level = os.environ.get("BENCH_CPU_KERNELS", "portable").strip().lower()
    for key, value in CPU_KERNELS.get(level, CPU_KERNELS["portable"]).items():
        os.environ.setdefault(key, value)


_pin_cpu_kernels()


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
