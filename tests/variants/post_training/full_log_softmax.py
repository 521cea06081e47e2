"""completion_logprobs as F.log_softmax over the whole (B, T, V) logits, then the pick: right to
the last bit (in float32 for 16-bit logits), but it makes a (B, T, V) log-softmax beside the
logits, B times one sequence's. Fails the largest-tensor check only."""

# target: losses.py

import torch
import torch.nn.functional as F


def completion_logprobs(logits, targets):
    compute = torch.float32 if logits.dtype in (torch.float16, torch.bfloat16) else logits.dtype
    logprobs = F.log_softmax(logits.to(compute), dim=-1)
    return logprobs.gather(-1, targets.long().unsqueeze(-1)).squeeze(-1).to(logits.dtype)
