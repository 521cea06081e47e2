"""run_schedule finds the global rank of a neighbouring stage as its own global rank -+ world_size // p, Megatron's layout of pipeline groups: right on a world that is one pipeline and in the pipelines {0, 2} and {1, 3} of a world of 4, but in the pipelines {0, 2, 3} and {1, 4} of a world of 5 it waits for messages from the other pipeline: a deadlock."""

# ruff: noqa: E501, F821 - a fragment appended to a solution file, whose names are in scope
# target: runtime.py
# select: pipeline_groups_of
# fails: groups_of_3_and_2_of_a_world_of_5
# kind: deadlock
# message: train_pipeline\(run_schedule\) deadlocked: every rank waited in a communication call and no rank moved a byte for [\d.]+ s; where each rank was:\n(.|\n)*  rank 2: runtime\.py:\d+ in run\(\): received = recv_tensors\(self\.neighbour\(stage - 1\)[^\n]*\n      waits in recv from rank 1 (.|\n)*the case: world size 5, train_pipeline


def _strided_neighbour(self, stage):
    # the bug: the group's members are not always this rank -+ world_size // p
    return dist.get_rank() + (stage % self.p - self.rank) * (dist.get_world_size() // self.p)


_StageRunner.neighbour = _strided_neighbour
