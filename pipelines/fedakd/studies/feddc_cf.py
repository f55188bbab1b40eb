"""Why the paper's FedDC CF row looks like noise (pipelines/fedakd/NOTES.md §0.9): FedAKD's released FedDC script
correlates FedDC's per-client accuracies with fresh uniform random numbers in place of the Standalone accuracies,
a different random row in each of the last three rounds, and prints mean ± np.std (ddof 0) of those three CF values
(§0.5). This simulates exactly that: K clients, any fixed accuracies, three CF values of
100·corrcoef(acc, U(0, 1)^K) per run (:func:`bench.suites.statistics.cf_code`), their mean and their within-run
std, over many runs. A CF against noise has mean 0 and a spread that does not depend on FedDC's accuracies; the
paper's ten FedDC cells (mean of their ± 24.33, cell means −9.18 with std 15.60) are what such noise gives.

    uv run python pipelines/fedakd/studies/feddc_cf.py --runs 20000
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[3]  # the repository: pipelines/<paper>/studies/<script>.py
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.suites.statistics import cf_code  # noqa: E402

# The paper's Table 1(c) FedDC row as printed (pipelines/fedakd/paper.yaml): cell mean and its ± (the within-run
# std of the last three rounds' CF, §0.5), FMNIST POW … CIFAR-10 ICS(10).
PAPER_MEANS = [-40.85, -11.12, 2.39, 18.37, -15.32, -4.22, -9.54, -21.57, -9.38, -0.52]
PAPER_STDS = [18.38, 22.49, 15.37, 9.41, 38.39, 32.08, 31.25, 5.97, 27.68, 42.33]


def simulate(accuracies: np.ndarray, runs: int, rounds: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Per simulated run: the mean and the within-run std (ddof 0) of ``rounds`` CF values of ``accuracies``
    against fresh U(0, 1) numbers, one row per round (seeded generator, no global state)."""
    rng = np.random.default_rng(seed)
    means, stds = np.empty(runs), np.empty(runs)
    for r in range(runs):
        cfs = [cf_code(rng.random(len(accuracies)).tolist(), accuracies.tolist()) for _ in range(rounds)]
        means[r], stds[r] = np.mean(cfs), np.std(cfs)
    return means, stds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20000)
    parser.add_argument("--clients", type=int, default=10, help="K (the paper's 10)")
    parser.add_argument("--rounds", type=int, default=3, help="the last rounds the statistics take (the code's 3)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    k = args.clients
    # three accuracy profiles for FedDC's clients: the spread of its own accuracies does not matter
    profiles = {"even (0.90 to 0.95)": np.linspace(0.90, 0.95, k),
                "power-law sizes (0.55 to 0.70)": 0.55 + 0.15 / np.arange(1, k + 1),
                "one weak client": np.r_[np.full(k - 1, 0.94), 0.60]}
    rows = {}
    for name, acc in profiles.items():
        means, stds = simulate(acc, args.runs, args.rounds, args.seed)
        rows[name] = {"cf_mean": round(float(means.mean()), 2), "cf_mean_std_over_runs": round(float(means.std()), 2),
                      "within_run_std_mean": round(float(stds.mean()), 2)}
    paper = {"cf_mean": round(statistics.fmean(PAPER_MEANS), 2),
             "cf_mean_std_over_cells": round(statistics.stdev(PAPER_MEANS), 2),
             "within_run_std_mean": round(statistics.fmean(PAPER_STDS), 2)}
    print(json.dumps({"clients": k, "rounds": args.rounds, "runs": args.runs, "simulated": rows,
                      "paper_feddc_row": paper}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
