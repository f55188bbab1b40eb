from __future__ import annotations

import torch
from torch import nn

from bench.engine.knowledge import ClassStatistics, aggregate_class_statistics, class_statistics


class Fixed(nn.Module):
    """features = x; logits = x @ W (hand-checkable)."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.tensor([[1.0, 0.0, 0.0], [0.0, 2.0, 0.0]]))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x, x @ self.w


def test_class_statistics_by_hand() -> None:
    x = torch.tensor([[1.0, 0.0], [3.0, 2.0], [0.0, 4.0]])
    y = torch.tensor([0, 0, 2])
    stats = class_statistics(Fixed(), x, y, num_classes=3, temperature=0.5, batch_size=2)
    torch.testing.assert_close(stats.features, torch.tensor([[2.0, 1.0], [0.0, 0.0], [0.0, 4.0]]))
    soft0 = (torch.softmax(torch.tensor([1.0, 0.0, 0.0]) / 0.5, 0) + torch.softmax(torch.tensor([3.0, 4.0, 0.0]) / 0.5, 0)) / 2
    torch.testing.assert_close(stats.soft[0], soft0)
    torch.testing.assert_close(stats.soft[2], torch.softmax(torch.tensor([0.0, 8.0, 0.0]) / 0.5, 0))
    assert stats.counts.tolist() == [2, 0, 1] and stats.present.tolist() == [True, False, True]


def test_aggregation_weighted_by_counts_and_uniform() -> None:
    a = ClassStatistics(torch.tensor([[1.0], [0.0]]), torch.tensor([[1.0, 0.0], [0.0, 0.0]]), torch.tensor([1, 0]))
    b = ClassStatistics(torch.tensor([[4.0], [2.0]]), torch.tensor([[0.0, 1.0], [0.0, 1.0]]), torch.tensor([3, 5]))
    weighted = aggregate_class_statistics([a, b])
    torch.testing.assert_close(weighted.features, torch.tensor([[(1 + 12) / 4], [2.0]]))
    torch.testing.assert_close(weighted.soft[0], torch.tensor([0.25, 0.75]))
    assert weighted.counts.tolist() == [4, 5]
    uniform = aggregate_class_statistics([a, b], "uniform")
    torch.testing.assert_close(uniform.features, torch.tensor([[2.5], [2.0]]))  # class 1: only b holds it
