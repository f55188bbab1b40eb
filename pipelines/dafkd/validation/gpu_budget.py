"""GPU-hours of the DaFKD pipeline at paper scale, for both readings of E (pipelines/dafkd/NOTES.md A1, §6 budget).

    uv run python pipelines/dafkd/validation/gpu_budget.py [--tflops 3] [--gpu benchmarks/gpu/gpu-nvidia-h200.json ...]

For every run of the ``paper`` (E local epochs) and ``paper_steps`` (E local steps) profiles of
pipelines/dafkd/params.yaml: its local iterations (epochs: T · E · the batches one pass over n_k cuts as the runs
do, ``batches_per_pass`` of bench/engine/streams.py: ⌈n_k/B⌉, ⌊n_k/B⌋ with ``training.drop_last``, over the round's
clients, on the setting's partition of evenly spread labels; steps: T · K_t · E), its server work per round and its
evaluations, each priced two ways:

* FLOPs: one forward pass of each network at its input shape counted by torch's FlopCounterMode (as
  ``bench models`` counts them, on the meta device), a trained sample taken as 3 forward passes (forward and
  backward), then GPU-hours at an assumed sustained throughput (``--tflops``, 3 by default as ``bench suite
  cost`` assumes);
* the reading notes' per-step milliseconds (pipelines/dafkd/NOTES.md §6) for an A100/H100 at batch 32, where small ResNets are launch-bound
  (§6: CE step 2.5 ms, FedProx 2.8, FedGen client step 3.5, DaFKD client iteration 8, KD or server step 2.5;
  an evaluation forward batch of 1,024 at 2.5 ms and FedFTG's and FedDF's teachers at a server step each per
  batch, assumptions of this script).

What each step runs (passes per trained sample, F = the classifier's forward, G the generator's, D the separate
discriminator's; a backward pass 2 forwards, or 1 where only input gradients flow, as through the classifier when
the generator trains): CE step 3F; DaFKD iteration 8F + 4G (G's samples, real and fake through φ with backward: 6F +
G, then G trained through φ and h_d: 2F + 3G); no-sharing 3F + 8D + 4G; KD step 3F; DaFKD's server per generated
sample G + K_t·F (+ K_t·D without sharing) for the teachers, in every round but the first under
``skip_first_distill``; FedFTG per iteration and sample K_t·generator_steps·(3G + 4F) + G + K_t·F +
student_steps·3F; FedDF per public sample of each distillation step K_t·F + 3F (the teacher is the mean of the
round's K_t client models' logits); the BatchNorm rule ``clients`` one F per training image of each round's
clients, ``test`` one F per image of the test set's full batches after each server training; evaluation F per
test image per model (DaFKD: the global model, ŵ and two ensembles of K_t client models). Images trained: local
steps × B, or epochs × each client's images (whole batches with ``drop_last``).

``--gpu FILE`` (repeatable; a step-time file of ``benchmarks/gpu.py measure``) adds a third price per file: the
run's training FLOPs at the seconds per FLOP measured for its client model's training step at its shape, batch
and optimiser, and its evaluation FLOPs at that model's measured forward, as ``bench suite cost --gpu`` prices
the other papers (``MeasuredSteps`` of bench/report/cost.py). The server's and the generator's passes are priced
at the client model's measured efficiency, as there. Unlike ``bench suite cost``, whose FLOPs per trained image
are measured on two small clients and so scale a round's fixed server work with the images trained, this
script counts the server's work per round, which is what DaFKD's and FedDF's distillation is.
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[3]  # the repository
sys.path.insert(0, str(ROOT))

from bench.algorithms.dafkd import generator_model  # noqa: E402
from bench.config import ExperimentConfig  # noqa: E402
from bench.data import get_dataset_spec  # noqa: E402
from bench.data.partition import make_partition  # noqa: E402
from bench.engine.streams import batches_per_pass  # noqa: E402
from bench.errors import BenchError  # noqa: E402
from bench.models import build_model  # noqa: E402
from bench.models.inventory import forward_flops  # noqa: E402
from bench.report.cost import MeasuredSteps, RunCost, images_per_round, run_steps  # noqa: E402
from bench.suites import Suite, load_suite  # noqa: E402

PARAMS = Path(__file__).resolve().parents[1] / "params.yaml"
MS = {"ce": 2.5, "fedprox": 2.8, "fedgen": 3.5, "dafkd": 8.0, "server": 2.5, "eval": 2.5}  # §6 (eval: ours)


def forward(name: str, shape: tuple[int, ...], classes: int, kind: str = "classifier", **kwargs: Any) -> int:
    with torch.device("meta"):
        return forward_flops(build_model(name, shape, classes, **kwargs), kind, shape)


def client_sizes(config: ExperimentConfig) -> list[int]:
    spec = get_dataset_spec(config.dataset.name)
    labels = np.arange(spec.num_train) % spec.num_classes
    p = config.partition
    part = make_partition(labels, spec.num_classes, p.scheme, p.num_clients, p.seed, p.scheme_params, 0.0)
    return [len(t) for t in part.train]


def run_budget(suite: Suite, method: str, setting: str) -> tuple[RunCost, float]:
    """One run's FLOPs (training, with the server's work, and evaluation, as a :class:`RunCost` of one "image"
    each) and its reading-notes milliseconds."""
    cfg = suite.config(method, setting, 0)
    spec = get_dataset_spec(cfg.dataset.name)
    shape, classes, t, p = spec.image_shape, spec.num_classes, cfg.training, cfg.algorithm.params
    algorithm = cfg.algorithm.name
    f = forward(cfg.model.name, shape, classes, **cfg.model.kwargs)
    sizes = client_sizes(cfg)
    k_t = max(1, round(cfg.participation.fraction * len(sizes)))
    b = t.batch_size
    per_client: float  # a client's local iterations a round
    if t.local_steps is not None:
        per_client = t.local_steps
    else:
        assert t.local_epochs is not None  # TrainingConfig requires local_epochs or local_steps
        per_client = t.local_epochs * float(np.mean([batches_per_pass(n, b, t.drop_last) for n in sizes]))
    iterations = t.rounds * k_t * per_client
    images = images_per_round(cfg, sizes) / len(sizes)  # a client's trained images a round, as bench suite cost counts
    evals = t.rounds * spec.num_test
    step, server, server_steps, eval_models, server_rounds = 3.0 * f, 0.0, 0.0, 1, t.rounds
    if algorithm == "dafkd":
        name, kwargs = generator_model(p["generator"], p["generator_width"])  # G as DaFKD builds it
        g = forward(name, shape, classes, "generator", noise_dim=p["noise_dim"], **kwargs)
        batch = p["distill_batch_size"] or b
        samples = p["distill_batches"] * batch
        if p["sharing"] == "separate":
            d = forward("dafkd_discriminator", shape, 1)
            step = 3 * f + 8 * d + 4 * g
            server = samples * (g + k_t * (f + d))
        else:
            step = 8 * f + 4 * g
            server = samples * (g + k_t * f)
        server += p["distill_batches"] * p["distill_epochs"] * batch * 3 * f
        server_steps = p["distill_batches"] * p["distill_epochs"]
        server_rounds = t.rounds - 1 if p["skip_first_distill"] else t.rounds
        eval_models = 2 + 2 * k_t
    elif algorithm == "fedftg":
        g = forward("cond_image_generator", shape, classes, "generator", noise_dim=p["noise_dim"])
        per_iteration = k_t * p["generator_steps"] * (3 * g + 4 * f) + g + k_t * f + p["student_steps"] * 3 * f
        server = p["iterations"] * per_iteration * (p["batch_size"] or b)
        server_steps = p["iterations"] * (k_t + p["student_steps"])
    elif algorithm == "feddf":
        server = p["distill_steps"] * (p["distill_batch_size"] or b) * (k_t * f + 3 * f)
        server_steps = p["distill_steps"] * (k_t + 1)
    rule = p.get("student_bn_stats", "distilled")
    if rule == "clients":  # every round, each client's pass over its training split
        bn_flops = t.rounds * k_t * float(np.mean(sizes)) * f
    elif rule == "test":  # after each server training, the test set's full batches
        bn_flops = server_rounds * (spec.num_test // b * b) * f
    else:
        bn_flops = 0.0
    cost = RunCost(method, setting, train_flops_per_image=t.rounds * k_t * images * step + server_rounds * server
                   + bn_flops, forward_flops=evals * eval_models * f, train_images=1, eval_images=1,
                   steps=run_steps(cfg))
    kind = {"dafkd": "dafkd", "fedprox": "fedprox", "fedgen": "fedgen"}.get(algorithm, "ce")
    ms = (iterations * MS[kind] + server_rounds * server_steps * MS["server"]
          + math.ceil(evals * eval_models / 1024) * MS["eval"])
    return cost, ms


Row = tuple[str, int, float, float, list[float]]  # method, runs, FLOPs, NOTES.md ms, GPU-seconds per device


def profile_budget(profile: str, measured: list[MeasuredSteps], overrides: tuple[str, ...] = ()
                   ) -> tuple[list[Row], dict[str, float]]:
    """Per method of ``profile``: (method, runs, FLOPs, NOTES.md ms, GPU-seconds on each measured device), every
    seed counted; and NOTES.md ms per dataset (``overrides``: more ``-S key=value`` of the params)."""
    suite = load_suite(PARAMS, overrides=[f"profile={profile}", *overrides])
    seeds = len(suite.params.suite.seeds)
    rows: list[Row] = []
    groups: dict[str, float] = {}
    for method in suite.methods:
        flops = ms = 0.0
        seconds = [0.0] * len(measured)
        for setting in suite.settings_of(method):
            cost, m = run_budget(suite, method, setting)
            flops, ms = flops + cost.flops * seeds, ms + m * seeds
            seconds = [s + device.seconds(cost) * seeds for s, device in zip(seconds, measured)]
            group = setting.split("-")[0]
            groups[group] = groups.get(group, 0.0) + m * seeds
        rows.append((method, len(suite.settings_of(method)) * seeds, flops, ms, seconds))
    return rows, groups


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tflops", type=float, default=3.0)
    parser.add_argument("--gpu", type=Path, action="append", default=[], metavar="FILE",
                        help="a step-time file of benchmarks/gpu.py measure: adds that device's GPU-hours (repeatable)")
    args = parser.parse_args(argv)
    if not args.tflops > 0:
        print(f"error: --tflops {args.tflops:g}: give a positive throughput in TFLOP/s (e.g. 3)", file=sys.stderr)
        sys.exit(2)
    try:
        measured = [MeasuredSteps.load(path) for path in args.gpu]
        for profile in ("paper", "paper_steps"):
            rows, groups = profile_budget(profile, measured)
            devices = "".join(f" | {d.device}-h (measured steps)" for d in measured)
            print(f"\n## profile {profile}: GPU-hours at {args.tflops:g} TFLOP/s (FLOPs), at the notes' ms per step"
                  + (" and at the measured steps" if measured else "") + "\n")
            print(f"| method | runs | PFLOP | GPU-h (FLOPs) | GPU-h (NOTES.md ms){devices} |\n|---|---|---|---|---|"
                  + "---|" * len(measured))
            for method, runs, flops, ms, seconds in rows:
                print(f"| {method} | {runs} | {flops / 1e15:.1f} | {flops / (args.tflops * 1e12) / 3600:.1f} | "
                      f"{ms / 3.6e6:.1f} |" + "".join(f" {s / 3600:.1f} |" for s in seconds))
            totals = [sum(row[4][i] for row in rows) for i in range(len(measured))]
            print(f"| total | {sum(row[1] for row in rows)} | {sum(row[2] for row in rows) / 1e15:.1f} | "
                  f"{sum(row[2] for row in rows) / (args.tflops * 1e12) / 3600:.0f} | "
                  f"{sum(row[3] for row in rows) / 3.6e6:.0f} |" + "".join(f" {s / 3600:.0f} |" for s in totals))
            print("\nGPU-h (NOTES.md ms) per dataset: " + ", ".join(f"{g} {v / 3.6e6:.0f}" for g, v in groups.items()))
    except BenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
