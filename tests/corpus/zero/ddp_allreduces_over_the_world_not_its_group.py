"""DDP takes `group` but all-reduces its buckets over the whole world: in a world of 4 where two groups train two models ({1, 3} and {0, 2}, or {0, 2, 3} and {1}), every bucket sums all four ranks' gradients."""

# ruff: noqa: E501, F821 - a fragment appended to a solution file, whose names are in scope
# target: ddp.py
# select: groups and trains_each
# fails: trains_each_like_one_process
# kind:
# message: DDP \(AdamW\) over group \[[\d, ]+\] of a world of 4 \(ranks \[[\d, ]+\] ran another group meanwhile\): group rank 0's \S+ after 5 steps


def _launch_over_the_world(self, index):
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in self.buckets[index]]
    flat = torch.cat([g.reshape(-1) for g in grads])
    self.pending[index] = (flat, dist.all_reduce(flat, async_op=True))


DDP._launch = _launch_over_the_world
