"""DaFKD (CVPR 2023): Tables 1-3 (``paper.yaml``), Figures 3-6, the R10 diagnostic and the claims the
report checks (pipelines/dafkd/NOTES.md §4, §6).

The ``paper`` profile's settings are the paper's columns (``mnist-a0.05`` … ``emnist-a10``, the Figure 3 α
grid, the Figure 5 ``<dataset>-a0.1-r<r>`` ratios); the ``proxy`` (digits) and ``smoke`` (fabricated
3x32x32) profiles' settings are analogues (``a0.05``, ``a0.1``, ``a1``, ``a0.5``, ``a0.1-r0.2`` …), compared
with the paper by rank and by the claims, not by value. Figure 6's E/B/d variants are methods run on one
setting (SVHN α = 0.1, or its analogue); :data:`SENSITIVITY` gives each one's value.

Claims are checked on our results and on the paper's own tables (where the paper prints a figure only,
the claim is "not measured" there). Every value is in our units (accuracies as fractions; the printed
percentages are divided by 100 in :meth:`DaFKD.printed`).
"""
from __future__ import annotations

import re
from pathlib import Path

from bench.models.paper_configs import CLIENT_MODEL, DISCRIMINATOR, IMAGE_GENERATOR, PaperConfig, printed
from bench.suites.paper import (Claim, Comparison, Curve, LineFigure, Paper, PaperDefinition, Panel, ReportColumn,
                                Results, claim, grouped_claim)
from bench.suites.verdicts import ALL, MOST, Need
from bench.suites.plugins import register_paper

KD_METHODS = ("feddf", "fedgen", "fedftg", "dafkd")
BASELINES = ("fedavg", "fedprox")
SENSITIVITY: dict[str, tuple[str, float]] = {  # Figure 6 (§6 R9): each variant's parameter and value
    "dafkd_e5": ("E", 5), "dafkd_e10": ("E", 10), "dafkd_e40": ("E", 40),
    "dafkd_b16": ("B", 16), "dafkd_b64": ("B", 64), "dafkd_b128": ("B", 128),
    "dafkd_d32": ("d", 32), "dafkd_d64": ("d", 64), "dafkd_d128": ("d", 128), "dafkd_d256": ("d", 256)}
DEFAULTS = {"E": 20.0, "B": 32.0, "d": 100.0}  # DaFKD's own row: E = 20, B = 32, d = 100 (§1.4)
E_PLATEAU, FLAT = 0.01, 0.02  # [I] "E = 20 and E = 40 are comparable": within 1 point; "similar": within 2
ACTIVE_RATIO = 0.4  # r of every column but Figure 5's
DAFKD_MECHANISMS = (("dafkd", "alpha_entropy"), ("dafkd", "gen_coverage"))  # its domain weights and its generator
GENERATORS = (("fedgen", "gen_fidelity"), ("fedftg", "gen_fidelity"))  # the other KD methods' generators


def _parameter(key: str, letter: str) -> float | None:
    """The α ("a") or active ratio ("r") a column key names (``svhn-a0.1-r0.2``, ``a0.5``), if any."""
    match = re.search(rf"(?:^|-){letter}(\d+(?:\.\d+)?)(?:-|$)", key)
    return float(match.group(1)) if match else None


class DaFKD(Paper):
    def printed(self) -> Results:
        """The printed tables in our units: accuracies as fractions (printed % / 100), rounds as printed."""
        results = super().printed()
        for (method, key, measure), value in list(results.values.items()):
            scale = self.definition.tables[self.definition.table_of(key)].measures[measure].scale
            results.values[method, key, measure] = value / scale
        return results

    def _panel(self, results: Results, column: ReportColumn) -> str:
        """A figure panel: the column's dataset, or "ours" for an analogue (the proxy's one dataset)."""
        groups = results.groups(column)
        return self.definition.groups.get(groups[0] or "", "?") if column.exact else "ours (analogues)"

    def claims(self, results: Results) -> list[Claim]:
        """§6's claims and acceptance checks and the paper's text claims (§4 "Text claims"), each as comparisons of
        cells (bench/suites/paper.py), judged on ours by the rule of bench/suites/verdicts.py. On the printed
        tables "beats" is strict (>) and a rank ("first", "among the two fastest") counts ties as not beaten;
        fewer rounds are better, and a target never reached is a tie with another never reached (not measured on
        ours). Claims on DaFKD's domain weighting rest on α̂'s entropy, those on the generators on theirs."""
        d = self.definition
        beats = results.beats
        cols1, cols2 = results.table("table1"), results.table("table2")
        cols3a, cols3b = results.table("table3a"), results.table("table3b")
        printed = self.printed()

        def paper_first(column: ReportColumn) -> bool:  # the paper ranks DaFKD first in most columns it stands for
            firsts = [printed.rank("dafkd", printed.column(key), "acc") == 1 for key in column.stands_for]
            return sum(firsts) > len(firsts) / 2

        def first(column: ReportColumn, table: str, measure: str) -> list[Comparison | None]:
            """DaFKD not beaten by any other row of the table in this cell (on ours: beats each)."""
            return [beats("dafkd", m, column, measure, strict=False) for m in d.rows(table) if m != "dafkd"]

        svhn = [c for c in cols1 if "svhn" in results.groups(c)]
        svhn01 = [c for c in svhn if _parameter(c.key, "a") == 0.1]
        fast = [c for c in cols2 if {"svhn", "fmnist"} & set(results.groups(c))]
        among_two = Need(but=1)
        return [
            grouped_claim("DaFKD ranks first in ≥ 8 of the 10 Table-1 cells where the paper ranks it first (§6)",
                          results, [first(c, "table1", "acc") for c in cols1 if paper_first(c)], Need(0.8),
                          rests_on=DAFKD_MECHANISMS),
            grouped_claim("DaFKD is best in most Table-1 cells (§4: 10 of 12)", results,
                          [first(c, "table1", "acc") for c in cols1], MOST, rests_on=DAFKD_MECHANISMS),
            self._margin_claim("SVHN α=0.1: DaFKD's margin over the best baseline is ≥ 3 points (§6; the paper: "
                               "+6.02)" + ("" if results.by_value else " (the analogue of SVHN α=0.1)"),
                               results, svhn01, 0.03, None),
            self._margin_claim("DaFKD surpasses the second best by 2-6 points on SVHN (§4 text; 0.005 of rounding)",
                               results, svhn, 0.02 - 0.00005, 0.06 + 0.00005),
            grouped_claim("The KD methods (FedDF, FedGen, FedFTG, DaFKD) beat FedAvg and FedProx in most Table-1 cells "
                          "(§4 text)", results, [[beats(m, b, c, "acc") for b in BASELINES]
                                                 for c in cols1 for m in KD_METHODS], MOST,
                          rests_on=DAFKD_MECHANISMS + GENERATORS),
            grouped_claim("Rounds to target: DaFKD among the two fastest on SVHN and FMNIST (§6)", results,
                          [first(c, "table2", "rounds") for c in fast], ALL, among_two, rests_on=DAFKD_MECHANISMS),
            grouped_claim("DaFKD reaches most best and second-best rounds to target (Table 2, §4)", results,
                          [first(c, "table2", "rounds") for c in cols2], MOST, among_two, rests_on=DAFKD_MECHANISMS),
            claim("Ablation: DaFKD beats DaFKD^no-correlation in ≥ 7 of 8 cells (§6; the text: all)", results,
                  [beats("dafkd", "dafkd_no_correlation", c, "ablation_acc") for c in cols3a], Need(7 / 8),
                  rests_on=(("dafkd", "alpha_entropy"),)),
            claim("Ablation: parameter sharing gives higher accuracy in most cases (Table 3a)", results,
                  [beats("dafkd", "dafkd_no_sharing", c, "ablation_acc") for c in cols3a], MOST),
            claim("Ablation: sharing consistently costs fewer rounds (Table 3b: DaFKD < DaFKD^no-sharing)", results,
                  [beats("dafkd", "dafkd_no_sharing", c, "ablation_rounds") for c in cols3b]),
            claim("Ablation: sharing accelerates more than correlations (Table 3b: no-sharing needs more rounds "
                  "than no-correlation, most rows)", results,
                  [beats("dafkd_no_correlation", "dafkd_no_sharing", c, "ablation_rounds") for c in cols3b], MOST),
            claim("Every method improves as heterogeneity decreases: accuracy at the largest α beats the "
                  "smallest (Fig. 3)", results, self._trends(results, ("table1", "figure3"), "a")),
            grouped_claim("DaFKD is best at every active ratio r (Fig. 5)", results,
                          [first(c, c.table, self._measure(c)) for c in self._ratio_columns(results)],
                          rests_on=DAFKD_MECHANISMS),
            claim("Accuracy increases with the active ratio r: the largest r beats the smallest (Fig. 5)", results,
                  self._trends(results, ("figure5",), "r")),
            *self._sensitivity_claims(results),
            claim("Diagnostic (R10, not the paper's): the α̂-weighted ensemble is at least as accurate as the uniform "
                  "one at α ≤ 0.1, in most columns", results,
                  [self._weighted(results, c) for c in results.table("diagnostic")
                   if (_parameter(c.key, "a") or 1.0) <= 0.1], MOST,
                  rests_on=(("dafkd", "alpha_entropy"),)),
        ]

    # -- claim helpers --------------------------------------------------------------------------------------

    @staticmethod
    def _weighted(results: Results, column: ReportColumn) -> Comparison | None:
        """DaFKD's α̂-weighted ensemble at least as accurate as its uniform one, on the same runs (paired)."""
        weighted, uniform = results.sample("dafkd", column, "weighted"), results.sample("dafkd", column, "uniform")
        return None if weighted is None or uniform is None else Comparison(weighted, uniform, strict=False)

    def _margin_claim(self, text: str, results: Results, columns: list[ReportColumn], low: float,
                      high: float | None) -> Claim:
        """DaFKD's margin over the best other row of Table 1 lies in [low, high] in every column: it beats each other
        row by ``low``, and (with ``high``) the runner-up is within ``high`` of it; the evidence names the margins."""
        others = [m for m in self.definition.rows("table1") if m != "dafkd"]
        groups, margins = [], []
        for column in columns:
            group = [results.beats("dafkd", m, column, "acc", low, strict=False) for m in others]
            present = {m: v for m in others if (v := results.value(m, column, "acc")) is not None}
            mine = results.value("dafkd", column, "acc")
            if present and mine is not None:
                runner_up = max(present, key=present.__getitem__)
                margins.append(f"{column.label} {100 * (mine - present[runner_up]):+.2f}")
                if high is not None:
                    group.append(results.beats(runner_up, "dafkd", column, "acc", -high, strict=False))
            groups.append(group)
        return grouped_claim(text, results, groups, rests_on=DAFKD_MECHANISMS, note=", ".join(margins))

    @staticmethod
    def _measure(column: ReportColumn) -> str:
        return next(iter(column.statistics))

    def _ratio_columns(self, results: Results) -> list[ReportColumn]:
        """Figure 5's columns and the r = 0.4 columns they extend (Table 1's α = 0.1 of the same datasets)."""
        fig5 = results.table("figure5")
        groups = {g for c in fig5 for g in results.groups(c)}
        base = [c for c in results.table("table1") if _parameter(c.key, "a") == 0.1 and groups & set(results.groups(c))]
        return fig5 + base

    def _placed(self, results: Results, columns: list[ReportColumn], letter: str) -> dict[str, list[tuple[float, ReportColumn]]]:
        """Per panel (dataset, or the analogues): (α or r, column) over ``columns`` (r = 0.4 where a column names
        none)."""
        out: dict[str, list[tuple[float, ReportColumn]]] = {}
        for column in columns:
            x = _parameter(column.key, letter)
            x = ACTIVE_RATIO if x is None and letter == "r" else x
            if x is not None:
                out.setdefault(self._panel(results, column), []).append((x, column))
        return out

    def _series(self, results: Results, columns: list[ReportColumn], letter: str,
                methods: list[str]) -> dict[str, dict[str, list[tuple[float, float]]]]:
        """Per panel (dataset, or the analogues), per method: (α or r, accuracy) over ``columns``."""
        out: dict[str, dict[str, list[tuple[float, float]]]] = {}
        for panel, placed in self._placed(results, columns, letter).items():
            for x, column in placed:
                for method in methods:
                    if (y := results.value(method, column, self._measure(column))) is not None:
                        out.setdefault(panel, {}).setdefault(method, []).append((x, y))
        return {p: {m: sorted(points) for m, points in series.items()} for p, series in out.items()}

    def _trends(self, results: Results, tables: tuple[str, ...], letter: str) -> list[Comparison | None]:
        """Per panel and method with ≥ 2 points: its accuracy at the largest x beats that at the smallest (the two
        columns' seeds, unpaired)."""
        columns = ([c for t in tables for c in results.table(t)] if letter == "a"
                   else self._ratio_columns(results))
        out: list[Comparison | None] = []
        for placed in self._placed(results, columns, letter).values():
            for method in self.definition.rows("table1"):
                points = sorted((x, value, column) for x, column in placed
                                if (value := results.value(method, column, self._measure(column))) is not None)
                if len(points) > 1:
                    high, low = (results.sample(method, points[i][2], self._measure(points[i][2])) for i in (-1, 0))
                    out.append(None if high is None or low is None else Comparison(high, low))
        return out

    def _sensitivity(self, results: Results) -> dict[str, list[tuple[float, float]]]:
        """Figure 6: per parameter (E, B, d), DaFKD's (value, accuracy) points, its own row at the defaults."""
        out: dict[str, list[tuple[float, float]]] = {name: [] for name in DEFAULTS}
        for column in results.table("figure6"):
            base = results.value("dafkd", column, "sensitivity_acc")
            for name, default in DEFAULTS.items():
                if base is not None:
                    out[name].append((default, base))
            for method, (name, value) in SENSITIVITY.items():
                if (y := results.value(method, column, "sensitivity_acc")) is not None:
                    out[name].append((value, y))
        return {name: sorted(points) for name, points in out.items()}

    def _sensitivity_claims(self, results: Results) -> list[Claim]:
        """Figure 6 on DaFKD's own row (E = 20, B = 32, d = 100) and its variants, paired on each column's seeds;
        "comparable" and "similar" within a band are the differences both ways within it."""
        measure, beats = "sensitivity_acc", results.beats
        variants = {name: ["dafkd", *(m for m, (n, _) in SENSITIVITY.items() if n == name)] for name in DEFAULTS}
        columns = results.table("figure6")

        def within(a: str, b: str, column: ReportColumn, band: float) -> list[Comparison | None]:
            return [beats(a, b, column, measure, -band, strict=False),
                    beats(b, a, column, measure, -band, strict=False)]

        return [
            claim("Accuracy increases with E at first: E = 20 beats E = 5 and 10 (Fig. 6a)", results,
                  [beats("dafkd", m, c, measure) for c in columns for m in ("dafkd_e5", "dafkd_e10")]),
            claim(f"E = 20 and E = 40 are comparable: within {100 * E_PLATEAU:g} point (Fig. 6a) [I]", results,
                  [w for c in columns for w in within("dafkd", "dafkd_e40", c, E_PLATEAU)]),
            claim(f"Accuracy is similar across B and across d: each within {100 * FLAT:g} points (Fig. 6b, c) [I]",
                  results, [w for c in columns for name in ("B", "d") for i, a in enumerate(variants[name])
                            for b in variants[name][i + 1:] for w in within(a, b, c, FLAT)]),
        ]

    # -- figures ----------------------------------------------------------------------------------------------

    def figures(self, ours: Results, curve: Curve) -> list[LineFigure]:
        """Figures 3-6 from our runs: accuracy against α (Table 1 and Figure 3's columns), learning curves at
        α = 0.1 every 5 rounds with a fitted cubic (every round for runs under 30 rounds), accuracy against r
        (Figure 5's columns and Table 1's α = 0.1, r = 0.4), and DaFKD against E, B and d."""
        rows = self.definition.rows("table1")
        alpha = self._series(ours, [c for t in ("table1", "figure3") for c in ours.table(t)], "a", rows)
        ratio = self._series(ours, self._ratio_columns(ours), "r", rows)
        learning = []
        for column in ours.table("table1"):
            if _parameter(column.key, "a") != 0.1:
                continue
            series = {m: curve(m, column.setting) for m in rows}
            every = 5 if max((len(p) for p in series.values()), default=0) >= 30 else 1
            learning.append(Panel(column.label, {m: [(r, v) for r, v in points if r % every == 0 or r == 1]
                                                 for m, points in series.items()}, fit=True))
        sensitivity = {name: points for name, points in self._sensitivity(ours).items() if len(points) > 1}
        figures = [
            LineFigure("figure3", "Figure 3: test accuracy vs data heterogeneity α (final round, mean over seeds)",
                       "α (log scale)", "accuracy", [Panel(p, s, log_x=True) for p, s in alpha.items()]),
            LineFigure("figure4", "Figure 4: learning curves at α = 0.1 (mean over seeds; line: least-squares cubic)",
                       "round", "accuracy", learning),
            LineFigure("figure5", "Figure 5: test accuracy vs the ratio r of active clients (α = 0.1)",
                       "r", "accuracy", [Panel(p, s) for p, s in ratio.items()]),
            LineFigure("figure6", "Figure 6: DaFKD vs local steps E, batch size B and noise dimension d",
                       "value", "accuracy", [Panel(name, {"dafkd": points}, log_x=True)
                                             for name, points in sensitivity.items()]),
        ]
        return [figure for figure in figures if figure.panels]  # a profile without the columns has no such figure


HEADS = ("body", "classifier", "discriminator")  # ResNet11's parts, each printed separately
MODEL_CONFIGS = (  # the (model, dataset) configurations and the parameter counts printed
    # DaFKD (CVPR 2023): ResNet11 = shared extractor phi (body) + classifier h_c + domain head h_d;
    # the DCGAN generator G_k; the separate discriminators of the no-sharing ablation.
    PaperConfig("DaFKD", CLIENT_MODEL, "dafkd_resnet11", ("mnist", "fashionmnist"), (1, 28, 28), 10,
                printed("817.6k", "2,570", "257", parts=HEADS), "pipelines/dafkd/NOTES.md §3.3"),
    PaperConfig("DaFKD", CLIENT_MODEL, "dafkd_resnet11", ("emnist-byclass",), (1, 28, 28), 62,
                printed("817.6k", "15,934", "257", parts=HEADS), "pipelines/dafkd/NOTES.md §3.3"),
    PaperConfig("DaFKD", CLIENT_MODEL, "dafkd_resnet11", ("svhn",), (3, 32, 32), 10,
                printed("817.9k", "2,570", "257", parts=HEADS), "pipelines/dafkd/NOTES.md §3.3"),
    PaperConfig("DaFKD", IMAGE_GENERATOR, "dcgan_generator", ("mnist", "fashionmnist"), (1, 28, 28), 10,
                printed("1.07M"), "pipelines/dafkd/NOTES.md §3.4 G-DCGAN-28", {"noise_dim": 100}),
    PaperConfig("DaFKD", IMAGE_GENERATOR, "dcgan_generator", ("emnist-byclass",), (1, 28, 28), 62,
                printed("1.07M"), "pipelines/dafkd/NOTES.md §3.4 G-DCGAN-28", {"noise_dim": 100}),
    PaperConfig("DaFKD", IMAGE_GENERATOR, "dcgan_generator", ("svhn",), (3, 32, 32), 10, printed("1.07M"),
                "pipelines/dafkd/NOTES.md §3.4 G-DCGAN-32", {"noise_dim": 100}),
    PaperConfig("DaFKD", DISCRIMINATOR, "dafkd_discriminator", ("mnist", "fashionmnist", "emnist-byclass"),
                (1, 28, 28), 1, printed("3.27M"), "pipelines/dafkd/NOTES.md §1.5 (no-sharing ablation)"),
    PaperConfig("DaFKD", DISCRIMINATOR, "dafkd_discriminator", ("svhn",), (3, 32, 32), 1, printed("663,361"),
                "pipelines/dafkd/NOTES.md §1.5 (no-sharing ablation)"),
)

PAPER = register_paper(DaFKD(PaperDefinition.load(Path(__file__).with_name("paper.yaml")), MODEL_CONFIGS))
