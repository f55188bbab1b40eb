"""Checkpoints: the complete state of a run after a round, written atomically and verified when read,
so a run killed at any moment (``kill -9`` included) continues from its last checkpoint to a
bitwise-identical result, and a damaged or planted file never changes a number.

**Content.** One :func:`torch.save` of the typed run state — models, optimisers (whose parameters
stay the models' own: pickle keeps object identity within one file), each method's client and server
state, the curves and records so far, the timing — and the identity of the run: config, dataset,
partition and source code hashes. A checkpoint of another identity is never resumed. RNG streams are
not stored: each is a pure function of the seed and its key (:mod:`bench.rng`).

**Verified.** The file ends with a footer written after the content: :data:`MAGIC` and the sha256 of
everything before it. A file whose footer is missing or whose digest differs (truncated, a flipped
bit) is refused before anything in it is read. The content is then read with ``weights_only=True``:
torch's restricted unpickler, which calls no function and builds no object but tensors, containers
and the classes allow-listed here (:func:`allowed_class`): models (``nn.Module``), optimisers,
dataclasses (the methods' typed state) and enums, each already imported by this run. A planted pickle
that names anything else (``os.system``, ``builtins.eval``) is refused without being executed.

**Kept: the last two.** Each write moves the previous checkpoint to ``checkpoint.prev.pt`` and puts
the new one in its place, so when the newest is damaged the run resumes from the one before; when
both are, from round 1. Each refusal and the resume itself are said in one line (``say``).

**When: :class:`CheckpointPolicy`.** After a round that is a multiple of ``every`` (default 1), once
``interval_s`` seconds (default 60) have passed since the last checkpoint (or the run's start) and at
least 50 times as long as the last checkpoint took to write, so checkpoints cost at most 2 % of a run's
time whatever the model's size (``benchmarks/test_checkpoint_cost.py`` measures it). A run killed at
any moment loses at most the interval plus the round in progress. ``interval_s=0``: after every
``every``-th round, whatever it costs.
"""
from __future__ import annotations

import copyreg
import dataclasses
import enum
import hashlib
import io
import math
import os
import pickle
import sys
import tempfile
import time
import types
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import torch
from torch import nn

from bench.engine.state import NoState, Server

CHECKPOINT = "checkpoint.pt"
PREVIOUS = "checkpoint.prev.pt"
MAGIC = b"fkd-bench checkpoint sha256\n"
FOOTER = len(MAGIC) + 32  # the magic, then the 32-byte digest of everything before it
BUDGET = 0.02  # the largest share of a run's time checkpoints may take under an interval policy
Record = tuple[int, str, int | None, float]
"""``(round, metric, client or None, value)``: one line of ``records.csv``."""
Say = Callable[[str], None]


@dataclass
class ClientSnapshot:
    model: nn.Module
    optimizer: torch.optim.Optimizer | None
    state: NoState


@dataclass
class Checkpoint:
    identity: dict[str, str]
    round: int
    server: Server
    clients: list[ClientSnapshot]
    curves: list[dict[str, float]]
    records: list[Record]
    timing: dict[str, float] = field(default_factory=dict)
    loss_reference: float | None = None  # the divergence guard's reference (the run's first step loss)
    divergence: tuple[int, int | str, str] | None = None  # training.on_divergence: train_on: the first one's
    # round, who, reason


@dataclass(frozen=True)
class CheckpointPolicy:
    """When a run writes its checkpoint (module docstring). Never changes a result."""

    every: int = 1  # rounds; 0: never
    interval_s: float = 60.0  # at least this long between checkpoints; 0: after every `every`-th round

    def __post_init__(self) -> None:
        if self.every < 0 or not (math.isfinite(self.interval_s) and self.interval_s >= 0):
            raise ValueError(f"checkpoint policy: every={self.every} and interval_s={self.interval_s} must be finite "
                             "and >= 0")

    def due(self, round_index: int, since_last_s: float, last_write_s: float) -> bool:
        """Whether to write after ``round_index``, ``since_last_s`` after the last checkpoint (or the run's
        start), the last of which took ``last_write_s`` to write."""
        if not self.every or round_index % self.every:
            return False
        return self.interval_s == 0 or since_last_s >= max(self.interval_s, last_write_s / BUDGET)


EVERY_ROUND = CheckpointPolicy(every=1, interval_s=0.0)
NEVER = CheckpointPolicy(every=0)


class DamagedCheckpoint(Exception):
    """A checkpoint file that is not one this project wrote, intact: the message says why."""


def optimizer_state(entries: dict[Any, Any]) -> defaultdict[Any, dict[Any, Any]]:
    """An optimiser's per-parameter state as torch keeps it (``defaultdict(dict)``), from a plain dict: the
    one function a checkpoint may call (the restricted unpickler fills no ``defaultdict`` itself)."""
    return defaultdict(dict, entries)


def _reduce_defaultdict(value: defaultdict[Any, Any]) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    if value.default_factory is not dict:
        raise TypeError(f"a checkpoint holds defaultdicts of dict only (an optimiser's state), not of "
                        f"{value.default_factory}")
    return optimizer_state, (dict(value),)


class _Pickler(pickle.Pickler):
    dispatch_table = {**copyreg.dispatch_table, defaultdict: _reduce_defaultdict}


_PICKLE = types.ModuleType("bench_checkpoint_pickle")
_PICKLE.Pickler = _Pickler  # type: ignore[attr-defined]  # typeshed: ModuleType declares no attributes
FUNCTIONS = {f"{optimizer_state.__module__}.{optimizer_state.__qualname__}": optimizer_state}
"""The functions a checkpoint may call, by the name it gives them."""


class _Digesting:
    """A writable file that hashes what passes through it."""

    def __init__(self, handle: IO[bytes]) -> None:
        self.handle, self.digest = handle, hashlib.sha256()

    def write(self, data: bytes) -> int:
        self.digest.update(data)
        return self.handle.write(data)

    def flush(self) -> None:
        self.handle.flush()


def _write_temporary(folder: Path, checkpoint: Checkpoint) -> Path:
    """The checkpoint, then its footer, into a temporary file of ``folder`` (synced to disk)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{CHECKPOINT}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as handle:
            content = _Digesting(handle)
            torch.save(checkpoint, content, pickle_module=_PICKLE)  # type: ignore[arg-type]  # torch: save types its file as IO[bytes]; it only writes and flushes
            handle.write(MAGIC + content.digest.digest())
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return Path(tmp)


def save_checkpoint(folder: Path, checkpoint: Checkpoint) -> Path:
    """Write ``checkpoint.pt`` atomically, keeping the one it replaces as ``checkpoint.prev.pt``."""
    folder = Path(folder)
    tmp = _write_temporary(folder, checkpoint)
    if (folder / CHECKPOINT).exists():
        os.replace(folder / CHECKPOINT, folder / PREVIOUS)  # killed here: the previous one still resumes
    os.replace(tmp, folder / CHECKPOINT)
    return folder / CHECKPOINT


def allowed_class(path: str) -> type | None:
    """The class a checkpoint may name at ``module.qualname``: one already imported by this process (the
    name never imports anything) that is a model, an optimiser, a dataclass, an enum or ``dict``; None for
    anything else."""
    parts = path.split(".")
    obj: object = None
    for split in range(len(parts) - 1, 0, -1):  # the longest prefix that is an imported module
        if (obj := sys.modules.get(".".join(parts[:split]))) is not None:
            break
    else:
        return None
    for attribute in parts[split:]:
        obj = getattr(obj, attribute, None)
    if obj is dict:
        return obj
    if not isinstance(obj, type) or f"{obj.__module__}.{obj.__qualname__}" != path:
        return None
    if issubclass(obj, (nn.Module, torch.optim.Optimizer, enum.Enum)) or dataclasses.is_dataclass(obj):
        return obj
    return None


def read_checkpoint(path: Path, device: torch.device) -> Checkpoint:
    """The checkpoint at ``path``, verified (module docstring); :class:`DamagedCheckpoint` says why not."""
    data = Path(path).read_bytes()
    if len(data) < FOOTER or data[-FOOTER:-32] != MAGIC:
        raise DamagedCheckpoint("it has no digest footer (truncated, or not written by this version)")
    content = memoryview(data)[:-FOOTER]
    if hashlib.sha256(content).digest() != data[-32:]:
        raise DamagedCheckpoint("its content does not match its sha256 (the file was changed or damaged)")
    try:
        names = torch.serialization.get_unsafe_globals_in_checkpoint(io.BytesIO(content))
    except Exception as exc:
        raise DamagedCheckpoint(f"it cannot be read as a torch file ({type(exc).__name__})") from None
    classes = {name: FUNCTIONS.get(name) or allowed_class(name) for name in names}
    if refused := sorted(name for name, cls in classes.items() if cls is None):
        raise DamagedCheckpoint(f"it names {', '.join(refused[:3])}, which a checkpoint never holds (not loaded)")
    try:
        with torch.serialization.safe_globals([(cls, name) for name, cls in classes.items() if cls is not None]):
            checkpoint = torch.load(io.BytesIO(content), map_location=device, weights_only=True)
    except Exception as exc:
        raise DamagedCheckpoint(f"it cannot be read ({type(exc).__name__}: {str(exc).splitlines()[0][:120]})") from None
    if not isinstance(checkpoint, Checkpoint):
        raise DamagedCheckpoint(f"it holds a {type(checkpoint).__name__}, not a checkpoint")
    return checkpoint


def load_checkpoint(folder: Path, identity: dict[str, str], device: torch.device,
                    say: Say = lambda line: None) -> tuple[Path, Checkpoint] | None:
    """The newest intact checkpoint in ``folder`` of the run of this ``identity`` (``checkpoint.pt``, else
    ``checkpoint.prev.pt``) and its path; None when there is none. Each file passed over is said in one line."""
    for path in (Path(folder) / CHECKPOINT, Path(folder) / PREVIOUS):
        if not path.exists():
            continue
        try:
            checkpoint = read_checkpoint(path, device)
        except DamagedCheckpoint as exc:
            say(f"refused {path}: {exc}")
            continue
        except OSError as exc:
            say(f"refused {path}: it cannot be read ({exc.strerror})")
            continue
        if checkpoint.identity != identity:
            changed = ", ".join(k.removesuffix("_sha256") for k in identity if checkpoint.identity.get(k) != identity[k])
            say(f"ignored {path}: it is of another run (its {changed} hash differs)")
            continue
        return path, checkpoint
    return None


def remove_checkpoint(folder: Path) -> None:
    """Delete the checkpoints and any temporary file a killed write left behind."""
    folder = Path(folder)
    for path in [folder / CHECKPOINT, folder / PREVIOUS, *folder.glob(f".{CHECKPOINT}.*.tmp")]:
        path.unlink(missing_ok=True)


@dataclass
class Checkpoints:
    """A run's checkpoints in ``folder`` under ``policy``: the one it resumes from, those it writes after rounds."""

    folder: Path
    policy: CheckpointPolicy = CheckpointPolicy()
    say: Say = lambda line: None
    last: float = field(default_factory=time.perf_counter)
    last_write_s: float = 0.0

    def resume(self, identity: dict[str, str], device: torch.device, rounds: int) -> Checkpoint | None:
        """The checkpoint to continue from, if any, said in one line either way when a file was there."""
        found = [name for name in (CHECKPOINT, PREVIOUS) if (Path(self.folder) / name).exists()]
        resumed = load_checkpoint(self.folder, identity, device, self.say)
        if resumed is not None:
            path, checkpoint = resumed
            self.say(f"resuming {self.folder} after round {checkpoint.round} of {rounds}, from {path.name}")
        elif found:
            self.say(f"starting {self.folder} at round 1: it holds no intact checkpoint of this run")
        self.last = time.perf_counter()
        return None if resumed is None else resumed[1]

    def after_round(self, round_index: int, make: Callable[[], Checkpoint]) -> float:
        """Write the checkpoint ``make()`` returns when the policy says it is due; the seconds it took."""
        if not self.policy.due(round_index, time.perf_counter() - self.last, self.last_write_s):
            return 0.0
        tick = time.perf_counter()
        save_checkpoint(self.folder, make())
        self.last = time.perf_counter()
        self.last_write_s = self.last - tick
        return self.last_write_s
