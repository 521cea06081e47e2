"""copy_to_tp_region's backward returns the gradient unreduced on rank 0: the other ranks wait in their all-reduce for it forever."""

# ruff: noqa: E501, F821 - a fragment appended to a solution file, whose names are in scope
# target: comm.py
# select: region_operator and not groups
# fails: region_operator_matches_its_definition_on_2_ranks\[copy_to_tp_region\]|every_region_operator_matches_its_definition_on_4_ranks
# kind: deadlock
# message: in step \d of 5 \(region_step\): region_step deadlocked: every rank waited in a communication call and no rank moved a byte for [\d.]+ s; where each rank was:(.|\n)*  rank 1: comm\.py:\d+ in _all_reduce\(\): dist\.all_reduce\(out, group=group\)[^\n]*\n      waits in all_reduce in a group of 4(.|\n)*the case: world size 4, region_step\([^\n]*\) in test_every_region_operator_matches_its_definition_on_4_ranks

_correct_copy_backward = _CopyToRegion.backward


def _copy_backward_skipped_on_rank_0(ctx, grad):
    if dist.get_rank() == 0:
        return grad, None
    return _correct_copy_backward(ctx, grad)


_CopyToRegion.backward = staticmethod(_copy_backward_skipped_on_rank_0)
