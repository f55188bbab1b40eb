"""Partition schemes over the images' domains (datasets that record one per image, e.g. ``domaindigits``).

* ``domains``: each client's images come from one domain (or ``domains_per_client`` of them); the clients
  that share a domain group split its images as another scheme (``within``) splits labels: ``iid``,
  ``dirichlet``, ``shards``, ... So clients differ in what their images look like (covariate shift), and
  in their labels as the inner scheme makes them.
* ``domain_dirichlet``: Dirichlet skew over domains instead of labels: the ``dirichlet`` scheme with each
  image's domain id in place of its label (so each client holds a Dirichlet mixture of the domains, and
  the labels each domain holds, which in ``domaindigits`` are balanced).
"""
from __future__ import annotations

from typing import Any

import numpy as np
from pydantic import Field, field_validator

from bench.data.partition import (
    DirichletParams,
    Indices,
    SchemeParams,
    Split,
    dirichlet,
    dirichlet_figure,
    get_partitioner,
    register_partitioner,
)
from bench.errors import BenchError

class DomainsParams(SchemeParams):
    domains_per_client: int = Field(1, ge=1, description=(
        "domains in each client's group; must divide the number of domains"))
    within: dict[str, Any] = Field(default_factory=lambda: {"scheme": "iid"}, description=(
        "the scheme, with its parameters, that splits a group's images among the group's clients, "
        "e.g. {scheme: dirichlet, alpha: 0.5}"))

    @field_validator("within")
    @classmethod
    def _known_scheme(cls, within: dict[str, Any]) -> dict[str, Any]:
        """The inner scheme's parameters validated by its own model (defaults filled in)."""
        params = dict(within)
        scheme = params.pop("scheme", "iid")
        inner = get_partitioner(scheme)
        if unsupported := set(inner.needs) - {"domains"}:
            raise ValueError(f"scheme {scheme!r} needs {sorted(unsupported)}; choose a scheme that splits the "
                             "train labels alone (iid, dirichlet, shards)")
        return {"scheme": scheme, **inner.params.model_validate(params).model_dump(mode="json")}


@register_partitioner("domains", DomainsParams, needs=("domains",))
def domains(labels: np.ndarray, num_clients: int, rng: np.random.Generator, params: DomainsParams, *,
            domains: np.ndarray) -> Indices:
    """Each client from one domain (or a few), labels within a domain as another scheme draws them.

    The domains, in a seeded order, are cut into groups of ``domains_per_client``; the clients, in a
    seeded order, are dealt to the groups in turn (so a group holds ⌊M/G⌋ or ⌈M/G⌉ of the M clients;
    with fewer clients than groups, the groups left without one are held by no client). Each group's
    images are split among its clients by the ``within`` scheme, run on the group's labels (and domain
    ids, if it needs them: ``domain_dirichlet`` mixes a group's domains) with this scheme's stream.
    Every client's images are from its group's domains only."""
    ids = np.unique(domains)
    per = params.domains_per_client
    if len(ids) % per:
        raise BenchError(f"partition: {len(ids)} domains do not split into groups of domains_per_client={per}; "
                         f"use a divisor of {len(ids)}")
    group_domains = rng.permutation(ids).reshape(-1, per)
    group_of_client = np.empty(num_clients, np.int64)
    group_of_client[rng.permutation(num_clients)] = np.arange(num_clients) % len(group_domains)
    inner_params = dict(params.within)
    inner = get_partitioner(inner_params.pop("scheme"))
    checked = inner.params.model_validate(inner_params)
    clients: Indices = [np.zeros(0, np.int64)] * num_clients
    for g, members in enumerate(group_domains):
        holders = np.flatnonzero(group_of_client == g)
        if not len(holders):
            continue
        images = np.flatnonzero(np.isin(domains, members))
        inputs = {"domains": domains[images]} if inner.needs else {}
        parts = inner.split(labels[images], len(holders), rng, checked, **inputs)
        if isinstance(parts, Split):
            raise BenchError(f"partition: the within scheme {inner.scheme!r} builds its own local test sets; "
                             "choose one that only splits the train images (iid, dirichlet, shards)")
        for client, part in zip(holders, parts):
            clients[client] = np.sort(images[np.asarray(part, dtype=np.int64)])
    return clients


@register_partitioner("domain_dirichlet", DirichletParams, needs=("domains",), figure=dirichlet_figure)
def domain_dirichlet(labels: np.ndarray, num_clients: int, rng: np.random.Generator, params: DirichletParams, *,
                     domains: np.ndarray) -> Indices:
    """Dirichlet over domains: the ``dirichlet`` scheme with each image's domain in place of its label.

    ``mode: per_class`` cuts each domain's shuffled images at Dir_M(α) shares (NIID-Bench, with its balance
    cap and ``min_size`` redraws); ``per_client``: each client draws domain proportions q ~ Dir_K(α) and
    takes ⌊N/M⌋ images by them. Small α gives clients few domains; large α, every domain evenly."""
    return dirichlet(domains, num_clients, rng, params)
