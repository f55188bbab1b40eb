"""Where a method's released code differs from its paper, one parameter model holds both readings
(``mode: paper|code``): each switch is declared once, with its paper value, its code value and what it
means (:func:`reading`). ``mode`` picks every switch's value; a switch given explicitly wins. A method's
docstring describes its paper; the switches, printed as a table (:func:`readings_table`), describe the code.

A switch added after runs were pinned keeps their config hashes: ``omitted`` names the modes in whose resolved
config it is left out while it holds that mode's value (validation fills it in again), ``as_null`` writes it
as null there instead (a value that was once optional).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer, model_validator

from bench.algorithms.base import AlgorithmParams

Mode = Literal["paper", "code"]


@dataclass(frozen=True)
class Reading:
    """One switch's two values: the paper's and the released code's."""

    paper: object
    code: object
    omitted: tuple[Mode, ...] = ()
    as_null: bool = False

    def value(self, mode: Mode) -> object:
        return self.paper if mode == "paper" else self.code


def reading(paper: Any, code: Any, doc: str, *, omitted: tuple[Mode, ...] = (), as_null: bool = False,
            **constraints: Any) -> Any:
    """Declare a switch as a field's default: ``kd_dist: Literal["l2", "kl"] = reading("l2", "kl", "what it is")``
    (the field's default is the paper's value; ``constraints`` are pydantic's, e.g. ``ge=0``)."""
    info = Field(paper, description=doc, **constraints)
    info.metadata.append(Reading(paper, code, omitted, as_null))
    return info


class ModeParams(AlgorithmParams):
    """Parameters of a method whose released code differs from its paper: its switches are :func:`reading`\\s."""

    mode: Mode = Field("paper", description="the switches' values: the paper's reading or the released code's")

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        """A parameter model's docstring ends with its switches' table."""
        super().__pydantic_init_subclass__(**kwargs)
        if cls.readings() and "__doc__" in cls.__dict__:
            table = "\n".join(f"    {line}" for line in readings_table(cls).splitlines())
            cls.__doc__ = f"{(cls.__doc__ or '').rstrip()}\n\nSwitches (``mode``; a switch given explicitly wins):\n\n{table}\n"

    @classmethod
    def readings(cls) -> dict[str, Reading]:
        """Every switch of the method, by name."""
        return {name: meta for name, info in cls.model_fields.items() for meta in info.metadata
                if isinstance(meta, Reading)}

    def departs_from_paper(self, *switches: str) -> bool:
        """Whether any of ``switches`` holds a value other than its paper value."""
        readings = self.readings()
        return any(getattr(self, name) != readings[name].paper for name in switches)

    @model_validator(mode="before")
    @classmethod
    def _mode_values(cls, data: Any) -> Any:
        """The mode's value of every switch not given (or given as null, where ``as_null``)."""
        if not isinstance(data, dict) or data.get("mode", "paper") not in ("paper", "code"):
            return data
        mode = data.get("mode", "paper")
        unset = {name: switch.value(mode) for name, switch in cls.readings().items()
                 if name not in data or (switch.as_null and data[name] is None)}
        return {**data, **unset}

    @model_serializer(mode="wrap")
    def _resolved(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """The resolved parameters, each switch ``omitted`` in its modes while it holds that mode's value."""
        out: dict[str, Any] = handler(self)
        for name, switch in self.readings().items():
            if self.mode in switch.omitted and getattr(self, name) == switch.value(self.mode):
                if switch.as_null:
                    out[name] = None
                else:
                    del out[name]
        return out


def readings_table(params: type[ModeParams]) -> str:
    """The switches of ``params`` as a table: name, paper value, code value, what it means."""
    rows = [(name, repr(s.paper), repr(s.code), params.model_fields[name].description or "")
            for name, s in params.readings().items()]
    width = [max(len(r[i]) for r in [("switch", "paper", "code", ""), *rows]) for i in range(3)]
    return "\n".join(f"{a:<{width[0]}}  {b:<{width[1]}}  {c:<{width[2]}}  {d}".rstrip()
                     for a, b, c, d in [("switch", "paper", "code", "what"), *rows])
