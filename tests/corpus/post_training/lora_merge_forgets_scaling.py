"""merge() folds B @ A into the base weight without the scaling alpha / rank: the merged model
(the one that is served) computes another function than the one that was trained."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: lora.py
# select: merge_folds or lora_forward_is_the_base
# fails: test_merge_folds
# kind:
# message: base_layer.weight after merge\(\) vs W \+ \(alpha / rank\) B A


def _unscaled_delta_weight(self):
    return (self.lora_B.weight @ self.lora_A.weight).to(self.base_layer.weight.dtype)


LoRALinear._delta_weight = _unscaled_delta_weight
