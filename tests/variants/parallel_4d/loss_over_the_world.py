"""The loss is summed over the whole world (0 from the other stages, divided by tp) instead of
the last stage's dp-cp group: the loss is right, but every rank joins a collective of the world."""
# target: step.py


def train_step(stage, tokens, grid, rank, groups, microbatches, lr):
    dp, cp, pp = grid.sizes["dp"], grid.sizes["cp"], grid.sizes["pp"]
    batch, length = tokens.shape[0], tokens.shape[1] - 1
    d, c, s = grid.coordinate("dp", rank), grid.coordinate("cp", rank), grid.coordinate("pp", rank)
    rows = tokens[d * batch // dp : (d + 1) * batch // dp]
    window = slice(c * length // cp, (c + 1) * length // cp)
    inputs, targets = rows[:, :-1][:, window], rows[:, 1:][:, window]
    pipeline = _Pipeline(stage, grid.members("pp", rank), s, groups["tp"], batch * length)
    _one_f_one_b(pipeline, inputs.chunk(microbatches), targets.chunk(microbatches), pp - s - 1)
    _sum_gradients(stage, groups, tied=pp > 1 and (pipeline.first or pipeline.last))
    with torch.no_grad():
        for p in stage.parameters():
            p -= lr * p.grad
    mine = torch.stack(pipeline.losses).sum() if pipeline.last else torch.zeros((), dtype=torch.float64)
    loss = mine.reshape(1) / grid.sizes["tp"]
    dist.all_reduce(loss)
    return loss.item() if pipeline.last else None
