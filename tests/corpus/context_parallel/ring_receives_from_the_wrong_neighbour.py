"""The ring posts its receive from the right neighbour instead of the left (batch_isend_irecv, then
wait() on each request): on 2 ranks both neighbours are one rank and it works; on 3 ranks or more
every rank waits for a block nobody sends it, and each such case must be reported as a deadlock
in about a second, not wait out the time limit."""

# ruff: noqa: E501, F821 - a fragment appended to a solution file, whose names are in scope
# target: ring.py
# select: ring and not overlap_condition
# fails: collectives_its_docstring_names|ring_attention_stays_finite_on_large_logits|ring_attention_matches_sdpa_on_the_whole_sequence\[[34]\]|zigzag_ring_attention_matches_sdpa_on_the_whole_sequence\[[34]\]|sends_p_minus_1|holds_one_block_of_scores_at_most\[[34]\]|skips_hidden_blocks_and_zigzag_balances_the_flops\[[34]\]|posts_the_next_block_before_computing_on_this_one\[[34]\]|ring_attention_in_subgroups
# kind: deadlock
# message: ring_step deadlocked: (every rank|ranks [\d, ]+) waited in a communication call and no rank moved a byte for [\d.]+ s[^;\n]*; where each rank was:\n  rank 0: ring\.py:\d+ in (forward|backward)\(\): [^\n]*wait\(\)(.|\n)*the cycle: rank \d waits for rank \d(.|\n)*\nthe case: world size [34]


def _exchange_with_the_wrong_neighbour(self, send, receive, tag=0):
    ops = [
        dist.P2POp(dist.isend, send, self.right, self.group, tag),
        dist.P2POp(dist.irecv, receive, self.right, self.group, tag),
    ]
    return dist.batch_isend_irecv(ops)


_Ring.exchange = _exchange_with_the_wrong_neighbour
