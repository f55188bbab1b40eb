"""Datasets: a registry of named datasets, each prepared into the cached format of :mod:`bench.data.prepared`."""
from bench.data.registry import (DatasetSpec, PreparedDataset, dataset_names, describe_source, get_dataset_spec,
                                 load_dataset, prepare_dataset, prepared_dir, prepared_source, register_dataset,
                                 resolve_data_dir)
from bench.data import celeba, cifar, cinic, digits, mnist, svhn, synthetic  # noqa: F401  (registers them)
from bench.data import covariate_shift, label_skew, partition, per_user  # noqa: F401  (registers the partition schemes)
from bench.data import domaindigits, domain_partitions  # noqa: F401  (registers the domain dataset and schemes)

__all__ = ["DatasetSpec", "PreparedDataset", "register_dataset", "dataset_names", "get_dataset_spec",
           "resolve_data_dir", "prepared_dir", "prepare_dataset", "load_dataset", "prepared_source", "describe_source"]
