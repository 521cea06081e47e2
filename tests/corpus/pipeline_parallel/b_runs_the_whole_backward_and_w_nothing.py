"""run_schedule whose B always runs the whole backward (input and weight gradients, freeing the graph) and whose W does nothing: the final gradients are right, but a later forward sees the weight gradient of a microbatch whose W has not run, and zero-bubble holds fewer activations than its schedule."""

# ruff: noqa: E501, F821 - a fragment appended to a solution file, whose names are in scope
# target: runtime.py
# select: run_schedule and not real_ranks and not groups
# fails: test_run_schedule_adds_each_weight_gradient_in_its_w_or_unsplit_b|test_run_schedule_keeps_a_split_backwards_graph_until_its_w
# kind:
# message: zero-bubble on 2 ranks, m=2, one-tensor stages, float64: rank 1, as F of microbatch 1 \(chunk 0\) started, layers\.2\.linear\.weight\.grad already held the weight gradient of microbatch\(es\) \[0\], whose B ran but whose W had not: a B whose W is in the schedule computes the input gradient only


def _whole_backward(self, key, stage):
    outputs, inputs = self.outputs.pop(key), self.inputs.pop(key, ())
    torch.autograd.backward(outputs, self.grad_outputs.pop(key, None))
    if stage > 0:
        self.grad_inputs[key] = tuple(x.grad for x in inputs)


_run_action = _StageRunner.run


def _run_without_w(self, kind, mb, chunk):
    if kind != "W":
        _run_action(self, kind, mb, chunk)


_StageRunner.backward = _whole_backward
_StageRunner.run = _run_without_w
