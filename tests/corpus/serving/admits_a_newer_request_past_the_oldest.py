"""The scheduler skips a waiting request that does not fit and admits a newer one: the oldest can starve."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: scheduler.py
# select: newer_request_is_not_admitted
# fails: newer_request_is_not_admitted
# kind:
# message: no newer request is admitted before it


def _schedule_skipping(self):
    budget, batch, reserved = self.max_batch_tokens, [], 0
    for request in list(self.running):
        if budget == 0 or request not in self.running:
            break
        n = min(request.uncomputed(), budget)
        need = self._blocks_needed(request, n)
        while not self._make_free(reserved + need):
            victim = self.running[-1]
            self._preempt(victim)
            if victim is request:
                return batch
        batch.append((request, n))
        budget, reserved = budget - n, reserved + need
    for request in list(self.waiting):  # the bug: a request that does not fit is skipped, not waited for
        if budget == 0:
            break
        blocks = self.prefix.match(request.tokens, self.block_size)
        n = min(len(request.tokens) - len(blocks) * self.block_size, budget)
        need = math.ceil((len(blocks) * self.block_size + n) / self.block_size) - len(blocks)
        if not self._make_free(reserved + need, keep=blocks):
            continue
        self.prefix.touch(blocks)
        self.cache.add_sequence(request.id, blocks)
        request.computed = len(blocks) * self.block_size
        self.waiting.remove(request)
        self.running.append(request)
        batch.append((request, n))
        budget, reserved = budget - n, reserved + need
    return batch


Scheduler._schedule = _schedule_skipping
