"""Measuring quantization error, and knowledge distillation (lecture 06, sections 8 and 9)."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def sqnr_db(x: torch.Tensor, x_hat: torch.Tensor) -> float:
    """Signal-to-quantization-noise ratio in decibels, as a Python float:

        10 * log10( sum(x^2) / sum((x - x_hat)^2) )     (in float64)

    float("inf") when x_hat equals x exactly. Every extra bit of a uniform quantizer adds about
    6.02 dB.
    """
    ### BEGIN SOLUTION
    x, x_hat = x.double(), x_hat.double()
    noise = (x - x_hat).pow(2).sum()
    if noise == 0:
        return float("inf")
    return float(10 * torch.log10(x.pow(2).sum() / noise))
    ### END SOLUTION


def distillation_loss(
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    labels: torch.Tensor,
    temperature: float = 2.0,
    alpha: float = 0.5,
) -> torch.Tensor:
    """Hinton et al. (2015): alpha * T^2 * KL(p_teacher || p_student) + (1 - alpha) * CE.

    Logits are [..., classes] (flattened to rows), labels the matching class indices.
      p_teacher = softmax(teacher / T), p_student = softmax(student / T)
      KL        = sum over classes of p_teacher * (log p_teacher - log p_student), averaged
                  over rows; the T^2 keeps its gradients on the scale of the hard-label term
      CE        = cross entropy of the student's logits (at T = 1) with `labels`, averaged
    Returns a scalar tensor that gradients flow through to `student_logits`. The teacher gets
    no gradient. Raises ValueError for temperature <= 0 or alpha outside [0, 1].
    """
    ### BEGIN SOLUTION
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if not 0 <= alpha <= 1:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    classes = student_logits.shape[-1]
    student = student_logits.reshape(-1, classes).float()
    teacher = teacher_logits.reshape(-1, classes).float().detach()
    log_p_student = F.log_softmax(student / temperature, dim=-1)
    log_p_teacher = F.log_softmax(teacher / temperature, dim=-1)
    kl = (log_p_teacher.exp() * (log_p_teacher - log_p_student)).sum(dim=-1).mean()
    hard = F.cross_entropy(student, labels.reshape(-1))
    return alpha * temperature**2 * kl + (1 - alpha) * hard
    ### END SOLUTION
