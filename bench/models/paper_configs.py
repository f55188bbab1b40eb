"""A paper's (model, dataset) configurations and the parameter counts it prints: the types.

Each :class:`PaperConfig` names a registered model, the arguments a paper builds it with for a
dataset, and the count the paper or its reading notes (pipelines/<paper>/NOTES.md) print: exactly (``"11,215,844"``) or rounded (``"61.7k"``,
``"0.30M"``, compared at the printed precision). A count may be of the whole model or of one of its parts
(DaFKD prints its extractor and heads separately). Each paper plug-in lists its own
(:class:`bench.suites.paper.Paper`'s ``model_configs``); ``bench models`` lists them with the count computed
by building each model on the ``meta`` device; ``tests/test_models.py`` checks every printed count.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

CLIENT_MODEL = "client model"
IMAGE_GENERATOR = "image generator"
FEATURE_GENERATOR = "feature generator"
DISCRIMINATOR = "discriminator"


@dataclass(frozen=True)
class Printed:
    """A count as printed: ``"1,286,734"`` (exact) or ``"817.6k"`` / ``"0.30M"`` (rounded), of ``part``
    (a submodule path such as ``"body"``) or, when ``part`` is None, of the whole model."""

    count: str
    part: str | None = None

    def __post_init__(self) -> None:
        if not re.fullmatch(r"\d{1,3}(,\d{3})*|\d+(\.\d+)?[kM]", self.count):
            raise ValueError(f"printed count {self.count!r} is neither exact (1,286,734) nor rounded (61.7k, 0.30M)")

    def matches(self, count: int) -> bool:
        """``count`` equals the exact figure, or rounds to the rounded one at its printed precision."""
        if self.count[-1] not in "kM":
            return count == int(self.count.replace(",", ""))
        number = self.count[:-1]
        decimals = len(number.split(".")[1]) if "." in number else 0
        return round(count / {"k": 1e3, "M": 1e6}[self.count[-1]], decimals) == float(number)

    def __str__(self) -> str:
        return self.count if self.part is None else f"{self.part} {self.count}"


@dataclass(frozen=True)
class PaperConfig:
    paper: str
    role: str  # CLIENT_MODEL, IMAGE_GENERATOR, FEATURE_GENERATOR or DISCRIMINATOR
    model: str  # registered name (bench.models)
    datasets: tuple[str, ...]  # registered dataset names this configuration is used on
    in_shape: tuple[int, ...]
    num_classes: int
    printed: tuple[Printed, ...]
    source: str  # where the count is printed
    kwargs: Mapping[str, object] = field(default_factory=dict)


def printed(*counts: str, parts: tuple[str, ...] = ()) -> tuple[Printed, ...]:
    """The counts as printed, each of the part of the same position in ``parts`` (none: of the whole model)."""
    return tuple(Printed(c, parts[i] if parts else None) for i, c in enumerate(counts))
