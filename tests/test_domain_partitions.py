"""The partition schemes over domains (bench/data/domain_partitions.py): sizes, disjointness, determinism and
domain purity, on domain ids laid out as ``domaindigits`` lays them out (every (domain, class) cell equal)."""
from __future__ import annotations

import numpy as np
import pytest

from bench.data.partition import IIDParams, Split, class_counts, make_partition, partition_dataset, register_partitioner
from bench.data.prepared import PreparedDataset
from bench.errors import BenchError
from bench.experiment import build_config

DOMAINS, CLASSES, PER_CELL = 10, 10, 30


def cells(per_cell: int = PER_CELL) -> tuple[np.ndarray, np.ndarray]:
    """Labels and domains of ``per_cell`` images in every (domain, class) cell, shuffled."""
    cell = np.random.default_rng(0).permutation(np.repeat(np.arange(DOMAINS * CLASSES), per_cell))
    return (cell % CLASSES).astype(np.int64), (cell // CLASSES).astype(np.int64)


LABELS, DOMAIN_IDS = cells()


def split(scheme: str, clients: int, seed: int = 0, local_test_fraction: float = 0.0, **params):
    return make_partition(LABELS, CLASSES, scheme, clients, seed, params, local_test_fraction, domains=DOMAIN_IDS)


def domains_of(part) -> list[set[int]]:
    return [set(DOMAIN_IDS[t].tolist()) for t in part.train]


def assert_disjoint(part, covers: bool = True) -> None:
    every = np.concatenate([*part.train, *part.local_test])
    assert len(every) == len(np.unique(every))
    if covers:
        assert len(every) == len(LABELS)


# ---------------------------------------------------------------------------------------------
# domains: each client from one domain (or a few)


def test_one_domain_per_client_each_client_a_whole_domain():
    part = split("domains", DOMAINS)
    assert [len(s) for s in domains_of(part)] == [1] * DOMAINS  # pure
    assert set().union(*domains_of(part)) == set(range(DOMAINS))  # every client a different domain
    assert [len(t) for t in part.train] == [CLASSES * PER_CELL] * DOMAINS
    assert_disjoint(part)


def test_two_clients_per_domain_split_it_as_the_within_scheme_says():
    part = split("domains", 2 * DOMAINS, local_test_fraction=0.2)
    held = [set(DOMAIN_IDS[t].tolist()) for t in part.local_test]
    assert all(len(s) == 1 for s in domains_of(part)) and held == domains_of(part)  # local tests pure too
    owners = np.bincount([d for s in domains_of(part) for d in s], minlength=DOMAINS)
    assert owners.tolist() == [2] * DOMAINS
    sizes = [len(t) + len(h) for t, h in zip(part.train, part.local_test)]
    assert sizes == [CLASSES * PER_CELL // 2] * (2 * DOMAINS)  # iid within: halves
    assert_disjoint(part)


def test_within_dirichlet_skews_labels_inside_a_domain_group():
    iid = split("domains", 2 * DOMAINS)
    skewed = split("domains", 2 * DOMAINS, within={"scheme": "dirichlet", "alpha": 0.1, "min_size": 1})
    assert all(len(s) == 1 for s in domains_of(skewed))
    assert_disjoint(skewed)

    def label_distance(part) -> float:
        """Mean total-variation distance between the label distributions of the two clients of a domain."""
        shares = class_counts(LABELS, part.train, CLASSES) / np.array([[len(t)] for t in part.train])
        owner = [next(iter(s)) for s in domains_of(part)]
        pairs = [[c for c in range(len(owner)) if owner[c] == d] for d in range(DOMAINS)]
        return float(np.mean([0.5 * np.abs(shares[a] - shares[b]).sum() for a, b in pairs]))

    assert label_distance(iid) < 0.3 < 0.6 < label_distance(skewed)


def test_a_few_domains_per_client():
    part = split("domains", 10, domains_per_client=2)
    groups = {frozenset(s) for s in domains_of(part)}
    assert all(len(g) == 2 for g in groups) and len(groups) == 5  # 5 groups of 2 domains, 2 clients each
    assert sorted(d for g in groups for d in g) == list(range(DOMAINS))
    assert_disjoint(part)


def test_fewer_clients_than_groups_leave_domains_unheld():
    part = split("domains", 4)
    assert all(len(s) == 1 for s in domains_of(part)) and len(set().union(*domains_of(part))) == 4
    assert [len(t) for t in part.train] == [CLASSES * PER_CELL] * 4
    assert_disjoint(part, covers=False)


def test_domains_is_deterministic_and_seeded():
    a, b = split("domains", 12, seed=3), split("domains", 12, seed=3)
    assert a.sha256 == b.sha256 and all(np.array_equal(x, y) for x, y in zip(a.train, b.train))
    assert split("domains", 12, seed=4).sha256 != a.sha256


def test_domains_per_client_must_divide_the_domains():
    with pytest.raises(BenchError, match="10 domains do not split into groups of domains_per_client=3"):
        split("domains", 10, domains_per_client=3)


def test_within_scheme_checked_when_the_config_is_built():
    config = build_config({"dataset": {"name": "domaindigits28"},
                           "partition": {"scheme": "domains", "within": {"scheme": "dirichlet", "alpha": 0.5}}})
    assert config.partition.scheme_params["within"]["alpha"] == 0.5
    assert config.partition.scheme_params["within"]["min_size"] == 10  # the inner scheme's default, filled in
    with pytest.raises(BenchError, match="needs \\['features'\\]"):
        build_config({"partition": {"scheme": "domains", "within": {"scheme": "fedakd", "setting": "pow"}}})
    with pytest.raises(BenchError, match="alpha"):
        build_config({"partition": {"scheme": "domains", "within": {"scheme": "dirichlet"}}})
    with pytest.raises(BenchError, match="unknown partition scheme 'nope'"):
        build_config({"partition": {"scheme": "domains", "within": {"scheme": "nope"}}})


def test_within_scheme_that_builds_local_tests_is_refused():
    @register_partitioner("test-split-inner", IIDParams)
    def own_tests(labels, num_clients, rng, params):
        """Makes its own local tests."""
        halves = np.array_split(np.arange(len(labels)), 2)
        return Split([halves[0]] * num_clients, [halves[1]] * num_clients, "train")

    with pytest.raises(BenchError, match="builds its own local test sets"):
        split("domains", 10, within={"scheme": "test-split-inner"})


# ---------------------------------------------------------------------------------------------
# domain_dirichlet: Dirichlet over domains


def largest_domain_share(part) -> float:
    counts = class_counts(DOMAIN_IDS, part.train, DOMAINS)
    return float(np.mean(counts.max(axis=1) / counts.sum(axis=1)))


def test_domain_dirichlet_alpha_sets_how_mixed_clients_are():
    few = split("domain_dirichlet", 10, alpha=0.1, min_size=1)
    many = split("domain_dirichlet", 10, alpha=100.0, min_size=1)
    assert largest_domain_share(few) > 0.45 and largest_domain_share(many) < 0.2
    assert min(len(s) for s in domains_of(many)) == DOMAINS
    for part in (few, many):
        assert_disjoint(part)


def test_domain_dirichlet_per_client_gives_equal_sizes():
    part = split("domain_dirichlet", 7, alpha=0.5, mode="per_client")
    assert [len(t) for t in part.train] == [len(LABELS) // 7] * 7
    assert_disjoint(part, covers=False)


def test_domain_dirichlet_is_deterministic_and_respects_min_size():
    a = split("domain_dirichlet", 10, alpha=0.3, min_size=100)
    b = split("domain_dirichlet", 10, alpha=0.3, min_size=100)
    assert a.sha256 == b.sha256 and min(len(t) for t in a.train) >= 100


# ---------------------------------------------------------------------------------------------
# From a prepared dataset


def dataset(with_domains: bool = True) -> PreparedDataset:
    images = np.zeros((len(LABELS), 1, 4, 4), np.uint8)
    return PreparedDataset(name="fake-domains", train_x=images, train_y=LABELS, test_x=images[:100],
                           test_y=LABELS[:100], num_classes=CLASSES, mean=(0.5,), std=(0.25,),
                           train_domain=DOMAIN_IDS if with_domains else None,
                           test_domain=DOMAIN_IDS[:100] if with_domains else None)


def test_partition_dataset_passes_domains_and_maps_them_past_the_public_set():
    part = partition_dataset(dataset(), "domains", DOMAINS, 0, {}, 0.2, public_size=250)
    assert all(len(set(DOMAIN_IDS[t].tolist())) == 1 for t in part.train)  # indices into the whole train split
    assert not set(np.concatenate(part.train).tolist()) & set(part.public.tolist())
    assert sum(len(t) + len(h) for t, h in zip(part.train, part.local_test)) == len(LABELS) - 250


@pytest.mark.parametrize("scheme", ["domains", "domain_dirichlet"])
def test_a_dataset_without_domains_is_refused(scheme):
    with pytest.raises(BenchError, match=f"partition scheme '{scheme}' needs domains"):
        partition_dataset(dataset(with_domains=False), scheme, 10, 0, {"alpha": 1.0} if "dirichlet" in scheme else {})
