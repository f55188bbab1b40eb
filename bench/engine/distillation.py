"""The distillation losses methods share: the KL divergence from a target distribution to a student's
tempered softmax, and Hinton et al.'s temperature knowledge-distillation loss built on it.

Both take the student first: ``(student_logits, teacher, temperature)``, the batch mean over rows (KL summed over
classes, ``F.kl_div(..., reduction="batchmean")``); the teacher is a constant (no gradient reaches it).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


def soft_target_kl(student_logits: torch.Tensor, target: torch.Tensor, temperature: float) -> torch.Tensor:
    """KL(target ‖ softmax(s/T)) = (1/B) Σ_i Σ_c target_ic (log target_ic − log softmax(s_i/T)_c), ``target`` a
    probability row per sample (a tempered softmax, an ensemble's mixture, a server's consensus)."""
    return F.kl_div(F.log_softmax(student_logits / temperature, dim=1), target, reduction="batchmean")


def kd_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """T²·KL(softmax(t/T) ‖ softmax(s/T)), batch mean: Hinton et al.'s distillation loss, whose T² keeps the
    gradients' scale independent of T."""
    return temperature ** 2 * soft_target_kl(student_logits, F.softmax(teacher_logits.detach() / temperature, dim=1),
                                             temperature)
