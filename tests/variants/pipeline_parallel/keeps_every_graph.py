"""run_schedule whose unsplit backward keeps the graph (retain_graph=True) and every output
until it returns: the gradients are right, but every forward's saved tensors stay alive, m at
once on every rank, whatever the schedule."""
# target: runtime.py

_split_backward = _StageRunner.backward


def _backward_keeping_the_graph(self, key, stage):
    if key in self.split:
        return _split_backward(self, key, stage)
    inputs = self.inputs.get(key, ())
    torch.autograd.backward(self.outputs[key], self.grad_outputs.get(key), retain_graph=True)
    if stage > 0:
        self.grad_inputs[key] = tuple(x.grad for x in inputs)
    return None


_StageRunner.backward = _backward_keeping_the_graph
