"""run_schedule sends to and receives from the neighbouring stage's GROUP rank, passed as if it were a global rank: in the pipeline {1, 3} of a world of 4, stage 1's peer becomes global rank 1 (itself) and stage 0's becomes global rank 0, in the other pipeline."""

# ruff: noqa: E501, F821 - a fragment appended to a solution file, whose names are in scope
# target: runtime.py
# select: pipeline_groups
# fails: pipeline_groups
# kind: exception
# message: rank 1:(.|\n)*self\.neighbour\(stage \+ 1\)(.|\n)*and these ranks were left waiting


def _the_group_rank_as_global(self, stage):
    return stage % self.p


_StageRunner.neighbour = _the_group_rank_as_global
