"""Every method's communication, counted by hand: the bytes a round sends up (client → server) and down
(server → client), summed over the round's clients, as ``records.csv`` records them (``upload_bytes``,
``download_bytes``). The runner counts what the methods' message functions return (bench/engine/protocol.py);
these counts are written from what each method's paper sends: a model is its state dict (4 bytes a float, 8 an
integer buffer), logits on a public batch B·K floats, a sparse vector 8 bytes an entry (its position and its
value), class statistics d·K + K·K floats and K int64 counts ..."""
from __future__ import annotations

import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import examples.plugins.codistill  # noqa: F401  (registers "codistill")
from bench.algorithms import algorithm_names, get_algorithm
from bench.config import ExperimentConfig
from bench.runner.federation import RunResult, run_federation
from tests.conftest import small_config
from tests.test_dafkd import dafkd_config
from tests.scripts import load_script
from tests.test_fedal import fedal_config

ROOT = Path(__file__).resolve().parents[1]
if "fkd_label_smoothing" not in sys.modules:  # the example plug-in package, imported as its entry point would once
    load_script(ROOT / "examples" / "plugin_package" / "src" / "fkd_label_smoothing" / "__init__.py",  # installed
                "fkd_label_smoothing")  # registers "fedavg_ls"

N = 3  # clients of the digits federation
K = 10  # digit classes
TAU, B = 2, 16  # local steps and public batch of fedal_config
PUBLIC = 32  # FedMD's public set


def state_bytes(model: nn.Module | dict[str, torch.Tensor]) -> int:
    """A model as sent: every state-dict entry, 4 bytes a float32 and 8 an int64 (BatchNorm's counters)."""
    state = model.state_dict() if isinstance(model, nn.Module) else model
    return sum(v.numel() * (4 if v.is_floating_point() else 8) for v in state.values())


def parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def sparse(count: int, length: int) -> int:
    """A sparse vector of ``count`` of ``length`` entries: 8 bytes an entry; all of them: 4 bytes an entry."""
    return 4 * length if count >= length else 8 * max(count, 0)


@dataclass
class Run:
    """What a hand count needs of a finished run."""

    result: RunResult

    @property
    def model(self) -> nn.Module:
        return self.result.state.clients[0].model

    @property
    def S(self) -> int:  # noqa: N802 (the model's bytes, as the counts below write it)
        return state_bytes(self.model)

    @property
    def P(self) -> int:  # noqa: N802
        return parameters(self.model)

    def shares(self, round_index: int, metric: str = "reward_share") -> list[float]:
        return [v for r, m, c, v in self.result.records if r == round_index and m == metric]

    def sent(self) -> list[tuple[float, float]]:
        """(upload, download) bytes of each round."""
        rows = {(r, m): v for r, m, c, v in self.result.records if m in ("upload_bytes", "download_bytes")}
        return [(rows[t, "upload_bytes"], rows[t, "download_bytes"]) for t in range(1, self.result.config.training.rounds + 1)]


def digits(algorithm: dict[str, Any], **sections: Any) -> ExperimentConfig:
    """N digits clients, the CNN, 2 rounds of one local epoch; a public set and validation splits for the methods
    that need them."""
    return small_config(algorithm=algorithm, partition={"num_clients": N, "validation_fraction": 0.1},
                        public={"size": PUBLIC, "source": "overlap"}, training={"rounds": 2}, **sections)


def knowledge(model: nn.Module) -> int:
    """Class statistics: K mean features (d floats), K mean soft predictions (K floats), K int64 counts."""
    return K * model.feature_dim * 4 + K * K * 4 + K * 8


def every_round(up: Callable[[Run], float], down: Callable[[Run], float]) -> Callable[[Run, int], tuple[float, float]]:
    return lambda run, t: (up(run), down(run))


def averaging(extra_up: Callable[[Run], float] = lambda run: 0,
              extra_down: Callable[[Run, int], float] = lambda run, t: 0) -> Callable[[Run, int], tuple[float, float]]:
    """The FedAvg family: each client receives the model (and the method's payload) and sends it back."""
    return lambda run, t: (N * (run.S + extra_up(run)), N * (run.S + extra_down(run, t)))


def cffl_paper(run: Run, t: int) -> tuple[float, float]:
    """Up (θ_u = 1): the whole clipped update; down: the reward, ⌊q_k·P⌋ entries of the others' aggregate, sparse
    (with θ_u < 1 the aggregate has more zeros, which are not sent, than a reward has entries to leave out)."""
    return N * 4 * run.P, sum(sparse(int(run.P * q), run.P) for q in run.shares(t))


def cffl_code(run: Run, t: int) -> tuple[float, float]:
    """Down: the global model to start from, and the others' whole aggregate (P floats) as the reward."""
    return N * sparse(int(0.5 * run.P), run.P), N * (run.S + 4 * run.P)


def cgsv(keys: Callable[[nn.Module], int], start_global: bool) -> Callable[[Run, int], tuple[float, float]]:
    """Up: the whole update (D floats); down (``sparse: false``): all of u, the global model too in code. (A sparse
    reward of ⌊q_k·D⌋ entries leaves out u's zeros — dead units' weights — so its size depends on the data; the
    sparse vectors are counted in tests/test_fairness_baselines.py.)"""
    def count(run: Run, t: int) -> tuple[float, float]:
        d = keys(run.model)
        return N * 4 * d, N * 4 * d + (N * run.S if start_global else 0)
    return count


def fedave(keys: Callable[[nn.Module], int], start_global: bool,
           distribution: bool = False) -> Callable[[Run, int], tuple[float, float]]:
    """Up (``upload_fraction`` 1): the whole update and the trained model (scored by the server), and with the
    distribution term the start model and one float64 loss per batch of 64 of the client's train split; down:
    ⌊f_k·D⌋ entries of u, the global model in code."""
    def count(run: Run, t: int) -> tuple[float, float]:
        d = keys(run.model)
        rewards = sum(sparse(int(d * f), d) for f in run.shares(t))
        extra = sum(run.S + 8 * math.ceil(len(c.data.y) / 64) for c in run.result.state.clients) if distribution else 0
        return N * (4 * d + run.S) + extra, rewards + (N * run.S if start_global else 0)
    return count


def fedsac(run: Run, t: int) -> tuple[float, float]:
    """Round 1: each client's contribution c_k (one float64) and trained model up, its submodel to train and its
    submodel of the new global model down; round 2 (the first allocation of a 2-round run) adds each client's mask
    of F filters (a byte each) to both downloads."""
    filters = sum(m.out_channels for m in run.model.modules() if isinstance(m, nn.Conv2d))
    if t == 1:
        return N * (8 + run.S), 2 * N * run.S
    return N * run.S, 2 * N * (run.S + filters)


def everything(model: nn.Module) -> int:
    return sum(v.numel() for v in model.state_dict().values())


def lockstep(up: Callable[[Run], float], down: Callable[[Run], float],
             steps: int = TAU, clients: int = 4) -> Callable[[Run, int], tuple[float, float]]:
    """Per public iteration and client ``up`` and ``down`` bytes, ``steps`` iterations a round."""
    return lambda run, t: (steps * clients * up(run), steps * clients * down(run))


def groups(run: Run, t: int) -> tuple[float, float]:
    """FedDF: each client receives its architecture group's model and sends its trained model."""
    total = sum(state_bytes(c.model) for c in run.result.state.clients)
    return total, total


def dafkd(code: bool) -> Callable[[Run, int], tuple[float, float]]:
    """3 clients a round; down φ, h_c and θ^g (and the code's one head h_d); up φ, h_c, h_d^k and G_k."""
    def count(run: Run, t: int) -> tuple[float, float]:
        head = sum(state_bytes({k: v}) for k, v in run.model.state_dict().items() if k.startswith("discriminator."))
        generator = state_bytes(run.result.state.server.state.generator)
        return 3 * (run.S + generator), 3 * (run.S - head + generator + (head if code else 0))
    return count


def bn_clients(run: Run, t: int) -> tuple[float, float]:
    """DaFKD with ``student_bn_stats: clients``: besides its exchange, each of the 3 clients receives φ and h_c again
    and sends each BatchNorm layer's running mean and variance (float32) back."""
    up, down = dafkd(code=False)(run, t)
    head = sum(state_bytes({k: v}) for k, v in run.model.state_dict().items() if k.startswith("discriminator."))
    statistics = sum(4 * v.numel() for k, v in run.model.state_dict().items() if k.endswith(("_mean", "_var")))
    return up + 3 * statistics, down + 3 * (run.S - head)


CASES: dict[str, tuple[Callable[[], ExperimentConfig], Callable[[Run, int], tuple[float, float]]]] = {
    "fedavg": (lambda: digits({"name": "fedavg"}), averaging()),
    "fedprox": (lambda: digits({"name": "fedprox"}), averaging()),
    "fedavg_ls": (lambda: digits({"name": "fedavg_ls", "smoothing": 0.2}), averaging()),  # only the local loss differs
    "moon": (lambda: digits({"name": "moon"}), averaging()),
    "fedalign": (lambda: digits({"name": "fedalign"}), averaging()),
    "fedmpr": (lambda: digits({"name": "fedmpr"}), averaging()),
    "fedas": (lambda: digits({"name": "fedas"}), averaging()),  # the Fisher trace is a Python float: 0 bytes
    "feddc": (lambda: digits({"name": "feddc"}),  # θ + h_k and g_k's change up, g down: P floats each
              averaging(lambda run: 4 * run.P, lambda run, t: 4 * run.P)),
    "feddc-code": (lambda: digits({"name": "feddc", "mode": "code"}), averaging()),  # no correction
    "fedproto": (lambda: digits({"name": "fedproto"}),  # prototypes up; the global ones down from round 2
                 averaging(lambda run: knowledge(run.model), lambda run, t: knowledge(run.model) if t > 1 else 0)),
    "fedhkd": (lambda: digits({"name": "fedhkd"}),  # hyper-knowledge, as FedProto's prototypes
               averaging(lambda run: knowledge(run.model), lambda run, t: knowledge(run.model) if t > 1 else 0)),
    "fedmd": (lambda: digits({"name": "fedmd"}),  # soft predictions on the public set up, the consensus down
              averaging(lambda run: PUBLIC * K * 4, lambda run, t: PUBLIC * K * 4 if t > 1 else 0)),
    "fedgen": (lambda: digits({"name": "fedgen"}),  # label counts up (K floats), the generator down
               averaging(lambda run: K * 4, lambda run, t: state_bytes(run.result.state.server.state.generator))),
    "fedftg": (lambda: digits({"name": "fedftg", "iterations": 1, "student_steps": 1}),
               averaging(lambda run: K * 4)),  # the label histogram (K floats)
    "standalone": (lambda: digits({"name": "standalone"}), every_round(lambda run: 0, lambda run: 0)),
    "fedakd": (lambda: digits({"name": "fedakd"}), averaging()),  # w_g down, the distilled copy w_{g,k} up
    "fedakd-code": (lambda: digits({"name": "fedakd", "mode": "code"}),  # w_g before L→G and again for G→L
                    lambda run, t: (N * run.S, 2 * N * run.S)),
    "pfedck": (lambda: digits({"name": "pfedck"}), averaging()),  # the interactive model I_k, both ways
    "cffl": (lambda: digits({"name": "cffl", "upload_fraction": 1.0}), cffl_paper),
    "cffl-code": (lambda: digits({"name": "cffl", "mode": "code"}), cffl_code),
    "cgsv": (lambda: digits({"name": "cgsv", "sparse": False}), cgsv(parameters, start_global=False)),
    "cgsv-code": (lambda: digits({"name": "cgsv", "mode": "code", "sparse": False}), cgsv(everything, start_global=True)),
    "fedave": (lambda: digits({"name": "fedave", "upload_fraction": 1.0}),
               fedave(parameters, start_global=False, distribution=True)),
    "fedave-code": (lambda: digits({"name": "fedave", "mode": "code", "upload_fraction": 1.0}),
                    fedave(everything, start_global=True)),
    "fedsac": (lambda: digits({"name": "fedsac", "contribution_epochs": 1}), fedsac),
    "fedsac-code": (lambda: digits({"name": "fedsac", "mode": "code", "contribution_epochs": 1}), fedsac),
    "dafkd": (lambda: dafkd_config(rounds=2), dafkd(code=False)),
    "dafkd-code": (lambda: dafkd_config(rounds=2, mode="code"), dafkd(code=True)),
    "dafkd-bn_clients": (lambda: dafkd_config(rounds=2, student_bn_stats="clients"), bn_clients),
    "fd": (lambda: fedal_config(algorithm={"name": "fd"}, training={"rounds": 2}),  # K × K label means + K counts
           lambda run, t: (4 * (K * K + K) * 4, 4 * (K * K + K) * 4 if t > 1 else 0)),
    "feddf": (lambda: fedal_config(algorithm={"name": "feddf"}, training={"rounds": 2}), groups),
    "feddf_al": (lambda: fedal_config(algorithm={"name": "feddf_al"}, training={"rounds": 2}), groups),
    "fedal": (lambda: fedal_config(training={"rounds": 2}),  # logits up; their mean and ∂U_n/∂f_n down
              lockstep(lambda run: B * K * 4, lambda run: 2 * B * K * 4)),
    "fedmd_lf": (lambda: fedal_config(algorithm={"name": "fedmd_lf"}, training={"rounds": 2}),
                 lockstep(lambda run: B * K * 4, lambda run: B * K * 4)),
    "fedmd_fedal": (lambda: fedal_config(algorithm={"name": "fedmd_fedal"}, training={"rounds": 2}),
                    lockstep(lambda run: B * K * 4, lambda run: B * K * 4)),
    "cfd": (lambda: fedal_config(algorithm={"name": "cfd"}, training={"rounds": 2}),  # the server model's logits
            lockstep(lambda run: B * K * 4, lambda run: B * K * 4)),
    "cfd-4bit": (lambda: fedal_config(algorithm={"name": "cfd", "quantization_bits": 4}, training={"rounds": 2}),
                 lockstep(lambda run: math.ceil(B * K * 4 / 8), lambda run: math.ceil(B * K * 4 / 8))),
    "fccl": (lambda: fedal_config(algorithm={"name": "fccl", "pretrain_epochs": 1}, training={"rounds": 2}),
             lockstep(lambda run: B * K * 4, lambda run: B * K * 4)),
    "fcclplus": (lambda: fedal_config(algorithm={"name": "fcclplus"}, training={"rounds": 2}),  # + B × (B − 1)
                 lockstep(lambda run: (B * K + B * (B - 1)) * 4, lambda run: (B * K + B * (B - 1)) * 4)),
    "fedproto_fedal": (lambda: fedal_config(algorithm={"name": "fedproto_fedal"}, model={"candidates": []},
                                            training={"rounds": 2}),  # features (d = the CNN's) both ways
                       lockstep(lambda run: B * run.model.feature_dim * 4, lambda run: B * run.model.feature_dim * 4)),
    "codistill": (lambda: fedal_config(algorithm={"name": "codistill", "distill_steps": 3, "public_batch_size": B},
                                       training={"rounds": 2}),  # logits up, the consensus down
                  lockstep(lambda run: B * K * 4, lambda run: B * K * 4, steps=3)),
}


def shipped_methods() -> set[str]:
    """The package's methods and the repository's example plug-ins, the one-file one and the package's (not
    those other tests register): every method whose file is under bench/ or examples/."""
    def folder(name: str) -> str:
        source = Path(sys.modules[get_algorithm(name).__module__].__file__ or "").resolve()
        return source.relative_to(ROOT).parts[0] if source.is_relative_to(ROOT) else ""

    return {name for name in algorithm_names() if folder(name) in ("bench", "examples")}


def test_every_method_has_a_hand_count() -> None:
    shipped = shipped_methods()
    assert {name.split("-")[0] for name in CASES} == shipped and {"codistill", "fedavg_ls"} <= shipped


@pytest.mark.parametrize("name", sorted(CASES))
def test_bytes_each_round_are_the_hand_count(name: str, data_dir: Any) -> None:
    config, count = CASES[name]
    run = Run(run_federation(config(), data_dir))
    sent = run.sent()
    assert sent == [count(run, t) for t in range(1, len(sent) + 1)]
    assert any(up or down for up, down in sent) or name == "standalone"
