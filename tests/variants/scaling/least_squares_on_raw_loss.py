"""The naive fit: squared error of the raw loss (no log, no Huber), same grid and L-BFGS."""
# target: fit.py


def _objective(theta, log_n, log_d, log_loss):
    a, b, e, alpha, beta = (column[:, None] for column in theta.unbind(-1))
    terms = torch.stack([a - alpha * log_n, b - beta * log_d, e.expand(-1, log_n.numel())])
    return ((torch.logsumexp(terms, dim=0).exp() - log_loss.exp()) ** 2).sum(-1)
