"""FedAvg — McMahan et al., "Communication-efficient learning of deep networks from decentralized
data", AISTATS 2017.

Local objective: cross-entropy (:meth:`Algorithm.local_loss`). Server: the sample-weighted average
of the clients' full state dicts (:class:`ParameterAveraging`; specs/dafkd.md §2.1,
specs/fedhkd.md §4).
"""
from __future__ import annotations

from bench.algorithms import register_algorithm
from bench.algorithms.base import ParameterAveraging


@register_algorithm("fedavg")
class FedAvg(ParameterAveraging):
    pass
