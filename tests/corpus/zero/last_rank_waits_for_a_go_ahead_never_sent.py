"""DDP's last rank waits for a go-ahead message from rank 0 before it averages the gradients; rank 0 never sends one and waits in its bucket's all-reduce: a deadlock."""

# ruff: noqa: E501, F821 - a fragment appended to a solution file, whose names are in scope
# target: ddp.py
# select: ddp_training_matches_one_process_on_the_whole_batch and plain
# fails: ddp_training_matches_one_process_on_the_whole_batch
# kind: deadlock
# message: train_ddp deadlocked: every rank waited in a communication call and no rank moved a byte for [\d.]+ s; where each rank was:\n  rank 0: ddp\.py:\d+ in finish_gradient_synchronization\(\): work\.wait\(\)\n      waits in wait\(\) on all_reduce in a group of 2\n(      [^\n]*\n)*  rank 1: ddp\.py:\d+ in _wait_for_the_go_ahead\(\): dist\.recv\(torch\.zeros\(1\), 0\)[^\n]*\n      waits in recv from rank 0 \(tag 0\)\n(      [^\n]*\n)*the case: world size 2, train_ddp\(.plain

_correct_finish = DDP.finish_gradient_synchronization


def _wait_for_the_go_ahead(self):
    if dist.get_rank() == dist.get_world_size() - 1:
        dist.recv(torch.zeros(1), 0)
    _correct_finish(self)


DDP.finish_gradient_synchronization = _wait_for_the_go_ahead
