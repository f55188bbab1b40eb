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
from bench.suites.paper import (Claim, Curve, LineFigure, Paper, PaperDefinition, Panel, ReportColumn, Results,
                                pairs_claim)
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
        """§6's claims and acceptance checks and the paper's text claims (§4 "Text claims"); "beats" is
        strict (>), fewer rounds are better, a target never reached counts as infinitely many rounds."""
        d = self.definition
        acc, rank = results.value, results.rank
        cols1, cols2 = results.table("table1"), results.table("table2")
        cols3a, cols3b = results.table("table3a"), results.table("table3b")
        printed = self.printed()

        def paper_first(column: ReportColumn) -> bool:  # the paper ranks DaFKD first in most columns it stands for
            firsts = [printed.rank("dafkd", printed.column(key), "acc") == 1 for key in column.stands_for]
            return sum(firsts) > len(firsts) / 2

        firsts = [c for c in cols1 if paper_first(c)]
        won = [c for c in firsts if rank("dafkd", c, "acc") == 1]
        svhn = [c for c in cols1 if "svhn" in results.groups(c)]
        svhn01 = [c for c in svhn if _parameter(c.key, "a") == 0.1]
        fast = [c for c in cols2 if {"svhn", "fmnist"} & set(results.groups(c))]
        ranks2 = [r for c in cols2 if (r := rank("dafkd", c, "rounds")) is not None]
        fast_ranks = [r for c in fast if (r := rank("dafkd", c, "rounds")) is not None]
        ratio_ranks = [r for c in self._ratio_columns(results) if (r := rank("dafkd", c, self._measure(c))) is not None]
        return [
            self._share_claim("DaFKD ranks first in ≥ 8 of the 10 Table-1 cells where the paper ranks it first (§6)",
                              len(won), len([c for c in firsts if acc("dafkd", c, "acc") is not None]), 0.8),
            self._share_claim("DaFKD is best in most Table-1 cells (§4: 10 of 12)",
                              sum(rank("dafkd", c, "acc") == 1 for c in cols1),
                              sum(acc("dafkd", c, "acc") is not None for c in cols1), 0.5, strict=True),
            self._margin_claim("SVHN α=0.1: DaFKD's margin over the best baseline is ≥ 3 points (§6; the paper: "
                               "+6.02)" + ("" if results.by_value else " (the analogue of SVHN α=0.1)"),
                               results, svhn01, 0.03, None),
            self._margin_claim("DaFKD surpasses the second best by 2-6 points on SVHN (§4 text; 0.005 of rounding)",
                               results, svhn, 0.02 - 0.00005, 0.06 + 0.00005),
            pairs_claim("The KD methods (FedDF, FedGen, FedFTG, DaFKD) beat FedAvg and FedProx in most Table-1 cells "
                        "(§4 text)", [(acc(m, c, "acc"), self._best(results, BASELINES, c, "acc"))
                                      for c in cols1 for m in KD_METHODS], "most"),
            self._share_claim("Rounds to target: DaFKD among the two fastest on SVHN and FMNIST (§6)",
                              sum(r <= 2 for r in fast_ranks), len(fast_ranks), 1.0),
            self._share_claim("DaFKD reaches most best and second-best rounds to target (Table 2, §4)",
                              sum(r <= 2 for r in ranks2), len(ranks2), 0.5, strict=True),
            self._share_claim("Ablation: DaFKD beats DaFKD^no-correlation in ≥ 7 of 8 cells (§6; the text: all)",
                              *self._wins(results, cols3a, "ablation_acc", "dafkd", "dafkd_no_correlation"), 7 / 8),
            pairs_claim("Ablation: parameter sharing gives higher accuracy in most cases (Table 3a)",
                        [(acc("dafkd", c, "ablation_acc"), acc("dafkd_no_sharing", c, "ablation_acc")) for c in cols3a],
                        "most"),
            pairs_claim("Ablation: sharing consistently costs fewer rounds (Table 3b: DaFKD < DaFKD^no-sharing)",
                        [(acc("dafkd_no_sharing", c, "ablation_rounds"), acc("dafkd", c, "ablation_rounds"))
                         for c in cols3b], "all"),
            pairs_claim("Ablation: sharing accelerates more than correlations (Table 3b: no-sharing needs more rounds "
                        "than no-correlation, most rows)",
                        [(acc("dafkd_no_sharing", c, "ablation_rounds"), acc("dafkd_no_correlation", c, "ablation_rounds"))
                         for c in cols3b], "most"),
            pairs_claim("Every method improves as heterogeneity decreases: accuracy at the largest α beats the "
                        "smallest (Fig. 3)", self._trend_pairs(results, ("table1", "figure3"), "a"), "all"),
            self._share_claim("DaFKD is best at every active ratio r (Fig. 5)", sum(r == 1 for r in ratio_ranks),
                              len(ratio_ranks), 1.0),
            pairs_claim("Accuracy increases with the active ratio r: the largest r beats the smallest (Fig. 5)",
                        self._trend_pairs(results, ("figure5",), "r"), "all"),
            *self._sensitivity_claims(results),
            self._ensemble_claim(results),
        ]

    # -- claim helpers --------------------------------------------------------------------------------------

    @staticmethod
    def _share_claim(text: str, wins: int, cells: int, share: float, strict: bool = False) -> Claim:
        """Holds when wins/cells ≥ share (> share with ``strict``); not measured without cells."""
        holds = None if not cells else (wins > share * cells if strict else wins >= share * cells - 1e-9)
        return Claim(text, holds, f"{wins}/{cells}")

    @staticmethod
    def _wins(results: Results, columns: list[ReportColumn], measure: str, a: str, b: str) -> tuple[int, int]:
        pairs = [(x, y) for c in columns if (x := results.value(a, c, measure)) is not None
                 and (y := results.value(b, c, measure)) is not None]
        return sum(x > y for x, y in pairs), len(pairs)

    def _best(self, results: Results, methods: tuple[str, ...], column: ReportColumn, measure: str) -> float | None:
        values = [v for m in methods if (v := results.value(m, column, measure)) is not None]
        return max(values) if values else None

    def _margin_claim(self, text: str, results: Results, columns: list[ReportColumn], low: float,
                      high: float | None) -> Claim:
        """DaFKD's margin over the best other row of Table 1 lies in [low, high] in every column."""
        margins = []
        for column in columns:
            mine = results.value("dafkd", column, "acc")
            others = self._best(results, tuple(m for m in self.definition.rows("table1") if m != "dafkd"), column,
                                "acc")
            if mine is not None and others is not None:
                margins.append((column.label, mine - others))
        if not margins:
            return Claim(text, None, "—")
        holds = all(m >= low and (high is None or m <= high) for _, m in margins)
        return Claim(text, holds, ", ".join(f"{label} {100 * m:+.2f}" for label, m in margins))

    @staticmethod
    def _measure(column: ReportColumn) -> str:
        return next(iter(column.statistics))

    def _ratio_columns(self, results: Results) -> list[ReportColumn]:
        """Figure 5's columns and the r = 0.4 columns they extend (Table 1's α = 0.1 of the same datasets)."""
        fig5 = results.table("figure5")
        groups = {g for c in fig5 for g in results.groups(c)}
        base = [c for c in results.table("table1") if _parameter(c.key, "a") == 0.1 and groups & set(results.groups(c))]
        return fig5 + base

    def _series(self, results: Results, columns: list[ReportColumn], letter: str,
                methods: list[str]) -> dict[str, dict[str, list[tuple[float, float]]]]:
        """Per panel (dataset, or the analogues), per method: (α or r, accuracy) over ``columns``."""
        out: dict[str, dict[str, list[tuple[float, float]]]] = {}
        for column in columns:
            x = _parameter(column.key, letter)
            x = ACTIVE_RATIO if x is None and letter == "r" else x
            if x is None:
                continue
            panel = out.setdefault(self._panel(results, column), {})
            for method in methods:
                if (y := results.value(method, column, self._measure(column))) is not None:
                    panel.setdefault(method, []).append((x, y))
        return {p: {m: sorted(points) for m, points in series.items()} for p, series in out.items()}

    def _trend_pairs(self, results: Results, tables: tuple[str, ...], letter: str) -> list[tuple[float | None, float | None]]:
        """Per panel and method with ≥ 2 points: (accuracy at the largest x, at the smallest x)."""
        columns = ([c for t in tables for c in results.table(t)] if letter == "a"
                   else self._ratio_columns(results))
        series = self._series(results, columns, letter, self.definition.rows("table1"))
        return [(points[-1][1], points[0][1]) for panel in series.values() for points in panel.values()
                if len(points) > 1]

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
        points = self._sensitivity(results)
        e = dict(points["E"])
        rises = [(e[20.0], e[x]) for x in (5.0, 10.0) if x in e and 20.0 in e]
        plateau = [abs(e[40.0] - e[20.0])] if 40.0 in e and 20.0 in e else []
        spreads = {name: max(y for _, y in pts) - min(y for _, y in pts)
                   for name, pts in points.items() if name != "E" and len(pts) > 1}
        return [
            pairs_claim("Accuracy increases with E at first: E = 20 beats E = 5 and 10 (Fig. 6a)", rises, "all"),
            Claim(f"E = 20 and E = 40 are comparable: within {100 * E_PLATEAU:g} point (Fig. 6a) [I]",
                  None if not plateau else plateau[0] <= E_PLATEAU,
                  "—" if not plateau else f"|Δ| = {100 * plateau[0]:.2f}"),
            Claim(f"Accuracy is similar across B and across d: each within {100 * FLAT:g} points (Fig. 6b, c) [I]",
                  None if not spreads else all(s <= FLAT for s in spreads.values()),
                  ", ".join(f"{name} range {100 * s:.2f}" for name, s in spreads.items()) or "—"),
        ]

    def _ensemble_claim(self, results: Results) -> Claim:
        """R10: the α̂-weighted ensemble at least as accurate as the uniform one at α ≤ 0.1, in most columns."""
        pairs = [(w, u) for c in results.table("diagnostic") if (_parameter(c.key, "a") or 1.0) <= 0.1
                 and (w := results.value("dafkd", c, "weighted")) is not None
                 and (u := results.value("dafkd", c, "uniform")) is not None]
        return self._share_claim("Diagnostic (R10, not the paper's): the α̂-weighted ensemble is at least as accurate "
                                 "as the uniform one at α ≤ 0.1, in most columns", sum(w >= u for w, u in pairs),
                                 len(pairs), 0.5, strict=True)

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
