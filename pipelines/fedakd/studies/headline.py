"""The FedAKD proxy's headline comparison: FedAKD against its strongest baseline, per Table 1 measure (the released
code's statistics: Max, Avg and CF of the last three rounds), from the runs `dvc repro` trained
(pipelines/fedakd/results/fedakd-proxy/). The strongest baseline of a measure is the row other than FedAKD and
Standalone (CF's reference) with the highest mean over seeds. Printed per measure: each row's mean ± sample std,
the paired difference FedAKD − baseline (mean, its std over seeds: the pair noise), the smallest difference the
paired t-test detects with power 0.8 at α = 0.05 with that noise and these seeds (docs/verdicts.md,
:func:`bench.suites.verdicts.detectable_difference`), and the seeds that would bring it to 1.5 points.

    uv run python pipelines/fedakd/studies/headline.py
"""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]  # the repository: pipelines/<paper>/studies/<script>.py
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.suites import load_suite  # noqa: E402
from bench.suites.statistics import Records, Statistic  # noqa: E402
from bench.suites.verdicts import detectable_difference  # noqa: E402

MEASURES = {"Max": ("last3_clientmax_local_acc", 100.0), "Avg": ("last3_local_acc", 100.0),
            "CF": ("last3_cfcode(standalone)_local_acc", 1.0)}
TARGET = 1.5


def seeds_for(noise: float, target: float, limit: int = 400) -> int | None:
    """The fewest pairs whose detectable difference at this pair noise is at most ``target`` (None: over ``limit``)."""
    for pairs in range(2, limit + 1):
        found = detectable_difference(noise, pairs)
        if found is not None and found <= target:
            return pairs
    return None


def main() -> int:
    suite = load_suite(ROOT / "pipelines" / "fedakd" / "params.yaml", overrides=["profile=proxy"])
    setting = suite.settings[0]
    methods = [m for m in suite.methods if suite.runs_on(m, setting)]
    records = {(m, s): Records.from_csv((suite.run_dir(m, setting, s) / "records.csv").read_text(), f"{m}/{s}")
               for m in methods for s in suite.seeds}
    for measure, (name, scale) in MEASURES.items():
        statistic = Statistic.model_validate(name)
        def value(method: str, seed: int) -> float:
            found = statistic.compute(records[method, seed], records["standalone", seed])
            return float("nan") if found is None else scale * found

        values = {m: [value(m, s) for s in suite.seeds] for m in methods if not (measure == "CF" and m == "standalone")}
        baselines = [m for m in values if m not in ("fedakd", "standalone")]
        best = max(baselines, key=lambda m: statistics.fmean(values[m]))
        diff = [a - b for a, b in zip(values["fedakd"], values[best])]
        noise = statistics.stdev(diff)
        print(json.dumps({"setting": setting, "measure": measure, "statistic": name, "seeds": suite.seeds,
                          "rows": {m: [round(statistics.fmean(v), 2), round(statistics.stdev(v), 2)]
                                   for m, v in values.items()},
                          "strongest_baseline": best, "difference_mean": round(statistics.fmean(diff), 2),
                          "pair_noise": round(noise, 2),
                          "detectable": round(detectable_difference(noise, len(diff)) or float("nan"), 2),
                          f"seeds_for_{TARGET}": seeds_for(noise, TARGET)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
