"""A 1F1B whose ranks wait for a microbatch's gradient before sending the activation the next rank needs to compute it: both ranks block in a receive, forever."""

# ruff: noqa: E501, F821 - a fragment appended to a solution file, whose names are in scope
# target: schedules.py
# select: test_your_schedule_runs_on_real_ranks and one_f_one_b
# fails: test_your_schedule_runs_on_real_ranks
# kind: deadlock
# message: deadlocked: every rank waited in a communication call(.|\n)*rank 0: runtime\.py:\d+ in run\(\): self\.grad_outputs\[key\] = recv_tensors[^\n]*\n      waits in recv from rank 1(.|\n)*rank 1: runtime\.py:\d+ in run\(\): received = recv_tensors[^\n]*\n      waits in recv from rank 0(.|\n)*the cycle: rank 0 waits for rank 1, rank 1 waits for rank 0(.|\n)*the simulator replays one_f_one_b_schedule\(2, 3\) and finds: deadlock: rank 0 waits in RECV_B of microbatch 0 \(its action 2\) for rank 1\'s SEND_B of microbatch 0

_one_f_one_b_in_order = one_f_one_b_schedule


def one_f_one_b_schedule(p, m):
    schedule = []
    for actions in _one_f_one_b_in_order(p, m):
        reordered = list(actions)
        for index, action in enumerate(actions):
            if action[0] != "SEND_F":
                continue
            later = [i for i in range(index + 1, len(actions)) if actions[i][0] == "RECV_B"]
            if later:  # the send goes after the next gradient's receive
                reordered.remove(action)
                reordered.insert(reordered.index(actions[later[0]]) + 1, action)
        schedule.append(reordered)
    return schedule
