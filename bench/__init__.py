"""fkd-bench: a reproducibility benchmark suite for federated knowledge distillation.

Importing the package pins the CPU kernels torch, oneDNN and MKL may use to the AVX2 level — before
torch computes anything — so that every x86-64 machine with AVX2 takes the same code paths (an
AVX-512 machine otherwise rounds differently and its numbers drift from pins made elsewhere).
``BENCH_CPU_KERNELS=native`` leaves the libraries to pick; variables already set are kept. The level
in force is recorded in every run's provenance (``cpu_capability``, ``cpu_kernels``).

:func:`exit_without_teardown` ends the project's own processes (the ``bench`` command, its helpers).
"""
import atexit
import contextlib
import os
import sys
import threading
from typing import NoReturn

CPU_KERNELS = {"avx2": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_CBWR": "AVX2",
                        "MKL_ENABLE_INSTRUCTIONS": "AVX2"},
               "native": {}}


def _pin_cpu_kernels() -> None:
    level = os.environ.get("BENCH_CPU_KERNELS", "avx2").strip().lower()
    for key, value in CPU_KERNELS.get(level, CPU_KERNELS["avx2"]).items():
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
