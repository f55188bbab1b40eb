"""No method state or message travels untyped: every algorithm's declared client and server state, every message
its rounds send and every annotation of its methods names concrete types (no ``Any``, no ``object``, no bare
containers, no string-keyed dict but a state dict or named models), and on a run the objects are what they
declare: the state of the declared classes, each value of its field's type, nothing kept on the algorithm object
but its parameters, its context and scratch models."""
from __future__ import annotations

import dataclasses
import inspect
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any, Literal, TypeVar, Union

import pytest
import torch
from torch import nn

import examples.plugins.codistill  # noqa: F401  (registers "codistill")
from bench.algorithms import Algorithm, AlgorithmParams, get_algorithm
from bench.engine.context import Context
from bench.engine.ledger import Ledger
from bench.engine.protocol import Exchange, Lockstep
from bench.runner import federation
from tests.test_communication import CASES, shipped_methods

CONTAINERS = (dict, list, tuple, set, frozenset, Mapping, Sequence)
NAMED = (torch.Tensor, nn.Module)  # what a string-keyed dict may hold: a state dict, named models


def problems(tp: Any, where: str, state: bool = True, seen: set[type] | None = None) -> list[str]:
    """Why the annotation ``tp`` is not a concrete type (empty: it is), recursing into its arguments and into the
    fields of the dataclasses it names; in ``state`` (and messages), a string-keyed dict must be a state dict or
    named models. A phase's message types are its own (Exchange[..., Any, Any]): they are checked on a run."""
    seen = set() if seen is None else seen
    if tp is Any or tp is object:
        return [f"{where}: {tp}"]
    if isinstance(tp, TypeVar) or tp is type(None) or tp is Ellipsis:
        return []
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (Literal, Exchange, Lockstep):
        return []
    if origin in (Union, types.UnionType):
        return [p for arg in args for p in problems(arg, where, state, seen)]
    if tp in CONTAINERS or (origin in CONTAINERS and not args):
        return [f"{where}: a bare {tp}"]
    if origin is not None:
        found = [p for arg in args for p in problems(arg, where, state, seen)]
        if state and origin in (dict, Mapping) and args[0] is str and not all(
                isinstance(v, type) and issubclass(v, NAMED) for v in _members(args[1])):
            found.append(f"{where}: a string-keyed dict of {args[1]}")
        return found
    if dataclasses.is_dataclass(tp) and tp not in seen:
        seen.add(tp)
        hints = typing.get_type_hints(tp)
        return [p for f in dataclasses.fields(tp)
                for p in problems(hints[f.name], f"{tp.__name__}.{f.name}", state, seen)]
    return []


def _members(tp: Any) -> tuple[Any, ...]:
    return typing.get_args(tp) if typing.get_origin(tp) in (Union, types.UnionType) else (tp,)


def conforms(value: object, tp: Any) -> bool:
    """Whether ``value`` is of the annotated type ``tp`` (a TypeVar: any typed payload)."""
    if isinstance(tp, TypeVar):
        return True
    if tp is type(None):
        return value is None
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (Union, types.UnionType):
        return any(conforms(value, arg) for arg in args)
    if origin is Literal:
        return value in args
    if origin in (list, Sequence):
        return isinstance(value, (list, tuple)) and all(conforms(v, args[0]) for v in value)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return isinstance(value, tuple) and all(conforms(v, args[0]) for v in value)
        return isinstance(value, tuple) and len(value) == len(args) and all(map(conforms, value, args))
    if origin in (dict, Mapping):
        return isinstance(value, Mapping) and all(conforms(k, args[0]) and conforms(v, args[1])
                                                  for k, v in value.items())
    if origin is not None:
        return isinstance(value, origin)
    if tp is float:
        return isinstance(value, (float, int))
    return isinstance(value, tp)


def field_problems(obj: object, where: str) -> list[str]:
    """Fields of the dataclass ``obj`` whose values are not of their declared types, recursively."""
    hints = typing.get_type_hints(type(obj))
    found = []
    for f in dataclasses.fields(obj):  # type: ignore[arg-type]
        value = getattr(obj, f.name)
        if not conforms(value, hints[f.name]):
            found.append(f"{where}.{f.name} holds a {type(value).__name__}, declared {hints[f.name]}")
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            found += field_problems(value, f"{where}.{f.name}")
    return found


def algorithm_classes() -> list[type[Algorithm]]:
    return [get_algorithm(name) for name in sorted(shipped_methods())]


def test_the_state_guard_refuses_untyped_and_string_keyed_fields() -> None:
    @dataclasses.dataclass
    class Loose:
        extra: dict[str, float]
        anything: Any
        bag: dict  # type: ignore[type-arg]
        fine: dict[str, torch.Tensor]
        by_client: dict[int, float]

    assert [p.split(":")[0] for p in problems(Loose, "Loose")] == ["Loose.extra", "Loose.anything", "Loose.bag"]
    assert conforms({1: 2.0}, dict[int, float]) and not conforms({1: "x"}, dict[int, float])


@pytest.mark.parametrize("algorithm", algorithm_classes(), ids=lambda a: a.name)
def test_declared_state_is_concretely_typed(algorithm: type[Algorithm]) -> None:
    for state in (algorithm.ClientState, algorithm.ServerState):
        assert dataclasses.is_dataclass(state), state
        assert not problems(state, state.__name__)


@pytest.mark.parametrize("algorithm", algorithm_classes(), ids=lambda a: a.name)
def test_method_annotations_name_concrete_types(algorithm: type[Algorithm]) -> None:
    found = []
    for cls in algorithm.__mro__:
        if not issubclass(cls, Algorithm):
            continue
        for name, member in vars(cls).items():
            if inspect.isfunction(member):
                for arg, hint in typing.get_type_hints(member).items():
                    found += problems(hint, f"{cls.__name__}.{name}({arg})", state=False)
    assert not found


class RecordingLedger(Ledger):
    """The run's ledger, keeping every message it counts."""

    sent: list[object] = []

    def up(self, message: object) -> None:
        self.sent.append(message)
        super().up(message)

    def down(self, message: object) -> None:
        self.sent.append(message)
        super().down(message)


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_run_holds_the_declared_state_and_sends_typed_messages(name: str, data_dir: Any,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    RecordingLedger.sent = []
    monkeypatch.setattr(federation, "Ledger", RecordingLedger)
    config, _ = CASES[name]
    state = federation.run_federation(config(), data_dir).state
    algorithm = state.algorithm
    assert type(state.server.state) is algorithm.ServerState
    assert all(type(c.state) is algorithm.ClientState for c in state.clients)
    found = field_problems(state.server.state, "server") + [
        p for c in state.clients for p in field_problems(c.state, f"client {c.cid}")]
    for message in RecordingLedger.sent:
        assert message is None or isinstance(message, torch.Tensor) or dataclasses.is_dataclass(message), message
        if dataclasses.is_dataclass(message):
            found += problems(type(message), type(message).__name__) + field_problems(message, type(message).__name__)
    kept = {k: type(v).__name__ for k, v in vars(algorithm).items()
            if not isinstance(v, (AlgorithmParams, Context, nn.Module))}
    assert not found and not kept, (found, kept)  # kept: method state outside the typed state
    assert RecordingLedger.sent
