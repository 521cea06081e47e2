"""LoRALinear scales the update by alpha instead of alpha / rank: right at rank 1, rank times too
large elsewhere (the merge agrees with the forward, so only the formula's value shows it)."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: lora.py
# select: lora_forward_is_the_base or merge_folds
# fails: test_lora_forward_is_the_base_plus.*\[(24x40|30x18)|test_merge_folds
# kind:
# message: scaling: expected alpha / rank

_LoRALinearScaledByAlphaOverRank = LoRALinear


class LoRALinear(_LoRALinearScaledByAlphaOverRank):
    def __init__(self, base_layer, rank, alpha, dropout=0.0):
        super().__init__(base_layer, rank, alpha, dropout)
        self.scaling = alpha
