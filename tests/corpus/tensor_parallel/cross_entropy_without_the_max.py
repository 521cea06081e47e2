"""vocab_parallel_cross_entropy takes exp() of the raw logits (no row max subtracted): right for
logits of size 1, inf and NaN for logits of size 1e4."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: vocab.py
# select: cross_entropy_matches
# fails: logits-of-1e4
# kind:
# message: losses.*expected


class _UnshiftedCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, targets, ignore_index, group):
        ctx.shape, ctx.dtype = logits.shape, logits.dtype
        logits, targets = logits.reshape(-1, logits.shape[-1]), targets.reshape(-1)
        per_rank = logits.shape[-1]
        local = targets - dist.get_rank(group) * per_rank
        ignored = targets == ignore_index
        mine = (local >= 0) & (local < per_rank) & ~ignored
        index = local.clamp(0, per_rank - 1).unsqueeze(-1)
        target_logit = logits.gather(-1, index).squeeze(-1).masked_fill(~mine, 0.0)
        dist.all_reduce(target_logit, group=group)
        exp = logits.exp()  # the bug: overflows past about 709 in float64
        sum_exp = exp.sum(dim=-1)
        dist.all_reduce(sum_exp, group=group)
        ctx.save_for_backward(exp / sum_exp.unsqueeze(-1), index.squeeze(-1), mine, ignored)
        return (sum_exp.log() - target_logit).masked_fill(ignored, 0.0).view(ctx.shape[:-1])

    backward = _VocabParallelCrossEntropy.backward


def vocab_parallel_cross_entropy(logits_shard, targets, ignore_index=-100, group=None):
    return _UnshiftedCrossEntropy.apply(logits_shard, targets, ignore_index, group)
