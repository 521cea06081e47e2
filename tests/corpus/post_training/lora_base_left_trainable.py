"""LoRALinear leaves the base layer trainable: the optimizer would hold state for every weight
(full fine-tuning's memory) and the frozen model drifts. add_lora still freezes the model's other
parameters, so only the layer's own test sees it."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: lora.py
# select: only_lora_a_and_b or add_lora_wraps
# fails: test_only_lora_a_and_b
# kind:
# message: base_layer.weight must be frozen

_LoRALinearWithFrozenBase = LoRALinear


class LoRALinear(_LoRALinearWithFrozenBase):
    def __init__(self, base_layer, rank, alpha, dropout=0.0):
        super().__init__(base_layer, rank, alpha, dropout)
        self.base_layer.requires_grad_(True)
