"""FedMD as the FedAL paper runs it (pipelines/fedal/NOTES.md §3.2.1): black-box clients, τ = 1 local step of CE
on private data then τ = 1 global iteration in which every client uploads its logits on the shared
public mini-batch, the server returns their mean f̄ and each client takes one step on
𝒦(ψ(f̄_{−n}, 1) ‖ ψ(f_n, 1)) (eqs. (4)-(6)). No discriminator, no less-forgetting terms, no model
averaging.

This is FedAL (:mod:`bench.algorithms.fedal`) with its adversarial and LF weights at 0 — the same
code, so Table VIII's three rows differ only in the terms the paper adds (§2.4 check 2); τ = 1 is the
run's ``training.local_steps``. It is **not** ``fedmd`` (:mod:`bench.algorithms.fedmd`), the FedHKD
paper's FedMD: FedAvg aggregation plus a distillation term on the whole public set's soft predictions
computed once per round (pipelines/fedhkd/NOTES.md §4). The original FedMD (labelled public pre-training, an
L1 "digest" on logits, "revisit" epochs) is neither.
"""
from __future__ import annotations

from pydantic import Field

from bench.algorithms import register_algorithm
from bench.algorithms.fedal import FedAL, FedALParams


class FedMDFedALParams(FedALParams):
    adv_weight: float = Field(0.0, ge=0, description="FedMD: no adversarial term")
    lf_local_weight: float = Field(0.0, ge=0, description="FedMD: no r_loc")
    lf_global_weight: float = Field(0.0, ge=0, description="FedMD: no r_glo")


@register_algorithm("fedmd_fedal")
class FedMDFedAL(FedAL):
    Params = FedMDFedALParams
