"""FedAKD's own figures (pipelines/fedakd/NOTES.md §6.2, §8 R0 and R10-R14), drawn by the report stage (the plug-in's
:meth:`~bench.suites.paper.Paper.own_figures`, paper.py) from the suite's
partitions and runs, on its simulated covariate-shift settings (the paper's Figs. 1, 2 and 4 are on the
private EHR data):

* ``fedakd_partition_sanity.png`` and ``fedakd_partition_sanity.md`` (R0): per covariate-shift setting, the
  client sizes, distinct samples, Algorithm 2's partition redone from the seed (it must equal the saved one)
  with δ_kᵀΣ⁻¹δ_k, the share of local test images some client trains on (as Algorithm 2 draws them, and in
  the partition: 0 with ``local_test: held_out``), the clients' classes, and the mean KL of the clients'
  Gaussians to the global one in the partition's 2-D PCA space, against C.
* ``fedakd_fig1_contributions.png`` (R12, Fig. 1): (a) each client's KL against its size; (b-e) each client's
  Standalone accuracy against the contribution CFFL, CGSV and FedAVE learned (their final reputation) and
  FedAvg's data share, with Pearson's r.
* ``fedakd_fig2_correct_incorrect.png`` (R13, Fig. 2): FedAvg's features of correctly and incorrectly
  classified samples projected to 1-D (PCA), their densities (KDE) globally and at two clients, and per
  client the KL of the fitted 1-D Gaussians to the global one. Needs FedAvg's saved model (``tracking.
  save_model`` on the ICS(5) setting).
* ``fedakd_fig3_runtime_loss.png`` (R10, R11, Fig. 3): seconds per round of every method, and the global
  model's training loss per round for FedAvg and FedAKD.
* ``fedakd_fig4_kl_approximation.png`` (R14, Fig. 4): per client, the KL of its Gaussian to the global one
  ("Real"), Theorem 2.2's approximation, Eq. (1) as printed, with δ_μ = μ_k − μ, δ_Σ = Σ_k − Σ and A = n_k
  ("Approx"), and the KL of a random subsample of the client's size ("Random"), in an M-dimensional
  whitened PCA space (the paper: a VAE's 100-D latent; here M = min(100, d, ⌊n_min/2⌋) so every client's
  covariance is invertible).

The ICS(5) setting is the first of the suite whose partition is Algorithm 2's ICS with C = 5 (in the
``paper_code`` profile, devide.py's ICS).
"""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
from scipy.stats import gaussian_kde, pearsonr

from bench.data import load_dataset
from bench.data.covariate_shift import FedAKDParams, algorithm2_draws, pca_coordinates, trained_test_share
from bench.data.partition import Partition, load_partition
from bench.data.prepared import PreparedDataset
from bench.fileio import atomic_write, write_text
from bench.suites.paper import FinishedRun, RunKey, SuiteView

SHIFT_SETTINGS = ("pow", "bcs", "ics")


def gaussian_kl(mu0: np.ndarray, cov0: np.ndarray, mu1: np.ndarray, cov1: np.ndarray) -> float:
    """KL(N(μ0, Σ0) ‖ N(μ1, Σ1)) = ½[tr(Σ1⁻¹Σ0) + (μ1−μ0)ᵀΣ1⁻¹(μ1−μ0) − M + ln(det Σ1/det Σ0)] (§3.4)."""
    inv = np.linalg.inv(cov1)
    diff = mu1 - mu0
    logdet = np.linalg.slogdet(cov1)[1] - np.linalg.slogdet(cov0)[1]
    return float(0.5 * (np.trace(inv @ cov0) + diff @ inv @ diff - len(mu0) + logdet))


def theorem22_approximation(delta_mu: np.ndarray, delta_sigma: np.ndarray, sigma: np.ndarray, size: int) -> float:
    """Theorem 2.2, Eq. (1) as printed: ¼‖Σ⁻¹δ_ΣΣ⁻¹‖_F² − ½tr((δ_ΣΣ⁻¹)³) + ½δ_μᵀΣ⁻¹(I − δ_ΣΣ⁻¹)δ_μ + M(M+3)/(4A)."""
    inv = np.linalg.inv(sigma)
    m = len(delta_mu)
    ds = delta_sigma @ inv
    return float(0.25 * np.linalg.norm(inv @ delta_sigma @ inv, "fro") ** 2 - 0.5 * np.trace(ds @ ds @ ds)
                 + 0.5 * delta_mu @ (inv @ (np.eye(m) - ds)) @ delta_mu + m * (m + 3) / (4 * size))


def fit(points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and covariance (rows are samples)."""
    return points.mean(axis=0), np.atleast_2d(np.cov(points, rowvar=False))


def _save(fig, path: Path) -> Path:  # type: ignore[no-untyped-def]
    return atomic_write(path, lambda handle: fig.savefig(handle, format="png", dpi=110))


def _figure(width: float, height: float, panels: int):  # type: ignore[no-untyped-def]
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    return fig, fig.subplots(1, panels, squeeze=False)[0]


def shift_settings(suite: SuiteView) -> dict[str, FedAKDParams]:
    """The suite's FedAKD covariate-shift settings (POW, BCS, ICS in either form) and their partition parameters."""
    out = {}
    for setting in suite.settings:
        config = suite.partition_config(setting)
        if config.partition.scheme == "fedakd":
            params = FedAKDParams.model_validate(config.partition.scheme_params)
            if params.setting in SHIFT_SETTINGS:
                out[setting] = params
    return out


def ics5_setting(suite: SuiteView) -> str | None:
    """The first ICS setting with C = 5 (devide.py's form, where C is unused, only if Algorithm 2's is absent)."""
    candidates = [(p.form != "paper", i, s) for i, (s, p) in enumerate(shift_settings(suite).items())
                  if p.setting == "ics" and p.shift == 5.0]
    return min(candidates)[2] if candidates else None


def ics5_inputs(suite: SuiteView, data_dir: Path | None) -> tuple[str, PreparedDataset, Partition] | None:
    """The ICS(5) setting, its dataset and its partition (None: the suite has no such setting)."""
    setting = ics5_setting(suite)
    if setting is None:
        return None
    config = suite.partition_config(setting)
    return setting, load_dataset(config.dataset.name, data_dir), load_partition(suite.partition_dir(setting))


def client_pools(partition: Partition) -> list[np.ndarray]:
    """Each client's samples before its local split (train and local test, duplicates kept), sorted."""
    return [np.sort(np.concatenate([t, h])) for t, h in zip(partition.train, partition.local_test)]


# -- R0 ----------------------------------------------------------------------------------------


def partition_sanity(suite: SuiteView, folder: Path, data_dir: Path | None) -> list[Path]:
    settings = shift_settings(suite)
    if not settings:
        return []
    rows, points = [], []
    for setting, params in settings.items():
        config = suite.partition_config(setting)
        data = load_dataset(config.dataset.name, data_dir)
        partition = load_partition(suite.partition_dir(setting))
        pools = client_pools(partition)
        coords = pca_coordinates(data.train_x)[:, :2]
        mu, cov = fit(coords)
        kls = [gaussian_kl(*fit(coords[p]), mu, cov) for p in pools if len(p) > 2]
        check = "—"
        leaked = f"{100 * trained_test_share(partition.train, partition.local_test):.1f} %"
        if params.form == "paper" and params.setting != "pow":
            made = algorithm2_draws(data.train_x, partition.num_clients, partition.seed, params)
            inv = np.linalg.inv(made.sigma)
            same = all(np.array_equal(a, b) for a, b in zip([*made.train, *made.local_test],
                                                            [*partition.train, *partition.local_test]))
            norms = [float(d @ inv @ d) for d in made.deltas]
            check = f"{'yes' if same else '**NO**'}; δᵀΣ⁻¹δ ∈ [{min(norms):.6g}, {max(norms):.6g}]"
            leaked = f"{100 * trained_test_share(made.as_drawn_train, made.local_test):.1f} % → {leaked}"
        classes = [int((c > 0).sum()) for c in partition.train_counts]
        rows.append([setting, params.form, params.setting.upper(), "—" if params.setting == "pow" else f"{params.shift:g}",
                     " ".join(str(len(p)) for p in pools), " ".join(str(len(np.unique(p))) for p in pools), check,
                     leaked, " ".join(map(str, classes)), f"{np.mean(kls):.4f}"])
        points.append((params, float(np.mean(kls))))
    header = ["setting", "form", "split", "C", "client sizes", "distinct samples", "Algorithm 2 redrawn = partition",
              "local test images some client trains on (as drawn → partition)", "classes per client", "mean KL(client ‖ global), 2-D PCA"]
    table = "\n".join(["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
                      + ["| " + " | ".join(r) + " |" for r in rows])
    # one point per C: settings that share a partition (FedAKD's Table 3 setting is ICS(5) again) count once
    by_c = sorted(dict((p.shift, kl) for p, kl in points if p.form == "paper" and p.setting == "ics").items())
    trend = ("" if len(by_c) < 2 else "\n\nThe clients' mean KL to the global Gaussian "
             + ("**increases** with C" if all(a[1] < b[1] for a, b in zip(by_c, by_c[1:])) else "does **not** increase with C")
             + " on Algorithm 2's ICS partitions: " + ", ".join(f"C = {c:g}: {kl:.4f}" for c, kl in by_c) + ".")
    written = [write_text(folder / "fedakd_partition_sanity.md",
                          f"# Partition sanity (pipelines/fedakd/NOTES.md §8 R0), suite `{suite.name}`\n\n{table}{trend}\n")]
    fig, (ax,) = _figure(5.5, 3.6, 1)
    for form, marker in (("paper", "o"), ("code", "s")):
        shown = sorted((p.shift, kl) for p, kl in points if p.form == form and p.setting == "ics")
        if shown and form == "paper":
            ax.plot(*zip(*shown), marker=marker, label="ICS, Algorithm 2")
        elif shown:
            ax.axhline(shown[0][1], linestyle="--", color="tab:orange", label="ICS, devide.py (C unused)")
    for p, kl in points:
        if p.setting == "bcs":
            ax.scatter([p.shift], [kl], marker="^", label=f"BCS ({p.form})")
    ax.set(xlabel="C (δᵀΣ⁻¹δ)", ylabel="mean KL(client ‖ global)", title="R0: shift grows with C")
    ax.legend(fontsize="small")
    written.append(_save(fig, folder / "fedakd_partition_sanity.png"))
    return written


# -- Fig. 1 --------------------------------------------------------------------------------------


def final_client_values(record: FinishedRun, metric: str) -> dict[int, float]:
    records = record.records
    if metric not in records.values:
        return {}
    return records.clients(metric, max(records.values[metric]))


def contributions(suite: SuiteView, runs: Mapping[RunKey, FinishedRun], folder: Path, data_dir: Path | None) -> list[Path]:
    inputs = ics5_inputs(suite, data_dir)
    if inputs is None:
        return []
    setting, data, partition = inputs
    coords = pca_coordinates(data.train_x)[:, :2]
    mu, cov = fit(coords)
    pools = client_pools(partition)
    sizes = np.array([len(t) for t in partition.train], dtype=float)
    panels = [("CFFL reputation", "cffl", "reputation"), ("CGSV reputation", "cgsv", "reputation"),
              ("FedAVE reputation", "fedave", "reputation"), ("FedAvg data share", "fedavg", None)]
    fig, axes = _figure(17, 3.4, 5)
    axes[0].scatter(sizes, [gaussian_kl(*fit(coords[p]), mu, cov) for p in pools])
    axes[0].set(xlabel="client train size", ylabel="KL(client ‖ global), 2-D PCA", title="(a) shift and size")
    for ax, (title, method, metric) in zip(axes[1:], panels):
        xs, ys = [], []
        for seed in suite.seeds:
            alone, run = runs.get(("standalone", setting, seed)), runs.get((method, setting, seed))
            if alone is None or run is None:
                continue
            acc = final_client_values(alone, "local_acc")
            score = final_client_values(run, metric) if metric else dict(enumerate(sizes / sizes.sum()))
            for cid in sorted(set(acc) & set(score)):
                xs.append(acc[cid])
                ys.append(score[cid])
        ax.scatter(xs, ys, s=14)
        r = pearsonr(xs, ys).statistic if len(xs) > 2 and np.ptp(xs) > 0 and np.ptp(ys) > 0 else float("nan")
        ax.set(xlabel="Standalone accuracy", ylabel="contribution", title=f"({'bcde'[panels.index((title, method, metric))]}) "
               f"{title}, r = {r:.2f}")
    fig.suptitle(f"Fig. 1 analogue, {suite.name} {setting} (all seeds)", fontsize="medium")
    return [_save(fig, folder / "fedakd_fig1_contributions.png")]


# -- Fig. 2 --------------------------------------------------------------------------------------


def correct_incorrect(suite: SuiteView, runs: Mapping[RunKey, FinishedRun], folder: Path, data_dir: Path | None) -> list[Path]:
    import torch
    from sklearn.decomposition import PCA

    from bench.models import build_model
    from bench.runner.federation import to_tensor

    setting = ics5_setting(suite)
    run = runs.get(("fedavg", setting, suite.seeds[0])) if setting else None
    if run is None or not (run.run_dir / "model.pt").exists():
        return []
    config = suite.config("fedavg", setting, suite.seeds[0])
    data = load_dataset(config.dataset.name, data_dir)
    model = build_model(config.model.name, data.image_shape, data.num_classes, **config.model.kwargs)
    model.load_state_dict(torch.load(run.run_dir / "model.pt", map_location="cpu", weights_only=True))
    model.eval()
    partition = load_partition(suite.partition_dir(setting))
    pools = [np.sort(t) for t in partition.train]
    with torch.no_grad():
        x = to_tensor(data.train_x[np.concatenate(pools)], data, torch.device("cpu"), config.dataset.normalize)
        features, logits = model(x)
    labels = data.train_y[np.concatenate(pools)]
    right = (logits.argmax(1).numpy() == labels)
    projected = PCA(n_components=1, random_state=0).fit_transform(features.numpy())[:, 0]
    owner = np.repeat(np.arange(len(pools)), [len(p) for p in pools])
    shown = [0, len(pools) - 1]  # the largest and the smallest client
    fig, axes = _figure(15, 3.6, 3)
    grid = np.linspace(projected.min(), projected.max(), 200)
    for ax, mask, title in ((axes[0], right, "(a) correct samples"), (axes[1], ~right, "(b) incorrect samples")):
        for who, label in [(None, "global"), *((c, f"client {c}") for c in shown)]:
            chosen = projected[mask & (owner == who if who is not None else True)]
            if len(chosen) > 2 and np.ptp(chosen) > 0:
                ax.plot(grid, gaussian_kde(chosen)(grid), label=label)
        ax.set(xlabel="1-D PCA of FedAvg's features", ylabel="density", title=title)
        ax.legend(fontsize="small")
    g_mu, g_var = projected.mean(), projected.var()
    kl = {"right": [], "wrong": []}
    for c in range(len(pools)):
        for name, mask in (("right", right), ("wrong", ~right)):
            v = projected[mask & (owner == c)]
            kl[name].append(gaussian_kl(np.array([v.mean()]), np.array([[v.var()]]), np.array([g_mu]), np.array([[g_var]]))
                            if len(v) > 2 and v.var() > 0 else np.nan)
    width = 0.4
    axes[2].bar(np.arange(len(pools)) - width / 2, kl["right"], width, label="correct")
    axes[2].bar(np.arange(len(pools)) + width / 2, kl["wrong"], width, label="incorrect")
    axes[2].set(xlabel="client", ylabel="KL(client ‖ global), 1-D Gaussians", title="(c) per-client KL")
    axes[2].legend(fontsize="small")
    fig.suptitle(f"Fig. 2 analogue, {suite.name} {setting}, FedAvg seed {suite.seeds[0]}", fontsize="medium")
    return [_save(fig, folder / "fedakd_fig2_correct_incorrect.png")]


# -- Fig. 3 --------------------------------------------------------------------------------------


def runtime_and_loss(suite: SuiteView, runs: Mapping[RunKey, FinishedRun], folder: Path) -> list[Path]:
    setting = ics5_setting(suite)
    if setting is None:
        return []
    methods = [m for m in suite.methods if suite.runs_on(m, setting)
               and all((m, setting, s) in runs for s in suite.seeds)]
    if not methods:
        return []
    seconds = [float(np.mean([runs[m, setting, s].seconds_per_round for s in suite.seeds]))
               for m in methods]
    fig, axes = _figure(13, 3.8, 2)
    axes[0].bar(range(len(methods)), seconds)
    axes[0].set_xticks(range(len(methods)), methods, rotation=60, ha="right", fontsize="small")
    axes[0].set(ylabel="seconds per round", title="(a) time per round (training and aggregation)")
    for method in ("fedavg", "fedakd"):
        series = [runs[method, setting, s].records.series("global_train_loss")
                  for s in suite.seeds if (method, setting, s) in runs
                  and "global_train_loss" in runs[method, setting, s].records.values]
        if series:
            rounds = sorted(series[0])
            axes[1].plot(rounds, [np.mean([s[r] for s in series]) for r in rounds], label=method)
    axes[1].set(xlabel="round", ylabel="CE of the global model on ∪ D_k^tr", title="(b) global training loss")
    axes[1].legend(fontsize="small")
    fig.suptitle(f"Fig. 3 analogue, {suite.name} {setting} (mean over seeds)", fontsize="medium")
    return [_save(fig, folder / "fedakd_fig3_runtime_loss.png")]


# -- Fig. 4 --------------------------------------------------------------------------------------


def kl_approximation(suite: SuiteView, folder: Path, data_dir: Path | None) -> list[Path]:
    from sklearn.decomposition import PCA

    inputs = ics5_inputs(suite, data_dir)
    if inputs is None:
        return []
    setting, data, partition = inputs
    pools = client_pools(partition)
    flat = data.train_x.reshape(len(data.train_x), -1).astype(np.float64) / 255.0
    dims = int(min(100, flat.shape[1], max(2, min(len(p) for p in pools) // 2)))
    latent = PCA(n_components=dims, whiten=True, random_state=42).fit_transform(flat)
    mu, sigma = fit(latent)
    rng = np.random.default_rng(partition.seed)
    real, approx, random = [], [], []
    for pool in pools:
        mu_k, sigma_k = fit(latent[pool])
        real.append(gaussian_kl(mu_k, sigma_k, mu, sigma))
        approx.append(theorem22_approximation(mu_k - mu, sigma_k - sigma, sigma, len(pool)))
        sample = latent[rng.choice(len(latent), size=len(pool), replace=False)]
        random.append(gaussian_kl(*fit(sample), mu, sigma))
    fig, (ax,) = _figure(6.5, 3.8, 1)
    clients = np.arange(len(pools))
    for values, label, colour in ((real, "Real KL", "tab:red"), (approx, "Approx (Eq. 1)", "tab:blue"),
                                  (random, "Random sampling", "tab:green")):
        ax.plot(clients, values, marker="o", label=label, color=colour)
    ax.set(xlabel="client (largest first)", ylabel="KL(client ‖ global)",
           title=f"Fig. 4 analogue: {dims}-D whitened PCA, {suite.name} {setting}")
    ax.legend(fontsize="small")
    return [_save(fig, folder / "fedakd_fig4_kl_approximation.png")]


def own_figures(suite: SuiteView, runs: Mapping[RunKey, FinishedRun], folder: Path, data_dir: Path | None) -> list[Path]:
    return [*partition_sanity(suite, folder, data_dir), *contributions(suite, runs, folder, data_dir),
            *correct_incorrect(suite, runs, folder, data_dir), *runtime_and_loss(suite, runs, folder),
            *kl_approximation(suite, folder, data_dir)]
