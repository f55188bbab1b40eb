"""Plots of a prepared dataset: :func:`plot_domain_samples`, samples per domain (``docs/datasets.md``).

Drawn on a :class:`matplotlib.figure.Figure` of its own (no pyplot state), written atomically as PNG.
"""
from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from bench.data.prepared import PreparedDataset
from bench.errors import BenchError
from bench.fileio import atomic_write

GAP = 2  # pixels between tiles


def sample_grid(data: PreparedDataset, classes: int) -> tuple[np.ndarray, list[str]]:
    """One row per domain, one tile for each of the first ``classes`` classes (the first test image of that
    domain and class), as one H x W x 3 uint8 image with white gaps; and the rows' domain names."""
    if data.test_domain is None:
        raise BenchError(f"dataset {data.name} records no domains; plot a dataset that does (e.g. domaindigits32)")
    table = data.source.get("domains")
    names = [str(d["name"]) for d in table] if isinstance(table, list) else \
        [f"domain {k}" for k in range(int(data.test_domain.max()) + 1)]
    c, h, w = data.image_shape
    grid = np.full((len(names) * (h + GAP), classes * (w + GAP), 3), 255, np.uint8)
    for k in range(len(names)):
        for label in range(classes):
            match = np.flatnonzero((data.test_domain == k) & (data.test_y == label))
            if len(match):
                tile = data.test_x[match[0]].transpose(1, 2, 0)
                grid[k * (h + GAP):k * (h + GAP) + h, label * (w + GAP):label * (w + GAP) + w] = \
                    np.repeat(tile, 3, axis=2) if c == 1 else tile
    return grid, names


def plot_domain_samples(datasets: Sequence[PreparedDataset], path: str | Path, classes: int = 6) -> Path:
    """A panel per dataset: rows are its domains (named as its manifest's domain table names them),
    columns its first ``classes`` classes."""
    fig = Figure(figsize=(0.42 * classes * len(datasets) + 1, 5.2))
    for i, data in enumerate(datasets):
        grid, names = sample_grid(data, classes)
        ax = fig.add_subplot(1, len(datasets), i + 1)
        ax.imshow(grid, interpolation="nearest")
        h, w = data.image_shape[1:]
        ax.set_yticks([k * (h + GAP) + h / 2 for k in range(len(names))], names if i == 0 else [""] * len(names))
        ax.set_xticks([j * (w + GAP) + w / 2 for j in range(classes)], [str(j) for j in range(classes)])
        ax.tick_params(length=0)
        ax.set_title(f"{data.name} ({'x'.join(map(str, data.image_shape))})", fontsize=10)
        for side in ax.spines.values():
            side.set_visible(False)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    return atomic_write(path, lambda h: h.write(buffer.getvalue()))
