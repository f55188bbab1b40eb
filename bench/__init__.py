"""fkd-bench: a reproducibility benchmark suite for federated knowledge distillation.

Importing the package pins the CPU kernels torch, oneDNN and MKL may use — before torch computes
anything — so that every x86-64 machine with AVX2, Intel or AMD, computes the same bits: ATen's and
oneDNN's kernels at the AVX2 level (an AVX-512 machine otherwise rounds differently), and MKL in its
``COMPATIBLE`` conditional-numerical-reproducibility branch. MKL's AVX2 branch is not enough: it runs
other code on AMD than on Intel processors (measured: the default suite's linear layers and their
gradients differ between an emulated EPYC and an emulated Haswell; in the COMPATIBLE branch the two
and this project's AVX-512 Xeon agree bitwise; README "CPU kernels"). ``BENCH_CPU_KERNELS=native``
leaves the libraries to pick; variables already set are kept. The level in force is recorded in every
run's provenance (``cpu_capability``, ``cpu_kernels``).
"""
import os

CPU_KERNELS = {"portable": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_CBWR": "COMPATIBLE"},
               "native": {}}
CPU_KERNEL_VARIABLES = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_CBWR", "MKL_ENABLE_INSTRUCTIONS")
"""The variables that choose CPU kernels: passed on to workers and recorded in provenance when set."""


def _pin_cpu_kernels() -> None:
    level = os.environ.get("BENCH_CPU_KERNELS", "portable").strip().lower()
    for key, value in CPU_KERNELS.get(level, CPU_KERNELS["portable"]).items():
        os.environ.setdefault(key, value)


_pin_cpu_kernels()
