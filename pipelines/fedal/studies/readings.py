"""FedAL's two readings on the proxy: the discriminator's optimiser (A8: ``sgd``, the paper's, or ``adam``) and
the less-forgetting snapshots' BatchNorm mode (A5: ``train``, the paper's θ^{t,0} and θ^{t+½,0}, or ``eval``),
each both ways, on one setting of ``pipelines/fedal/params.yaml``'s proxy profile (its FedAL run, only those two
options replaced; pipelines/fedal/README.md quotes the table).

Per run it measures:

* ``acc``: the final accuracy (``final_client_global_acc``: every client on the test split, their mean);
* ``disc_acc``: the discriminator's final accuracy at naming a client from ψ(f_n(x), E_adv) on the whole public
  set (every client's train-mode forward in batches of the run's size, as in training; chance is 1/N), and
  ``disc_acc_init``, the same with its initial weights (stream ``("init", "discriminator")``) at the same
  final client outputs: how far training moved it; ``disc_move``: ‖w_T − w_0‖ / ‖w_0‖;
* ``r_loc0``, ``r_glo0``: the less-forgetting terms at a stage's first step, the mean over rounds and the clients
  whose model has BatchNorm (the proxy's CNN; r_loc from round 2: in round 1 its snapshot is the same random
  initialisation either way); ``r_glo0_no_batchnorm``: the same over the others (the MLP: 0 in both modes);
* ``offline``: whether the step count or the optimiser keeps the discriminator at chance. A discriminator
  from the same initialisation trained by each optimiser at η_d on the run's **final** client outputs held
  fixed (every public batch's N × B rows in turn), its accuracy (as ``disc_acc``) after
  the proxy's step count and after the paper's (``--paper-steps``: 7,000, SVHN α = 1's budget read as one
  global step per iteration, A11).

And once, ``control``: the same offline training on client outputs that are easy to tell apart (client n's
logits 4·e_{n mod K} plus N(0, 0.5²) noise, 8 clients, batches of 32), so that what the optimiser can do at η_d in
the paper's step count does not depend on the proxy's clients (``--control`` runs only this).

Run (one JSON line per run, then a mean per reading over seeds)::

    uv run python pipelines/fedal/studies/readings.py --setting het-a5 --seeds 0 1 2
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import itertools
import json
import statistics
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]  # the repository: pipelines/<paper>/studies/<script>.py
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import bench.algorithms.fedal as fedal  # noqa: E402
from bench.experiment import build_config  # noqa: E402
from bench.runner.federation import run_federation  # noqa: E402
from bench.suites import load_suite  # noqa: E402

PARAMS = ROOT / "pipelines" / "fedal" / "params.yaml"
READINGS = {"disc_optimizer": ("sgd", "adam"), "snapshot_mode": ("train", "eval")}


@contextlib.contextmanager
def first_step_regularisers(found: list[tuple[str, int, float]]) -> Iterator[None]:
    """Record (term, client, value) of r_loc and r_glo at each client's first step of each stage: the ``lf_loss``
    its first local (or global) loss computes, no extra forward pass."""
    original_loss = fedal.lf_loss
    original = {name: getattr(fedal.FedAL, name) for name in ("before_local", "start_public", "local_loss",
                                                               "transfer_loss")}
    pending: set[tuple[str, int]] = set()
    current: list[tuple[str, int]] = []

    def lf_loss(logits: torch.Tensor, snapshot: torch.Tensor, temperature: float) -> torch.Tensor:
        value = original_loss(logits, snapshot, temperature)
        if current:
            term, cid = current.pop()
            found.append((term, cid, float(value.detach())))
        return value

    def before_local(self: fedal.FedAL, round_index: int, client: Any) -> None:
        if round_index > 1:
            pending.add(("r_loc0", client.cid))
        original["before_local"](self, round_index, client)

    def start_public(self: fedal.FedAL, round_index: int, client: Any) -> Any:
        pending.add(("r_glo0", client.cid))
        return original["start_public"](self, round_index, client)

    def first(term: str, method: str) -> Any:
        def wrapped(self: fedal.FedAL, step: Any, client: Any, *args: Any) -> torch.Tensor:
            if (term, client.cid) in pending:
                pending.discard((term, client.cid))
                current[:] = [(term, client.cid)]
            try:
                return original[method](self, step, client, *args)
            finally:
                current.clear()
        return wrapped

    patches = {"before_local": before_local, "start_public": start_public,
               "local_loss": first("r_loc0", "local_loss"), "transfer_loss": first("r_glo0", "transfer_loss")}
    fedal.lf_loss = lf_loss
    for name, function in patches.items():
        setattr(fedal.FedAL, name, function)
    try:
        yield
    finally:
        fedal.lf_loss = original_loss
        for name, function in original.items():
            setattr(fedal.FedAL, name, function)


def discriminator_accuracy(discriminator: torch.nn.Module, inputs: list[torch.Tensor]) -> float:
    """The share of (client, public image) rows of ``inputs`` (each N × B × K) whose client it names."""
    n, b, k = inputs[0].shape
    with torch.no_grad():
        hits = sum(int((discriminator(z.reshape(n * b, k))[1].argmax(1) == torch.arange(n).repeat_interleave(b)).sum())
                   for z in inputs)
    return hits / (n * b * len(inputs))


def public_outputs(clients: list[Any], public: torch.Tensor, batch: int, temperature: float) -> list[torch.Tensor]:
    """Every public batch's N × B discriminator inputs ψ(f_n(x), E), the clients' train-mode forwards."""
    out = []
    with torch.no_grad():
        for start in range(0, len(public) - batch + 1, batch):
            x = public[start:start + batch]
            out.append(torch.stack([F.softmax(c.model.train()(x)[1] / temperature, dim=1) for c in clients]))
    return out


def offline_accuracy(initial: torch.nn.Module, inputs: list[torch.Tensor], optimizer: str, lr: float,
                     checkpoints: tuple[int, ...]) -> dict[int, float]:
    """A copy of ``initial`` trained on the fixed ``inputs`` (cycled, one batch a step) by ``optimizer`` at ``lr``
    on the clients' cross-entropy; its accuracy on all of them after each of ``checkpoints`` steps."""
    model = copy.deepcopy(initial).train()
    make = torch.optim.SGD if optimizer == "sgd" else torch.optim.Adam
    opt = make(model.parameters(), lr=lr)
    n, b, k = inputs[0].shape
    targets = torch.arange(n).repeat_interleave(b)
    found = {}
    for step in range(1, max(checkpoints) + 1):
        z = inputs[(step - 1) % len(inputs)].reshape(n * b, k)
        opt.zero_grad()
        F.cross_entropy(model(z)[1], targets).backward()
        opt.step()
        if step in checkpoints:
            found[step] = discriminator_accuracy(model, inputs)
    return found


def measure(setting: str, seed: int, readings: dict[str, str], data_dir: Path, paper_steps: int) -> dict[str, Any]:
    suite = load_suite(PARAMS, overrides=["profile=proxy"])
    raw = suite.config("fedal", setting, seed).to_dict()
    raw["algorithm"] = {**raw["algorithm"], **readings}
    raw["tracking"] = {**raw.get("tracking", {}), "mlflow": False}
    config = build_config(raw)
    found: list[tuple[str, int, float]] = []
    with first_step_regularisers(found):
        result = run_federation(config, data_dir)
    batchnorm = {cid for cid, arch in enumerate(result.architectures)
                 if any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in result.state.clients[cid].model.modules())}

    def first_step(term: str) -> float | None:
        values = [v for t, cid, v in found if t == term and cid in batchnorm]
        return statistics.fmean(values) if values else None

    algorithm, state = result.state.algorithm, result.state.server.state
    params = algorithm.params
    initial = fedal.discriminator_state(algorithm.ctx, params, len(result.state.clients)).discriminator
    public, batch = algorithm.ctx.public_x, config.training.batch_size
    steps = config.training.rounds * algorithm.global_steps  # the discriminator's steps in the run
    inputs = public_outputs(result.state.clients, public, batch, params.adv_temperature)
    offline = {f"{opt}@{n}": acc for opt in ("sgd", "adam")
               for n, acc in offline_accuracy(initial, inputs, opt, params.disc_lr, (steps, paper_steps)).items()}
    final_w = torch.cat([p.detach().flatten() for p in state.discriminator.parameters()])
    init_w = torch.cat([p.detach().flatten() for p in initial.parameters()])
    return {"setting": setting, "seed": seed, **readings, "clients": len(result.state.clients),
            "acc": result.summary()["final"]["client_global_acc"],
            "disc_acc": discriminator_accuracy(state.discriminator, inputs),
            "disc_acc_init": discriminator_accuracy(initial, inputs),
            "disc_move": float((final_w - init_w).norm() / init_w.norm()),
            "batchnorm_clients": len(batchnorm), "r_loc0": first_step("r_loc0"), "r_glo0": first_step("r_glo0"),
            "r_glo0_no_batchnorm": statistics.fmean(v for t, cid, v in found if t == "r_glo0" and cid not in batchnorm),
            "disc_steps": steps, "offline": offline}


def control(seed: int, clients: int, classes: int, batch: int, temperature: float, lr: float,
            checkpoints: tuple[int, ...]) -> dict[str, float]:
    """Offline accuracy of each optimiser from the discriminator's initialisation on separable fabricated outputs."""
    generator = torch.Generator().manual_seed(seed)
    centres = 4.0 * F.one_hot(torch.arange(clients) % classes, classes).float()
    inputs = [F.softmax((centres[:, None, :] + 0.5 * torch.randn(clients, batch, classes, generator=generator))
                        / temperature, dim=2) for _ in range(6)]
    from bench.models import build_model
    initial = build_model("fedal_discriminator", (classes,), clients, seed=seed, key=("init", "discriminator"),
                          hidden=(32, 265), activation="relu")
    return {"init": discriminator_accuracy(initial, inputs),
            **{f"{opt}@{n}": acc for opt in ("sgd", "adam")
               for n, acc in offline_accuracy(initial, inputs, opt, lr, checkpoints).items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--setting", default="het-a5", help="a proxy setting of pipelines/fedal/params.yaml")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--data-dir", type=Path, default=ROOT / "data")
    parser.add_argument("--paper-steps", type=int, default=7000, help="the paper's discriminator steps (offline)")
    parser.add_argument("--control", action="store_true", help="only the separable control")
    args = parser.parse_args()
    torch.set_num_threads(1)  # as the runs (``threads: 1``)
    checks = {"control": control(0, 8, 10, 32, 2.0, 1e-4, (100, args.paper_steps)), "chance": 1 / 8}
    if args.control:
        print(json.dumps(checks), flush=True)
        return
    rows = []
    for values in itertools.product(*READINGS.values()):
        readings = dict(zip(READINGS, values))
        for seed in args.seeds:
            rows.append(measure(args.setting, seed, readings, args.data_dir, args.paper_steps))
            print(json.dumps(rows[-1]), flush=True)
    for values in itertools.product(*READINGS.values()):
        mine = [r for r in rows if tuple(r[k] for k in READINGS) == values]
        summary = {k: statistics.fmean(r[k] for r in mine) for k in
                   ("acc", "disc_acc", "disc_acc_init", "disc_move", "r_loc0", "r_glo0")}
        offline = {key: statistics.fmean(r["offline"][key] for r in mine) for key in mine[0]["offline"]}
        print(json.dumps({"mean over seeds": dict(zip(READINGS, values)), "seeds": len(mine),
                          "chance": 1 / mine[0]["clients"], **summary, "offline": offline}), flush=True)
    print(json.dumps(checks), flush=True)


if __name__ == "__main__":
    main()
