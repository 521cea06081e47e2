# Your working copy: replace every `raise NotImplementedError` with your implementation.
# (Generated from the course's reference by `python -m grader sync`.)
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
    raise NotImplementedError("implement sqnr_db (lectures/06-quantization.md, section 8)")


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
    raise NotImplementedError("implement distillation_loss (lectures/06-quantization.md, section 9)")
