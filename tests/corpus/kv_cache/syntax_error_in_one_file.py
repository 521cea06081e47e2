"""generate.py does not parse: only the functions in generate.py fail."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: generate.py
# select: kv_cache_bytes_matches or greedy_generation_matches and one-token-cached
# fails: greedy_generation
# append: def generate_faster(model, prompt_ids:
# kind: import
# message: importing generate\.py failed:\n(.*\n)*.*SyntaxError

_correct_generate = generate
