"""Parameters of a method whose released code differs from its paper: ``mode: paper|code`` fills in the
switches that the two readings set differently (a subclass's ``MODE_DEFAULTS``); a switch given explicitly
wins (DESIGN.md "Paper mode and code mode")."""
from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from bench.algorithms.base import AlgorithmParams, with_mode_defaults


class ModeParams(AlgorithmParams):
    MODE_DEFAULTS: ClassVar[dict[str, dict[str, Any]]] = {}
    mode: Literal["paper", "code"] = Field("paper", description="the defaults of the switches: the paper's reading "
                                                                 "or the released code's")

    @model_validator(mode="before")
    @classmethod
    def _mode_defaults(cls, data: Any) -> Any:
        return with_mode_defaults(data, cls.MODE_DEFAULTS)
