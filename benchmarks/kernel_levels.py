"""What each variable of the portable CPU-kernel level costs, per layer kind, on the papers' models.

Each setting runs in its own process (the kernel variables are read once, when torch first dispatches),
with nothing but that setting's variables: ``native`` (the libraries' own choices), each variable of the
``portable`` level alone (``bench/__init__.py``: ``ATEN_CPU_CAPABILITY=avx2``, ``ONEDNN_MAX_CPU_ISA=AVX2``,
``MKL_CBWR=COMPATIBLE``), and the whole level. A process times, single-threaded as the runs are, every
convolution, linear layer and BatchNorm of each model at the input shape the model gives it in training
(forward and backward apart, summed per kind), and one whole training step (forward, backward, SGD) at
batch 32. Times are the thread's CPU time (``time.thread_time``), so that other jobs on a shared machine
slow the figures less than they would wall times. The settings are interleaved — each repetition runs every setting once, in rotated order — and
each figure is the median over repetitions of the ratio to the same repetition's native time, since the
machine is shared and its speed drifts between processes.

    .venv/bin/python benchmarks/kernel_levels.py            # --reps N, --models cnn fedavg_cnn ...

prints the table as Markdown with the load average before and after and the CPU time the workers took.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

SETTINGS: dict[str, dict[str, str]] = {
    "native": {},
    "ATEN_CPU_CAPABILITY=avx2": {"ATEN_CPU_CAPABILITY": "avx2"},
    "ONEDNN_MAX_CPU_ISA=AVX2": {"ONEDNN_MAX_CPU_ISA": "AVX2"},
    "MKL_CBWR=COMPATIBLE": {"MKL_CBWR": "COMPATIBLE"},
    "portable (all three)": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_CBWR": "COMPATIBLE"},
}
MODELS = {"cnn": (1, 8, 8), "fedavg_cnn": (1, 28, 28), "dafkd_resnet11": (3, 32, 32)}
"""The digits CNN of the default suite, the 582,026-parameter CNN of the shared workload
(benchmarks/bare_loop.py), DaFKD's ResNet-11 — at their data's image shape."""
BATCH = 32
KINDS = ("Conv2d", "Linear", "BatchNorm2d", "BatchNorm1d")


def _time_layers(model, x, budget_s: float) -> dict[str, float]:
    """CPU seconds per call (median), summed per layer kind and direction, for every layer of ``model`` at its
    input shape; each layer timed for at least ``budget_s`` CPU seconds."""
    import torch

    shapes: list[tuple[torch.nn.Module, torch.Size]] = []
    hooks = [m.register_forward_hook(lambda m, i, o: shapes.append((m, i[0].shape)))
             for m in model.modules() if type(m).__name__ in KINDS]
    model(x)
    for h in hooks:
        h.remove()
    out: dict[str, float] = {}
    for layer, shape in shapes:
        inp = torch.randn(shape, requires_grad=True)
        y = layer(inp)
        grad = torch.randn_like(y)
        fwd, bwd, n, start = [], [], 0, time.thread_time()
        while n < 5 or time.thread_time() - start < budget_s:
            t0 = time.thread_time()
            y = layer(inp)
            t1 = time.thread_time()
            y.backward(grad)
            t2 = time.thread_time()
            fwd.append(t1 - t0)
            bwd.append(t2 - t1)
            n += 1
        kind = type(layer).__name__.replace("1d", "").replace("2d", "") if "BatchNorm" in type(layer).__name__ \
            else type(layer).__name__
        for direction, times in (("forward", fwd), ("backward", bwd)):
            key = f"{kind} {direction}"
            out[key] = out.get(key, 0.0) + statistics.median(times)
    return out


def _time_step(model, x, y, budget_s: float) -> float:
    """Median CPU seconds of one training step: forward, cross-entropy, backward, SGD step."""
    import torch
    import torch.nn.functional as F

    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    times, start = [], time.thread_time()
    while len(times) < 5 or time.thread_time() - start < budget_s:
        t0 = time.thread_time()
        out = model(x)
        logits = out[1] if isinstance(out, tuple) else out
        loss = F.cross_entropy(logits, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        times.append(time.thread_time() - t0)
    return statistics.median(times)


def worker(models: list[str], budget_s: float) -> dict:
    import torch

    from bench.models import build_model

    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(0)
    result: dict[str, dict[str, float]] = {}
    for name in models:
        model = build_model(name, MODELS[name], 10, seed=0).train()
        x = torch.randn((BATCH, *MODELS[name]), generator=gen)
        y = torch.randint(0, 10, (BATCH,), generator=gen)
        result[name] = {**_time_layers(model, x, budget_s), "training step": _time_step(model, x, y, 4 * budget_s)}
    return {"capability": torch.backends.cpu.get_cpu_capability(), "times": result}


def run_setting(setting: str, models: list[str], budget_s: float) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_CBWR", "MKL_ENABLE_INSTRUCTIONS")}
    env.update(SETTINGS[setting], BENCH_CPU_KERNELS="native", PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    done = subprocess.run([sys.executable, __file__, "--worker", "--budget", str(budget_s), "--models", *models],
                          env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--budget", type=float, default=0.3, help="seconds of timing per layer (a step: 4x)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.models, args.budget)))
        return
    load_before, wall = os.getloadavg(), time.perf_counter()
    names = list(SETTINGS)
    reps: list[dict[str, dict]] = []
    for rep in range(args.reps):
        order = names[rep % len(names):] + names[:rep % len(names)]
        reps.append({s: run_setting(s, args.models, args.budget) for s in order})
        print(f"repetition {rep + 1}/{args.reps} done", file=sys.stderr, flush=True)
    cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
    capabilities = {s: reps[0][s]["capability"] for s in names}
    print(f"CPU kernels dispatched: {', '.join(f'{s}: {c}' for s, c in capabilities.items())}\n")
    print(f"| model | measured | native (ms CPU) | {' | '.join(names[1:])} |")
    print("|---|---|---|" + "---|" * (len(names) - 1))
    for model in args.models:
        for key in reps[0]["native"]["times"][model]:
            native = statistics.median(r["native"]["times"][model][key] for r in reps)
            ratios = [statistics.median(r[s]["times"][model][key] / r["native"]["times"][model][key] for r in reps)
                      for s in names[1:]]
            print(f"| {model} | {key} | {1000 * native:.3f} | " + " | ".join(f"{q:.2f}×" for q in ratios) + " |")
    print(f"\n{args.reps} interleaved repetitions, {time.perf_counter() - wall:.0f} s wall, "
          f"{cpu.ru_utime + cpu.ru_stime:.0f} s CPU in the workers; load average before "
          f"{load_before[0]:.2f}, after {os.getloadavg()[0]:.2f}; {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
