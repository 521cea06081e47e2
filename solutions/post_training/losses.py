"""The losses of post-training: log-probabilities of completions, DPO and GRPO (lecture 16,
sections 3 to 5).

Every loss here is a function of per-token log-probabilities: log pi(y_t | x, y_<t) for each
token y_t of a completion y of a prompt x. A completion's log-probability is their sum.

The formulas are those of TRL 1.16.0 (trl/trainer/utils.py selective_log_softmax,
trl/trainer/dpo_trainer.py's sigmoid loss, trl/trainer/grpo_trainer.py's advantages and its loss
types "grpo", "bnpo" and "dapo"); the course's project tests compare them in float64.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch._decomp import core_aten_decompositions
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves


def completion_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """log softmax(logits)[b, t, targets[b, t]] for every position: the log-probability of each
    target token under the logits that predict it.

    logits (B, T, V): the caller has shifted them, so that logits[:, t] predicts targets[:, t]
    (for a model's output on a sequence s, logits[:, :-1] predict s[:, 1:]). targets (B, T): token
    ids (an integer dtype). There is no ignore_index: a padding position must hold some valid id
    (the pad token's, say), and the caller masks its log-probability out afterwards. Returns a
    (B, T) tensor in logits' dtype, on logits' device, differentiable with respect to logits (its
    gradient is that of log_softmax followed by the pick). B or T may be 0: the result is then an
    empty (B, T) tensor.

    Precision: float32 and float64 logits are computed in their own dtype. 16-bit logits (float16,
    bfloat16) are computed in float32 (one sequence at a time, converted) and the result rounded
    once to logits' dtype: in bfloat16 itself, logits near 100 carry a step of 0.5, and the
    difference of two such numbers (the target's logit minus the log of the sum of exponentials)
    would be off by that much.

    Memory: no tensor it makes holds more than T * V elements, one sequence's logits (counted by
    the grader on every tensor an operator returns that is not a view of its inputs, with torch's
    composite operators broken into the aten operators they are made of: torch.logsumexp over the
    whole (B, T, V) logits makes a (B, T, V) temporary, and so does F.log_softmax over them). Work
    one sequence at a time, as TRL's selective_log_softmax does: a model's logits are the largest
    tensor of a post-training step (batch x length x a vocabulary of 150,000), and a second copy
    of them in float32 is what runs out of memory.

    Raises ValueError when logits is not 3-D; targets' shape is not logits' first two dimensions;
    logits is not a floating-point tensor; targets is not an integer tensor; a target is outside
    [0, V).
    """
    ### BEGIN SOLUTION
    if logits.dim() != 3:
        raise ValueError(f"logits must be (B, T, V), got shape {tuple(logits.shape)}")
    if targets.shape != logits.shape[:2]:
        raise ValueError(f"targets must be (B, T) = {tuple(logits.shape[:2])}, got {tuple(targets.shape)}")
    if not logits.is_floating_point():
        raise ValueError(f"logits must be floating point, got {logits.dtype}")
    if targets.is_floating_point() or targets.is_complex() or targets.dtype == torch.bool:
        raise ValueError(f"targets must be integer token ids, got {targets.dtype}")
    vocab = logits.shape[-1]
    if targets.numel() and (int(targets.min()) < 0 or int(targets.max()) >= vocab):
        low, high = int(targets.min()), int(targets.max())
        raise ValueError(f"targets must lie in [0, {vocab}), got values from {low} to {high}")
    compute = torch.float32 if logits.dtype in (torch.float16, torch.bfloat16) else logits.dtype
    rows = []
    for row, row_targets in zip(logits, targets.long()):  # one sequence at a time: at most (T, V)
        row = row.to(compute)
        picked = row.gather(-1, row_targets.unsqueeze(-1)).squeeze(-1)
        rows.append((picked - torch.logsumexp(row, dim=-1)).to(logits.dtype))
    if not rows:
        return logits.new_empty(targets.shape)
    return torch.stack(rows)
    ### END SOLUTION


def dpo_loss(
    policy_chosen: torch.Tensor,
    policy_rejected: torch.Tensor,
    reference_chosen: torch.Tensor,
    reference_rejected: torch.Tensor,
    beta: float = 0.1,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """DPO's sigmoid loss (Rafailov et al. 2023) over a batch of N preference pairs.

    Each argument is an (N,) tensor of sequence log-probabilities (the sum of a completion's
    per-token log-probabilities): pair i's chosen completion under the policy being trained
    (policy_chosen[i]) and under the frozen reference model (reference_chosen[i]), and the same
    for its rejected completion. With the implicit rewards r_chosen = beta * (policy_chosen -
    reference_chosen) and r_rejected = beta * (policy_rejected - reference_rejected), the loss is
    the mean over the N pairs of -log sigmoid(r_chosen - r_rejected), beta inside the sigmoid. It
    is computed with F.logsigmoid, so it stays finite for any margin (a margin of -1000 gives a
    loss of 1000, not inf). Only the sigmoid loss: no label smoothing (TRL's "robust" and
    "exo_pair" losses), no other loss type. This is TRL 1.16.0's DPOTrainer with loss_type
    "sigmoid".

    Returns (loss, chosen_rewards, rejected_rewards): loss a 0-dim tensor in the inputs' dtype,
    differentiable with respect to the policy's log-probabilities; chosen_rewards and
    rejected_rewards the (N,) implicit rewards r_chosen and r_rejected, detached (for logging:
    they require no grad and carry no graph).

    Raises ValueError when the four tensors do not have the same shape; they are not 1-D; the
    batch is empty (N == 0); beta <= 0.
    """
    ### BEGIN SOLUTION
    shapes = {tuple(t.shape) for t in (policy_chosen, policy_rejected, reference_chosen, reference_rejected)}
    if len(shapes) != 1:
        raise ValueError(f"the four log-probability tensors must have one shape, got {sorted(shapes)}")
    if policy_chosen.dim() != 1:
        raise ValueError(f"log-probabilities must be (N,), got shape {tuple(policy_chosen.shape)}")
    if policy_chosen.numel() == 0:
        raise ValueError("an empty batch of pairs has no mean loss")
    if not beta > 0:
        raise ValueError(f"beta must be > 0, got {beta}")
    chosen = policy_chosen - reference_chosen
    rejected = policy_rejected - reference_rejected
    loss = -F.logsigmoid(beta * (chosen - rejected)).mean()
    return loss, beta * chosen.detach(), beta * rejected.detach()
    ### END SOLUTION


def group_advantages(rewards: torch.Tensor, group_size: int, scale: bool = True, eps: float = 1e-4) -> torch.Tensor:
    """GRPO's advantages: each completion's reward against the other completions of its prompt.

    rewards (N,), a floating-point tensor, holds group_size completions of each prompt, all sampled
    from one policy: prompt i's are rewards[i * group_size : (i + 1) * group_size]. Each
    completion's advantage is its reward minus its group's mean, divided (scale=True) by the
    group's standard deviation plus eps: (r - mean) / (std + eps), with the unbiased standard
    deviation (divided by group_size - 1, as torch.std and TRL's nanstd compute it). This is
    TRL 1.16.0's GRPOTrainer with scale_rewards="group". scale=False (Dr. GRPO, TRL's
    scale_rewards="none") only subtracts the mean. Returns an (N,) tensor in rewards' dtype.

    A group whose rewards are all equal gives exactly 0 for each of its completions, whatever
    scale is: not NaN (0 / 0), and not the rounding noise of its mean (three rewards of 0.1 have
    a floating-point mean of 0.10000000000000002). Such a group carries no learning signal.

    Raises ValueError when rewards is not 1-D; rewards is not a floating-point tensor; rewards
    is empty; group_size < 2 (one completion has no standard deviation, and no baseline but
    itself); the number of rewards is not a multiple of group_size.
    """
    ### BEGIN SOLUTION
    if rewards.dim() != 1:
        raise ValueError(f"rewards must be (N,), got shape {tuple(rewards.shape)}")
    if not rewards.is_floating_point():
        raise ValueError(f"rewards must be floating point, got {rewards.dtype}")
    if rewards.numel() == 0:
        raise ValueError("rewards is empty")
    if group_size < 2:
        raise ValueError(f"group_size must be >= 2, got {group_size}")
    if rewards.numel() % group_size:
        raise ValueError(f"{rewards.numel()} rewards are not groups of {group_size}")
    groups = rewards.view(-1, group_size)
    centred = groups - groups.mean(dim=1, keepdim=True)
    if scale:
        centred = centred / (groups.std(dim=1, keepdim=True) + eps)
    equal = (groups == groups[:, :1]).all(dim=1, keepdim=True)
    return torch.where(equal, torch.zeros_like(centred), centred).reshape(-1)
    ### END SOLUTION


def grpo_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    reference_logprobs: torch.Tensor | None,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    epsilon: float = 0.2,
    beta: float = 0.04,
    normalisation: str = "sequence",
    epsilon_high: float | None = None,
) -> torch.Tensor:
    """GRPO's clipped objective (Shao et al. 2024), as a loss to minimise.

    Inputs, for N completions of T tokens (prompt and padding positions included, masked out):
    logprobs (N, T), the per-token log-probabilities of the policy being trained (with grad);
    old_logprobs (N, T), those of the policy that sampled the completions (for rollouts of the
    previous step, the previous weights); reference_logprobs (N, T), those of the frozen reference
    model; advantages (N,), one per completion (group_advantages); mask (N, T), 1 (or True) on
    the completion tokens that count, 0 on prompt tokens, padding and anything else.

    Per token, with ratio = exp(logprobs - old_logprobs) (the importance ratio: it corrects for
    completions sampled by old weights) and A the completion's advantage:

        loss_t = -min(ratio * A, clamp(ratio, 1 - epsilon, 1 + epsilon_high) * A) + beta * k3_t

    where k3_t = exp(ref - logp) - (ref - logp) - 1 is Schulman's k3 estimator of KL(pi || ref)
    (ref = reference_logprobs, logp = logprobs; never negative, 0 where they are equal).
    epsilon_high=None means epsilon_high = epsilon (symmetric clipping); DAPO's clip-higher uses
    epsilon = 0.2, epsilon_high = 0.28. With beta == 0 the KL term is skipped: it is not computed
    at all, and reference_logprobs may be None (a reference given then is ignored, even one
    holding NaN).

    normalisation "sequence" (the paper; TRL's loss_type "grpo"): each completion's masked mean
    (the sum of loss_t over its mask, divided by its number of masked tokens, or by 1 when it has
    none), then the mean over all N completions. An empty completion (a row of mask all 0)
    contributes 0 and is still counted in N. normalisation "token" (DAPO; TRL's "bnpo" and, on one
    batch, "dapo"): the sum of loss_t over every masked token of the batch divided by their
    number (by 1 when there is none), so that long completions weigh more. With no masked token
    at all, the loss is 0 in both.

    Tokens where mask is 0 do not change the loss or its gradient, whatever (finite) values the
    three log-probability tensors hold there. The gradient flows only through logprobs:
    old_logprobs, reference_logprobs and advantages are constants (detached), also when they
    require grad; in particular, on-policy, old_logprobs may be logprobs itself, and the ratio is
    then 1 with the gradient of the policy-gradient objective, not 0. Returns a 0-dim tensor in
    logprobs' dtype.

    Raises ValueError when logprobs is not 2-D; old_logprobs does not have logprobs' shape; mask
    does not have logprobs' shape; reference_logprobs is None while beta != 0; reference_logprobs
    does not have logprobs' shape while beta != 0; advantages is not (N,); N == 0; normalisation
    is neither "sequence" nor "token"; epsilon <= 0; epsilon_high <= 0; beta < 0.
    """
    ### BEGIN SOLUTION
    if logprobs.dim() != 2:
        raise ValueError(f"logprobs must be (N, T), got shape {tuple(logprobs.shape)}")
    shape = tuple(logprobs.shape)
    for name, tensor in (("old_logprobs", old_logprobs), ("mask", mask)):
        if tuple(tensor.shape) != shape:
            raise ValueError(f"{name} must have logprobs' shape {shape}, got {tuple(tensor.shape)}")
    if beta != 0:
        if reference_logprobs is None:
            raise ValueError("reference_logprobs is None while beta != 0: the KL term needs it")
        if tuple(reference_logprobs.shape) != shape:
            got = tuple(reference_logprobs.shape)
            raise ValueError(f"reference_logprobs must have logprobs' shape {shape}, got {got}")
    if tuple(advantages.shape) != shape[:1]:
        raise ValueError(f"advantages must be (N,) = {shape[:1]}, got {tuple(advantages.shape)}")
    if shape[0] == 0:
        raise ValueError("no completions (N == 0)")
    if normalisation not in ("sequence", "token"):
        raise ValueError(f"normalisation must be 'sequence' or 'token', got {normalisation!r}")
    epsilon_high = epsilon if epsilon_high is None else epsilon_high
    if not (epsilon > 0 and epsilon_high > 0):
        raise ValueError(f"epsilon and epsilon_high must be > 0, got {epsilon} and {epsilon_high}")
    if not beta >= 0:
        raise ValueError(f"beta must be >= 0, got {beta}")
    mask = mask.to(logprobs.dtype)
    ratio = torch.exp(logprobs - old_logprobs.detach())
    clipped = torch.clamp(ratio, 1 - epsilon, 1 + epsilon_high)
    advantage = advantages.detach().to(logprobs.dtype).unsqueeze(1)
    per_token = -torch.min(ratio * advantage, clipped * advantage)
    if beta != 0:
        gap = reference_logprobs.detach() - logprobs
        per_token = per_token + beta * (torch.exp(gap) - gap - 1)
    if normalisation == "sequence":
        return ((per_token * mask).sum(1) / mask.sum(1).clamp(min=1)).mean()
    return (per_token * mask).sum() / mask.sum().clamp(min=1)
    ### END SOLUTION


# ---------------------------------------------------------------------------------------------
# Given: what the grader runs around your functions in the worker.
# ---------------------------------------------------------------------------------------------

_DECOMPOSITIONS = core_aten_decompositions()


class LargestTensor(TorchDispatchMode):
    """Given: remembers the largest tensor any operator makes while the mode is on, in elements.

    Only tensors an operator allocates count: an output that shares storage with one of its
    inputs (a view such as logits[b], logits.view(-1, V) or an in-place result) does not. An
    operator that torch's core aten decompositions break into parts (torch.logsumexp into amax,
    sub, exp, sum, log, ...) runs as those parts, so the temporaries inside it count too.
    """

    def __init__(self) -> None:
        super().__init__()
        self.largest = 0
        self.largest_op = ""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _DECOMPOSITIONS:  # (the table's .get() does not see every entry: index it)
            decomposition = _DECOMPOSITIONS[func]
            with self:  # the parts run under this mode too
                out = decomposition(*args, **kwargs)
            if out is not NotImplemented:
                return out
        out = func(*args, **kwargs)
        inputs = {_storage(t) for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)}
        for leaf in tree_leaves(out):
            if isinstance(leaf, torch.Tensor) and _storage(leaf) not in inputs and leaf.numel() > self.largest:
                self.largest, self.largest_op = leaf.numel(), str(func)
        return out


def _storage(tensor: torch.Tensor) -> int:
    """The identity of a tensor's storage (its StorageImpl)."""
    return tensor.untyped_storage()._cdata


def measure_completion_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> dict[str, object]:
    """Given (the grader calls it): completion_logprobs(logits, targets) run under LargestTensor,
    without grad. Returns {"logprobs": the result, "largest": the elements of the largest tensor
    it made, "largest_op": the operator that made it}."""
    with torch.no_grad(), LargestTensor() as probe:
        out = completion_logprobs(logits, targets)
    return {"logprobs": out, "largest": probe.largest, "largest_op": probe.largest_op}


def run_with_gradients(
    function: str,
    args: tuple,
    kwargs: dict | None = None,
    differentiate: tuple[int, ...] = (),
    same_as: dict[int, int] | None = None,
    grad_output: torch.Tensor | None = None,
) -> dict[str, object]:
    """Given (the grader calls it): calls the function of this file named `function` on `args`,
    where args[i] for every i in `differentiate` is a leaf that requires grad, and args[j] is the
    very same tensor as args[i] for every j: i in `same_as`. Then backward from its output (the
    first output when it returns a tuple), with `grad_output` for a tensor that is not 0-dim (ones
    when None). Returns {"outputs": every output, detached; "requires_grad": whether each output
    requires grad; "grads": for each i in `differentiate`, args[i].grad (None if it got none)}."""
    args = list(args)
    for i in differentiate:
        args[i] = args[i].detach().clone().requires_grad_(True)
    for j, i in (same_as or {}).items():
        args[j] = args[i]
    out = globals()[function](*args, **(kwargs or {}))
    outputs = out if isinstance(out, tuple) else (out,)
    first = outputs[0]
    if first.requires_grad:
        first.backward(first.new_ones(first.shape) if grad_output is None else grad_output)
    return {
        "outputs": [o.detach() for o in outputs],
        "requires_grad": [bool(o.requires_grad) for o in outputs],
        "grads": {i: args[i].grad for i in differentiate},
    }
