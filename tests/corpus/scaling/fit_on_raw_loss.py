"""fit_scaling_law minimises the squared error of the raw loss: its end point is no minimum of approach 3."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: fit.py
# select: fit_recovers_the_published_parameters
# fails: fit_recovers_the_published_parameters
# kind:
# message: not a minimum of approach 3's objective


def _objective(theta, log_n, log_d, log_loss):
    a, b, e, alpha, beta = (column[:, None] for column in theta.unbind(-1))
    terms = torch.stack([a - alpha * log_n, b - beta * log_d, e.expand(-1, log_n.numel())])
    return ((torch.logsumexp(terms, dim=0).exp() - log_loss.exp()) ** 2).sum(-1)
