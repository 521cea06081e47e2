"""The ring adds each block's softmax output instead of merging them by their log-sum-exp (as an
older AIInfra notebook did): every block's softmax is normalised over that block alone, so the
output is wrong wherever a query sees more than one block."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: ring.py
# select: ring_attention_matches_sdpa_on_the_whole_sequence
# fails: ring_attention_matches_sdpa_on_the_whole_sequence
# kind:
# message: output \(against SDPA on the whole sequence


def _merge(out, lse, block_out, block_lse):
    return out + block_out, torch.logaddexp(lse, block_lse)
