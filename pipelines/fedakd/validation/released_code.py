"""FedAKD ``mode: code`` beside the authors' released loop (Tianrun-Yu/FedAKD at 6bd41ca, ``METHOD/fedack.py``), on
the CPU.

    uv run python pipelines/fedakd/validation/released_code.py CHECKOUT [--seeds 0 1 2] [--rounds 10] [--out DIR] ...

CHECKOUT is a checkout of github.com/Tianrun-Yu/FedAKD at commit 6bd41ca16d9181938d998ce4d37ecaa8a63befdf
(pipelines/fedakd/NOTES.md, "M": the last commit with ``METHOD/``; ``git clone`` it and ``git checkout 6bd41ca``
outside this repository; it is only read, never copied here). ``METHOD/fedack.py`` is FedAKD. Its file runs
unmodified: it is imported as a module (its ``main()`` is not called) and its own ``fedack_training(base_dir, lr,
alpha, beta, device)`` runs the whole loop and returns the rounds × clients matrix of the global model's accuracy on
each client's local test split, from which ``main()`` takes each round's mean (Avg) and max (Max) over the clients.
What is set in the imported module before the call, and why:

- ``load_client_data_labels`` (its data loading: ``client_<k>/data.npy`` and ``labels.npy`` under hard-coded
  paths on the authors' machine) is replaced by :func:`released_loader`: client k's images as ``devide.py`` stores
  them (float32 pixel/255, N × 28 × 28) and int64 labels, taken from our partition and put in the order
  (:func:`code_order`) in which the code's own ``train_test_split(test_size=0.2, random_state=42, shuffle=True)``
  puts exactly our client's train split in its train part and our local test split in its test part;
- ``NUM_CLIENTS`` and ``NUM_GLOBAL_ROUNDS`` (module constants the loop reads) are the workload's;
- lr, α and β are the code's own ``learning_rates["FashionMNIST"]`` (``main()`` passes them the same way), the
  device is the CPU (``main()`` picks CUDA where there is one);
- the code seeds nothing; its weights and its loaders' shuffles draw from torch's global generator, which is seeded
  with the run seed before the call (and torch runs on one thread).

The two recording wrappers of :func:`record_first_round` (around ``local_to_global_distill`` and
``global_to_local_distill``) call the originals unchanged and only clone what they were given and return in round 1.

Ours: ``mode: code`` FedAKD with the ``fedakd`` row of the ``paper_code`` profile of pipelines/fedakd/params.yaml
(Adam at lr 1e-3 re-created per phase, batch 32, one epoch per phase, α = β = τ = 1, code-form ICS partition,
inputs pixel/255, ``local_model: global``), on the workload's dataset, clients and rounds; the script refuses to run
if those hyperparameters differ from the released module's. Both sides train on the same partition; the run seeds
drive initial weights and batch order on each side, not the same draws on both sides.

Output (``--out``): per seed and side the rounds × clients accuracy matrix (``runs.json``); per round each side's
Avg and Max, mean ± std over seeds, and Welch's t-test of the two sides; the code's final statistic (mean of the
last 3 rounds of Avg and of Max); and the **first-round checks on identical inputs** (``report.md``): given the
code's own round-1 uploads w_{g,k} and its |D_k|, our aggregation (``weighted_average``) against the w_g the code
broadcast next (float parameters and BatchNorm statistics; ``num_batches_tracked`` the code averages as floats and
truncates, ours copies); our ``correctly_predicted`` on the code's updated local models against the code's
selected set I_k (exact); our aggregation weights against the code's. The distillation steps themselves are not
compared on identical inputs: their batches come from the code's ``DataLoader(shuffle=True)`` on torch's global
generator and ours from our own streams, and making them equal would mean replacing the code's training loops.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import statistics
import sys
import tempfile
import time
import types
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bench.algorithms.fedakd import FedAKD, correctly_predicted
from bench.config import ExperimentConfig
from bench.data import load_dataset, prepare_dataset
from bench.data.covariate_shift import CODE_SPLIT_STATE
from bench.data.domaindigits import register_domain_digits
from bench.data.partition import Partition
from bench.data.prepared import PreparedDataset
from bench.data.registry import get_dataset_spec
from bench.engine.aggregate import weighted_average
from bench.errors import BenchError
from bench.report.released import p_text, repeat_command, require_checkout, welch_p
from bench.experiment import build_config
from bench.fileio import write_json, write_text
from bench.models.registry import build_model
from bench.runner.federation import partition_for, run_federation, to_tensor
from bench.suites import load_suite

COMMIT = "6bd41ca16d9181938d998ce4d37ecaa8a63befdf"
RELEASED_FILE = Path("METHOD") / "fedack.py"
PARAMS = Path(__file__).resolve().parents[1] / "params.yaml"
PROFILE, ROW, SETTING = "paper_code", "fedakd", "fmnist-ics5"  # the code-mode row whose hyperparameters ours takes
DATASET = "fedakd-released-domaindigits28"
TEST_RATIO = 0.2  # create_data_loaders_ack's default test_ratio
TEST_IMAGES = 100  # the global test split (the code scores local test splits only; ours logs global_acc besides)

ClientArrays = tuple[np.ndarray, np.ndarray]


# -- the shared workload ------------------------------------------------------------------------------------


def register_workload(train_images: int) -> None:
    """The first ``train_images`` images of domaindigits28 (and 100 test images) as the workload's dataset, once per
    process (docs/datasets.md: a smaller variant's splits are prefixes of the full one's)."""
    try:
        get_dataset_spec(DATASET)
    except BenchError:
        register_domain_digits(DATASET, (1, 28, 28), train_images, TEST_IMAGES)


def ours_config(args: argparse.Namespace, seed: int) -> ExperimentConfig:
    """The ``paper_code`` profile's ``fedakd`` row on the workload: its dataset (inputs pixel/255), clients, rounds
    and seed on the CPU; its partition (code-form ICS), model, method and optimiser unchanged."""
    raw = load_suite(PARAMS, overrides=[f"profile={PROFILE}"]).config(ROW, SETTING, seed, timed=False).model_dump()
    raw["dataset"]["name"] = DATASET
    raw["partition"]["num_clients"] = args.clients
    raw["training"]["rounds"] = args.rounds
    raw.update(name=f"fedakd-released-ours-seed{seed}", device="cpu")
    raw["evaluation"].update(every=1, global_train_loss=False)
    raw["tracking"]["mlflow"] = False
    return build_config(raw)


def unit_images(data: PreparedDataset) -> np.ndarray:
    """The train split as ours feeds it in code mode (``dataset.normalize: unit``): float32 pixel/255, N × 1 × H × W."""
    return to_tensor(data.train_x, data, torch.device("cpu"), "unit").numpy()


def code_order(train: np.ndarray, test: np.ndarray) -> np.ndarray:
    """A client's indices (train split and local test split) in the order whose ``train_test_split(test_size=0.2,
    random_state=42, shuffle=True)`` — the code's per-client split — returns ``train`` as its train part and ``test``
    as its test part, each in the given order. The split's positions depend only on the count and the seed."""
    from sklearn.model_selection import train_test_split

    count = len(train) + len(test)
    at_train, at_test = train_test_split(np.arange(count), test_size=TEST_RATIO, random_state=CODE_SPLIT_STATE,
                                         shuffle=True)
    if len(at_test) != len(test):
        raise BenchError(f"the released code holds out {len(at_test)} of a client's {count} images for its local test "
                         f"split, our partition {len(test)}; partition with test_fraction {TEST_RATIO}")
    order = np.empty(count, dtype=np.int64)
    order[at_train], order[at_test] = train, test
    return order


def client_arrays(data: PreparedDataset, part: Partition) -> list[ClientArrays]:
    """Each client's ``(data.npy, labels.npy)`` as ``devide.py`` stores them — float32 pixel/255 images N × H × W
    (grey: no channel axis) and int64 labels — holding our partition's train and local test images in
    :func:`code_order`."""
    if part.local_test_source != "train":
        raise BenchError("the released code splits each client's own data; the partition must hold local test "
                         "splits drawn from the train split")
    images = unit_images(data)[:, 0]
    orders = [code_order(np.asarray(tr), np.asarray(te)) for tr, te in zip(part.train, part.local_test)]
    return [(images[o], data.train_y[o].astype(np.int64)) for o in orders]


def released_loader(clients: list[ClientArrays]) -> Callable[[str, int], tuple[np.ndarray | None, np.ndarray | None]]:
    """The replacement of the code's ``load_client_data_labels(base_dir, cid)``: client ``cid``'s arrays, or
    ``(None, None)`` (the code's answer for a missing folder) past the last client."""
    def load(base_dir: str, cid: int) -> tuple[np.ndarray | None, np.ndarray | None]:
        return clients[cid] if 0 <= cid < len(clients) else (None, None)
    return load


# -- the released loop --------------------------------------------------------------------------------------


def load_released(checkout: Path) -> types.ModuleType:
    """``METHOD/fedack.py`` imported afresh as a module (its ``main()`` is guarded by ``__name__``)."""
    spec = importlib.util.spec_from_file_location("fedack_released", checkout / RELEASED_FILE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def released_hyperparameters(module: Any) -> dict[str, float]:
    """What the code runs FashionMNIST with: ``learning_rates["FashionMNIST"]`` (lr, α, β), ``BATCH_SIZE``,
    ``LOCAL_EPOCHS`` and ``kd_loss``'s default T = 1 (the two distillations call it with ``T=1.0``)."""
    lr, alpha, beta = module.learning_rates["FashionMNIST"]
    return {"lr": lr, "alpha": alpha, "beta": beta, "batch_size": module.BATCH_SIZE,
            "local_epochs": module.LOCAL_EPOCHS, "temperature": 1.0}


def our_hyperparameters(cfg: ExperimentConfig) -> dict[str, float]:
    params = cfg.algorithm.params
    return {"lr": cfg.training.optimizer.lr, "alpha": params["alpha"], "beta": params["beta"],
            "batch_size": cfg.training.batch_size, "local_epochs": cfg.training.local_epochs,
            "temperature": params["temperature"]}


def check_hyperparameters(module: Any, cfg: ExperimentConfig) -> None:
    """Refuse to compare unless ours runs the code's hyperparameters, Adam and its order and data readings."""
    theirs, ours = released_hyperparameters(module), our_hyperparameters(cfg)
    differ = {k: (theirs[k], ours[k]) for k in theirs if theirs[k] != ours[k]}
    if differ:
        raise BenchError(f"ours ({PROFILE} {ROW}) and the released code differ in {differ} (released, ours); "
                         f"align {PARAMS.name} with METHOD/fedack.py")
    p = cfg.algorithm.params
    if (cfg.training.optimizer.name, p["order"], p["data"], cfg.evaluation.local_model) != (
            "adam", "code", "train_and_test", "global"):
        raise BenchError(f"ours must run mode: code (Adam, order code, data train_and_test, local_model global); "
                         f"check the {ROW} row of the {PROFILE} profile")


@dataclass
class FirstRound:
    """What the code did in round 1, recorded: each client's upload w_{g,k} after local → global distillation, the
    w_g the first global → local distillation received (the aggregate), each client's local model after global →
    local distillation and the images of the selected set I_k the code returned for it."""

    uploads: list[dict[str, torch.Tensor]] = field(default_factory=list)
    aggregate: dict[str, torch.Tensor] | None = None
    local_models: list[dict[str, torch.Tensor]] = field(default_factory=list)
    selected: list[np.ndarray] = field(default_factory=list)


def cloned(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


@contextlib.contextmanager
def record_first_round(module: Any, clients: int, record: FirstRound) -> Iterator[None]:
    """Wrap the code's two distillation functions for the first ``clients`` calls of each: the originals run with the
    same arguments; their models' states and the returned selection are cloned into ``record``."""
    l2g, g2l = module.local_to_global_distill, module.global_to_local_distill

    def local_to_global(global_model: torch.nn.Module, *rest: Any, **kw: Any) -> None:
        l2g(global_model, *rest, **kw)
        if len(record.uploads) < clients:
            record.uploads.append(cloned(global_model))

    def global_to_local(local_model: torch.nn.Module, global_model: torch.nn.Module, *rest: Any,
                        **kw: Any) -> tuple[np.ndarray, np.ndarray]:
        if record.aggregate is None:
            record.aggregate = cloned(global_model)
        selected: tuple[np.ndarray, np.ndarray] = g2l(local_model, global_model, *rest, **kw)
        if len(record.local_models) < clients:
            record.local_models.append(cloned(local_model))
            record.selected.append(selected[0].copy())
        return selected

    module.local_to_global_distill, module.global_to_local_distill = local_to_global, global_to_local
    try:
        yield
    finally:
        module.local_to_global_distill, module.global_to_local_distill = l2g, g2l


def run_released_loop(module: Any, clients: list[ClientArrays], rounds: int, seed: int,
                      record: FirstRound | None = None) -> np.ndarray:
    """The code's ``fedack_training`` on the clients' arrays for ``rounds`` rounds, torch seeded with ``seed``: the
    rounds × clients accuracy matrix (module docstring for what is set)."""
    module.load_client_data_labels = released_loader(clients)
    module.NUM_CLIENTS, module.NUM_GLOBAL_ROUNDS = len(clients), rounds
    theirs = released_hyperparameters(module)
    torch.manual_seed(seed)
    with record_first_round(module, len(clients), record) if record is not None else contextlib.nullcontext():
        acc = module.fedack_training("unused: load_client_data_labels is replaced", theirs["lr"], theirs["alpha"],
                                     theirs["beta"], torch.device("cpu"))
    return np.asarray(acc, dtype=float)


# -- ours ---------------------------------------------------------------------------------------------------


def client_accuracy(records: list[tuple[int, str, int | None, float]], clients: int, rounds: int) -> np.ndarray:
    """Ours' rounds × clients ``local_acc`` (the global model on each client's local test split, as the code scores)."""
    acc = np.full((rounds, clients), np.nan)
    for t, metric, cid, value in records:
        if metric == "local_acc" and cid is not None and 1 <= t <= rounds:
            acc[t - 1, cid] = value
    if np.isnan(acc).any():
        raise BenchError("ours did not record local_acc for every client in every round")
    return acc


def run_ours(cfg: ExperimentConfig, data_dir: Path, partition: Partition) -> tuple[np.ndarray, list[float]]:
    """Ours' rounds × clients accuracy matrix and its first-round aggregation weights (recorded, not changed); refused
    unless ours trained on ``partition``, the one the released loop was given."""
    weights: list[float] = []
    aggregate = FedAKD.aggregate

    def recording(self: FedAKD, round_index: int, server: Any, updates: list[Any]) -> Any:
        if not weights:
            weights.extend(u.weight for u in updates)
        return aggregate(self, round_index, server, updates)

    FedAKD.aggregate = recording  # type: ignore[method-assign]
    try:
        result = run_federation(cfg, data_dir)
    finally:
        FedAKD.aggregate = aggregate  # type: ignore[method-assign]
    if result.partition_sha256 != partition.sha256:
        raise BenchError(f"ours (seed {cfg.seed}) ran on another partition than the released code's "
                         f"({result.partition_sha256[:12]}, not {partition.sha256[:12]})")
    return client_accuracy(result.records, cfg.partition.num_clients, cfg.training.rounds), weights


# -- first round on identical inputs -------------------------------------------------------------------------


def renamed(code_state: dict[str, torch.Tensor], our_keys: list[str]) -> dict[str, torch.Tensor]:
    """The code's SimpleCNN state under our ``fedakd_simplecnn`` names: both list the same tensors in the same
    order (conv, BN, conv, BN, linear), so position gives the name; refused unless every shape and leaf name match."""
    if len(code_state) != len(our_keys):
        raise BenchError(f"the released SimpleCNN has {len(code_state)} tensors, ours {len(our_keys)}")
    out = {}
    for (theirs, value), ours in zip(code_state.items(), our_keys):
        if theirs.rsplit(".", 1)[1] != ours.rsplit(".", 1)[1]:
            raise BenchError(f"released {theirs} does not match our {ours}")
        out[ours] = value
    return out


def first_round_checks(record: FirstRound, clients: list[ClientArrays], our_weights: list[float],
                       eval_batch: int) -> dict[str, float]:
    """Ours on the code's round-1 inputs: the aggregate of its uploads at its weights |D_k| against the w_g it
    broadcast (largest absolute difference of the float entries; of ``num_batches_tracked``), our selection on its
    updated local models against its I_k (images in either set and not the other, summed over clients), and our
    aggregation weights against its |D_k| (largest absolute difference)."""
    assert record.aggregate is not None
    model = build_model("fedakd_simplecnn", (1, *clients[0][0].shape[1:]), 10)
    keys = list(model.state_dict())
    sizes = [float(len(x)) for x, _ in clients]
    ours = weighted_average([renamed(u, keys) for u in record.uploads], sizes)
    theirs = renamed(record.aggregate, keys)
    floats = [k for k in keys if theirs[k].is_floating_point()]
    counts = [k for k in keys if not theirs[k].is_floating_point()]
    mismatched = 0
    for (x, y), local, chosen in zip(clients, record.local_models, record.selected):
        model.load_state_dict(renamed(local, keys))
        ours_idx = correctly_predicted(model, torch.from_numpy(x[:, None]), torch.from_numpy(y), eval_batch).numpy()
        in_ours = {row.tobytes() for row in x[ours_idx]}
        in_theirs = {row.tobytes() for row in chosen}
        mismatched += len(in_ours ^ in_theirs) + abs(len(ours_idx) - len(chosen))
    return {"aggregate": max(float((ours[k] - theirs[k]).abs().max()) for k in floats),
            "batch_count": max((float((ours[k] - theirs[k]).abs().max()) for k in counts), default=0.0),
            "selection_mismatch": float(mismatched),
            "selected_share": sum(len(c) for c in record.selected) / sum(sizes),
            "weights": max(abs(a - b) for a, b in zip(our_weights, sizes)) if len(our_weights) == len(sizes)
            else float("inf")}


FIRST_ROUND_TOLERANCE = {"aggregate": 1e-6, "selection_mismatch": 0.0, "weights": 0.0}


def first_round_holds(checks: dict[str, float]) -> dict[str, bool]:
    """Each first-round check against its tolerance: the aggregate to float32 rounding (1e-6 absolute), the selection
    and the weights exactly."""
    return {k: checks[k] <= tolerance for k, tolerance in FIRST_ROUND_TOLERANCE.items()}


# -- statistics and report ----------------------------------------------------------------------------------


@dataclass
class Run:
    """One run's rounds × clients accuracy of the global model on the clients' local test splits."""

    side: str
    seed: int
    accuracy: list[list[float]] = field(default_factory=list)
    first_round: dict[str, float] = field(default_factory=dict)
    wall_s: float = 0.0

    def avg(self) -> list[float]:
        """The code's ``mean_each_round``: per round the mean over clients."""
        return [float(np.mean(row)) for row in self.accuracy]

    def max(self) -> list[float]:
        """The code's ``max_each_round``: per round the max over clients."""
        return [float(np.max(row)) for row in self.accuracy]


def last3(values: list[float]) -> float:
    """The code's final statistic: the mean of the last three rounds (``avg3_mean``, ``avg3_max``)."""
    return float(np.mean(values[-3:]))


def mean_std(values: list[float]) -> str:
    if not values:
        return "—"
    return f"{statistics.mean(values):.4f} ± {statistics.stdev(values) if len(values) > 1 else 0.0:.4f}"


def comparison(runs: list[Run], rounds: int) -> dict[str, Any]:
    """Per round and statistic (Avg, Max) each side's values over seeds and Welch's p; the same for the last-3 means."""
    sides = {s: sorted((r for r in runs if r.side == s), key=lambda r: r.seed) for s in ("released", "ours")}
    rows = []
    for t in range(rounds):
        row: dict[str, Any] = {"round": t + 1}
        for stat in ("avg", "max"):
            values = {s: [getattr(r, stat)()[t] for r in group] for s, group in sides.items()}
            row[stat] = {**values, "p": welch_p(values["released"], values["ours"])}
        rows.append(row)
    final = {}
    for stat in ("avg", "max"):
        values = {s: [last3(getattr(r, stat)()) for r in group] for s, group in sides.items()}
        final[stat] = {**values, "p": welch_p(values["released"], values["ours"])}
    return {"rounds": rows, "last3": final}


def report(runs: list[Run], args: argparse.Namespace, sizes: list[int], command: str) -> str:
    table = comparison(runs, args.rounds)
    lines = [f"# FedAKD: the released loop ({COMMIT[:7]}, METHOD/fedack.py) and ours (mode: code), per round", "",
             f"`{command}`", "",
             f"{args.clients} clients (code-form ICS of the first {args.train_images} domaindigits28 images: the lowest "
             f"half along PC1 in power-law chunks; each client's data {sizes}, 80/20 local split as sklearn's "
             f"random_state 42), {args.rounds} rounds, inputs pixel/255; lr, α, β, batch and epochs the code's "
             f"FashionMNIST values; seeds {' '.join(map(str, args.seeds))}; CPU. The global model's accuracy on each "
             "client's local test split; Avg and Max over the clients per round (the code's `mean_each_round`, "
             "`max_each_round`), mean ± std over seeds; Welch's t-test of the two sides' means.", "",
             "| round | Avg released | Avg ours | p | Max released | Max ours | p |", "|---|---|---|---|---|---|---|"]
    for row in table["rounds"]:
        a, m = row["avg"], row["max"]
        lines.append(f"| {row['round']} | {mean_std(a['released'])} | {mean_std(a['ours'])} | {p_text(a['p'])} | "
                     f"{mean_std(m['released'])} | {mean_std(m['ours'])} | {p_text(m['p'])} |")
    a, m = table["last3"]["avg"], table["last3"]["max"]
    lines.append(f"| last 3 (the code's statistic) | {mean_std(a['released'])} | {mean_std(a['ours'])} | "
                 f"{p_text(a['p'])} | {mean_std(m['released'])} | {mean_std(m['ours'])} | {p_text(m['p'])} |")
    checks = [r for r in runs if r.side == "released" and r.first_round]
    if checks:
        lines += ["", "First round on identical inputs (ours on the code's uploads, local models and |D_k|; "
                      f"tolerances {FIRST_ROUND_TOLERANCE}):", "",
                  "| seed | aggregate, max abs diff | num_batches_tracked, max abs diff | selected images differing | "
                  "share selected | weights, max abs diff | holds |", "|---|---|---|---|---|---|---|"]
        for r in checks:
            c = r.first_round
            lines.append(f"| {r.seed} | {c['aggregate']:.1e} | {c['batch_count']:.0f} | {c['selection_mismatch']:.0f} | "
                         f"{c['selected_share']:.3f} | {c['weights']:g} | "
                         f"{'yes' if all(first_round_holds(c).values()) else '**no**'} |")
        lines += ["", "`num_batches_tracked` is not held to a tolerance: the code averages the clients' counters as floats "
                      "and truncates them on loading, ours keeps the first client's; no forward pass reads it (BatchNorm "
                      "momentum 0.1)."]
    lines += ["", "Wall time per run: " + "; ".join(f"{r.side} seed {r.seed} {r.wall_s:.0f} s" for r in runs)]
    return "\n".join(lines)


# -- command line -------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("checkout", type=Path, help=f"checkout of Tianrun-Yu/FedAKD at commit {COMMIT[:7]}")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="run seeds")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--clients", type=int, default=5)
    parser.add_argument("--train-images", type=int, default=4000,
                        help="the first N domaindigits28 images; half of them (the lowest PC1) are the clients'")
    parser.add_argument("--work", type=Path, help="folder for the workload's dataset (default: temp)")
    parser.add_argument("--out", type=Path, help="folder for runs.json and report.md (default: the work folder)")
    args = parser.parse_args(argv)
    for name in ("rounds", "clients"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1, got {getattr(args, name)}")
    if args.train_images % 100 or not 100 * args.clients <= args.train_images <= 12000:
        parser.error(f"--train-images must be a multiple of 100 from {100 * args.clients} (100 per client) to 12000, "
                     f"got {args.train_images}")
    return args


def main(argv: list[str] | None = None) -> int:
    given = sys.argv[1:] if argv is None else argv
    args = parse_args(given)
    command = repeat_command("pipelines/fedakd/validation/released_code.py", given, args.checkout)
    try:
        require_checkout(args.checkout, [str(RELEASED_FILE)], "FedAKD", "Tianrun-Yu/FedAKD", COMMIT)
        work = (args.work or Path(tempfile.mkdtemp(prefix="fedakd-released-"))).resolve()
        out_dir = (args.out or work).resolve()
        data_dir = work / "bench-data"
        register_workload(args.train_images)
        prepare_dataset(DATASET, data_dir)
        data = load_dataset(DATASET, data_dir)
        cfg = ours_config(args, args.seeds[0])
        part = partition_for(cfg, data, None)
        clients = client_arrays(data, part)
        check_hyperparameters(load_released(args.checkout), cfg)
    except BenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    runs: list[Run] = []
    for seed in args.seeds:
        started = time.perf_counter()
        record = FirstRound()
        released = run_released_loop(load_released(args.checkout), clients, args.rounds, seed, record)
        runs.append(Run("released", seed, released.tolist(), wall_s=time.perf_counter() - started))
        started = time.perf_counter()
        try:
            ours, weights = run_ours(ours_config(args, seed), data_dir, part)
        except BenchError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        runs.append(Run("ours", seed, ours.tolist(), wall_s=time.perf_counter() - started))
        runs[-2].first_round = first_round_checks(record, clients, weights, cfg.evaluation.batch_size)
        for r in runs[-2:]:
            print(f"{r.side} seed {r.seed}: Avg {np.round(r.avg(), 4).tolist()} Max {np.round(r.max(), 4).tolist()} "
                  f"{r.wall_s:.0f} s", flush=True)
        sizes = [len(y) for _, y in clients]
        write_json(out_dir / "runs.json", {"settings": {k: str(v) if isinstance(v, Path) else v
                                                        for k, v in vars(args).items()},
                                           "client_sizes": sizes, "runs": [asdict(r) for r in runs],
                                           "comparison": comparison(runs, args.rounds)})
        write_text(out_dir / "report.md", report(runs, args, sizes, command) + "\n")
    text = report(runs, args, [len(y) for _, y in clients], command)
    print(text)
    return 0 if all(all(first_round_holds(r.first_round).values()) for r in runs if r.side == "released") else 1


if __name__ == "__main__":
    sys.exit(main())
