"""Evaluation chunks (bench.engine.chunks): sized from the largest activation, unchanged where they fit."""
from __future__ import annotations

import pytest
import torch

import bench.engine.chunks as chunks
from bench.engine.chunks import ACTIVATION_BUDGET, chunk_size, peak_activation_bytes
from bench.engine.context import Context
from bench.engine.knowledge import class_statistics
from bench.engine.setup import MMAP_THRESHOLD_BYTES
from bench.models import build_model
from tests.conftest import small_config


def test_peak_activation_is_the_largest_module_output_per_sample() -> None:
    model = build_model("fedavg_cnn", (1, 28, 28), 10).eval()
    assert peak_activation_bytes(model, torch.zeros(1, 1, 28, 28)) == 32 * 24 * 24 * 4  # the first conv's output
    digits = build_model("cnn", (1, 8, 8), 10).eval()
    assert peak_activation_bytes(digits, torch.zeros(1, 1, 8, 8)) == 32 * 8 * 8 * 4  # the second conv block


def test_chunks_of_the_pinned_suites_are_unchanged() -> None:
    """digits (8 KiB a sample) keeps evaluation.batch_size 1024; ShuffleNetV2 on synthetic32 (the FedHKD
    smoke) keeps its largest pass, the 200 test images, in one chunk, as before chunking existed (its
    clients hold at most 100 train images, its public set 20)."""
    digits = build_model("cnn", (1, 8, 8), 10, feature_dim=32).eval()
    assert chunk_size(digits, torch.zeros(1347, 1, 8, 8), 1024) == 1024
    shufflenet = build_model("fedhkd_shufflenetv2", (3, 32, 32), 10, latent_dim=32).eval()
    assert chunk_size(shufflenet, torch.zeros(200, 3, 32, 32), 1024) >= 200


def test_chunks_keep_activations_under_the_mmap_threshold() -> None:
    model = build_model("fedavg_cnn", (1, 28, 28), 10).eval()
    size = chunk_size(model, torch.zeros(4000, 1, 28, 28), 1024)
    assert size == ACTIVATION_BUDGET // (32 * 24 * 24 * 4) and size * 32 * 24 * 24 * 4 < MMAP_THRESHOLD_BYTES
    assert chunk_size(model, torch.zeros(4000, 1, 28, 28, device="meta"), 1024) == 1024  # only the CPU's malloc


def test_probe_changes_no_state() -> None:
    model = build_model("cnn", (1, 8, 8), 10).eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    x = torch.randn(50, 1, 8, 8)
    rng = torch.get_rng_state()
    chunk_size(model, x, 1024)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items()) and not model.training
    assert torch.equal(rng, torch.get_rng_state())


def test_chunked_evaluation_matches_one_chunk(monkeypatch: pytest.MonkeyPatch) -> None:
    """Accuracy is the same whatever the chunking; class statistics agree to rounding."""
    ctx = Context(small_config(), (1, 8, 8), 10, torch.device("cpu"))
    model = build_model("cnn", (1, 8, 8), 10)
    x, y = torch.randn(300, 1, 8, 8), torch.randint(10, (300,))
    whole, stats = ctx.accuracy(model, x, y), class_statistics(model, x, y, 10)
    monkeypatch.setattr(chunks, "ACTIVATION_BUDGET", 8 * 1024 * 40)  # 40 samples a chunk
    assert chunk_size(model.eval(), x, 1024) == 40
    assert ctx.accuracy(model, x, y) == whole
    chunked = class_statistics(model, x, y, 10)
    assert torch.allclose(chunked.features, stats.features, atol=1e-6) and torch.equal(chunked.counts, stats.counts)
