"""Typed, validated experiment configuration (pydantic) and its stable hash.

A config is YAML; ``-S key.path=value`` overrides are applied before validation. Unknown keys,
wrong types and invalid values raise :class:`~bench.errors.BenchError` with one message naming the
key and what is allowed. This module holds the schemas only and imports no other room; algorithm and
partition parameters are flat keys that :func:`bench.experiment.build_config` validates against the
parameter model the algorithm or partition scheme registers.
"""
from __future__ import annotations

import copy
import math
import re
import typing
import unicodedata
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from bench.errors import BenchError
from bench.fileio import canonical_json, sha256_bytes


def _admits_bool(annotation: Any) -> bool:
    return annotation is bool or annotation is Any or any(_admits_bool(a) for a in typing.get_args(annotation))


def refuse_bools_for_numbers(model: type[BaseModel], values: Any) -> None:
    """``true``/``false`` given for a key that is not a switch (pydantic would read them as 1 and 0:
    ``training.rounds=true`` would run one round): a ``ValueError`` naming the key."""
    if not isinstance(values, dict):
        return
    for key, value in values.items():
        field = model.model_fields.get(key)
        if field is not None and isinstance(value, bool) and not _admits_bool(field.annotation):
            raise ValueError(f"{key}: expected a number or a name, got {str(value).lower()}")


class Strict(BaseModel):
    """A config section: unknown keys, non-finite numbers and booleans for numbers are refused."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _no_bools_for_numbers(cls, values: Any) -> Any:
        refuse_bools_for_numbers(cls, values)
        return values


class DatasetConfig(Strict):
    name: str = "digits"
    normalize: Literal["stats", "half", "unit"] = Field("stats", exclude_if=lambda v: v == "stats", description=(
        "input normalisation: each channel by the dataset's own mean and std, or torchvision's "
        "Normalize(0.5, 0.5) to [-1, 1] (FedHKD's released code, pipelines/fedhkd/NOTES.md §5.1), or pixel/255 in "
        "[0, 1] and nothing else (FedAKD's released code, pipelines/fedakd/NOTES.md §1.8); left out of the "
        "resolved config at its default, so the runs from before it keep their hash"))


class PartitionConfig(BaseModel):
    """``scheme`` plus that scheme's own parameters as flat keys (e.g. ``alpha`` for dirichlet)."""

    model_config = ConfigDict(extra="allow", frozen=True)
    scheme: str = "iid"
    num_clients: int = Field(10, ge=1)
    seed: int = Field(0, ge=0, description="partition seed; fixed per setting, shared by every method and run seed")
    local_test_fraction: float = Field(0.2, ge=0.0, lt=1.0)
    validation_fraction: float = Field(0.0, ge=0.0, lt=1.0, description=(
        "share of each client's train split held out as its validation split (val_acc), drawn with the "
        "partition seed"))

    @property
    def scheme_params(self) -> dict[str, Any]:
        return dict(self.model_extra or {})



class ModelConfig(Strict):
    name: str = "cnn"
    kwargs: dict[str, Any] = Field(default_factory=dict)
    candidates: list[str] = Field(default_factory=list, description=(
        "heterogeneous clients: each client's architecture is a seeded draw from these (pipelines/fedal/NOTES.md "
        "§4.1); the server model, if any, is `name`"))


class OptimizerConfig(Strict):
    name: Literal["sgd", "adam"] = "sgd"
    lr: float = Field(0.05, gt=0)
    momentum: float = Field(0.0, ge=0, lt=1)
    weight_decay: float = Field(0.0, ge=0)
    persistent: bool = Field(False, description="keep each client's optimiser state across rounds")


class LRDecayConfig(Strict):
    every: int | None = Field(None, ge=1, description="multiply the learning rate by `factor` every this many "
                                                       "rounds (pipelines/fedhkd/NOTES.md A6); null: constant")
    factor: float = Field(0.5, gt=0, le=1)


class TrainingConfig(Strict):
    rounds: int = Field(30, ge=1)
    local_epochs: int | None = Field(1, ge=1)
    local_steps: int | None = Field(None, ge=1, description="if set, overrides local_epochs")
    batch_size: int = Field(32, ge=1)
    drop_last: bool = False
    optimizer: OptimizerConfig = Field(default_factory=OptimizerConfig)
    lr_decay: LRDecayConfig = Field(default_factory=LRDecayConfig)
    grad_clip: float | None = Field(None, gt=0, description="clip each local step's gradient norm (FedHKD code: 1.1)")
    divergence_factor: float | None = Field(1000.0, gt=1, description=(
        "a client's mean loss above this multiple of the run's first step loss is divergence (the run fails); "
        "null: only NaN/inf losses and parameters"))
    on_divergence: Literal["stop", "train_on"] = Field("stop", exclude_if=lambda v: v == "stop", description=(
        "stop: a divergence ends the run (failure.json). train_on: the run records its first divergence and "
        "trains on to its last round, as a released code without a guard does (its NaN-then-chance curves in "
        "curves.csv and records.csv); it still ends as failed, never with metrics.json. Only with "
        "algorithm.mode: code where the method has modes (paper mode stops); left out of the resolved config "
        "at its default"))
    vectorize_clients: bool = Field(False, exclude_if=lambda v: not v, description=(
        "train a round's clients together, one vmapped forward/backward per step (bench/engine/vectorized.py): "
        "for methods defined by their local_loss (FedAvg, FedProx, Standalone); equal to the serial loop to "
        "float32 rounding, not bitwise; for GPUs"))

    @model_validator(mode="after")
    def _epochs_or_steps(self) -> TrainingConfig:
        if self.local_epochs is None and self.local_steps is None:
            raise ValueError("set training.local_epochs or training.local_steps")
        return self


class ParticipationConfig(Strict):
    fraction: float = Field(1.0, gt=0, le=1, description="share of clients sampled each round (seeded)")
    seed: int | None = Field(None, ge=0, exclude_if=lambda v: v is None, description=(
        "seed of the client schedule; null: the run seed. A number gives every run seed the same clients in each "
        "round (pipelines/dafkd/NOTES.md A26, the released DaFKD code's np.random.seed(round)); left out of the resolved "
        "config at its default, so the runs from before it keep their hash"))


class PublicConfig(Strict):
    """An unlabelled public set shared by all clients (FedMD, FedAL, FedDF's proxy set): ``size`` training
    images, labels discarded, drawn with the partition seed. ``unused``: from the images the partition leaves
    unused, so no client holds them (pipelines/fedhkd/NOTES.md §4 FedMD [R]; FedAL's CelebA, pipelines/fedal/NOTES.md A12);
    ``carve``: drawn first, the rest partitioned; ``overlap``: from the images the clients hold for training,
    which they keep (pipelines/fedal/NOTES.md A12 𝒫 ⊂ ∪𝒟_n; pipelines/dafkd/NOTES.md §2.3 FedDF's proxy set [I])."""

    size: int = Field(0, ge=0, description="0: no public data")
    source: Literal["unused", "carve", "overlap"] = "unused"


class EvaluationConfig(Strict):
    """When and what the runner evaluates: rounds ``every``, ``every·2``, … plus the last ``last`` rounds
    (the final round always); which models on which splits (the method may declare more)."""

    every: int = Field(1, ge=1, description="evaluate every k rounds")
    last: int = Field(5, ge=1, description="the last k rounds are always evaluated (the last-5 statistic needs "
                                           "5; tables of final values need 1)")
    global_model: bool = Field(True, description="the global model on the global test set (global_acc)")
    local_models: bool = Field(True, description="each client's model on its local test split (local_acc)")
    clients_on_global_test: bool = Field(False, description="each client's model on the global test set "
                                                            "(client_global_acc: FedAL, FedAKD)")
    batch_size: int = Field(1024, ge=1)
    accuracy: Literal["samples", "batches"] = Field("samples", exclude_if=lambda v: v == "samples", description=(
        "exact sample-level accuracy, or the mean of per-batch accuracies over seeded shuffled batches of "
        "training.batch_size, the last partial batch dropped on client splits when training.drop_last "
        "(FedHKD's released code, pipelines/fedhkd/NOTES.md §3.7); left out of the resolved config at its default, "
        "so the runs from before it keep their hash"))
    local_model: Literal["own", "global"] = Field("own", exclude_if=lambda v: v == "own", description=(
        "the model evaluated on each client's local test split (local_acc): its own, or the global model it "
        "receives (FedAKD's Acc_p of the FedAvg family, pipelines/fedakd/NOTES.md §0.11); left out of the resolved "
        "config at its default"))
    global_train_loss: bool = Field(False, exclude_if=lambda v: not v, description=(
        "record global_train_loss: the global model's cross-entropy on the union of the clients' train splits "
        "(pipelines/fedakd/NOTES.md §3.4, Fig. 3b); left out of the resolved config at its default"))


class AlgorithmConfig(BaseModel):
    """``name`` plus the algorithm's hyperparameters as flat keys (e.g. ``mu`` for fedprox)."""

    model_config = ConfigDict(extra="allow", frozen=True)
    name: str = "fedavg"

    @property
    def params(self) -> dict[str, Any]:
        return dict(self.model_extra or {})



class TrackingConfig(Strict):
    mlflow: bool = True
    experiment: str = "default"
    save_model: bool = Field(False, exclude_if=lambda v: not v, description=(
        "write the final global model's state dict to model.pt beside the run's records (for figures drawn "
        "from a trained model, pipelines/fedakd/NOTES.md §6.2 (Fig. 2), R13); left out of the resolved config at its default"))


class ExperimentConfig(Strict):
    name: str = Field("experiment", min_length=1, max_length=200, description=(
        "the run's name: a file name (the default run folder) and an MLflow run name"))
    seed: int = Field(0, ge=0)
    device: str = Field("cpu", description="cpu, cuda or cuda:N")
    threads: int = Field(1, ge=1, description="torch intra-op threads for this run")
    deterministic: bool = True
    dataset: DatasetConfig = Field(default_factory=DatasetConfig)
    partition: PartitionConfig = Field(default_factory=PartitionConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    algorithm: AlgorithmConfig = Field(default_factory=AlgorithmConfig)
    training: TrainingConfig = Field(default_factory=TrainingConfig)
    participation: ParticipationConfig = Field(default_factory=ParticipationConfig)
    public: PublicConfig = Field(default_factory=PublicConfig)
    evaluation: EvaluationConfig = Field(default_factory=EvaluationConfig)
    tracking: TrackingConfig = Field(default_factory=TrackingConfig)


    @field_validator("name")
    @classmethod
    def _plain_name(cls, name: str) -> str:
        if bad := [c for c in name if unicodedata.category(c).startswith("C") or c in "/\\"]:
            raise ValueError(f"{name!r} holds {ascii(bad[0])}; use letters, digits and punctuation other than / and \\")
        if name in (".", ".."):
            raise ValueError(f"{name!r} is not a name")
        return name

    @field_validator("device")
    @classmethod
    def _known_device(cls, device: str) -> str:
        if not re.fullmatch(r"cpu|cuda(:\d+)?", device):
            raise ValueError(f"must be cpu, cuda or cuda:N, got {device!r}")
        return device

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    @property
    def sha256(self) -> str:
        """Stable hash of the resolved config (canonical JSON)."""
        return sha256_bytes(canonical_json(self.to_dict()).encode())


def validate_params(model: type[BaseModel], values: dict[str, Any], section: str) -> dict[str, Any]:
    """Validate the flat parameters of ``section`` (``algorithm``, ``partition``) against the parameter
    model its method or scheme registers, defaults filled in; a :class:`BenchError` names each key."""
    try:
        refuse_bools_for_numbers(model, values)
        resolved = model.model_validate(values).model_dump(mode="json")
    except ValueError as exc:  # pydantic's ValidationError is one
        message = describe_validation(exc, f" (allowed: {', '.join(model.model_fields) or 'none'})", section) \
            if isinstance(exc, ValidationError) else f"{section}.{exc}"
        raise BenchError(f"invalid config: {message}") from None
    if problem := non_finite(resolved):
        raise BenchError(f"invalid config: {section}.{problem}")
    return resolved


def non_finite(tree: Any, key: str = "") -> str | None:
    """``<key>: ...`` naming the first NaN or infinite number in a nested dict or list; None if all are finite."""
    if isinstance(tree, float) and not math.isfinite(tree):
        return f"{key}: must be a finite number, got {tree}"
    items = tree.items() if isinstance(tree, dict) else enumerate(tree) if isinstance(tree, list) else ()
    for k, v in items:
        if problem := non_finite(v, f"{key}.{k}" if key else str(k)):
            return problem
    return None


def describe_validation(exc: ValidationError, unknown_hint: str = "", prefix: str = "") -> str:
    parts = []
    for err in exc.errors():
        key = ".".join(str(p) for p in ([prefix] if prefix else []) + list(err["loc"]))
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown key" + unknown_hint
        if err["type"] == "value_error" and ": " in msg and key:
            parts.append(f"{key}.{msg}")  # a nested parameter error already names its key
        else:
            parts.append(f"{key}: {msg}" if key else msg)
    return "; ".join(parts)


def apply_overrides(raw: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``key.path=value`` overrides (values parsed as YAML) to a raw config dict."""
    out = copy.deepcopy(raw)
    for item in overrides:
        if "=" not in item:
            raise BenchError(f"override {item!r} must look like key.path=value")
        key, value = item.split("=", 1)
        node = out
        *parents, leaf = key.strip().split(".")
        for part in parents:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise BenchError(f"override {key}: {part} is not a section")
            node = child
        try:
            node[leaf] = yaml.load(value, Loader=_UniqueKeyLoader)
        except yaml.YAMLError as exc:
            raise BenchError(f"override {item!r}: the value is not valid YAML ({yaml_problem(exc)})") from None
    return out



def yaml_problem(exc: yaml.YAMLError) -> str:
    """One line saying what is wrong in a YAML file and where."""
    mark = getattr(exc, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    return f"{getattr(exc, 'problem', None) or type(exc).__name__}{where}"


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader refusing a key given twice in one mapping (the plain loader keeps the last; a key
    that overrides one merged in with ``<<: *anchor`` is not a repeat)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *anchor`: its keys may be overridden
                continue
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, typing.Hashable) and key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"key {key!r} is given twice",
                                                        key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _UniqueKeyLoader.construct_mapping)


def read_yaml_mapping(path: str | Path, what: str = "config file") -> dict[str, Any]:
    """A YAML file holding a non-empty mapping, each key once; anything else is a one-line :class:`BenchError`."""
    path = Path(path)
    try:
        raw = yaml.load(path.read_text(), Loader=_UniqueKeyLoader)
    except FileNotFoundError:
        raise BenchError(f"{what} {path} not found") from None
    except IsADirectoryError:
        raise BenchError(f"{what} {path} is a directory; give the YAML file inside it") from None
    except UnicodeDecodeError:
        raise BenchError(f"{what} {path} is not a text file; give a YAML file") from None
    except yaml.YAMLError as exc:
        raise BenchError(f"{what} {path} is not valid YAML: {yaml_problem(exc)}") from None
    if raw is None:
        raise BenchError(f"{what} {path} is empty; write its sections (see examples/fedavg_digits.yaml)")
    if not isinstance(raw, dict):
        raise BenchError(f"{what} {path} must hold a mapping of sections, got {type(raw).__name__}")
    return raw
