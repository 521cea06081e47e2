"""run_schedule receives a later chunk's activation under its own stage's tag, not the sending boundary's: only interleaved schedules (two chunks per rank) deadlock, and only their tests fail."""

# ruff: noqa: E501, F821 - a fragment appended to a solution file, whose names are in scope
# target: runtime.py
# select: (run_schedule or your_schedule) and not groups
# fails: two_ranks_matches_one_process_on_the_whole_batch\[interleaved\]|four_ranks|waits_on_every_send|adds_each_weight_gradient|frees_each_activation|returns_each_action|your_schedule_runs_on_real_ranks\[interleaved_schedule\]
# kind: deadlock
# time-limit: 10
# message: train_pipeline deadlocked: every rank waited in a communication call(.|\n)*runtime\.py:\d+ in _run_later_chunks_with_the_wrong_tag\(\)(.|\n)*waits in recv from rank \d \(tag \d+\)(.|\n)*the case: world size 2, train_pipeline\('run_schedule', [^\n]*\) in test_run_schedule_on_two_ranks_matches_one_process_on_the_whole_batch\[gpipe\]

_run_every_action = _StageRunner.run


def _run_later_chunks_with_the_wrong_tag(self, kind, mb, chunk):
    if kind == "RECV_F" and chunk > 0:
        stage = stage_of(self.rank, chunk, self.p)
        received = recv_tensors(self.neighbour(stage - 1), message_tag("F", mb, stage))
        self.inputs[(mb, chunk)] = tuple(t.requires_grad_() for t in received)
        return
    _run_every_action(self, kind, mb, chunk)


_StageRunner.run = _run_later_chunks_with_the_wrong_tag
