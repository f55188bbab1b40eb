"""How the FedAL proxy's client training was chosen (pipelines/fedal/README.md, "Proxy"): on a validation split,
the same procedure for every method, before any test accuracy was looked at.

Each candidate client training (the Adam learning rate every method's clients use) runs FedMD as FedAL runs it —
the row every FedAL table shares, the black-box round without FedAL's two terms — on the proxy's ``het-a2``
setting with 10 % of each client's training images held out as its validation split
(``partition.validation_fraction``); the candidate with the highest final ``val_acc`` (each client's model on its
own validation images, averaged over clients) is the proxy's, for every method. The test accuracy is not printed.
One JSON line per candidate and seed, with the CPU seconds of the run.

    uv run python pipelines/fedal/studies/proxy_choice.py --lrs 0.0003 0.001 0.003 --seeds 0

``--method`` and ``--setting`` time or probe other rows (``--show-test`` then prints the test accuracy and the
mechanism diagnostics: for timing the proxy, never for the choice).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]  # the repository: pipelines/<paper>/studies/<script>.py
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.experiment import build_config  # noqa: E402
from bench.runner.federation import run_federation  # noqa: E402
from bench.suites import load_suite  # noqa: E402

PARAMS = ROOT / "pipelines" / "fedal" / "params.yaml"


def run(method: str, setting: str, seed: int, lr: float | None, validation: float, data_dir: Path,
        overrides: list[str], show_test: bool) -> dict[str, object]:
    suite = load_suite(PARAMS, overrides=["profile=proxy", *overrides])
    raw = suite.config(method, setting, seed).to_dict()
    raw["partition"] = {**raw["partition"], "validation_fraction": validation}
    if lr is not None:
        raw["training"] = {**raw["training"], "optimizer": {**raw["training"]["optimizer"], "lr": lr}}
    raw["tracking"] = {**raw.get("tracking", {}), "mlflow": False}
    config = build_config(raw)
    start = time.process_time()
    result = run_federation(config, data_dir)
    final = result.summary()["final"]
    out: dict[str, object] = {"method": method, "setting": setting, "seed": seed, "lr": config.training.optimizer.lr,
                              "val_acc": final.get("val_acc"), "cpu_s": round(time.process_time() - start, 1),
                              "rounds": config.training.rounds}
    if show_test:
        out["test_acc"] = final.get("client_global_acc", final.get("global_acc"))
        for metric in ("disc_acc", "disc_chance", "adv_share"):
            values = [row[metric] for row in result.curves if metric in row]
            if values:
                out[metric] = statistics.fmean(values)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--method", default="fedmd_fedal")
    parser.add_argument("--setting", default="het-a2")
    parser.add_argument("--lrs", type=float, nargs="+", default=[None])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--validation", type=float, default=0.1)
    parser.add_argument("--data-dir", type=Path, default=ROOT / "data")
    parser.add_argument("-S", dest="overrides", action="append", default=[], help="params.yaml override")
    parser.add_argument("--show-test", action="store_true")
    args = parser.parse_args()
    for lr in args.lrs:
        for seed in args.seeds:
            print(json.dumps(run(args.method, args.setting, seed, lr, args.validation, args.data_dir,
                                 args.overrides, args.show_test)), flush=True)


if __name__ == "__main__":
    main()
