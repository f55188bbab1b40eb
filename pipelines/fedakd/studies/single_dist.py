"""Table 4's Single-Dist in its two readings (pipelines/fedakd/NOTES.md §1.7, A12) beside the full FedAKD, on one
setting of the FedAKD proxy (``pipelines/fedakd/params.yaml``, profile ``proxy``), the README quotes it.

Each row is the proxy's own FedAKD config for that setting and seed, with overrides: the partition is
Algorithm 2's leak-free reading (``local_test: held_out``, the default) and, for Single-Dist, ``global_to_local:
false`` with its reading named (``single_dist: trained`` or ``copied``); the dataset the proxy uses is prepared
in a scratch folder. CF's reference is the proxy's Standalone on the same
partition. Printed per row: Max, Avg and CF as Table 4 takes them (the released code's statistics: the last 3
rounds' client max and mean of ``local_acc`` ×100, and ``last3_cfcode(standalone)_local_acc``), mean ± sample std
over the seeds, and the per-seed values.

    uv run python pipelines/fedakd/studies/single_dist.py --setting ics5 --seeds 0 1
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]  # the repository: pipelines/<paper>/studies/<script>.py
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.data import prepare_dataset  # noqa: E402
from bench.experiment import build_config  # noqa: E402
from bench.runner.executor import RunRequest, run_experiment  # noqa: E402
from bench.suites import load_suite  # noqa: E402
from bench.suites.statistics import Records, Statistic  # noqa: E402

PARAMS = ROOT / "pipelines" / "fedakd" / "params.yaml"
ROWS = {"FedAKD (Full)": {}, "Single-Dist, trained": {"global_to_local": False, "single_dist": "trained"},
        "Single-Dist, copied": {"global_to_local": False, "single_dist": "copied"}}
MEASURES = {"Max": ("last3_clientmax_local_acc", 100.0), "Avg": ("last3_local_acc", 100.0),
            "CF": ("last3_cfcode(standalone)_local_acc", 1.0)}


def run(method: str, setting: str, seed: int, algorithm: dict[str, str], data_dir: Path, out: Path) -> Records:
    """The proxy's run of ``method`` on ``setting`` and ``seed`` on the leak-free partition, ``algorithm`` overriding
    (Single-Dist is FedAKD with ``global_to_local: false``)."""
    raw = load_suite(PARAMS, overrides=["profile=proxy"]).config(method, setting, seed).to_dict()
    raw["partition"]["local_test"] = "held_out"
    raw["algorithm"].update(algorithm)
    raw["tracking"]["mlflow"] = False
    run_experiment(RunRequest(build_config(raw), out, data_dir), mlflow=False)
    return Records.from_csv((out / "records.csv").read_text(), str(out))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--setting", default="ics5")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        data_dir = folder / "data"
        prepare_dataset(load_suite(PARAMS, overrides=["profile=proxy"]).partition_config(args.setting).dataset.name,
                        data_dir)
        table: dict[str, dict[str, list[float]]] = {row: {m: [] for m in MEASURES} for row in ROWS}
        for seed in args.seeds:
            reference = run("standalone", args.setting, seed, {}, data_dir, folder / f"standalone-{seed}")
            for row, algorithm in ROWS.items():
                records = run("fedakd", args.setting, seed, algorithm, data_dir, folder / f"{row}-{seed}")
                for measure, (name, scale) in MEASURES.items():
                    value = Statistic.model_validate(name).compute(records, reference)
                    table[row][measure].append(float("nan") if value is None else scale * value)
    for row, values in table.items():
        print(json.dumps({"setting": args.setting, "seeds": args.seeds, "row": row, **{
            m: {"mean": round(statistics.mean(v), 2), "std": round(statistics.stdev(v), 2) if len(v) > 1 else None,
                "per_seed": [round(x, 2) for x in v]} for m, v in values.items()}}))


if __name__ == "__main__":
    main()
