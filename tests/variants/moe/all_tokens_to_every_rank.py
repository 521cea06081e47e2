"""Expert parallelism by broadcast: every rank sends all its tokens to every other rank, each
rank runs its own experts on whatever chose them, and sends a partial output for every token
back. Correct, with the right gradients, but it moves (p-1) * T rows each way instead of the
rows routed to other ranks' experts."""
# target: expert_parallel.py


def expert_parallel_forward(layer_shard, x, group=None):
    p = dist.get_world_size(group)
    tokens = x.reshape(-1, layer_shard.d_model)
    n = tokens.shape[0]
    sizes = _exchange_counts(torch.full((p, 1), n), group).reshape(-1).tolist()
    received = _AllToAll.apply(tokens.repeat(p, 1), [n] * p, sizes, group)
    weights, ids = topk_route(layer_shard.router(received), layer_shard.k)
    partial = torch.zeros_like(received)
    for local in range(layer_shard.num_local_experts):
        token, choice = torch.nonzero(ids == layer_shard.first_expert + local, as_tuple=True)
        experts = (w[local : local + 1] for w in (layer_shard.w_gate, layer_shard.w_up, layer_shard.w_down))
        out = swiglu_experts(received[token].unsqueeze(0), *experts)[0]
        partial = partial.index_add(0, token, weights[token, choice].unsqueeze(-1) * out)
    returned = _AllToAll.apply(partial, sizes, [n] * p, group)
    y = returned.view(p, n, -1).sum(dim=0)
    if layer_shard.num_shared_experts > 0:
        y = y + layer_shard.shared_experts(tokens)
    return y.view_as(x)
