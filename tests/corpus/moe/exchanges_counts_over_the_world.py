"""expert_parallel_forward exchanges its choice counts over the whole world instead of its group: in a world of 4 where ranks {1, 3} and {0, 2} shard two layers, each rank reads counts from the wrong ranks and sizes its rows exchange from them; in a world of 5 (groups of 3 and 2) the world cannot even split the counts."""

# ruff: noqa: E501, F821 - a fragment appended to a solution file, whose names are in scope
# target: expert_parallel.py
# select: groups
# fails: groups
# kind: exception
# message: in step 5 of 5 \(expert_parallel_forward_backward\): (every rank|rank \d):(.|\n)*all_to_all_single\(received, (rows|counts\))


def _exchange_counts(counts, group):
    received = torch.empty_like(counts)
    dist.all_to_all_single(received, counts)
    return received
