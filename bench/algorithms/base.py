"""The interface every method implements.

A round is ``broadcast -> local_update (per selected client, in client-id order) -> aggregate``.
The FedAvg family overrides only the pieces that differ (usually :meth:`Algorithm.local_loss`);
methods with other communication patterns (logits on a public set, generators, prototypes)
override :meth:`Algorithm.run_round` and use the same :class:`~bench.engine.context.Context`.
"""
from __future__ import annotations

from typing import Any, ClassVar, Literal

import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field

from bench.engine.aggregate import copy_state, weighted_average
from bench.engine.context import Context
from bench.engine.state import Client, Server, Update
from bench.errors import BenchError


class AlgorithmParams(BaseModel):
    """Hyperparameters of a method; subclasses add fields with the paper's defaults."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Algorithm:
    name: ClassVar[str] = ""
    Params: ClassVar[type[AlgorithmParams]] = AlgorithmParams
    has_global_model: ClassVar[bool] = True
    resident_models: ClassVar[int] = 1  # copies of the client model held during local training

    def resident_parameters(self, model: torch.nn.Module) -> int:
        """Parameters held in memory during local training (FedHKD Table 1 "Params"): ``resident_models``
        copies of the client model; methods with extra models (FedGen's generator) add them."""
        return self.resident_models * sum(p.numel() for p in model.parameters())

    def __init__(self, params: AlgorithmParams, ctx: Context) -> None:
        self.params = params
        self.ctx = ctx

    # -- set-up ---------------------------------------------------------------------------------

    def init_server(self) -> Server:
        return Server(model=self.ctx.build_model("server") if self.has_global_model else None)

    def init_client_model(self, cid: int, server: Server) -> torch.nn.Module:
        """A client's model (its assigned architecture): a copy of the global model when there is one
        of the same architecture, else its own initialisation."""
        name = self.ctx.architectures[cid]
        model = self.ctx.build_model("client", cid, name=name)
        if server.model is not None and name == self.ctx.config.model.name:
            model.load_state_dict(server.model.state_dict())
        return model

    # -- one round ------------------------------------------------------------------------------

    def run_round(self, round_index: int, server: Server, clients: list[Client]) -> dict[str, float]:
        """One communication round over the selected ``clients`` (sorted by id); returns metrics."""
        updates, losses = [], []
        for client in clients:
            self.broadcast(server, client)
            update, loss = self.local_update(round_index, server, client)
            updates.append(update)
            losses.append(loss)
        self.aggregate(round_index, server, updates)
        return {"train_loss": sum(losses) / len(losses)}

    def broadcast(self, server: Server, client: Client) -> None:
        """Send the global model to the client (overwrites its weights and BN buffers)."""
        if server.model is not None:
            copy_state(client.model, server.model)

    def local_update(self, round_index: int, server: Server, client: Client) -> tuple[Update, float]:
        loss = self.ctx.local_train(client, round_index, self.local_loss)
        return Update(client.cid, client.data.num_samples, client.model.state_dict()), loss

    def local_loss(self, client: Client, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The per-batch local objective; plain cross-entropy by default."""
        _, logits = client.model(x)
        return F.cross_entropy(logits, y)

    def aggregate(self, round_index: int, server: Server, updates: list[Update]) -> None:
        """Combine the clients' updates into the server state. Methods without one do nothing."""

    # -- evaluation -----------------------------------------------------------------------------

    def global_model(self, server: Server) -> torch.nn.Module | None:
        """The model evaluated on the global test set, if the method has one."""
        return server.model

    def extra_metrics(self, server: Server, clients: list[Client]) -> dict[str, Any]:
        return {}


class AveragingParams(AlgorithmParams):
    weighting: Literal["samples", "uniform"] = Field("samples", description="aggregation weights n_k or 1")


class ParameterAveraging(Algorithm):
    """The FedAvg server step shared by the FedAvg family:
    θ^{t+1} = Σ_{k∈S_t} (n_k / Σ_{j∈S_t} n_j) θ_k^t over the full state dict, BatchNorm running
    statistics included, ``num_batches_tracked`` copied (specs/fedhkd.md §4 and §11.3,
    specs/dafkd.md §2.1). ``weighting: uniform`` is the unweighted mean some official code uses
    (anchors.md §2.2)."""

    Params = AveragingParams
    params: AveragingParams

    def init_server(self) -> Server:
        if set(self.ctx.architectures) != {self.ctx.config.model.name}:
            raise BenchError(f"{self.name} averages parameters, so every client needs the architecture "
                             f"{self.ctx.config.model.name!r}; drop model.candidates")
        return super().init_server()

    def aggregate(self, round_index: int, server: Server, updates: list[Update]) -> None:
        assert server.model is not None
        weights = [u.num_samples if self.params.weighting == "samples" else 1.0 for u in updates]
        server.model.load_state_dict(weighted_average([u.state for u in updates], weights))
