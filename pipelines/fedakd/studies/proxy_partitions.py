"""The FedAKD proxy's partitions (pipelines/fedakd/params.yaml, profile ``proxy``): per seed, each client's training
images, distinct local test images, and how its images lean to the dataset's domains (the largest domain's share and
the entropy of its domain mix, in nats; ten domains mixed evenly give 0.10 and ln 10 = 2.30). The README quotes it.
Reads the partitions `dvc repro` saved (partitions/fedakd-proxy/<setting>/seed<s>/); the same for a fresh draw of
Algorithm 2's POW column, which spreads the domains evenly, as a reference.

    uv run python pipelines/fedakd/studies/proxy_partitions.py --data-dir data
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[3]  # the repository: pipelines/<paper>/studies/<script>.py
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.data import load_dataset  # noqa: E402
from bench.data.partition import load_partition  # noqa: E402
from bench.runner.federation import partition_for  # noqa: E402
from bench.suites import load_suite  # noqa: E402


def domain_lean(indices: np.ndarray, domains: np.ndarray) -> tuple[float, float]:
    """The largest domain's share of these images and the entropy (nats) of their domain mix."""
    share = np.bincount(domains[indices], minlength=int(domains.max()) + 1) / len(indices)
    present = share[share > 0]
    return float(share.max()), float(-(present * np.log(present)).sum())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=ROOT / "data")
    parser.add_argument("--setting", default="ics5")
    args = parser.parse_args(argv)
    suite = load_suite(ROOT / "pipelines" / "fedakd" / "params.yaml", overrides=["profile=proxy"])
    config = suite.partition_config(args.setting)
    data = load_dataset(config.dataset.name, args.data_dir)
    domains = np.load(args.data_dir / "prepared" / config.dataset.name / "train_domain.npy")
    rows = []
    for seed in suite.seeds:
        part = load_partition(suite.partition_dir(args.setting, seed))
        lean = [domain_lean(np.asarray(t), domains) for t in part.train]
        rows.append({"seed": seed, "train": [len(t) for t in part.train],
                     "local_test_distinct": [len(np.unique(t)) for t in part.local_test],
                     "largest_domain_share": [round(a, 2) for a, _ in lean],
                     "domain_entropy": [round(b, 2) for _, b in lean]})
    figure = suite.figure_config("pow") if "pow" in (suite.params.figures or {}) else None  # drawn afresh
    summary = {"setting": args.setting, "seeds": rows,
               "min_local_test_distinct": min(min(r["local_test_distinct"]) for r in rows),
               "mean_largest_domain_share": round(float(np.mean([r["largest_domain_share"] for r in rows])), 3),
               "mean_domain_entropy": round(float(np.mean([r["domain_entropy"] for r in rows])), 3)}
    if figure is not None:
        reference = partition_for(figure, data, None)
        lean = [domain_lean(np.asarray(t), domains) for t in reference.train]
        summary["pow_reference"] = {"largest_domain_share": [round(a, 2) for a, _ in lean],
                                    "domain_entropy": [round(b, 2) for _, b in lean]}
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
