"""FedAvg — McMahan et al., AISTATS 2017.

"Communication-efficient learning of deep networks from decentralized data".

Local objective: cross-entropy (:meth:`Algorithm.local_loss`). Server: the sample-weighted average
of the clients' full state dicts (:class:`~bench.algorithms.base.ParameterAveraging`; pipelines/dafkd/NOTES.md §2.1,
pipelines/fedhkd/NOTES.md §4).
"""
from __future__ import annotations

from bench.algorithms import register_algorithm
from bench.algorithms.base import ModelAveraging


@register_algorithm("fedavg")
class FedAvg(ModelAveraging):
    pass
