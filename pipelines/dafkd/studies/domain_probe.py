"""DaFKD's proxy with clients from distinct domains (issue 25), a probe, not a pinned profile: the `proxy` profile of
pipelines/dafkd/params.yaml on one column, ``--rounds`` rounds, every other setting the proxy's (the paper's rates,
4 clients a round, 20 local steps, the proxy's MTLResNet and generator). ``--dataset`` picks the data: a
``domaindigits`` variant (``domaindigits28`` by default, or the 8×8 ``domaindigits8`` at the proxy's own input size),
split into 10 clients in five groups of two domains (each group's images split between its two clients by Dirichlet
α = 0.1 over labels); or ``digits``, the pinned proxy's own α = 0.1 column (label skew, no domains). ``--set`` passes
``-S`` overrides (e.g. ``profiles.proxy.methods.dafkd.real_fake_forward=joint``). It trains ``--methods`` on
``--seeds`` in a temporary folder and prints, per run, the final global accuracy, the training seconds per round, and
the means over the rounds that record them of DaFKD's two mechanism diagnostics (α̂'s entropy against log K_t; the
generated samples' class coverage, 0 for one class and 1 for all), of the discriminators' mean outputs on real and
generated samples (``d_real``, ``d_fake``) and of ŵ's accuracy before distillation. It runs at this machine's native
CPU kernels (its suite has no pinned file to take them from). The README's DaFKD section quotes it.

    uv run python pipelines/dafkd/studies/domain_probe.py --data-dir data
    uv run python pipelines/dafkd/studies/domain_probe.py --data-dir data --dataset domaindigits8 --rounds 12 \
        --seeds 0 1 2 --methods dafkd --set profiles.proxy.methods.dafkd.real_fake_forward=joint
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]  # the repository: pipelines/<paper>/studies/<script>.py
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.cli import main as bench  # noqa: E402
from bench.suites.statistics import Records  # noqa: E402

DIAGNOSTICS = ("alpha_entropy", "alpha_entropy_uniform", "gen_coverage", "d_real", "d_fake", "pre_kd_acc")


def domain_params(raw: dict[str, Any], rounds: int, dataset: str) -> dict[str, Any]:
    """The params with the `proxy` profile on one column of ``dataset`` (module docstring)."""
    proxy = raw["profiles"]["proxy"]
    base = proxy["suite"]["base"]
    if dataset != "digits":
        base["dataset"] = {"name": dataset}
        base["partition"] = {"scheme": "domains", "num_clients": 10, "domains_per_client": 2,
                             "within": {"scheme": "dirichlet", "alpha": 0.1, "min_size": 20}}
    base["training"] = {**base["training"], "rounds": rounds}
    proxy["settings"] = {"a0.1": proxy["settings"]["a0.1"] if dataset == "digits" else {}}
    for entry in proxy["methods"].values():
        entry["settings"] = ["a0.1"]
    raw["profile"] = "proxy"
    raw["suite"]["paper"] = str(HERE.parent / raw["suite"]["paper"])
    return raw


def run_summary(run: Path) -> dict[str, Any]:
    """The final global accuracy, training seconds per round and the mean of each diagnostic a run recorded."""
    metrics = json.loads((run / "metrics.json").read_text())
    timing = json.loads((run / "timing.json").read_text())
    records = Records.from_csv((run / "records.csv").read_text(), str(run))
    found: dict[str, Any] = {"final_global_acc": round(metrics["final"]["global_acc"], 4),
                             "train_s_per_round": round(timing["train_time_s"] / metrics["rounds"], 2)}
    for name in DIAGNOSTICS:
        if name in records.values:
            found[name] = round(statistics.fmean(records.series(name).values()), 4)
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", default="data")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dataset", default="domaindigits28", choices=["digits", "domaindigits8", "domaindigits28"],
                        help="the data (module docstring; default %(default)s)")
    parser.add_argument("--set", nargs="*", default=[], help="-S overrides of the probe's params")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--methods", nargs="+", default=["dafkd", "fedgen"])
    args = parser.parse_args()
    raw = yaml.safe_load((HERE.parent / "params.yaml").read_text())
    with tempfile.TemporaryDirectory() as tmp:
        params = Path(tmp) / "params.yaml"
        params.write_text(yaml.safe_dump(domain_params(raw, args.rounds, args.dataset)))
        command = ["suite", "train", "--params", str(params), "--data-dir", args.data_dir, "--jobs", "1",
                   "-S", f"suite.seeds={args.seeds}", *[a for o in args.set for a in ("-S", o)]]
        for method in args.methods:
            command += ["--method", method]
        if code := bench(command):
            return code
        for method in args.methods:
            for seed in args.seeds:
                run = Path(tmp) / "results" / "dafkd-proxy" / method / "a0.1" / f"seed{seed}"
                print(json.dumps({"method": method, "seed": seed, **run_summary(run)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
