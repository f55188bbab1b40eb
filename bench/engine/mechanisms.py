"""Declared mechanisms: what a method's paper says makes it work, and how the method's records show it at work.

A method declares its mechanisms (:meth:`bench.algorithms.base.Algorithm.mechanisms`, from its parameters: a switch
that turns the mechanism off declares none) and records each one's diagnostic every round, as a metric of its round
(a run-level record) or a per-client record, computed from what the round computes anyway: no random draw, no
training step, no BatchNorm statistics moved, so every other record of the run is what it would be without it. The
report (bench/suites/mechanisms.py) reads the diagnostic over each run's rounds and says whether the mechanism was
active on the profile; a claim resting on an inert one is "not exercised".
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class Mechanism:
    """``name``: the mechanism, in words; ``metric``: its per-round diagnostic (a record of the run; per-client
    values are averaged over the clients); ``inert``: the diagnostic's value when the mechanism does nothing — a
    number, or the name of a per-round record holding it (chance 1/N, log K); it is active when the diagnostic lies
    beyond ``margin`` on the ``active`` side of that value (``relative``: ``margin`` in units of the inert value).
    ``why``: the reading behind the margin; ``beside``: other per-round records of the run that the report prints
    in a table under the mechanism table, because they show why the diagnostic stands where it does (e.g. the
    discriminators' outputs behind a weighting that stays uniform)."""

    name: str
    metric: str
    inert: float | str
    active: Literal["above", "below"]
    margin: float
    relative: bool = False
    why: str = ""
    beside: tuple[str, ...] = ()

    def threshold(self, inert: float) -> float:
        """The value the diagnostic must pass (above or below) to count as active."""
        step = self.margin * abs(inert) if self.relative else self.margin
        return inert + step if self.active == "above" else inert - step

    def is_active(self, value: float, inert: float) -> bool:
        threshold = self.threshold(inert)
        return value > threshold if self.active == "above" else value < threshold

    @property
    def rule(self) -> str:
        """The rule in words, e.g. ``disc_acc > 1.25 × disc_chance``."""
        sign = ">" if self.active == "above" else "<"
        if not isinstance(self.inert, str):
            return f"{self.metric} {sign} {self.threshold(self.inert):g} (inert: {self.inert:g})"
        reference = self.inert
        if self.relative:
            factor = 1 + self.margin if self.active == "above" else 1 - self.margin
            return f"{self.metric} {sign} {factor:g} × {reference}"
        offset = f" {'+' if self.active == 'above' else '−'} {self.margin:g}" if self.margin else ""
        return f"{self.metric} {sign} {reference}{offset}"
