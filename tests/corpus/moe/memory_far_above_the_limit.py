"""swiglu_experts allocates 16 GiB, four times the worker's memory limit."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: layer.py
# select: swiglu_experts or expert_capacity_is
# fails: swiglu_experts
# kind: memory
# message: layer\.py.*\n(.*\n)*.*(can't allocate memory|DefaultCPUAllocator)


def swiglu_experts(x, w_gate, w_up, w_down):
    hog = torch.ones(2**34, dtype=torch.uint8)
    return hog[:0]
