"""sync_weights checks the placement on rank 0 only: rank 0 raises ValueError while the other
ranks go on (with no engine rank a trainer rank returns None; with tp = 0 it fails on a division
by zero), where every rank sees the same placement and must raise the same ValueError."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: sync.py
# select: refuses_a_bad_placement and (tp-0 or engine-ranks-empty)
# fails: tp-0|engine-ranks-empty
# kind:
# message: every rank must raise the same ValueError

_check_placement_everywhere = _check_placement


def _check_placement(config, trainer_ranks, engine_ranks, tp, world):
    if world is None or dist.get_rank() == 0:
        return _check_placement_everywhere(config, trainer_ranks, engine_ranks, tp, world)
    with torch.device("meta"):
        return fsdp_units(TinyGPT(config))
