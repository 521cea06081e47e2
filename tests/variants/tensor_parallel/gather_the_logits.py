"""A vocabulary-parallel loss that all-gathers the whole logits and calls F.cross_entropy on them:
right losses and gradients, but every rank holds tokens x V elements."""
# target: vocab.py


class _GatherVocabulary(torch.autograd.Function):
    @staticmethod
    def forward(ctx, shard, group):
        ctx.group = group
        p = dist.get_world_size(group)
        gathered = shard.new_empty((p * shard.shape[0], shard.shape[1]))
        dist.all_gather_single(gathered, shard.contiguous(), group=group)
        return gathered.view(p, *shard.shape).permute(1, 0, 2).reshape(shard.shape[0], -1)

    @staticmethod
    def backward(ctx, grad):
        return grad.chunk(dist.get_world_size(ctx.group), dim=1)[dist.get_rank(ctx.group)].contiguous(), None


def vocab_parallel_cross_entropy(logits_shard, targets, ignore_index=-100, group=None):
    rows = logits_shard.reshape(-1, logits_shard.shape[-1])
    losses = F.cross_entropy(
        _GatherVocabulary.apply(rows, group), targets.reshape(-1), reduction="none", ignore_index=ignore_index
    )
    return losses.view(targets.shape)
