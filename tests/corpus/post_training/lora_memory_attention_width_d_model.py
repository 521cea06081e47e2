"""lora_memory takes the attention's width to be d_model (query d x d, out d x d): right whenever
num_heads divides d_model, wrong for d_model 50 over 4 heads, where TinyGPT's query is 50 -> 48."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: lora.py
# select: lora_memory_counts
# fails: test_lora_memory_counts_the_parameters_and_bytes_of_the_wrapped_tinygpt\[width-48-of-d-50\]
# kind:
# message: lora_memory\(.*d_model=50.*\(got, expected\)

_linears_by_head_dim = _tiny_gpt_linears


def _tiny_gpt_linears(config):
    shapes = _linears_by_head_dim(config)
    d = config.d_model
    for name, (_, _, bias) in shapes.items():
        if name.endswith(("attention.query", "attention.out")):
            shapes[name] = (d, d, bias)
    return shapes
