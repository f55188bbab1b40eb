"""benchmarks/gpu.py on the CPU: its measurement at a toy size and the table the docs quote from its files."""
from __future__ import annotations

import json
from pathlib import Path

from benchmarks.gpu import measure, table


def test_the_measurement_runs_at_a_toy_size_and_the_table_shows_its_figures(tmp_path: Path) -> None:
    path = measure(tmp_path, quick=True, parts=["steps"])
    result = json.loads(path.read_text())
    assert result["quick"] and len(result["steps"]) == 2
    text = table([path])
    for row in result["steps"]:
        d = row["deterministic"]
        assert d["step_s"] > 0 and d["step_flops"] > 0
        assert f"| {row['key']} | {d['step_s'] * 1e3:.2f} ({d['step_tflops']:.2f}) |" in text

