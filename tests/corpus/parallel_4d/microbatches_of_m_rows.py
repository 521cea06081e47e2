"""train_step cuts the rows into micro-batches of m rows (torch.split(m)), not into m micro-batches of rows/m."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: step.py
# select: (test_1f1b_runs_m_microbatches or test_one_step_with_three_pipeline_stages) and dp2-tp1-pp3-cp2
# fails: test_1f1b_runs_m_microbatches
# kind:
# message: sent 2 activations to stage 1 \(rank 4\), expected one per micro-batch, m = 3


_reference_one_f_one_b = _one_f_one_b


def _one_f_one_b(pipeline, inputs, targets, warmup):
    # train_step passes inputs.chunk(m): glued back, then cut into pieces of m rows each.
    m = len(inputs)
    rows, labels = torch.cat(inputs), torch.cat(targets)
    _reference_one_f_one_b(pipeline, rows.split(m), labels.split(m), warmup)
