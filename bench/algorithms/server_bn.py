"""The BatchNorm statistics a server-distillation method's global model carries after the server's round: one rule,
``student_bn_stats``, for FedDF, FedFTG, FedGen and DaFKD (pipelines/dafkd/NOTES.md A27).

A server that trains the averaged model ŵ (distillation on proxy or generated samples, data-free fine-tuning) runs it
in train mode, so its BatchNorm running statistics end as those forwards left them; clients that pass generated
samples through the shared extractor in train mode (DaFKD) have already moved the statistics that ŵ averages. The
papers are silent on which statistics the evaluated model carries. Readings:

* ``distilled``: as the server's work left them (FedGen's server never trains the global model: ŵ's); the default,
  which every run pinned before the rule existed used;
* ``averaged``: ŵ's, the (n_k- or uniformly) weighted average of the uploaded buffers, restored after the server's
  training, whose parameters stay;
* ``clients``: re-estimated on the clients' real training data only, federated — the recommended reading for the
  papers' protocol: after the round's server work the server sends each of the round's clients its model; the client
  runs one seeded shuffled pass over its training split in batches of ``training.batch_size`` through it in train mode
  (every layer normalising with its batch's statistics) and sends back, per BatchNorm layer, the mean over its batches
  of the batch means and unbiased variances, and how many samples it used (:func:`estimate_statistics`); the server
  pools them weighted by those counts, the spread between the clients' means included (:func:`pooled_statistics`),
  and loads them. The extra exchange costs one model download and 2 values per BatchNorm channel upstream per client
  (the communication ledger counts both). Every round, with or without server training;
* ``test``: the released DaFKD code's (NOTES §1.7.17): after the server trains, train-mode forwards of the test set's
  full batches (``training.batch_size``, in order, each layer's own momentum) move the statistics towards the test
  set's, and the model evaluated on the test set carries them — **test data leaks into the evaluation**; only for
  reproducing that code.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, replace
from typing import Literal

import torch
from pydantic import Field

from bench.algorithms.base import AveragingParams, DownP, ParameterAveraging, UpP
from bench.engine.aggregate import load_state, weighted_average
from bench.engine.batchnorm import estimate_statistics, pooled_statistics
from bench.engine.messages import ModelBroadcast, Update
from bench.engine.protocol import Exchange, Metrics, Phase
from bench.engine.state import Client, ClientStateT, Server, ServerStateT
from bench.errors import BenchError

BNRule = Literal["distilled", "averaged", "clients", "test"]
BN_RULE_DOC = ("the global model's BatchNorm running statistics after the server's round: as its training left them, "
               "ŵ's averaged ones, re-estimated on the clients' training data (federated), or the released DaFKD "
               "code's test-set passes (test-data leakage) (bench/algorithms/server_bn.py)")


class ServerBNParams(AveragingParams):
    student_bn_stats: BNRule = Field("distilled", exclude_if=lambda v: v == "distilled", description=(
        BN_RULE_DOC + "; left out of the resolved config at its default, so the runs from before it keep their hash"))


@dataclass(frozen=True)
class BNStatistics:
    """A client's answer under ``clients``: each BatchNorm layer's running mean and variance estimated on its training
    data, and the number of samples the estimate used."""

    statistics: dict[str, torch.Tensor]
    num_samples: int


class ServerBNRule(ParameterAveraging[ClientStateT, ServerStateT, DownP, UpP]):
    """A parameter-averaging method whose server trains the global model: after the method's :meth:`aggregate` the
    ``student_bn_stats`` rule sets the global model's BatchNorm statistics (module docstring)."""

    params: ServerBNParams

    def phases(self, round_index: int) -> list[Phase[ClientStateT, ServerStateT]]:
        """The method's round, its last exchange's server side followed by the rule; under ``clients`` one more
        exchange, the clients' estimates."""
        phases = list(super().phases(round_index))
        last = phases[-1]
        assert isinstance(last, Exchange)
        phases[-1] = replace(last, take=self.aggregate_with_rule)
        if self.params.student_bn_stats == "clients":
            phases.append(Exchange(self.statistics_request, self.client_statistics, self.pool_statistics))
        return phases

    def server_trains(self, round_index: int) -> bool:
        """Whether the server trains the global model in ``round_index`` (every round unless the method says not)."""
        return True

    def aggregate_with_rule(self, round_index: int, server: Server[ServerStateT],
                            updates: list[Update[UpP]]) -> Metrics:
        """The method's :meth:`aggregate`, then ``averaged`` or ``test`` where the server trained."""
        metrics = self.aggregate(round_index, server, updates)
        rule = self.params.student_bn_stats
        if rule == "distilled" or not self.server_trains(round_index):
            return metrics
        if server.model is None:
            raise BenchError(f"student_bn_stats: {rule} sets the statistics of one global model; {self.name} with "
                             "model.candidates has one per architecture: set student_bn_stats: distilled")
        if rule == "averaged":
            keys = [name for name, _ in server.model.named_buffers()]
            weights = [u.num_samples if self.params.weighting == "samples" else 1.0 for u in updates]
            load_state(server.model, weighted_average([u.state for u in updates], weights, keys), strict=False)
        elif rule == "test":
            self.test_set_passes(server.model)
        return metrics

    @torch.no_grad()
    def test_set_passes(self, model: torch.nn.Module) -> None:
        """``test``: train-mode forwards of the test set's full batches of ``training.batch_size``, in order."""
        x, size = self.ctx.test_x, self.ctx.config.training.batch_size
        assert x is not None, "the runner gives the method the test images"
        model.train()
        for start in range(0, len(x) - size + 1, size):
            model(x[start:start + size])

    # -- ``clients``: the extra exchange ------------------------------------------------------------------

    def statistics_request(self, round_index: int, server: Server[ServerStateT], cid: int) -> ModelBroadcast[None]:
        """Server side: the global model's shared state, to estimate its statistics on."""
        return ModelBroadcast(self.global_state(server, cid), None)

    def client_statistics(self, round_index: int, client: Client[ClientStateT],
                          message: ModelBroadcast[None]) -> tuple[BNStatistics, Metrics]:
        """Client side: the received model's BatchNorm statistics on one seeded pass over the client's training split
        (stream ``("bn-statistics", cid, round)``); its own model is left as it is."""
        model = copy.deepcopy(client.model)
        load_state(model, message.state, strict=not self.personal_parameters)
        data = client.data
        indices = list(self.ctx.shuffled_pass(data.num_samples, "bn-statistics", client.cid, round_index))
        statistics = estimate_statistics(model, (data.x[idx] for idx in indices))
        return BNStatistics(statistics, sum(len(idx) for idx in indices)), {}

    def pool_statistics(self, round_index: int, server: Server[ServerStateT], answers: list[BNStatistics]) -> Metrics:
        """Server side: the clients' estimates pooled by sample count into the global model."""
        if server.model is None:
            raise BenchError(f"student_bn_stats: clients sets the statistics of one global model; {self.name} with "
                             "model.candidates has one per architecture: set student_bn_stats: distilled")
        load_state(server.model, pooled_statistics([a.statistics for a in answers], [a.num_samples for a in answers]),
                   strict=False)
        return {}
