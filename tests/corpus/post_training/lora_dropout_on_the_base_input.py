"""LoRALinear drops inputs before the base layer too (dropout(x) fed to both branches): in train
mode the frozen model's own output is perturbed, which LoRA's dropout never does."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: lora.py
# select: dropout_drops or lora_forward_is_the_base
# fails: test_dropout_drops
# kind:
# message: must be dropout\(x\).*neither


def _forward_dropping_both(self, x):
    x = self.lora_dropout(x)
    result = self.base_layer(x)
    if self.merged:
        return result
    return result + self.lora_B(self.lora_A(x)) * self.scaling


LoRALinear.forward = _forward_dropping_both
