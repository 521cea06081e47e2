"""The loss is summed over the whole world (0 from the other stages, divided by tp) instead of
the last stage's dp-cp group: the loss is right, but every rank joins a collective of the world."""
# target: step.py


def _global_loss(pipeline, groups):
    mine = torch.stack(pipeline.losses).sum() if pipeline.last else torch.zeros((), dtype=torch.float64)
    loss = mine.reshape(1) / dist.get_world_size(groups["tp"])
    dist.all_reduce(loss)
    return loss.item() if pipeline.last else None
