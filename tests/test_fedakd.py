"""FedAKD (pipelines/fedakd/NOTES.md §1): its losses and aggregation by hand, its ablations and its code mode as
switches of one method; its partitions (§2); the collaborative-fairness statistics in both definitions (§3);
the suite mechanics its pipeline needs (equal wall-clock budgets, per-setting rows, per-setting method
overlays)."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from bench.algorithms.fedakd import DistilledCopy, FedAKDParams, correctly_predicted, distillation_objective
from bench.data.covariate_shift import algorithm2_draws, client_sizes, FedAKDParams as Scheme
from bench.data.partition import make_partition
from bench.errors import BenchError
from bench.runner.federation import run_federation
from bench.suites import equal_time_rounds, load_suite
from bench.suites.statistics import Records, Statistic, cf, cf_code
from bench.engine.ledger import Ledger
from bench.runner.rounds import run_round
from tests.conftest import small_config

# -- losses ---------------------------------------------------------------------------------------


def test_distillation_objective_is_ce_plus_weighted_kd_eq2_eq5() -> None:
    """Zero student logits: CE = ln 3 whatever the label; α = 0 is plain cross-entropy (no KD term)."""
    student = torch.zeros(2, 3, requires_grad=True)
    teacher = torch.tensor([[math.log(2), 0.0, 0.0]] * 2)
    y = torch.tensor([0, 2])
    loss = distillation_objective(student, teacher, y, 0.5, 1.0)
    assert float(loss.detach()) == pytest.approx(math.log(3) + 0.5 * 0.5 * math.log(9 / 8), rel=1e-6)
    assert float(distillation_objective(student, teacher, y, 0.0, 1.0).detach()) == pytest.approx(math.log(3), rel=1e-6)
    loss.backward()  # the teacher is a constant: only the student gets a gradient
    assert student.grad is not None and teacher.grad is None


def test_selection_is_the_correctly_predicted_samples_without_threshold() -> None:
    """§0.1: I_k = {argmax f(x) = y}; a barely-right prediction (margin 1e-3) is selected too."""
    class Fixed(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return x, x  # the inputs are the logits

    x = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.501, 0.5], [2.0, 3.0]])
    y = torch.tensor([0, 0, 0, 1])
    assert correctly_predicted(Fixed(), x, y, batch_size=3).tolist() == [0, 2, 3]


def test_mode_sets_order_and_data_an_explicit_switch_wins() -> None:
    assert (FedAKDParams().order, FedAKDParams().data) == ("paper", "train")
    code = FedAKDParams(mode="code")
    assert (code.order, code.data) == ("code", "train_and_test")
    assert FedAKDParams(mode="code", data="train").data == "train"
    assert (FedAKDParams().alpha, FedAKDParams().beta, FedAKDParams().temperature) == (1.0, 1.0, 1.0)  # Table 6


# -- a tiny federation ----------------------------------------------------------------------------


def fedakd_run(data_dir: Path, rounds: int = 1, **algorithm: object):  # type: ignore[no-untyped-def]
    cfg = small_config(algorithm={"name": "fedakd", **algorithm}, training={"rounds": rounds},
                       partition={"num_clients": 3, "local_test_fraction": 0.2},
                       model={"name": "mlp"}, evaluation={"local_model": "global"})
    return run_federation(cfg, data_dir).state


def test_aggregation_is_the_data_size_weighted_average_of_the_uploaded_global_copies(data_dir: Path) -> None:
    """Step 4: w_g = Σ|D_k|·w_{g,k}/Σ|D_k|; with Correct-Agg. the weights are |I_k|."""
    state = fedakd_run(data_dir)
    algorithm, server, clients = state.algorithm, state.server, state.clients
    uploads = [{k: torch.full_like(v, float(i + 1)) if v.is_floating_point() else v for k, v in
                server.model.state_dict().items()} for i in range(3)]
    sizes = [algorithm.weight(c) for c in clients]
    assert sizes == [float(c.data.num_samples) for c in clients]
    algorithm.aggregate(4, server, [DistilledCopy(upload, size) for upload, size in zip(uploads, sizes)])
    expected = sum((i + 1) * n for i, n in enumerate(sizes)) / sum(sizes)
    weight = next(iter(server.model.parameters()))
    assert torch.allclose(weight, torch.full_like(weight, expected), rtol=1e-6)
    algorithm.aggregate(5, server, [DistilledCopy(upload, w) for upload, w in zip(uploads, [0.25, 0.25, 0.5])])
    assert torch.allclose(weight, torch.full_like(weight, 0.25 + 0.5 + 1.5), rtol=1e-6)  # shares, not counts
    before = weight.detach().clone()
    algorithm.aggregate(6, server, [DistilledCopy(upload, 0.0) for upload in uploads])  # nobody selected anything
    assert torch.equal(weight, before)
    correct = fedakd_run(data_dir, weighting="correct")
    assert [correct.algorithm.weight(c) for c in correct.clients] == [float(len(c.state.selected))
                                                                       for c in correct.clients]


def test_step_1_distils_with_alpha_and_step_3_with_beta(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Eq. 2 (G→L: the local model, the global teacher) weighs its KD term by α; Eq. 5 (L→G: the global copy,
    the local teacher) by β; both at the temperature τ."""
    import bench.algorithms.fedakd as fedakd

    state = fedakd_run(data_dir, alpha=0.3, beta=0.7, temperature=2.0)
    client, algorithm = state.clients[0], state.algorithm
    weights: list[tuple[object, object]] = []

    def spy(student, teacher, y, weight, temperature):  # type: ignore[no-untyped-def]
        weights.append((weight, temperature))
        return distillation_objective(student, teacher, y, weight, temperature)

    monkeypatch.setattr(fedakd, "distillation_objective", spy)
    algorithm.global_to_local(2, client, algorithm.broadcast(2, state.server, client.cid))
    assert weights and set(weights) == {(0.3, 2.0)}
    weights.clear()
    client.state.selected = torch.arange(client.data.num_samples)
    algorithm.local_to_global(2, client, algorithm.broadcast(2, state.server, client.cid), 1.0)
    assert weights and set(weights) == {(0.7, 2.0)}


def test_an_empty_selection_uploads_the_global_model_unchanged(data_dir: Path) -> None:
    state = fedakd_run(data_dir)
    client, server = state.clients[0], state.server
    client.state.selected = torch.zeros(0, dtype=torch.long)
    received = state.algorithm.broadcast(2, server, client.cid)
    upload, loss = state.algorithm.local_to_global(2, client, received, 1.0)
    assert loss == 0.0
    assert all(torch.equal(upload.state[k], v) for k, v in server.model.state_dict().items())


def test_selection_is_recorded_and_all_data_selects_everything(data_dir: Path) -> None:
    full, all_data = fedakd_run(data_dir), fedakd_run(data_dir, selection="all")
    for client in all_data.clients:
        assert client.state.selected.tolist() == list(range(client.data.num_samples))
    shares = full.algorithm.client_records(full.server, full.clients)["selected_share"]
    for client in full.clients:  # I_k: what the updated local model gets right, as a share of D_k
        hits = correctly_predicted(client.model, client.data.x, client.data.y, 1024)
        assert client.state.selected.tolist() == hits.tolist() and shares[client.cid] == len(hits) / client.data.num_samples


def test_single_dist_trained_overwrites_then_trains_by_cross_entropy_alone(data_dir: Path) -> None:
    """Table 4 Single-Dist, default reading: w_k ← w_g, then an epoch of CE on D_k (no KD term: α has no effect),
    and that trained w_k selects I_k; the local model is no longer the round's starting global model."""
    runs = [run_federation(small_config(algorithm={"name": "fedakd", "global_to_local": False, "alpha": alpha},
                                        training={"rounds": 2}, model={"name": "mlp"},
                                        partition={"num_clients": 3, "local_test_fraction": 0.2}), data_dir).state
            for alpha in (1.0, 5.0)]
    state, other = runs
    for a, b in zip(state.clients, other.clients):
        assert all(torch.equal(x, y) for x, y in zip(a.model.state_dict().values(), b.model.state_dict().values()))
    before = {k: v.clone() for k, v in state.server.model.state_dict().items()}
    run_round(state.algorithm, 3, state.server, state.clients, Ledger())
    for client in state.clients:
        assert not all(torch.equal(client.model.state_dict()[k], v) for k, v in before.items())
        hits = correctly_predicted(client.model, client.data.x, client.data.y, 1024)
        assert client.state.selected.tolist() == hits.tolist()


def test_single_dist_copied_replaces_the_local_model_by_the_global_one(data_dir: Path) -> None:
    """Single-Dist, reading ``copied``: w_k ← w_g only, so after a round every local model is the round's starting
    global model, and the global model moved (L→G still ran)."""
    cfg = small_config(algorithm={"name": "fedakd", "global_to_local": False, "single_dist": "copied"},
                       training={"rounds": 2},
                       partition={"num_clients": 3, "local_test_fraction": 0.2}, model={"name": "mlp"})
    state = run_federation(cfg, data_dir).state
    before = {k: v.clone() for k, v in state.server.model.state_dict().items()}
    run_round(state.algorithm, 3, state.server, state.clients, Ledger())
    for client in state.clients:
        assert all(torch.equal(client.model.state_dict()[k], v) for k, v in before.items())
    assert not torch.equal(next(iter(state.server.model.parameters())), next(iter(before.values())))


def test_code_mode_trains_and_selects_on_train_and_test_and_distils_last_rounds_selection(data_dir: Path) -> None:
    """§1.4: D_k = train + local test (the leakage), aggregation weights count both; round 1's L→G uses all
    of D_k (no selection yet), and after a round I_k indexes the combined data."""
    state = fedakd_run(data_dir, mode="code")
    algorithm = state.algorithm
    for client in state.clients:
        x, y = algorithm.pool(client)
        assert len(y) == client.data.num_samples + len(client.data.test_y)
        assert algorithm.weight(client) == float(len(y))
        hits = correctly_predicted(client.model, x, y, 1024)
        assert client.state.selected.tolist() == hits.tolist()
    fresh = FedAKDParams(mode="code")
    assert fresh.order == "code"


@pytest.mark.parametrize("order", ["paper", "code"])
def test_the_order_of_a_rounds_steps(data_dir: Path, order: str) -> None:
    """§0.10: Algorithm 1 (``order: paper``) distils G→L from the round's *incoming* w_g, selects, then distils L→G
    on the I_k just selected, and aggregates last. The released loop (``code``) distils L→G first, on last round's
    I_k (all of D_k before any selection), aggregates, and only then distils G→L from the *new* w_g and selects.
    Swapping the two branches of ``phases`` fails both cases."""
    state = fedakd_run(data_dir, rounds=1, order=order)
    algorithm, server, clients = state.algorithm, state.server, state.clients
    taught_by: list[dict[str, torch.Tensor]] = []
    distilled_on: list[list[int]] = []
    g2l, l2g = algorithm.global_to_local, algorithm.local_to_global

    def record_g2l(round_index, client, received):  # type: ignore[no-untyped-def]
        taught_by.append({k: v.clone() for k, v in received.state.items()})
        return g2l(round_index, client, received)

    def record_l2g(round_index, client, received, weight):  # type: ignore[no-untyped-def]
        chosen = client.state.selected
        distilled_on.append(list(range(len(algorithm.pool(client)[1]))) if chosen is None else chosen.tolist())
        return l2g(round_index, client, received, weight)

    algorithm.global_to_local, algorithm.local_to_global = record_g2l, record_l2g  # type: ignore[method-assign]
    before_selection = [None if c.state.selected is None else c.state.selected.tolist() for c in clients]
    incoming = {k: v.clone() for k, v in server.model.state_dict().items()}
    run_round(algorithm, 2, server, clients, Ledger())
    outgoing = server.model.state_dict()
    assert len(taught_by) == len(distilled_on) == len(clients)
    teacher = outgoing if order == "code" else incoming
    assert not all(torch.equal(incoming[k], outgoing[k]) for k in incoming)  # the aggregation moved w_g
    for received in taught_by:
        assert all(torch.equal(received[k], teacher[k]) for k in teacher)
    after_selection = [c.state.selected.tolist() for c in clients]
    assert distilled_on == (before_selection if order == "code" else after_selection)
    assert before_selection != after_selection


def test_a_round_is_deterministic(data_dir: Path) -> None:
    a, b = fedakd_run(data_dir, rounds=2), fedakd_run(data_dir, rounds=2)
    assert all(torch.equal(x, y) for x, y in zip(a.server.model.state_dict().values(), b.server.model.state_dict().values()))


# -- partitions (§2) ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pool() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(10), 100).astype(np.int64)
    rng.shuffle(labels)
    images = (labels[:, None, None, None] * 20 + rng.integers(0, 60, (1000, 1, 8, 8))).astype(np.uint8)
    return labels, images


@pytest.mark.parametrize("shift", [2.0, 5.0, 10.0])
def test_algorithm2_redrawn_from_the_seed_is_the_partition_with_mahalanobis_norm_c(pool, shift: float) -> None:
    labels, features = pool
    params = {"setting": "ics", "shift": shift}
    part = make_partition(labels, 10, "fedakd", 10, 4, params, features=features)
    made = algorithm2_draws(features, 10, 4, Scheme.model_validate(params))
    for train, test, made_train, made_test in zip(part.train, part.local_test, made.train, made.local_test):
        assert np.array_equal(train, made_train) and np.array_equal(test, made_test)
    for draw, train, test in zip(made.drawn, made.as_drawn_train, made.local_test):  # as drawn: the split of the draw
        assert np.array_equal(np.sort(draw), np.sort(np.concatenate([train, test])))
    np.testing.assert_allclose([d @ np.linalg.inv(made.sigma) @ d for d in made.deltas], shift, rtol=1e-9)
    assert [len(d) for d in made.drawn] == client_sizes(1000, 10, Scheme.model_validate(params)).tolist()


def test_pool_fraction_sizes_and_a_whole_pool(pool) -> None:
    labels, features = pool
    whole = make_partition(labels, 10, "fedakd", 10, 0, {"setting": "pow", "pool_fraction": 1.0}, features=features)
    flat = np.concatenate([*whole.train, *whole.local_test])
    assert len(flat) == len(np.unique(flat)) == 1000
    assert [len(t) + len(h) for t, h in zip(whole.train, whole.local_test)] == \
        [342, 171, 114, 86, 69, 57, 48, 42, 37, 34]  # ⌊1000/(k·Z)⌋, remainder from client 1


def test_cla_gives_client_k_exactly_k_classes_in_equal_parts(pool) -> None:
    labels, features = pool
    part = make_partition(labels, 10, "fedakd", 10, 0, {"setting": "cla", "cla_size": 20, "test_fraction": 0.0,
                                                         "pool_fraction": 1.0}, features=features)
    for k, counts in enumerate(part.train_counts, start=1):
        assert np.flatnonzero(counts).tolist() == list(range(k))
        assert counts[:k].sum() == 20 and counts[:k].max() - counts[:k].min() <= 1
    with pytest.raises(BenchError, match="lower cla_size or raise pool_fraction"):
        make_partition(labels, 10, "fedakd", 10, 0, {"setting": "cla", "cla_size": 400}, features=features)


def test_dir_gives_each_class_floor_share_of_a_dirichlet_draw(pool) -> None:
    """§2.7: per class c, client k gets ⌊p_{c,k}·|D_c|⌋ of the pool's class c: no client gets more of a class
    than it holds, and at most K − 1 samples of each class are left over."""
    labels, features = pool
    part = make_partition(labels, 10, "fedakd", 10, 0, {"setting": "dir", "alpha": 1.0, "test_fraction": 0.0},
                          features=features)
    assert 500 - 10 * 10 < part.train_counts.sum() <= 500  # the pool is a random half: 500 samples
    assert part.sha256 == make_partition(labels, 10, "fedakd", 10, 0, {"setting": "dir", "alpha": 1.0,
                                                                        "test_fraction": 0.0}, features=features).sha256


# -- CF (§3.1, §3.2) ------------------------------------------------------------------------------


def test_cf_paper_definition_and_the_released_codes_on_a_hand_made_pair() -> None:
    """Acc_s = (.1 .2 .3 .4), Acc_p = (.1 .3 .2 .4): ρ = 4/5, CF = 80 both ways; the code reads Acc_s back from
    a 4-decimal file (.12345 → .1235) and sets CF to 0 when a vector is all zeros, where Pearson is undefined."""
    assert cf([0.1, 0.2, 0.3, 0.4], [0.1, 0.3, 0.2, 0.4]) == pytest.approx(80.0)
    assert cf_code([0.1, 0.2, 0.3, 0.4], [0.1, 0.3, 0.2, 0.4]) == pytest.approx(80.0, abs=1e-5)
    assert cf_code([0.0, 0.0, 0.0], [0.2, 0.5, 0.1]) == 0.0 and math.isnan(cf([0.0, 0.0, 0.0], [0.2, 0.5, 0.1]))
    assert math.isnan(cf_code([0.1, 0.2, 0.3], [0.5, 0.5, 0.5]))
    standalone = [0.12345, 0.5, 0.3]
    rounded = np.array([0.1235, 0.5, 0.3], dtype=np.float32)
    assert cf_code(standalone, [0.2, 0.1, 0.9]) == pytest.approx(100 * np.corrcoef([0.2, 0.1, 0.9], rounded)[0, 1])


def test_code_statistics_average_the_last_three_rounds() -> None:
    """The code's Max, Avg and CF: per round over the clients, then the mean of the last 3 rounds."""
    rows = {2: (0.5, 1.0, 0.75), 3: (0.25, 0.5, 0.75), 4: (0.5, 1.0, 0.75)}
    text = "round,metric,client,value\n" + "".join(f"{r},local_acc,{c},{v}\n" for r, accs in rows.items()
                                                   for c, v in enumerate(accs)) + "".join(
        f"{r},train_loss,,0.1\n" for r in range(1, 5))
    ref = Records.from_csv("round,metric,client,value\n4,local_acc,0,0.25\n4,local_acc,1,0.75\n4,local_acc,2,0.5\n",
                           "standalone")
    run = Records.from_csv(text, "run")

    def stat(name: str) -> float | None:
        return Statistic.model_validate(name).compute(run, ref)

    assert stat("last3_clientmax_local_acc") == pytest.approx((1.0 + 0.75 + 1.0) / 3)
    assert stat("last3_local_acc") == pytest.approx((0.75 + 0.5 + 0.75) / 3)
    assert stat("last3_cfcode(standalone)_local_acc") == pytest.approx((100 + 50 + 100) / 3, rel=1e-6)
    assert stat("final_cf(standalone)_local_acc") == pytest.approx(100.0)
    assert stat("count_train_loss") == 4.0  # Table 3's "Round": the rounds the run completed


# -- suite mechanics --------------------------------------------------------------------------------

PARAMS = Path(__file__).resolve().parents[1] / "pipelines" / "fedakd" / "params.yaml"


def test_equal_time_rounds_by_hand() -> None:
    """Table 3: ⌊R·s_ref/s⌋, at least 1: FedAvg at half FedAKD's time per round completes 80 of FedAKD's 40."""
    assert equal_time_rounds(40, 1.0, 0.5) == 80
    assert equal_time_rounds(40, 1.0, 1.0 / 0.975) == 39  # FedAVE's 39 in the paper: 2.5 % slower than FedAKD
    assert equal_time_rounds(40, 0.1, 100.0) == 1


def test_time_budget_reads_the_timing_file_and_names_the_command_when_it_is_missing(tmp_path: Path) -> None:
    suite = load_suite(PARAMS, tmp_path, ["profile=smoke"])
    with pytest.raises(BenchError, match="bench suite time"):
        suite.config("fedavg", "time", 0)
    assert suite.config("fedavg", "time", 0, timed=False).training.rounds == 3  # the reference's rounds
    (tmp_path / "timing").mkdir()
    (tmp_path / "timing" / "fedakd-smoke.json").write_text(
        '{"settings": {"time": {"fedakd": 0.9, "fedavg": 0.3}}}')
    assert suite.config("fedavg", "time", 0).training.rounds == 9
    assert suite.config("fedakd", "time", 0).training.rounds == 3
    assert suite.config("standalone", "time", 0).training.rounds == 2  # its own budget wins (method_config)
    assert suite.config("fedavg", "ics5", 0).training.rounds == 2  # other settings: the base budget


def test_each_table_runs_only_its_rows_and_standalone_runs_wherever_cf_needs_it() -> None:
    suite = load_suite(PARAMS, overrides=["profile=paper"])
    assert suite.runs_on("pfedck", "fmnist-pow") and not suite.runs_on("pfedck", "t5-fmnist-dir1")
    assert suite.runs_on("fedakd_all_data", "cifar10-bcs") and not suite.runs_on("fedakd_all_data", "cifar10-pow")
    for setting in suite.params.settings:
        assert suite.runs_on("standalone", setting)
    assert [s for s in suite.params.settings if suite.runs_on("fedsac", s) and "cla" in s] == ["t5-fmnist-cla",
                                                                                                "t5-cifar10-cla"]
    # a per-dataset learning rate of one method: Standalone at a tenth of the federated rate (§4 [I])
    assert suite.config("standalone", "cifar10-ics5", 0).training.optimizer.lr == 5.0e-4
    assert suite.config("fedavg", "cifar10-ics5", 0).training.optimizer.lr == 0.005
    with pytest.raises(BenchError, match="needs the runs of standalone"):
        load_suite(PARAMS, overrides=["profile=paper", "settings.fmnist-pow.methods=[fedavg]"])


def test_runner_options_fedakds_suite_uses(data_dir: Path, tmp_path: Path) -> None:
    """`evaluation.local_model: global` scores the global model on every local test split (Acc_p of the FedAvg
    family); `evaluation.global_train_loss` records the global model's CE on the union of the train splits;
    `tracking.save_model` writes the final global model; none of them is in a default config's hash."""
    from bench.runner.executor import RunRequest, run_experiment

    plain = small_config(partition={"num_clients": 3, "local_test_fraction": 0.2}, training={"rounds": 2})
    cfg = small_config(partition={"num_clients": 3, "local_test_fraction": 0.2}, training={"rounds": 2},
                       evaluation={"local_model": "global", "global_train_loss": True},
                       tracking={"save_model": True})
    assert "local_model" not in plain.to_dict()["evaluation"] and "save_model" not in plain.to_dict()["tracking"]
    run_experiment(RunRequest(cfg, tmp_path / "run", data_dir))
    records = Records.from_csv((tmp_path / "run" / "records.csv").read_text(), "run")
    state = run_federation(cfg, data_dir).state
    model = state.server.model.eval()
    for client in state.clients:
        with torch.no_grad():
            expected = float((model(client.data.test_x)[1].argmax(1) == client.data.test_y).float().mean())
        assert records.clients("local_acc", 2)[client.cid] == pytest.approx(expected)
    with torch.no_grad():
        loss = sum(float(torch.nn.functional.cross_entropy(model(c.data.x)[1], c.data.y, reduction="sum"))
                   for c in state.clients) / sum(c.data.num_samples for c in state.clients)
    assert records.series("global_train_loss")[2] == pytest.approx(loss, rel=1e-5)
    saved = torch.load(tmp_path / "run" / "model.pt", weights_only=True)
    assert all(torch.equal(saved[k], v) for k, v in model.state_dict().items())


# -- the released code's protocol in code mode (pipelines/fedakd/NOTES.md §1.8, §2.5) -----------------------


def test_unit_normalisation_is_pixel_over_255_and_changes_a_run(data_dir: Path) -> None:
    """D12: the released code feeds pixel/255 in [0, 1], no mean/std (``dataset.normalize: unit``)."""
    from bench.data import load_dataset
    from bench.runner.federation import to_tensor

    data = load_dataset("digits", data_dir)
    unit = to_tensor(data.train_x[:4], data, torch.device("cpu"), "unit")
    torch.testing.assert_close(unit, torch.from_numpy(data.train_x[:4]).float() / 255)
    stats = run_federation(small_config(training={"rounds": 1}), data_dir)
    released = run_federation(small_config(training={"rounds": 1}, dataset={"normalize": "unit"}), data_dir)
    assert released.curves != stats.curves


def test_the_released_protocols_settings_use_pixel_over_255_the_paper_form_mean_and_std() -> None:
    """paper_code and smoke's devide.py column feed pixel/255; the proxy (Algorithm 2's column only) and the paper
    profile mean/std."""
    root = Path(__file__).resolve().parents[1] / "pipelines" / "fedakd" / "params.yaml"
    for profile, code_settings in (("paper_code", None), ("paper", set()), ("proxy", set()), ("smoke", {"ics-code"})):
        suite = load_suite(root, overrides=[f"profile={profile}"])
        for setting in suite.settings:
            released = code_settings is None or setting in code_settings
            assert suite.config("fedakd", setting, 0, timed=False).dataset.normalize == ("unit" if released else "stats")


def test_stored_validation_is_the_head_of_each_clients_stored_data_test_images_included(data_dir: Path) -> None:
    """§2.5, D18: ``validation: stored`` is the first ⌊0.1·n_k⌋ of the client's train and local test data together,
    in the partition's (index) order — some of them test images (leakage); ``head`` holds train images only."""
    from bench.data import load_dataset
    from bench.engine.validation import server_validation
    from bench.runner.federation import partition_for, to_tensor

    cfg = small_config(algorithm={"name": "fedave", "mode": "code"}, training={"rounds": 1},
                       partition={"num_clients": 3, "local_test_fraction": 0.2}, model={"name": "mlp"})
    assert FedAKDParams(mode="code").data == "train_and_test"
    from bench.algorithms.rewards import RewardParams  # the fairness baselines' shared readings
    assert RewardParams(mode="code").validation == "stored" and RewardParams().validation == "split"
    state = run_federation(cfg, data_dir).state
    data = load_dataset("digits", data_dir)
    partition = partition_for(cfg, data, None)
    images = to_tensor(data.train_x, data, torch.device("cpu"))
    xs, tested = [], 0
    for cid in range(3):
        stored = np.sort(np.concatenate([partition.train[cid], partition.local_test[cid]]))
        head = stored[: int(0.1 * len(stored))]
        xs.append(images[torch.from_numpy(head)])
        tested += int(np.isin(head, partition.local_test[cid]).sum())
    x, y = server_validation([c.data for c in state.clients], "stored")
    torch.testing.assert_close(x, torch.cat(xs))
    assert tested > 0
    x_head, _ = server_validation([c.data for c in state.clients], "head")
    assert len(x_head) != len(x) or not torch.equal(x_head, x)


def released_statistics(acc_p: np.ndarray, acc_s_file: str) -> dict[str, float]:
    """The released scripts' summary, restated (pipelines/fedakd/NOTES.md §0.5, §3.2): ``acc_p`` is rounds × clients
    of the scored accuracies; Acc_s is parsed from the standalone script's ``Client k: 0.xxxx`` lines as float32;
    per round the clients' mean, max and 100·corrcoef(acc_p, acc_s) (0 if either vector is all zeros), then the
    mean of the last three rounds."""
    acc_s = np.array([float(line.split(":")[1]) for line in acc_s_file.splitlines()], dtype=np.float32)
    cf_rounds = [0.0 if not (row.any() and acc_s.any()) else 100 * np.corrcoef(row, acc_s)[0, 1] for row in acc_p]
    return {"avg": float(np.mean(acc_p.mean(axis=1)[-3:])), "max": float(np.mean(acc_p.max(axis=1)[-3:])),
            "cf": float(np.mean(cf_rounds[-3:]))}


def test_the_released_statistics_agree_with_ours_to_10_decimals_on_a_code_mode_run(data_dir: Path,
                                                                                  tmp_path: Path) -> None:
    """§3.2: on a real code-mode FedAKD run and its Standalone, the released statistics computed from the
    per-client records (the standalone accuracies through the script's 4-decimal file) equal the suite's
    ``last3_local_acc``, ``last3_clientmax_local_acc`` and ``last3_cfcode(standalone)_local_acc``."""
    from bench.runner.executor import RunRequest, run_experiment

    records = {}
    for name, algorithm in (("standalone", {"name": "standalone"}), ("fedakd", {"name": "fedakd", "mode": "code"})):
        cfg = small_config(algorithm=algorithm, training={"rounds": 5}, model={"name": "mlp"},
                           partition={"num_clients": 5, "local_test_fraction": 0.2}, evaluation={"local_model": "global"}
                           if name == "fedakd" else {})
        run_experiment(RunRequest(cfg, tmp_path / name, data_dir))
        records[name] = Records.from_csv((tmp_path / name / "records.csv").read_text(), name)
    run, standalone = records["fedakd"], records["standalone"]
    rounds = sorted(run.values["local_acc"])
    acc_p = np.array([list(run.clients("local_acc", r).values()) for r in rounds])
    final_s = standalone.clients("local_acc", standalone.last_round)
    acc_s_file = "".join(f"Client {cid}: {acc:.4f}\n" for cid, acc in final_s.items())
    theirs = released_statistics(acc_p, acc_s_file)
    assert np.ptp(acc_p[-1]) > 0 and not math.isnan(theirs["cf"])
    for ours, key in (("last3_local_acc", "avg"), ("last3_clientmax_local_acc", "max"),
                      ("last3_cfcode(standalone)_local_acc", "cf")):
        assert Statistic.model_validate(ours).compute(run, standalone) == pytest.approx(theirs[key], abs=1e-10)


def test_every_profile_runs_the_leak_free_partitions_and_single_dist_trained() -> None:
    """The re-pinned proxy, ``paper``, ``paper_code`` and ``smoke`` all run the leak-free partitions and
    Single-Dist ``trained``; ``as_drawn`` and ``copied`` are options no profile names."""
    root = Path(__file__).resolve().parents[1] / "pipelines" / "fedakd" / "params.yaml"
    for profile, reading, single_dist in (("proxy", "held_out", "trained"), ("paper", "held_out", "trained"),
                                          ("paper_code", "held_out", "trained"), ("smoke", "held_out", "trained")):
        suite = load_suite(root, overrides=[f"profile={profile}"])
        for setting in suite.settings:
            assert suite.partition_config(setting).partition.scheme_params.get("local_test", "held_out") == reading
            if "fedakd_single_dist" in suite.methods and suite.runs_on("fedakd_single_dist", setting):
                assert suite.config("fedakd_single_dist", setting, 0, timed=False).algorithm.params.get(
                    "single_dist", "trained") == single_dist


def test_the_proxy_draws_a_fresh_partition_per_seed_on_domaindigits_with_the_papers_learning_rates() -> None:
    """Issue 25's FedAKD proxy: ICS(5) on domaindigits28, 5 clients over 60 % of the train split, run seed s on
    partition seed s; Adam 1e-3 and Standalone 1e-4 (the paper's FashionMNIST rule, not tuned); every row the same
    rounds."""
    root = Path(__file__).resolve().parents[1] / "pipelines" / "fedakd" / "params.yaml"
    suite = load_suite(root, overrides=["profile=proxy"])
    assert suite.settings == ["ics5"] and suite.params.suite.partition_seed == "run"
    for seed in suite.seeds:
        cfg = suite.config("fedakd", "ics5", seed, timed=False)
        assert (cfg.dataset.name, cfg.partition.seed, cfg.partition.num_clients) == ("domaindigits28", seed, 5)
        assert (cfg.partition.scheme_params["setting"], cfg.partition.scheme_params["shift"],
                cfg.partition.scheme_params["pool_fraction"]) == ("ics", 5.0, 0.6)
    lrs = {m: suite.config(m, "ics5", 0, timed=False).training for m in suite.methods}
    assert {m: t.optimizer.lr for m, t in lrs.items()} == {"standalone": 1e-4, "fedavg": 1e-3, "fedave": 1e-3,
                                                           "fedakd": 1e-3}
    assert {t.rounds for t in lrs.values()} == {5}
