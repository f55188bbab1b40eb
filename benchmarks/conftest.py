"""Benchmarks reuse the test fixtures (prepared digits, isolated working directory)."""
from tests.conftest import _isolated, data_dir  # noqa: F401
