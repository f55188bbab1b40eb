"""A suite's saved partitions checked against what makes them, before audit, compare or versus trust them.

A setting's partition (``partitions/<suite>/<setting>/``) is a function of the prepared data, the
scheme, its parameters and the partition seed (:func:`bench.data.partition.partition_dataset`). So it
is made again from those and its sha256 (over the scheme, parameters, seed and every index array) compared
with the saved arrays'. Editing the index arrays and rewriting the sha256 that ``partition.json``
records does not pass. Where the prepared data is not at hand (``--data-dir``), the saved partition is
at least compared with the one the suite's runs recorded in their provenance, and the check says that
it was not made again.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from bench.data import load_dataset
from bench.data.partition import load_partition
from bench.data.prepared import PreparedDataset
from bench.data.registry import prepared_dir
from bench.errors import BenchError
from bench.runner.federation import partition_for
from bench.suites import Suite


@dataclass(frozen=True)
class PartitionCheck:
    """One setting's saved partition: its sha256 (None: absent or unreadable), the sha256 of the partition
    its data, scheme and seed make (None: the data is not at hand), and those its runs recorded."""

    setting: str
    folder: Path
    saved: str | None
    made: str | None
    trained: frozenset[str] = frozenset()
    why: str = ""  # why `saved` or `made` is None
    seed: int | None = None  # the run seed whose own partition this is (suite.partition_seed: run)

    @property
    def failed(self) -> bool:
        """The saved partition is unreadable, is not the one its data, scheme and seed make, or is not the
        one the runs trained on."""
        if self.saved is None:
            return bool(self.why) and "absent" not in self.why
        return (self.made is not None and self.saved != self.made) or bool(self.trained - {self.saved})

    @property
    def verified(self) -> bool:
        return self.saved is not None and self.saved == self.made and not self.trained - {self.saved}

    def line(self) -> str:
        name = f"partition {self.setting}{'' if self.seed is None else f' seed {self.seed}'} ({self.folder})"
        if self.saved is None:
            return f"{name}: {self.why}"
        if self.made is not None and self.saved != self.made:
            return (f"{name}: FORGED or stale: its arrays hash to {self.saved[:16]}, but its data, scheme and seed "
                    f"make {self.made[:16]}; restore it with `dvc checkout` or `bench suite partition`")
        if other := sorted(self.trained - {self.saved}):
            return (f"{name}: its arrays hash to {self.saved[:16]}, but the runs trained on {other[0][:16]}; restore "
                    "it with `dvc checkout` or `bench suite partition`")
        if self.made is None:
            return f"{name}: sha256 {self.saved[:16]}, as the runs recorded; not made again ({self.why})"
        return f"{name}: sha256 {self.saved[:16]}, verified: its data, scheme and seed make the same arrays"


def check_partition(suite: Suite, setting: str, data: PreparedDataset | None, trained: Iterable[str] = (),
                    why_no_data: str = "", seed: int | None = None) -> PartitionCheck:
    """The check of ``setting``'s saved partition (with ``partition_seed: run``, run seed ``seed``'s) against the
    one ``data`` (its prepared dataset; None: not at hand, ``why_no_data`` says why) makes; ``trained``: the
    partition sha256 its runs recorded."""
    folder = suite.partition_dir(setting, seed)
    recorded = frozenset(trained)
    if not (folder / "partition.json").exists():
        return PartitionCheck(setting, folder, None, None, recorded, "absent (fetch it with `dvc pull`)", seed)
    try:
        saved = load_partition(folder).sha256
    except BenchError as exc:
        return PartitionCheck(setting, folder, None, None, recorded, f"UNREADABLE: {exc}", seed)
    if data is None:
        return PartitionCheck(setting, folder, saved, None, recorded, why_no_data, seed)
    return PartitionCheck(setting, folder, saved,
                          partition_for(suite.partition_config(setting, seed), data, None).sha256, recorded, "", seed)


def check_partitions(suite: Suite, settings: Iterable[str], data_dir: Path | None,
                     trained: dict[tuple[str, int | None], set[str]] | None = None,
                     prepare: bool = False) -> list[PartitionCheck]:
    """:func:`check_partition` of each setting's partitions (one, or one per run seed), each dataset loaded once
    from ``data_dir``; ``trained`` by :meth:`Suite.partition_key`; ``prepare``: prepare an embedded dataset that
    is not yet (else a dataset not prepared there is not at hand)."""
    loaded: dict[str, PreparedDataset | None] = {}
    checks = []
    for setting in settings:
        name = suite.partition_config(setting).dataset.name
        folder = prepared_dir(name, data_dir)
        if name not in loaded:
            loaded[name] = load_dataset(name, data_dir) if prepare or (folder / "manifest.json").exists() else None
        for seed in suite.partition_seeds():
            checks.append(check_partition(suite, setting, loaded[name], (trained or {}).get((setting, seed), ()),
                                          f"{name} is not prepared in {folder.parent.parent}: give --data-dir", seed))
    return checks
