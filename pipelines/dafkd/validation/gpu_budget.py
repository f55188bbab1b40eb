"""GPU-hours of the DaFKD pipeline at paper scale, for both readings of E (pipelines/dafkd/NOTES.md A1, §6 budget).

    uv run python pipelines/dafkd/validation/gpu_budget.py [--tflops 3]

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

What each step runs (passes per sample, F = the classifier's forward, G the generator's, D the separate
discriminator's): CE step 3F; DaFKD iteration 9F + 4G (real and fake through φ with backward, G's samples,
then G trained through φ and h_d); no-sharing 3F + 9D + 4G; KD step 3F; DaFKD's teachers K_t·F per
distillation sample; FedFTG per iteration K_t·(3G + 6F) + K_t·F + 5·3F; FedDF per public sample of each
distillation step K_t·F + 3F (the teacher is the mean of the round's K_t client models' logits); evaluation F
per test image per model (DaFKD: the global model, ŵ and two ensembles of K_t client models).
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

from bench.config import ExperimentConfig  # noqa: E402
from bench.data import get_dataset_spec  # noqa: E402
from bench.data.partition import make_partition  # noqa: E402
from bench.engine.streams import batches_per_pass  # noqa: E402
from bench.models import build_model  # noqa: E402
from bench.models.inventory import forward_flops  # noqa: E402
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


def run_budget(suite: Suite, method: str, setting: str) -> tuple[float, float]:
    """(FLOPs, reading-notes milliseconds) of one run."""
    cfg = suite.config(method, setting, 0)
    spec = get_dataset_spec(cfg.dataset.name)
    shape, classes, t, p = spec.image_shape, spec.num_classes, cfg.training, cfg.algorithm.params
    algorithm = cfg.algorithm.name
    f = forward(cfg.model.name, shape, classes, **cfg.model.kwargs)
    sizes = client_sizes(cfg)
    k_t = max(1, round(cfg.participation.fraction * len(sizes)))
    b = t.batch_size
    per_client: float
    if t.local_steps is not None:
        per_client = t.local_steps
    else:
        assert t.local_epochs is not None  # TrainingConfig requires local_epochs or local_steps
        per_client = t.local_epochs * float(np.mean([batches_per_pass(n, b, t.drop_last) for n in sizes]))
    iterations = t.rounds * k_t * per_client
    evals = t.rounds * spec.num_test
    step, server, server_steps, eval_models = 3.0 * f, 0.0, 0.0, 1
    if algorithm == "dafkd":
        g = forward("dcgan_generator", shape, classes, "generator", noise_dim=p["noise_dim"])
        if p["sharing"] == "separate":
            d = forward("dafkd_discriminator", shape, 1)
            step = 3 * f + 9 * d + 4 * g
        else:
            step = 9 * f + 4 * g
        samples = p["distill_batches"] * (p["distill_batch_size"] or b)
        server = samples * (g + k_t * f) + p["distill_batches"] * p["distill_epochs"] * (p["distill_batch_size"] or b) * 3 * f
        server_steps = p["distill_batches"] * p["distill_epochs"]
        eval_models = 2 + 2 * k_t
    elif algorithm == "fedftg":
        g = forward("cond_image_generator", shape, classes, "generator", noise_dim=p["noise_dim"])
        per_iteration = k_t * (3 * g + 6 * f) + k_t * f + p["student_steps"] * 3 * f + g
        server = p["iterations"] * per_iteration * (p["batch_size"] or b)
        server_steps = p["iterations"] * (k_t + p["student_steps"])
    elif algorithm == "feddf":
        server = p["distill_steps"] * (p["distill_batch_size"] or b) * (k_t * f + 3 * f)
        server_steps = p["distill_steps"] * (k_t + 1)
    flops = iterations * b * step + t.rounds * server + evals * eval_models * f
    kind = {"dafkd": "dafkd", "fedprox": "fedprox", "fedgen": "fedgen"}.get(algorithm, "ce")
    ms = (iterations * MS[kind] + t.rounds * server_steps * MS["server"]
          + math.ceil(evals * eval_models / 1024) * MS["eval"])
    return flops, ms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tflops", type=float, default=3.0)
    args = parser.parse_args()
    for profile in ("paper", "paper_steps"):
        suite = load_suite(PARAMS, overrides=[f"profile={profile}"])
        seeds = len(suite.params.suite.seeds)
        rows, total_flops, total_ms = [], 0.0, 0.0
        groups: dict[str, float] = {}
        for method in suite.methods:
            flops = ms = 0.0
            for setting in suite.settings_of(method):
                f, m = run_budget(suite, method, setting)
                flops, ms = flops + f * seeds, ms + m * seeds
                group = setting.split("-")[0]
                groups[group] = groups.get(group, 0.0) + m * seeds
            rows.append((method, len(suite.settings_of(method)) * seeds, flops, ms))
            total_flops, total_ms = total_flops + flops, total_ms + ms
        print(f"\n## profile {profile}: GPU-hours at {args.tflops:g} TFLOP/s (FLOPs) and at the notes' ms per step\n")
        print("| method | runs | PFLOP | GPU-h (FLOPs) | GPU-h (NOTES.md ms) |\n|---|---|---|---|---|")
        for method, runs, flops, ms in rows:
            print(f"| {method} | {runs} | {flops / 1e15:.1f} | {flops / (args.tflops * 1e12) / 3600:.1f} | "
                  f"{ms / 3.6e6:.1f} |")
        print(f"| total | {sum(row[1] for row in rows)} | {total_flops / 1e15:.1f} | "
              f"{total_flops / (args.tflops * 1e12) / 3600:.0f} | {total_ms / 3.6e6:.0f} |")
        print("\nGPU-h (NOTES.md ms) per dataset: " + ", ".join(f"{g} {v / 3.6e6:.0f}" for g, v in groups.items()))


if __name__ == "__main__":
    main()
