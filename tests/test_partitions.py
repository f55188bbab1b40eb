"""Partitions against the reading notes: FedHKD's seed-0 vectors (pipelines/fedhkd/NOTES.md §5.2), FedAKD's
δᵀΣ⁻¹δ = C and sizes (pipelines/fedakd/NOTES.md §2.2-2.5), DaFKD/NIID-Bench (pipelines/dafkd/NOTES.md §3.2), FedAL's
equal sizes and public set (pipelines/fedal/NOTES.md §4.2-4.3), LEAF users; plus properties of every scheme."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.data import prepared_dir
from bench.data.covariate_shift import (
    client_shift,
    covariate_shift_sample,
    pca_coordinates,
    power_law_counts,
    trained_test_share,
)
from bench.data.per_user import public_split
from bench.data.partition import (
    IIDParams,
    Partition,
    Split,
    build_partition,
    get_partitioner,
    load_partition,
    make_partition,
    partition_schemes,
    register_partitioner,
)
from bench.data.prepared import PreparedDataset
from bench.rng import numpy_stream
from bench.errors import BenchError
from bench.report.partition_plots import plot_class_bubbles, plot_class_heatmap, plot_client_summary, plot_partition


def labels_of(counts: list[int]) -> np.ndarray:
    return np.repeat(np.arange(len(counts)), counts).astype(np.int64)


# Real class counts (pipelines/fedhkd/NOTES.md §5.1); only counts matter to the vectors.
CIFAR10 = (labels_of([5000] * 10), labels_of([1000] * 10))
CIFAR100 = (labels_of([500] * 100), labels_of([100] * 100))
SVHN = (labels_of([4948, 13861, 10585, 8497, 7458, 6882, 5727, 5595, 5045, 4659]),
        labels_of([1744, 5099, 4149, 2882, 2523, 2384, 1977, 2019, 1660, 1595]))


def fedhkd_partition(data, m, beta, **extra) -> Partition:
    train, test = data
    return make_partition(train, int(train.max()) + 1, "fedhkd", m, 0, {"alpha": beta, **extra}, test_labels=test)


# ---------------------------------------------------------------------------------------------
# FedHKD (pipelines/fedhkd/NOTES.md §5.2, partition unit-test vectors, seed 0)

@pytest.mark.parametrize("data, m, beta, train_counts, test_counts", [
    (CIFAR10, 20, 0.5, [108, 102, 8, 16, 25, 15, 39, 3, 231, 0], [54, 43, 0, 1, 10, 7, 14, 3, 85, 0]),
    (CIFAR10, 10, 0.5, [79, 10, 14, 6, 74, 91, 0, 256, 0, 0], [39, 6, 9, 2, 22, 37, 0, 96, 0, 0]),
    (CIFAR10, 50, 0.5, [73, 2, 0, 1, 45, 37, 482, 0, 0, 0], None),
    (CIFAR10, 10, 0.2, [85, 136, 11, 120, 51, 6, 0, 360, 0, 0], None),
    (CIFAR10, 10, 5.0, [40, 58, 20, 47, 38, 51, 81, 85, 54, 89], None),
    (SVHN, 10, 0.5, [16, 9, 437, 214, 142, 0, 0, 0, 0, 0], None),
], ids=["cifar10-m20", "cifar10-m10", "cifar10-m50", "cifar10-b0.2", "cifar10-b5", "svhn-m10"])
def test_fedhkd_client0_vectors(data, m, beta, train_counts, test_counts):
    part = fedhkd_partition(data, m, beta)
    assert part.train_counts[0].tolist() == train_counts
    assert len(part.train[0]) == sum(train_counts)
    if test_counts is not None:
        assert part.local_test_counts[0].tolist() == test_counts


def test_fedhkd_size_vectors():
    assert [len(t) for t in fedhkd_partition(CIFAR10, 10, 0.5).train] == \
        [530, 368, 443, 504, 518, 380, 520, 432, 807, 492]
    assert [len(t) for t in fedhkd_partition(CIFAR100, 10, 0.5).train] == \
        [511, 510, 462, 476, 510, 528, 487, 505, 500, 506]
    # full (pre-subsampling) partition sizes: part = 1 keeps int(1 * n) = n samples
    full = fedhkd_partition(CIFAR10, 20, 0.5, part=1.0)
    assert [len(t) for t in full.train[:5]] == [2737, 2831, 2812, 2203, 3764]


def test_fedhkd_local_test_points_into_test_split():
    part = fedhkd_partition(CIFAR10, 10, 0.5)
    assert part.local_test_source == "test"
    train, test = CIFAR10
    for tr, te, tr_counts, te_counts in zip(part.train, part.local_test, part.train_counts, part.local_test_counts):
        assert te.max() < len(test)
        np.testing.assert_array_equal(np.bincount(test[te], minlength=10), te_counts)
        np.testing.assert_array_equal(np.bincount(train[tr], minlength=10), tr_counts)
        assert len(np.unique(tr)) < len(tr)  # subsampled with replacement: duplicates
    no_dups = fedhkd_partition(CIFAR10, 10, 0.5, replace=False)
    assert all(len(np.unique(t)) == len(t) for t in no_dups.train)


def test_fedhkd_never_touches_global_rng():
    np.random.seed(123)
    state = np.random.get_state()[1].copy()
    fedhkd_partition(CIFAR10, 10, 0.5)
    np.testing.assert_array_equal(np.random.get_state()[1], state)


# ---------------------------------------------------------------------------------------------
# NIID-Bench per-class Dirichlet (FedHKD paper mode, DaFKD) and FedAL per-client Dirichlet


def _covers_disjointly(parts, n):
    flat = np.concatenate(parts)
    return len(flat) == len(np.unique(flat)) == n


@pytest.mark.parametrize("scheme, params", [("dirichlet", {"alpha": 0.1, "mode": "per_class", "min_size": 100}),
                                            ("dafkd", {"alpha": 0.1})])
def test_niid_bench_dirichlet_uses_all_samples_with_min_size(scheme, params):
    labels = CIFAR10[0]
    part = make_partition(labels, 10, scheme, 20, 3, params)
    assert _covers_disjointly(part.train, len(labels))  # "We apply all the training samples"
    assert min(len(t) for t in part.train) >= 100
    # balance cap: a client stops receiving once it holds N/K, so it exceeds N/K by < one class
    assert max(len(t) for t in part.train) < len(labels) / 20 + 5000
    assert part.params["min_size"] == 100


def test_dafkd_equals_dirichlet_per_class_min100():
    labels = labels_of([300] * 10)
    from bench.data.label_skew import DaFKDParams, dafkd
    from bench.data.partition import DirichletParams, dirichlet
    a = dafkd(labels, 5, numpy_stream(1, "x"), DaFKDParams(alpha=0.5))
    b = dirichlet(labels, 5, numpy_stream(1, "x"), DirichletParams(alpha=0.5, min_size=100))
    assert all(np.array_equal(x, y) for x, y in zip(a, b))


def test_fedal_per_client_dirichlet_equal_sizes():
    labels = labels_of([1000] * 10)
    part = make_partition(labels, 10, "dirichlet", 15, 0, {"alpha": 1.0, "mode": "per_client"})
    assert {len(t) for t in part.train} == {len(labels) // 15}  # pipelines/fedal/NOTES.md §4.2: m = ⌊|D_train| / N⌋ (N clients)
    flat = np.concatenate(part.train)
    assert len(np.unique(flat)) == len(flat)


def _heterogeneity(part: Partition) -> float:
    """Mean total-variation distance between each client's class mix and the global one."""
    counts = part.train_counts.astype(float)
    local = counts / counts.sum(axis=1, keepdims=True)
    glob = counts.sum(axis=0) / counts.sum()
    return float(np.abs(local - glob).sum(axis=1).mean() / 2)


@pytest.mark.parametrize("mode", ["per_class", "per_client"])
def test_heterogeneity_grows_as_alpha_falls(mode):
    labels = labels_of([400] * 10)
    levels = [np.mean([_heterogeneity(make_partition(labels, 10, "dirichlet", 10, s,
                                                     {"alpha": a, "mode": mode, "min_size": 0}))
                       for s in range(3)]) for a in (100.0, 5.0, 1.0, 0.1)]
    assert levels == sorted(levels), levels


# ---------------------------------------------------------------------------------------------
# Properties of the generic schemes


label_arrays = st.lists(st.integers(0, 9), min_size=60, max_size=400).map(lambda v: np.asarray(v, np.int64))


@settings(max_examples=25, deadline=None)
@given(labels=label_arrays, clients=st.integers(1, 12), seed=st.integers(0, 2**31 - 1),
       scheme=st.sampled_from(["iid", "shards", "dirichlet-class", "dirichlet-client"]))
def test_generic_schemes_disjoint_reproducible(labels, clients, seed, scheme):
    name, params = {"iid": ("iid", {}), "shards": ("shards", {"shards_per_client": 2}),
                    "dirichlet-class": ("dirichlet", {"alpha": 0.5, "min_size": 0}),
                    "dirichlet-client": ("dirichlet", {"alpha": 0.5, "mode": "per_client"})}[scheme]
    a = make_partition(labels, 10, name, clients, seed, params, local_test_fraction=0.25)
    b = make_partition(labels, 10, name, clients, seed, params, local_test_fraction=0.25)
    assert a.sha256 == b.sha256
    everything = np.concatenate([*a.train, *a.local_test])
    assert len(np.unique(everything)) == len(everything)  # disjoint, train and local test included
    if scheme != "dirichlet-client":  # the per-client reading drops the leftovers
        assert len(everything) == len(labels)
    else:
        assert len(everything) == (len(labels) // clients) * clients
    if scheme == "iid":
        sizes = [len(t) + len(h) for t, h in zip(a.train, a.local_test)]
        assert max(sizes) - min(sizes) <= 1
    np.testing.assert_array_equal(a.train_counts.sum() + a.local_test_counts.sum(), len(everything))


def test_shards_give_few_classes_per_client():
    labels = labels_of([100] * 10)
    part = make_partition(labels, 10, "shards", 10, 0, {"shards_per_client": 2})
    assert all((row > 0).sum() <= 4 for row in part.train_counts)


def test_sha256_stable_and_seed_dependent(tmp_path):
    labels = labels_of([50] * 10)
    a = make_partition(labels, 10, "dirichlet", 5, 7, {"alpha": 0.5, "min_size": 0}, local_test_fraction=0.2)
    assert a.sha256 == make_partition(labels, 10, "dirichlet", 5, 7, {"alpha": 0.5, "min_size": 0},
                                      local_test_fraction=0.2).sha256
    assert a.sha256 != make_partition(labels, 10, "dirichlet", 5, 8, {"alpha": 0.5, "min_size": 0},
                                      local_test_fraction=0.2).sha256
    loaded = load_partition(a.save(tmp_path / "p"))
    assert loaded.sha256 == a.sha256 and loaded.summary() == a.summary()


# ---------------------------------------------------------------------------------------------
# FedAKD (pipelines/fedakd/NOTES.md §2)


def test_power_law_counts_match_the_notes_table():  # pipelines/fedakd/NOTES.md §2.4
    assert power_law_counts(30000, 10).tolist() == [10243, 5122, 3415, 2560, 2048, 1707, 1463, 1280, 1138, 1024]
    assert power_law_counts(25000, 10).tolist() == [8536, 4268, 2846, 2134, 1708, 1422, 1219, 1066, 948, 853]
    assert power_law_counts(35000, 10).tolist() == [11950, 5975, 3984, 2988, 2390, 1992, 1707, 1493, 1327, 1194]


@pytest.mark.parametrize("dims", [1, 2, 5])
@pytest.mark.parametrize("shift", [2.0, 5.0, 10.0])
def test_algorithm2_delta_has_mahalanobis_norm_c(dims, shift):
    rng = np.random.default_rng(0)
    coords = rng.standard_normal((4000, dims)) @ rng.standard_normal((dims, dims)) + 3.0
    clients, deltas, sigma = covariate_shift_sample(coords, np.full(5, 500), shift, numpy_stream(1, "t"))
    inv = np.linalg.inv(sigma)
    np.testing.assert_allclose([d @ inv @ d for d in deltas], shift, rtol=1e-9)
    assert [len(c) for c in clients] == [500] * 5
    # samples are drawn around μ + δ: the realised shift lies along δ (≈ δ/2 for Gaussian data, §2.3)
    mu = coords.mean(axis=0)
    for c, d in zip(clients, deltas):
        along = (coords[c].mean(axis=0) - mu) @ inv @ d / shift
        assert 0.3 < along < 0.7


@pytest.fixture(scope="module")
def pool():
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 10, 1000).astype(np.int64)
    base = (labels[:, None, None, None] * 20 + rng.integers(0, 60, (1000, 1, 8, 8))).astype(np.uint8)
    return labels, base


def test_fedakd_code_form_bcs_ics(pool):
    labels, features = pool
    bcs = make_partition(labels, 10, "fedakd", 10, 0, {"setting": "bcs", "form": "code"}, features=features)
    sizes = [len(t) + len(h) for t, h in zip(bcs.train, bcs.local_test)]
    assert sizes == [50] * 10  # equal n_half / K
    assert [len(h) for h in bcs.local_test] == [10] * 10  # 80/20
    pc1 = pca_coordinates(features)[:, 0]
    chunks = [np.concatenate([t, h]) for t, h in zip(bcs.train, bcs.local_test)]
    assert all(pc1[a].max() <= pc1[b].min() for a, b in itertools.pairwise(chunks))  # contiguous PC1 slices
    assert np.all(pc1[np.concatenate(chunks)] <= np.median(pc1) + 1e-9)  # the lowest half
    ics = [make_partition(labels, 10, "fedakd", 10, 0, {"setting": "ics", "form": "code", "shift": c},
                          features=features) for c in (2.0, 5.0, 10.0)]
    assert [len(t) + len(h) for t, h in zip(ics[0].train, ics[0].local_test)] == power_law_counts(500, 10).tolist()
    # C is unused in the code: ICS(2) = ICS(5) = ICS(10) index arrays
    assert all(np.array_equal(x, y) for p in ics[1:] for x, y in zip(ics[0].train, p.train))


def test_fedakd_code_split_is_sklearn_random_state_42(pool):
    from sklearn.model_selection import train_test_split
    labels, features = pool
    part = make_partition(labels, 10, "fedakd", 10, 0, {"setting": "bcs", "form": "code"}, features=features)
    lowest = np.argsort(pca_coordinates(features)[:, 0], kind="stable")[:500]
    tr, te = train_test_split(lowest[:50], test_size=0.2, random_state=42, shuffle=True)
    np.testing.assert_array_equal(part.train[0], np.sort(tr))
    np.testing.assert_array_equal(part.local_test[0], np.sort(te))


@pytest.mark.parametrize("setting", ["pow", "bcs", "ics"])
def test_fedakd_paper_form(pool, setting):
    labels, features = pool
    params = {"setting": setting, "shift": 5.0}
    part = make_partition(labels, 10, "fedakd", 10, 3, params, features=features)
    assert part.local_test_source == "train"
    sizes = [len(t) + len(h) for t, h in zip(part.train, part.local_test)]
    expected = [50] * 10 if setting == "bcs" else power_law_counts(500, 10).tolist()
    assert sizes == expected
    for t, h in zip(part.train, part.local_test):
        assert not np.intersect1d(t, h).size  # a client trains on no duplicate of its test images
    assert part.sha256 == make_partition(labels, 10, "fedakd", 10, 3, params, features=features).sha256
    if setting == "pow":
        flat = np.concatenate([*part.train, *part.local_test])
        assert len(np.unique(flat)) == len(flat) == 500


FEDAKD_SCHEMES = [{"setting": "pow"}, {"setting": "bcs", "shift": 5.0}, {"setting": "ics", "shift": 2.0},
                  {"setting": "ics", "shift": 5.0}, {"setting": "ics", "shift": 10.0},
                  {"setting": "cla", "cla_size": 8}, {"setting": "dir", "alpha": 1.0},
                  {"setting": "pow", "form": "code"}, {"setting": "bcs", "form": "code"},
                  {"setting": "ics", "form": "code"}]


@pytest.mark.parametrize("params", FEDAKD_SCHEMES, ids=lambda p: "-".join(str(v) for v in p.values()))
@pytest.mark.parametrize("seed", [0, 3])
def test_fedakd_no_client_trains_on_any_clients_test_image(pool, params, seed):
    """Every FedAKD partition in its default reading: no local test image of any client is in any client's
    training split (pipelines/fedakd/NOTES.md §2.3, A17)."""
    labels, features = pool
    part = make_partition(labels, 10, "fedakd", 10, seed, params, features=features)
    assert sum(len(h) for h in part.local_test) > 0
    for test in part.local_test:
        for train in part.train:
            assert not np.intersect1d(test, train).size
    assert trained_test_share(part.train, part.local_test) == 0.0


@pytest.mark.parametrize("setting, shift", [("bcs", 5.0), ("ics", 2.0), ("ics", 5.0), ("ics", 10.0)])
def test_fedakd_as_drawn_reading_leaks_and_held_out_keeps_tests_sizes_and_shift(pool, setting, shift):
    """Taken as drawn, Algorithm 2's clients train on other clients' test images; held out, the same local test
    sets and sizes, and the training data still drawn around μ + δ_k (each client's training mean lies on
    its own side of the pool, as in the as-drawn reading)."""
    labels, features = pool
    params = {"setting": setting, "shift": shift}
    held = make_partition(labels, 10, "fedakd", 10, 0, params, features=features)
    drawn = make_partition(labels, 10, "fedakd", 10, 0, {**params, "local_test": "as_drawn"}, features=features)
    assert trained_test_share(drawn.train, drawn.local_test) > 0.1
    assert all(np.array_equal(a, b) for a, b in zip(held.local_test, drawn.local_test))
    assert [len(t) for t in held.train] == [len(t) for t in drawn.train]
    assert held.sha256 != drawn.sha256
    coords = pca_coordinates(features)[:, :2]
    mu = coords.mean(axis=0)
    for a, b in zip(held.train, drawn.train):  # the same direction from μ: cosine of the two training shifts
        u, v = coords[a].mean(axis=0) - mu, coords[b].mean(axis=0) - mu
        assert u @ v / (np.linalg.norm(u) * np.linalg.norm(v)) > 0.5


def test_fedakd_needs_features():
    with pytest.raises(BenchError, match="needs features"):
        make_partition(labels_of([10] * 10), 10, "fedakd", 2, 0, {"setting": "pow"})


# ---------------------------------------------------------------------------------------------
# LEAF and FedAL's public set


def test_leaf_one_client_per_user():
    groups = np.repeat(np.arange(6), [5, 3, 8, 2, 4, 6])
    test_groups = np.repeat(np.arange(6), 1)
    labels = (np.arange(len(groups)) % 2).astype(np.int64)
    part = make_partition(labels, 2, "leaf", 3, 0, {"select": "largest"}, groups=groups,
                          test_groups=test_groups, test_labels=np.zeros(6, np.int64))
    assert [set(groups[t]) for t in part.train] == [{2}, {5}, {0}]
    assert [test_groups[t].tolist() for t in part.local_test] == [[2], [5], [0]]
    rand = make_partition(labels, 2, "leaf", 4, 1, {}, groups=groups, test_groups=test_groups,
                          test_labels=np.zeros(6, np.int64))
    assert len({int(groups[t][0]) for t in rand.train}) == 4
    assert all(len(set(groups[t])) == 1 for t in rand.train)


@pytest.mark.parametrize("size", [200, 400, 600, 800, 1000])
def test_public_split(size):
    public, remaining = public_split(5000, size, seed=0)
    assert len(public) == len(np.unique(public)) == size
    assert len(remaining) == 5000  # default: 𝒫 ⊂ ∪𝒟_n, clients still get the whole split
    again, _ = public_split(5000, size, seed=0)
    np.testing.assert_array_equal(public, again)
    held_public, held_rest = public_split(5000, size, seed=0, disjoint=True)
    np.testing.assert_array_equal(held_public, public)
    assert len(held_rest) == 5000 - size and not np.intersect1d(held_rest, public).size
    outside = np.arange(2000, 5000)
    from_others, _ = public_split(5000, size, seed=1, candidates=outside)
    assert from_others.min() >= 2000


def test_public_split_rejects_bad_size():
    with pytest.raises(BenchError, match="public set size"):
        public_split(100, 200, seed=0)


# ---------------------------------------------------------------------------------------------
# The registry extension, build_partition and plots


def test_local_test_fraction_refused_when_scheme_builds_its_own():
    with pytest.raises(BenchError, match="builds its own local test"):
        make_partition(*CIFAR10[:1], 10, "fedhkd", 10, 0, {"alpha": 0.5}, local_test_fraction=0.2,
                       test_labels=CIFAR10[1])


def test_schemes_registered():
    assert {"iid", "shards", "dirichlet", "fedhkd", "dafkd", "fedakd", "leaf"} <= set(partition_schemes())


def _save_fake_dataset(data_dir, name="celeba"):
    rng = np.random.default_rng(0)
    n, n_test = 300, 60
    groups = np.repeat(np.arange(30), 10)
    data = PreparedDataset(name=name, train_x=rng.integers(0, 256, (n, 3, 6, 6), dtype=np.uint8),
                           train_y=rng.integers(0, 2, n).astype(np.int64),
                           test_x=rng.integers(0, 256, (n_test, 3, 6, 6), dtype=np.uint8),
                           test_y=rng.integers(0, 2, n_test).astype(np.int64), num_classes=2,
                           mean=(0.5,) * 3, std=(0.25,) * 3, train_group=groups,
                           test_group=np.repeat(np.arange(30), 2))
    data.save(prepared_dir(name, data_dir))
    return data


@pytest.mark.parametrize("scheme, params", [("leaf", {}), ("fedakd", {"setting": "ics"}),
                                            ("fedhkd", {"alpha": 0.5}), ("iid", {})])
def test_build_partition_and_plots(tmp_path, scheme, params):
    data = _save_fake_dataset(tmp_path)
    part = build_partition("celeba", scheme, 10, 0, params, 0.2 if scheme == "iid" else 0.0, tmp_path)
    assert part.dataset == {"name": "celeba", "sha256": data.sha256}
    assert load_partition(part.save(tmp_path / "part")).summary() == part.summary()
    for plot in (plot_class_heatmap, plot_class_bubbles, plot_client_summary, plot_partition):
        out = plot(part, tmp_path / "plots" / f"{plot.__name__}.png")
        assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    declared = {"heatmap": plot_class_heatmap, "bubble": plot_class_bubbles, "summary": plot_client_summary}[
        get_partitioner(scheme).figure_for(params)]
    assert (tmp_path / "plots" / "plot_partition.png").read_bytes() == \
        (tmp_path / "plots" / f"{declared.__name__}.png").read_bytes()  # auto draws the declared figure
    shift = client_shift(part.train, data.train_x)
    plot_client_summary(part, tmp_path / "shift.png", shift=shift)
    assert (tmp_path / "shift.png").exists() and not list((tmp_path / "plots").glob(".*.tmp"))


def test_build_partition_embedded_digits(tmp_path):
    part = build_partition("digits", "dirichlet", 5, 0, {"alpha": 1.0, "mode": "per_client"}, 0.25, tmp_path)
    assert part.num_clients == 5 and part.dataset["name"] == "digits"


def test_custom_scheme_may_return_split():
    @register_partitioner("test-split-scheme", IIDParams, needs=("test_labels",))
    def scheme(labels, num_clients, rng, params, *, test_labels):
        """Every client: half the train split, all of the test split."""
        return Split([np.arange(len(labels) // 2)] * num_clients, [np.arange(len(test_labels))] * num_clients,
                     "test")

    part = make_partition(labels_of([4, 4]), 2, "test-split-scheme", 2, 0, test_labels=labels_of([1, 2]))
    assert part.local_test_counts.tolist() == [[1, 2], [1, 2]] and part.train_counts.tolist() == [[4, 0], [4, 0]]


def test_a_scheme_declares_the_figure_its_partitions_are_drawn_as() -> None:
    """FedAKD's and LEAF's partitions as per-client summaries, FedAL's per-client Dirichlet as Fig. 4's bubbles (on
    labels or on domains), the per-class Dirichlet and every other scheme as a heatmap."""
    assert get_partitioner("fedakd").figure_for({"setting": "ics"}) == "summary"
    assert get_partitioner("leaf").figure_for({}) == "summary"
    for scheme in ("dirichlet", "domain_dirichlet"):
        assert get_partitioner(scheme).figure_for({"alpha": 0.5, "mode": "per_client"}) == "bubble"
        assert get_partitioner(scheme).figure_for({"alpha": 0.5, "mode": "per_class"}) == "heatmap"
        assert get_partitioner(scheme).figure_for({"alpha": 0.5}) == "heatmap"
    assert {s: get_partitioner(s).figure_for({}) for s in ("iid", "shards", "fedhkd", "dafkd", "domains")} == \
        dict.fromkeys(("iid", "shards", "fedhkd", "dafkd", "domains"), "heatmap")
