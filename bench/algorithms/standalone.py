"""Standalone — every client trains only on its own data; nothing is communicated.

The lower bound of the personalised-accuracy comparisons (pipelines/fedakd/NOTES.md §4). Each client's
model persists across rounds from its own initialisation; there is no global model, so only the
local (personalised) accuracy is reported.
"""
from __future__ import annotations

from bench.algorithms import register_algorithm
from bench.algorithms.base import Algorithm
from bench.engine.state import Client, NoState, Server


@register_algorithm("standalone")
class Standalone(Algorithm[NoState, NoState, None, None]):
    has_global_model = False

    def broadcast(self, round_index: int, server: Server[NoState], cid: int) -> None:
        return None

    def update(self, client: Client[NoState]) -> None:
        return None
