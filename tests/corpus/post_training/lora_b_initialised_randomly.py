"""LoRALinear initialises lora_B like lora_A (kaiming uniform) instead of zero: training starts
from a model whose outputs already differ from the pretrained one's."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: lora.py
# select: starts_from_pefts_init or add_lora_wraps or lora_forward_is_the_base
# fails: test_a_new_lora_layer_starts_from_pefts_init|test_add_lora_wraps
# kind:
# message: lora_B.weight must start at zero

_LoRALinearWithZeroB = LoRALinear


class LoRALinear(_LoRALinearWithZeroB):
    def __init__(self, base_layer, rank, alpha, dropout=0.0):
        super().__init__(base_layer, rank, alpha, dropout)
        nn.init.kaiming_uniform_(self.lora_B.weight, a=math.sqrt(5))
