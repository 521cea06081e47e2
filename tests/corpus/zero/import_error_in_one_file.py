"""memory.py raises while it is imported: only the functions in memory.py fail."""

# target: memory.py
# select: zero_memory or checkpointed_forward_gives and 9-3
# fails: zero_memory
# kind: import
# message: importing memory\.py failed:\n(.*\n)*.*RuntimeError: the config file is missing

raise RuntimeError("the config file is missing")
