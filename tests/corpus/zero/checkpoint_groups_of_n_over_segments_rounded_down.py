"""checkpointed_forward that cuts the blocks into groups of len(blocks) // segments: right when segments divides the blocks, but 7 blocks in 3 segments make 4 groups (2, 2, 2, 1) and the forward keeps 4 inputs for backward, not 3."""

# ruff: noqa: E501, F821 - a fragment appended to a solution file, whose names are in scope
# target: checkpoint.py
# select: segment_boundaries or gives_the_plain_forwards
# fails: test_checkpointing_saves_only_segment_boundaries
# kind:
# message: with 7 blocks in 3 segments the forward saved 1024 bytes for backward \(the plain forward saves 2048, one input is 256\); only the 3 segment inputs \(768 bytes\) may be kept \(3 groups of nearly equal size, e.g\. 3, 2, 2 for 7 in 3\)


def checkpointed_forward(blocks, x, segments):
    if not 1 <= segments <= len(blocks):
        raise ValueError(f"segments must be between 1 and {len(blocks)}, not {segments}")
    size = len(blocks) // segments
    for start in range(0, len(blocks), size):
        group = blocks[start : start + size]
        params = [p for block in group for p in block.parameters() if p.requires_grad]
        x = _CheckpointedSegment.apply(x, group, *params)
    return x
