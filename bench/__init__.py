"""fkd-bench: a reproducibility benchmark suite for federated knowledge distillation.

Importing the package pins the CPU kernels torch, oneDNN and MKL may use to the AVX2 level — before
torch computes anything — so that every x86-64 machine with AVX2 takes the same code paths (an
AVX-512 machine otherwise rounds differently and its numbers drift from pins made elsewhere).
``BENCH_CPU_KERNELS=native`` leaves the libraries to pick; variables already set are kept. The level
in force is recorded in every run's provenance (``cpu_capability``, ``cpu_kernels``).
"""
import os

CPU_KERNELS = {"avx2": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_CBWR": "AVX2",
                        "MKL_ENABLE_INSTRUCTIONS": "AVX2"},
               "native": {}}


def _pin_cpu_kernels() -> None:
    level = os.environ.get("BENCH_CPU_KERNELS", "avx2").strip().lower()
    for key, value in CPU_KERNELS.get(level, CPU_KERNELS["avx2"]).items():
        os.environ.setdefault(key, value)


_pin_cpu_kernels()
