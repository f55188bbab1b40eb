"""Benchmarks reuse the test fixtures (prepared digits, isolated working directory)."""
import os

os.environ.setdefault("BENCH_CPU_KERNELS", "native")  # benchmarks measure the default level; tests/conftest.py pins the tests'

from tests.conftest import _isolated, data_dir  # noqa: F401,E402
