"""CFD — Sattler, Marban, Rischke, Samek, "Communication-efficient federated distillation",
arXiv:2012.00632 (2020), as the FedAL paper runs it (pipelines/fedal/NOTES.md §3.2.3; the paper: "CFD is the same
as MHAT", so one baseline stands for both).

The server owns a model f_S (``server_model``; [ASSUMPTION] per dataset: WRN-16-1 on SVHN, ResNet-18
on CIFAR-10/CINIC-10, LeNet5 on MNIST, the LEAF CNN on CelebA, WRN-10-1 in the homogeneous Fig. 11).
Each round: τ local CE steps per client, then τ global iterations on lockstep public batches x:

1. clients upload their logits f_n(x);
2. the server forms f̄ = mean_n f_n(x) and takes one Adam step (``server_lr`` 1e-3, its optimiser
   kept across rounds) on 𝒦(ψ(f̄, E) ‖ ψ(f_S(x), E));
3. it sends its updated logits f_S(x) (``reply_mode: eval``: computed in eval mode, so the reply does not
   update the server's BatchNorm statistics a second time; ``train``: a second train-mode pass);
4. each client takes one step on 𝒦(ψ(f_S(x), E) ‖ ψ(f_n(x), E)).

E = 1; τ = 1 by default (the FedMD pipeline; unstated, §3.2.3). CFD's soft-label compression is an
option, off by default (Fig. 11 reports CFD at FedAL's volume, so the authors did not compress):
``quantization_bits: b`` uploads and downloads soft labels ψ(·, E) quantised to b bits per entry
(uniform levels k/(2^b − 1), rounded to the nearest, renormalised after decoding; the server then
averages the clients' decoded probabilities instead of their logits). CFD's delta coding is not
implemented. The ledger counts b bits per entry.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn

from bench.algorithms import register_algorithm
from bench.algorithms.knowledge_transfer import (KnowledgeTransfer, LogitsUpload, PublicOutputs, TransferParams,
                                                 stacked_logits)
from bench.engine.distillation import soft_target_kl
from bench.engine.loop import Loop, Step
from bench.engine.protocol import Metrics
from bench.engine.state import Client, NoState, Server


class CFDParams(TransferParams):
    server_model: str | None = Field(None, description="the server model's architecture; None: model.name")
    server_lr: float = Field(1e-3, gt=0, description="the server's Adam learning rate")
    temperature: float = Field(1.0, gt=0, description="E of both distillation KLs")
    reply_mode: Literal["eval", "train"] = Field("eval", description="mode of the server's reply forward pass")
    quantization_bits: int | None = Field(None, ge=1, le=16, description="b-bit soft labels up and down; None: "
                                                                         "full-precision logits")


def quantize(probabilities: torch.Tensor, bits: int) -> torch.Tensor:
    """b-bit codes of probabilities: round(p·(2^b − 1)), as integers."""
    levels = 2 ** bits - 1
    return torch.round(probabilities * levels).to(torch.int16 if bits > 8 else torch.uint8)


def dequantize(codes: torch.Tensor, bits: int) -> torch.Tensor:
    """Probabilities from b-bit codes: codes/(2^b − 1), renormalised per row (a row of zeros: uniform)."""
    values = codes.to(torch.float32) / (2 ** bits - 1)
    total = values.sum(dim=-1, keepdim=True)
    uniform = torch.full_like(values, 1.0 / values.shape[-1])
    return torch.where(total > 0, values / total.clamp(min=1e-12), uniform)


@dataclass(frozen=True)
class QuantizedSoftLabels:
    """Soft labels as b-bit codes (B × K); on the wire, b bits per entry."""

    codes: torch.Tensor
    bits: int

    def wire_bytes(self) -> int:
        return math.ceil(self.codes.numel() * self.bits / 8)

    def probabilities(self) -> torch.Tensor:
        return dequantize(self.codes, self.bits)


@dataclass(frozen=True)
class ServerLogits:
    """The server model's logits f_S(x) on the public batch (B × K)."""

    logits: torch.Tensor


@dataclass
class CFDServer(NoState):
    """The server's model f_S and its Adam optimiser (kept across rounds)."""

    model: nn.Module | None = None
    optimizer: torch.optim.Optimizer | None = None


@register_algorithm("cfd")
class CFD(KnowledgeTransfer[NoState, CFDServer, LogitsUpload | QuantizedSoftLabels, ServerLogits | QuantizedSoftLabels]):
    """Up: logits (or b-bit soft labels); down: the server model's logits (or its b-bit soft labels)."""

    Params = CFDParams
    params: CFDParams
    ServerState = CFDServer

    def init_server_state(self, model: nn.Module | None) -> CFDServer:
        server_model = self.ctx.build_model("cfd-server", name=self.params.server_model or self.ctx.config.model.name)
        return CFDServer(server_model, torch.optim.Adam(server_model.parameters(), lr=self.params.server_lr))

    def soft(self, logits: torch.Tensor) -> torch.Tensor:
        return F.softmax(logits / self.params.temperature, dim=-1)

    def upload(self, client: Client[NoState], outputs: PublicOutputs) -> LogitsUpload | QuantizedSoftLabels:
        bits = self.params.quantization_bits
        logits = outputs.logits.detach()
        return LogitsUpload(logits) if bits is None else QuantizedSoftLabels(quantize(self.soft(logits), bits), bits)

    def serve(self, round_index: int, server: Server[CFDServer], cids: list[int], x: torch.Tensor,
              uploads: list[LogitsUpload | QuantizedSoftLabels]) -> tuple[list[ServerLogits | QuantizedSoftLabels],
                                                                         Metrics]:
        p, state = self.params, server.state
        assert state.model is not None and state.optimizer is not None
        logits_uploads = [u for u in uploads if isinstance(u, LogitsUpload)]
        quantized = [u for u in uploads if isinstance(u, QuantizedSoftLabels)]
        target = (self.soft(stacked_logits(logits_uploads).mean(0)) if logits_uploads
                  else torch.stack([u.probabilities() for u in quantized]).mean(0))
        model = state.model.train()
        loss = Loop(state.optimizer, list(model.parameters()), round_index, "server").run(
            [x], lambda step, batch: soft_target_kl(model(batch)[1], target, p.temperature))
        with torch.no_grad():
            model.train(p.reply_mode == "train")
            _, logits = model(x)
        reply = (ServerLogits(logits) if p.quantization_bits is None
                 else QuantizedSoftLabels(quantize(self.soft(logits), p.quantization_bits), p.quantization_bits))
        return [reply] * len(cids), {"server_loss": loss}

    def transfer_loss(self, step: Step, client: Client[NoState], x: torch.Tensor, outputs: PublicOutputs,
                      reply: ServerLogits | QuantizedSoftLabels) -> torch.Tensor:
        target = reply.probabilities() if isinstance(reply, QuantizedSoftLabels) else self.soft(reply.logits)
        return soft_target_kl(outputs.logits, target, self.params.temperature)
