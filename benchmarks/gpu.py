"""What the paper profiles cost on a GPU, measured: one script, prepared and tested on the CPU, that a GPU
machine runs in a few minutes.

Three measurements, each on fabricated data (no dataset is needed on the GPU machine):

1. **steps** — every client model of every paper profile at its paper shape, number of classes and batch
   size, with its optimiser: the median time of a training step (forward, cross-entropy, backward, step)
   over timed steps after warm-up, under the runs' settings (deterministic kernels, no TF32) and, beside
   it, with the libraries' own choices (cuDNN autotuning, non-deterministic); the FLOPs of one step counted
   as ``bench suite cost`` counts them; so the achieved TFLOP/s of each model. Also the evaluation forward
   (batch 1024). ``bench suite cost --gpu FILE`` turns these rates into each profile's GPU-hours.
2. **vectorize** — ``training.vectorize_clients`` against the serial loop: FedAvg with the 582k CNN on 50
   clients of 240 images (``synthetic28``), 10 and 50 of them a round, 2 rounds, the run's training time
   (pairs in alternating order, medians).
3. **share** — k runs sharing one GPU (k = 1, 2, 4, 8 processes started together, each a 2-round FedAvg run
   of the same workload on 20 clients): wall time for all k and runs per hour. The Ray executor is not
   measured there: Ray's wheel is larger than what can be carried to that machine; the processes are what
   Ray's workers would be on one node.

Commands (``workload`` needs the project's environment, ``measure`` only torch, numpy and pydantic):

    uv run python benchmarks/gpu.py workload                 # resolve the paper profiles -> benchmarks/gpu/workload.json
    python benchmarks/gpu.py measure --out DIR               # on the GPU machine: DIR/gpu-<device>.json
    uv run python benchmarks/gpu.py measure --quick --out D  # the same code at a toy size on the CPU (tests)
    uv run python benchmarks/gpu.py table benchmarks/gpu/gpu-*.json   # measured files side by side (docs/scale.md)

The measured files live in ``benchmarks/gpu/``; ``docs/scale.md`` quotes them.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

WORKLOAD = ROOT / "benchmarks" / "gpu" / "workload.json"
EVAL_BATCH = 1024


# ---- workload: what to measure, resolved here from the paper profiles -------------------------------------


def paper_profiles() -> list[tuple[Path, str | None]]:
    """Every (params file, profile) of a paper pipeline that is meant for paper scale: the top level and each
    profile whose name starts with ``paper``."""
    out: list[tuple[Path, str | None]] = []
    for params in sorted((ROOT / "pipelines").glob("*/params.yaml")):
        import yaml

        raw = yaml.safe_load(params.read_text())
        if not isinstance(raw, dict) or "profiles" not in raw:
            continue
        out.append((params, None))
        out += [(params, name) for name in raw["profiles"] if name.startswith("paper") and name != "paper"]
    return out


def workload() -> dict[str, Any]:
    """The distinct training steps of the paper profiles: (model, kwargs, image shape, classes, batch,
    optimiser), with the profiles and methods that use each."""
    from bench.data import get_dataset_spec
    from bench.suites import load_suite

    steps: dict[str, dict[str, Any]] = {}
    for params, profile in paper_profiles():
        suite = load_suite(params, overrides=[f"profile={profile or 'null'}"])
        for method in suite.methods:
            for setting in suite.settings_of(method):
                config = suite.config(method, setting, suite.params.suite.seeds[0], timed=False)
                spec = get_dataset_spec(config.dataset.name)
                t = config.training
                for model in config.model.candidates or [config.model.name]:
                    kwargs = config.model.kwargs if model == config.model.name else {}
                    entry = {"model": model, "kwargs": kwargs, "shape": list(spec.image_shape),
                             "classes": spec.num_classes, "batch": t.batch_size,
                             "optimizer": t.optimizer.name, "momentum": t.optimizer.momentum}
                    key = step_key(entry)
                    use = steps.setdefault(key, {**entry, "key": key, "used_by": []})["used_by"]
                    name = f"{suite.name}:{method}"
                    if name not in use:
                        use.append(name)
    return {"steps": sorted(steps.values(), key=lambda s: s["key"])}


def step_key(entry: dict[str, Any]) -> str:
    """The step's name as ``bench suite cost --gpu`` looks it up (bench/report/cost.py ``step_key``)."""
    from bench.report.cost import step_key as key

    return key(entry["model"], entry["kwargs"], entry["shape"], entry["classes"], entry["batch"], entry["optimizer"],
               entry.get("momentum", 0.0))


# ---- measure: on the GPU machine --------------------------------------------------------------------------


def _sync(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _median_seconds(fn: Any, device: Any, warmup: int, timed: int) -> float:
    for _ in range(warmup):
        fn()
    _sync(device)
    times = []
    for _ in range(timed):
        start = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure_step(entry: dict[str, Any], device: Any, deterministic: bool, warmup: int, timed: int) -> dict[str, Any]:
    """Median seconds of one training step and of one evaluation forward of ``entry``'s model on fabricated
    data, and the FLOPs of each (torch's FlopCounterMode, as ``bench suite cost`` counts)."""
    import torch
    import torch.nn.functional as F
    from torch.utils.flop_counter import FlopCounterMode

    from bench.engine.setup import set_deterministic
    from bench.models import build_model

    set_deterministic(deterministic)
    torch.backends.cudnn.benchmark = not deterministic
    torch.backends.cudnn.deterministic = deterministic
    model = build_model(entry["model"], tuple(entry["shape"]), entry["classes"], seed=0, **entry["kwargs"]).to(device)
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = (torch.optim.Adam(params, lr=1e-3) if entry["optimizer"] == "adam"
                 else torch.optim.SGD(params, lr=1e-2, momentum=entry.get("momentum", 0.0)))
    generator = torch.Generator(device="cpu").manual_seed(0)
    x = torch.randn((entry["batch"], *entry["shape"]), generator=generator).to(device)
    y = torch.randint(0, entry["classes"], (entry["batch"],), generator=generator).to(device)
    x_eval = torch.randn((EVAL_BATCH, *entry["shape"]), generator=generator).to(device)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        _, logits = model(x)
        F.cross_entropy(logits, y).backward()
        optimizer.step()

    def forward() -> None:
        with torch.no_grad():
            model(x_eval)

    with FlopCounterMode(display=False) as counter:
        step()
    step_flops = int(counter.get_total_flops())
    step_s = _median_seconds(step, device, warmup, timed)
    model.eval()
    with FlopCounterMode(display=False) as counter:
        forward()
    forward_flops = int(counter.get_total_flops())
    forward_s = _median_seconds(forward, device, max(1, warmup // 2), max(3, timed // 3))
    del model, optimizer, x, y, x_eval
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return {"step_s": step_s, "step_flops": step_flops, "step_tflops": step_flops / step_s / 1e12,
            "forward_s": forward_s, "forward_flops": forward_flops, "forward_tflops": forward_flops / forward_s / 1e12}


def measure_steps(device: Any, quick: bool) -> list[dict[str, Any]]:
    steps = json.loads(WORKLOAD.read_text())["steps"]
    if quick:  # the CPU test: two small models at a small batch
        steps = [dict(s, batch=4) for s in steps if s["model"] in ("lenet5", "fedakd_simplecnn")][:2]
        steps = [dict(s, key=step_key(s)) for s in steps]
    warmup, timed = (1, 2) if quick else (5, 25)
    out = []
    for entry in steps:
        row = {**entry, "deterministic": measure_step(entry, device, True, warmup, timed),
               "native": measure_step(entry, device, False, warmup, timed)}
        print(f"  {entry['key']:<72} {row['deterministic']['step_s'] * 1e3:8.2f} ms/step "
              f"({row['deterministic']['step_tflops']:.2f} TFLOP/s; native {row['native']['step_s'] * 1e3:.2f} ms)",
              flush=True)
        out.append(row)
    return out


def _fedavg_config(device: str, clients: int, sampled: int, vectorize: bool, rounds: int) -> Any:
    from bench.experiment import build_config

    return build_config({
        "name": "gpu-bench", "seed": 0, "device": device, "dataset": {"name": "synthetic28"},
        "model": {"name": "fedavg_cnn"},
        "partition": {"scheme": "iid", "num_clients": clients, "local_test_fraction": 0.0},
        "participation": {"fraction": sampled / clients},
        "training": {"rounds": rounds, "local_epochs": 1, "batch_size": 32,
                     "optimizer": {"name": "sgd", "lr": 0.01}, "vectorize_clients": vectorize},
        "evaluation": {"every": rounds, "last": 1, "local_models": False},
        "tracking": {"mlflow": False}})


def measure_vectorize(device: str, data_dir: Path, quick: bool) -> list[dict[str, Any]]:
    from bench.runner.federation import run_federation

    clients, sampled_counts, reps = (10, [2, 10], 1) if quick else (50, [10, 50], 3)
    rounds = 1 if quick else 2
    out = []
    for sampled in sampled_counts:
        times: dict[bool, list[float]] = {False: [], True: []}
        run_federation(_fedavg_config(device, clients, sampled, True, 1), data_dir)  # warm-up: kernels, vmap
        for rep in range(reps):
            for vectorize in ((False, True) if rep % 2 == 0 else (True, False)):
                result = run_federation(_fedavg_config(device, clients, sampled, vectorize, rounds), data_dir)
                times[vectorize].append(result.timing["train_time_s"])
        loop, together = statistics.median(times[False]), statistics.median(times[True])
        row = {"clients_per_round": sampled, "images_per_client": 12_000 // clients, "rounds": rounds,
               "loop_train_s": loop, "vectorized_train_s": together, "speedup": loop / together,
               "loop_all": times[False], "vectorized_all": times[True]}
        print(f"  vectorize_clients, {sampled} clients a round: loop {loop:.2f} s, together {together:.2f} s, "
              f"loop/together {loop / together:.2f}x", flush=True)
        out.append(row)
    return out


def measure_share(device: str, data_dir: Path, quick: bool) -> list[dict[str, Any]]:
    counts = [1, 2] if quick else [1, 2, 4, 8]
    out = []
    for k in counts:
        start = time.perf_counter()
        procs = [subprocess.Popen([sys.executable, __file__, "one-run", "--device", device, "--data", str(data_dir),
                                   "--rounds", "1" if quick else "2"], stdout=subprocess.PIPE, text=True)
                 for _ in range(k)]
        outputs = [p.communicate()[0] for p in procs]
        wall = time.perf_counter() - start
        if any(p.returncode for p in procs):
            raise RuntimeError(f"a shared run failed: {outputs}")
        train = [json.loads(o.strip().splitlines()[-1])["train_time_s"] for o in outputs]
        row = {"runs": k, "wall_s": wall, "runs_per_hour": k * 3600 / wall, "train_s_median": statistics.median(train)}
        print(f"  {k} runs sharing the device: wall {wall:.1f} s, {row['runs_per_hour']:.0f} runs/hour, "
              f"each trained {row['train_s_median']:.2f} s (median)", flush=True)
        out.append(row)
    return out


def one_run(device: str, data_dir: Path, rounds: int) -> None:
    from bench.runner.federation import run_federation

    result = run_federation(_fedavg_config(device, 20, 20, False, rounds), data_dir)
    print(json.dumps({"train_time_s": result.timing["train_time_s"]}))


def measure(out_dir: Path, quick: bool, parts: list[str]) -> Path:
    import torch

    from bench.data import prepare_dataset

    device_name = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(device_name)
    if device.type == "cuda":
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    label = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu"
    print(f"device: {label}; torch {torch.__version__}", flush=True)
    data_dir = out_dir / "data"
    data_dir.mkdir(parents=True, exist_ok=True)
    prepare_dataset("synthetic28", data_dir)
    result: dict[str, Any] = {"device": label, "device_type": device.type, "torch": torch.__version__,
                              "cuda": torch.version.cuda, "quick": quick, "eval_batch": EVAL_BATCH}
    started = time.perf_counter()
    parts_run = {"steps": ("steps of the paper profiles' client models", lambda: measure_steps(device, quick)),
                 "vectorize": ("vectorize_clients against the loop",
                               lambda: measure_vectorize(device_name, data_dir, quick)),
                 "share": ("runs sharing the device", lambda: measure_share(device_name, data_dir, quick))}
    for part in parts:
        title, run = parts_run[part]
        print(f"{title}:", flush=True)
        try:  # one part failing (a torch older than the lock's there, say) must not lose the others' figures
            result[part] = run()
        except Exception as exc:  # noqa: BLE001  (recorded in the result and printed)
            result[f"{part}_error"] = f"{type(exc).__name__}: {exc}"
            print(f"  failed: {result[f'{part}_error']}", flush=True)
    result["seconds"] = time.perf_counter() - started
    slug = "".join(c if c.isalnum() else "-" for c in label.lower()).strip("-")
    path = out_dir / f"gpu-{slug}.json"
    path.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {path} ({result['seconds']:.0f} s)", flush=True)
    return path


# ---- table: the measured files side by side ----------------------------------------------------------------


def step_ratios(files: list[dict[str, Any]], heads: list[str]) -> str:
    """Medians over the steps both files measured: each file's time per step against the first file's (min–max), and
    in each file the runs' deterministic settings against the libraries' own choices."""
    def times(f: dict[str, Any], kind: str) -> dict[str, float]:
        return {r["key"]: r[kind]["step_s"] for r in f.get("steps", [])}

    first = times(files[0], "deterministic")
    lines = []
    for head, f in zip(heads, files):
        own, native = times(f, "deterministic"), times(f, "native")
        cost = statistics.median(own[k] / native[k] for k in own)
        line = f"- {head}: deterministic / native per step, median {cost:.2f}"
        if f is not files[0]:
            ratio = [own[k] / first[k] for k in own if k in first]
            line += (f"; time per step against {heads[0]}, median {statistics.median(ratio):.2f} "
                     f"({min(ratio):.2f}–{max(ratio):.2f})")
        lines.append(line)
    return "\n".join(lines)


def table(paths: list[Path]) -> str:
    """Markdown tables of measured files side by side (one column per file): each step's milliseconds under the
    runs' settings with the achieved TFLOP/s; ``vectorize_clients``' speed-up over the loop; runs per hour with k
    runs sharing the device. What the docs quote from ``benchmarks/gpu/``."""
    files = [json.loads(Path(p).read_text()) for p in paths]
    heads = [Path(p).stem.removeprefix("gpu-") for p in paths]

    def md(header: list[str], rows: list[list[str]]) -> str:
        lines = [header, ["---"] * len(header), *rows]
        return "\n".join("| " + " | ".join(cells) + " |" for cells in lines)

    def side_by_side(part: str, key: Any, cell: Any) -> list[list[str]]:
        """One row per ``key(row)`` of ``part`` over the files, ``cell(row)`` in each file's column."""
        cells: dict[Any, list[str]] = {}
        for i, f in enumerate(files):
            for row in f.get(part, []):
                cells.setdefault(key(row), ["—"] * len(files))[i] = cell(row)
        return [[str(k), *v] for k, v in sorted(cells.items())]

    out = [md(["training step (ms, TFLOP/s)", *heads], side_by_side(
        "steps", lambda r: r["key"],
        lambda r: f"{r['deterministic']['step_s'] * 1e3:.2f} ({r['deterministic']['step_tflops']:.2f})"))]
    out.append(step_ratios(files, heads))
    if vectorize := side_by_side("vectorize", lambda r: r["clients_per_round"], lambda r: (
            f"{r['loop_train_s']:.2f} s / {r['vectorized_train_s']:.2f} s = {r['speedup']:.2f}×")):
        out.append(md(["clients a round (loop / together)", *heads], vectorize))
    if share := side_by_side("share", lambda r: r["runs"],
                             lambda r: f"{r['runs_per_hour']:.0f} ({r['train_s_median']:.2f} s)"):
        out.append(md(["runs sharing the device (runs/hour, training s each)", *heads], share))
    return "\n\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("workload", help="resolve the paper profiles' training steps into benchmarks/gpu/workload.json")
    m = sub.add_parser("measure", help="measure the steps, vectorize_clients and shared runs on this machine")
    m.add_argument("--out", type=Path, required=True)
    m.add_argument("--quick", action="store_true", help="a toy size (the CPU test)")
    m.add_argument("--parts", default="steps,vectorize,share")
    t = sub.add_parser("table", help="print measured files side by side as Markdown tables")
    t.add_argument("files", type=Path, nargs="+")
    one = sub.add_parser("one-run")
    one.add_argument("--device", required=True)
    one.add_argument("--data", type=Path, required=True)
    one.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    if args.command == "workload":
        WORKLOAD.parent.mkdir(parents=True, exist_ok=True)
        WORKLOAD.write_text(json.dumps(workload(), indent=1) + "\n")
        print(f"wrote {WORKLOAD}: {len(json.loads(WORKLOAD.read_text())['steps'])} steps")
    elif args.command == "measure":
        measure(args.out, args.quick, args.parts.split(","))
    elif args.command == "table":
        print(table(args.files))
    else:
        one_run(args.device, args.data, args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
