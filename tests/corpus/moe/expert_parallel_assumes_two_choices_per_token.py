"""expert_parallel_forward finds the token of each sorted choice as choice // 2, Mixtral's k, instead of // k: right on every layer with k = 2, out of range once a layer routes each token to 3 experts (the groups of 3 and 2 ranks of a world of 5)."""

# ruff: noqa: E501, F821 - a fragment appended to a solution file, whose names are in scope
# target: expert_parallel.py
# select: single_process_layer_with_gradients or world_of_5
# fails: groups_of_3_and_2_of_a_world_of_5
# kind: exception
# message: in step 5 of 5 \(expert_parallel_forward_backward\): (every rank|rank \d):(.|\n)*tokens\[token_of\](.|\n)*IndexError: index \d+ is out of bounds


def expert_parallel_forward(layer_shard, x, group=None):
    world_size = dist.get_world_size(group)
    local, d_model = layer_shard.num_local_experts, layer_shard.d_model
    tokens = x.reshape(-1, d_model)
    weights, expert_ids = topk_route(layer_shard.router(tokens), layer_shard.k)
    flat_ids = expert_ids.reshape(-1)
    order = torch.argsort(flat_ids, stable=True)
    token_of = order // 2  # the bug: a token has k choices, not always 2
    counts = torch.bincount(flat_ids, minlength=layer_shard.num_experts).view(world_size, local)
    incoming = _exchange_counts(counts, group)
    send_sizes, receive_sizes = counts.sum(dim=1).tolist(), incoming.sum(dim=1).tolist()
    received = _AllToAll.apply(tokens[token_of], send_sizes, receive_sizes, group)
    received_ids = torch.repeat_interleave(torch.arange(local).repeat(world_size), incoming.reshape(-1)).unsqueeze(1)
    capacity = int(incoming.sum(dim=0).max()) if received_ids.numel() else 0
    expert_inputs, slots = dispatch(received, received_ids, local, capacity)
    expert_outputs = swiglu_experts(expert_inputs, layer_shard.w_gate, layer_shard.w_up, layer_shard.w_down)
    outputs = combine(expert_outputs, received_ids, torch.ones_like(slots, dtype=received.dtype), slots)
    returned = _AllToAll.apply(outputs, receive_sizes, send_sizes, group)
    y = torch.zeros_like(tokens).index_add(0, token_of, returned * weights.reshape(-1, 1)[order])
    if layer_shard.num_shared_experts > 0:
        y = y + layer_shard.shared_experts(tokens)
    return y.view_as(x)
