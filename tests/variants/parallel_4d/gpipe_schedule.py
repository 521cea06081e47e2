"""GPipe instead of 1F1B: every forward first, then every backward. The step is right, but
stage s holds all m micro-batches between forward and backward, not pp - s."""
# target: step.py


def _one_f_one_b(pipeline, inputs, targets, warmup):
    for i in range(len(inputs)):
        pipeline.forward(i, inputs[i], targets[i])
    for i in range(len(inputs)):
        pipeline.backward(i)
    pipeline.finish()
