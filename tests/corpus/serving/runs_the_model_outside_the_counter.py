"""step() runs the given TinyGPT directly once more per step (bypassing ServingModel.forward):
forward calls counted by the model look fine, but the FLOPs of the run give it away."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: scheduler.py
# select: forward_calls
# fails: forward_calls
# kind:
# message: run the model only through model.forward

_counted_step = Scheduler.step


def _step_with_a_hidden_forward(self):
    batch = _counted_step(self)
    if batch:
        with torch.no_grad():
            self.model.net(torch.zeros(1, 8, dtype=torch.long))
    return batch


Scheduler.step = _step_with_a_hidden_forward
