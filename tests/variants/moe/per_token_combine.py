"""combine with a Python loop over tokens and choices: correct (drops, weights, gradients), but
the number of tensor operations grows with the number of tokens, and so does the time."""
# target: routing.py


def combine(expert_outputs, expert_ids, weights, slots):
    y = expert_outputs.new_zeros(expert_ids.shape[0], expert_outputs.shape[-1])
    for t in range(expert_ids.shape[0]):
        for j in range(expert_ids.shape[1]):
            if slots[t, j] >= 0:
                y[t] += weights[t, j] * expert_outputs[expert_ids[t, j], slots[t, j]]
    return y
