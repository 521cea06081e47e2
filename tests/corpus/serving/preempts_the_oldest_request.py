"""The scheduler preempts the oldest running request instead of the newest: outputs stay right,
but the first come are served last."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: scheduler.py
# select: arrival_order
# fails: arrival_order
# kind:
# message: first come, first served


def _oldest_first_preemption(self):
    budget, batch, reserved = self.max_batch_tokens, [], 0
    for request in list(self.running):
        if budget == 0 or request not in self.running:
            continue
        n = min(request.uncomputed(), budget)
        need = self._blocks_needed(request, n)
        while not self._make_free(reserved + need):
            victim = next(r for r in self.running if all(r is not b for b, _ in batch))  # the bug: the oldest
            self._preempt(victim)
            if victim is request:
                break
        if request not in self.running:
            continue
        batch.append((request, n))
        budget, reserved = budget - n, reserved + need
    return batch + _admit(self, budget, reserved)


def _admit(self, budget, reserved):
    batch = []
    while self.waiting and budget > 0:
        request = self.waiting[0]
        blocks = self.prefix.match(request.tokens, self.block_size)
        n = min(len(request.tokens) - len(blocks) * self.block_size, budget)
        need = math.ceil((len(blocks) * self.block_size + n) / self.block_size) - len(blocks)
        if not self._make_free(reserved + need, keep=blocks):
            break
        self.prefix.touch(blocks)
        self.cache.add_sequence(request.id, blocks)
        request.computed = len(blocks) * self.block_size
        self.waiting.pop(0)
        self.running.append(request)
        batch.append((request, n))
        budget, reserved = budget - n, reserved + need
    return batch


Scheduler._schedule = _oldest_first_preemption
