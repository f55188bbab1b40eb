"""Plots of a :class:`~bench.data.partition.Partition`, like the papers' figures.

* :func:`plot_class_heatmap`: client x class sample counts (pipelines/fedhkd/NOTES.md §7, Figs. 1-3).
* :func:`plot_class_bubbles`: x = client, y = class, area ∝ count (pipelines/fedal/NOTES.md §4.2, Fig. 4).
* :func:`plot_client_summary`: per-client sizes, class mix and an optional shift value per client
  (pipelines/fedakd/NOTES.md §2.2: "log per-client label histograms").

Each writes a PNG atomically and returns its path.
"""
from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from bench.data.partition import FigureKind, Partition, get_partitioner
from bench.fileio import atomic_write


def _title(partition: Partition, title: str | None) -> str:
    if title:
        return title
    params = ", ".join(f"{k}={v}" for k, v in partition.params.items())
    name = f"{partition.dataset['name']}: " if partition.dataset else ""
    return f"{name}{partition.scheme} ({params}), {partition.num_clients} clients, seed {partition.seed}"


def _save(fig: plt.Figure, path: str | Path) -> Path:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=120, bbox_inches="tight")
    plt.close(fig)
    return atomic_write(path, lambda h: h.write(buffer.getvalue()))


def plot_class_heatmap(partition: Partition, path: str | Path, title: str | None = None) -> Path:
    """FedHKD Figs. 1-3: colour = number of train samples of each class at each client."""
    counts = partition.train_counts
    fig, ax = plt.subplots(figsize=(min(0.35 * counts.shape[1] + 2, 30), min(0.3 * counts.shape[0] + 1.5, 20)))
    image = ax.imshow(counts, cmap="Blues", aspect="auto", interpolation="nearest")
    fig.colorbar(image, ax=ax, label="samples")
    if counts.size <= 400:
        for (i, j), value in np.ndenumerate(counts):
            ax.text(j, i, str(value), ha="center", va="center", fontsize=6,
                    color="white" if value > counts.max() / 2 else "black")
    ax.set_xlabel("class"); ax.set_ylabel("client")
    ax.set_title(_title(partition, title), fontsize=9)
    return _save(fig, path)


def plot_class_bubbles(partition: Partition, path: str | Path, clients: Sequence[int] | None = None,
                       title: str | None = None) -> Path:
    """FedAL Fig. 4: one circle per (client, class), area proportional to its train samples;
    the first 10 clients by default, as the paper shows 10 of 20."""
    shown = list(clients) if clients is not None else list(range(min(10, partition.num_clients)))
    counts = partition.train_counts[shown]
    xs, ys = np.meshgrid(np.arange(len(shown)), np.arange(counts.shape[1]), indexing="ij")
    fig, ax = plt.subplots(figsize=(max(4.0, 0.5 * len(shown) + 2), max(3.0, 0.3 * counts.shape[1] + 1.5)))
    ax.scatter(xs.ravel(), ys.ravel(), s=600 * counts.ravel() / max(1, counts.max()), alpha=0.6, color="tab:red")
    ax.set_xticks(range(len(shown)), [str(c) for c in shown])
    ax.set_xlabel("client"); ax.set_ylabel("class")
    ax.set_title(_title(partition, title), fontsize=9)
    return _save(fig, path)


def plot_client_summary(partition: Partition, path: str | Path, shift: Sequence[float] | None = None,
                        shift_label: str = "mean PC1", title: str | None = None) -> Path:
    """FedAKD per-client summary: train / local test sizes, class mix, and an optional per-client shift
    (e.g. :func:`bench.data.covariate_shift.client_shift`)."""
    k = np.arange(partition.num_clients)
    panels = 3 if shift is not None else 2
    fig, axes = plt.subplots(panels, 1, figsize=(max(5.0, 0.4 * len(k) + 2), 2.6 * panels), sharex=True)
    train = np.array([len(a) for a in partition.train]); test = np.array([len(a) for a in partition.local_test])
    axes[0].bar(k, train, label="train"); axes[0].bar(k, test, bottom=train, label=f"local test ({partition.local_test_source} split)")
    axes[0].set_ylabel("samples"); axes[0].legend(fontsize=7)
    share = partition.train_counts / np.maximum(1, partition.train_counts.sum(axis=1, keepdims=True))
    bottom = np.zeros(len(k))
    cmap = plt.get_cmap("tab20")
    for c in range(share.shape[1]):
        axes[1].bar(k, share[:, c], bottom=bottom, color=cmap(c % 20), width=0.8)
        bottom += share[:, c]
    axes[1].set_ylabel("class share")
    if shift is not None:
        axes[2].plot(k, np.asarray(shift, dtype=float), marker="o")
        axes[2].set_ylabel(shift_label)
    axes[-1].set_xlabel("client")
    axes[0].set_title(_title(partition, title), fontsize=9)
    return _save(fig, path)


PlotKind = Literal["auto", FigureKind]


def plot_partition(partition: Partition, path: str | Path, kind: PlotKind = "auto") -> Path:
    """The figure the scheme's paper uses: ``auto`` is the one its registration declares
    (``register_partitioner(..., figure=...)``: the heatmap unless it says otherwise)."""
    if kind == "auto":
        kind = get_partitioner(partition.scheme).figure_for(partition.params)
    plots: dict[str, Callable[[Partition, str | Path], Path]] = {
        "heatmap": plot_class_heatmap, "bubble": plot_class_bubbles, "summary": plot_client_summary}
    return plots[kind](partition, path)
