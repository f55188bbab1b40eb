"""FedAlign — Mendieta, Yang, Wang, Lee, Ding, Chen, "Local learning matters: rethinking data
heterogeneity in federated learning", CVPR 2022, as FedHKD compares it (pipelines/fedhkd/NOTES.md §4 FedAlign,
§5.5; the official FedAlign code).

Per batch (:func:`fedalign_backward`):

1. full-width forward keeping the final block's input f_in and output f_out; backpropagate L_CE;
2. sub-network pass: the first ⌈w·C⌉ channels of the detached f_in through the final block at width w,
   by weight slicing, without touching BN running statistics (:mod:`bench.models.slimmable`);
3. per sample, the transmitting matrix TM = f̂_in·f_outᵀ/(H·W) (f̂_in average-pooled to f_out's spatial
   size), K = TM·TMᵀ, and √λ_max(K) by power iteration from a ones vector;
4. L_lip = MSE(√λ_max(K_sub), √λ_max(K_full).detach()), scaled to μ·(L_CE/L_lip)·L_lip so its value is
   μ·L_CE, and backpropagated onto CE's gradients; clip the gradient norm (FedAlign: 10) and step.

Server: FedAvg. μ = 0.45, w = 0.25 [P]. The final block is the model's ``final_block`` (ResNet-18
``layer4``, ShuffleNetV2 ``conv5`` [R], the digits ``cnn``'s second conv block).

Readings (Params fields):

- ``sub_bn``: the sub-network's BatchNorm normalises with the sub-batch statistics (``batch``, what
  FedAlign's ``USBatchNorm2d`` does at sub-widths) or the sliced running statistics (``running``);
  neither updates them (pipelines/fedhkd/NOTES.md §4).
- ``grad_clip``: FedAlign's own clip replaces ``training.grad_clip``; null: no clipping.
- The reported train loss is the objective's value, L_CE + L_align = (1 + μ)·L_CE; a batch with
  L_lip = 0 (sub- and full-width estimates agree) adds no alignment term instead of FedAlign's 0/0.
- ⌈w·C⌉ channels (pipelines/fedhkd/NOTES.md §4), not FedAlign's ``make_divisible(w·C, 8)``: identical for ResNet-18's 64/128,
  and it gives the notes' 116 -> 256 for ShuffleNetV2's ``conv5``.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn

from bench.algorithms import register_algorithm
from bench.algorithms.base import AveragingParams, ModelAveraging
from bench.engine.loop import Step
from bench.engine.messages import Update
from bench.engine.state import Client, NoState, Server
from bench.models.slimmable import BNStats, capture_block_io, final_block, slim_forward, sliced_channels


class FedAlignParams(AveragingParams):
    mu: float = Field(0.45, ge=0, description="μ_align: the alignment term's value relative to CE")
    width: float = Field(0.25, gt=0, le=1, description="fractional width w of the sub-network")
    power_iterations: int = Field(10, ge=1, description="power-iteration steps for the top eigenvalue")
    sub_bn: BNStats = Field("batch", description="sub-network BN statistics: batch (FedAlign code) or running")
    grad_clip: float | None = Field(10.0, gt=0, description="gradient-norm clip (FedAlign: 10), used instead of "
                                                            "training.grad_clip; null: none")


def transmitting_matrix(f_in: torch.Tensor, f_out: torch.Tensor) -> torch.Tensor:
    """Per-sample TM = f̂_in·f_outᵀ/(H·W), shape (B, C_in, C_out); f̂_in is f_in average-pooled to
    f_out's spatial size when larger."""
    if f_in.shape[2] > f_out.shape[2]:
        f_in = F.adaptive_avg_pool2d(f_in, (f_out.shape[2], f_out.shape[3]))
    a, b = f_in.flatten(2), f_out.flatten(2)
    return torch.bmm(a, b.transpose(1, 2)) / a.shape[2]


def sqrt_top_eigenvalue(k: torch.Tensor, iterations: int = 10) -> torch.Tensor:
    """√λ_max of each symmetric PSD matrix in the batch ``k`` (B, n, n), shape (B, 1, 1): ``iterations``
    power-iteration steps from a ones vector, returning √(‖Kv‖/‖v‖) as FedAlign's ``top_eigenvalue``
    does. For K = TM·TMᵀ this is TM's largest singular value."""
    v = torch.ones(k.shape[0], k.shape[1], 1, dtype=k.dtype, device=k.device)
    norm = torch.ones(k.shape[0], 1, 1, dtype=k.dtype, device=k.device)
    for _ in range(iterations):
        m = torch.bmm(k, v)
        norm = torch.linalg.vector_norm(m, dim=1, keepdim=True)
        v = m / norm
    return torch.sqrt(norm / torch.linalg.vector_norm(v, dim=1, keepdim=True))


def lipschitz(f_in: torch.Tensor, f_out: torch.Tensor, iterations: int) -> torch.Tensor:
    """The block's Lipschitz estimate √λ_max(TM·TMᵀ) per sample."""
    tm = transmitting_matrix(f_in, f_out)
    return sqrt_top_eigenvalue(torch.bmm(tm, tm.transpose(1, 2)), iterations)


def fedalign_backward(model: nn.Module, block: nn.Module, x: torch.Tensor, y: torch.Tensor,
                      params: FedAlignParams) -> tuple[float, float]:
    """Steps 1-4 for one batch: accumulate the gradients of L_CE and L_align in ``.grad``; return
    their values (L_CE, L_align)."""
    with capture_block_io(block) as io:
        _, logits = model(x)
    ce = F.cross_entropy(logits, y)
    ce.backward()
    f_in, f_out = io["input"].detach(), io["output"].detach()
    sub_in = f_in[:, :sliced_channels(f_in.shape[1], params.width)]
    sub_out = slim_forward(block, sub_in, params.width, params.sub_bn)
    lip = F.mse_loss(lipschitz(sub_in, sub_out, params.power_iterations),
                     lipschitz(f_in, f_out, params.power_iterations))
    ce_value, lip_value = ce.item(), lip.item()
    if lip_value == 0.0:
        return ce_value, 0.0
    scale = params.mu * ce_value / lip_value
    (scale * lip).backward()
    return ce_value, scale * lip_value


@register_algorithm("fedalign")
class FedAlign(ModelAveraging[NoState, NoState]):
    Params = FedAlignParams
    params: FedAlignParams

    def init_server(self) -> Server[NoState]:
        server = super().init_server()
        assert server.model is not None
        final_block(server.model, self.ctx.config.model.name)  # fail before training if the model has none
        return server

    def local_update(self, round_index: int, client: Client[NoState]) -> tuple[Update[None], float]:
        """The engine's client loop (seeded batches, optimiser, lr schedule) with FedAlign's two backward
        passes and its own clip per step."""
        block = final_block(client.model, self.ctx.architectures[client.cid])

        def gradients(step: Step, batch: tuple[torch.Tensor, torch.Tensor]) -> float:
            return sum(fedalign_backward(client.model, block, *batch, self.params))

        loop = self.ctx.client_loop(client, round_index, grad_clip=self.params.grad_clip)
        loss = loop.run_gradients(self.ctx.client_batches(client, round_index), gradients)
        return self.update(client), loss
