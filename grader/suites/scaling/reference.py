"""Trusted references of the scaling suite, run in the grader's process: the course's own models
built from a TransformerConfig and counted with torch's FlopCounterMode, the shipped Chinchilla
data, published figures, and a least-squares fit on raw loss (the fit Chinchilla's approach 3
avoids)."""

from __future__ import annotations

import itertools
import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint, set_checkpoint_early_stop
from torch.utils.flop_counter import FlopCounterMode

from grader.models.tiny_gpt import TinyGPT, TinyGPTConfig
from grader.models.transformer_config import TransformerConfig

# Besiroglu et al. 2024, table 1 ("our estimate" of approach 3, 240 points).
PUBLISHED_FIT = {"E": 1.82, "A": 482.01, "B": 2085.43, "alpha": 0.3478, "beta": 0.3658}
CHINCHILLA_BUDGET = 5.76e23  # FLOPs of Chinchilla 70B (Hoffmann et al. 2022, table 3)


def raised(error) -> str:
    """The last line of a SubmissionError's message: the exception and its text (the lines
    before it quote the student's source, which names every argument)."""
    return error.message.strip().splitlines()[-1]


class GatedMLP(nn.Module):
    """SwiGLU (Shazeer 2020): down(silu(gate(x)) * up(x)), three bias-free d x d_ff matrices."""

    def __init__(self, d_model: int, d_ff: int) -> None:
        super().__init__()
        self.gate = nn.Linear(d_model, d_ff, bias=False)
        self.up = nn.Linear(d_model, d_ff, bias=False)
        self.down = nn.Linear(d_ff, d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.silu(self.gate(x)) * self.up(x))


class _Checkpointed(nn.Module):
    """A TinyGPT block whose activations torch.utils.checkpoint recomputes in backward, whole:
    by default torch stops recomputing once it has the tensors backward needs, which skips the
    block's last matmul (its output is not saved)."""

    def __init__(self, block: nn.Module) -> None:
        super().__init__()
        self.block = block

    def forward(self, x: torch.Tensor, allowed: torch.Tensor, cache: object) -> torch.Tensor:
        with set_checkpoint_early_stop(False):
            return checkpoint(self.block, x, allowed, cache, use_reentrant=False)


def tiny_gpt(cfg: TransformerConfig, seq_len: int, recompute: bool = False) -> TinyGPT:
    """The course's TinyGPT (grader/models/tiny_gpt.py) in the shape of `cfg`: GQA as given; a
    gated MLP swapped in for gated_mlp; every block checkpointed for recompute."""
    if not cfg.gated_mlp and cfg.d_ff % cfg.d_model:
        raise ValueError("TinyGPT's plain MLP is mlp_ratio * d_model wide")
    config = TinyGPTConfig(
        vocab_size=cfg.vocab_size,
        max_seq_len=seq_len,
        num_layers=cfg.num_layers,
        d_model=cfg.d_model,
        num_heads=cfg.num_heads,
        num_kv_heads=cfg.num_kv_heads,
        mlp_ratio=max(1, cfg.d_ff // cfg.d_model),
    )
    model = TinyGPT.from_seed(config, seed=0).train()
    for index, block in enumerate(model.blocks):
        if cfg.gated_mlp:
            block.mlp = GatedMLP(cfg.d_model, cfg.d_ff)
        if recompute:
            model.blocks[index] = _Checkpointed(block)
    return model


class ZeroBlock(nn.Module):
    """Module zero's given ddp.Block, the same architecture (a copy: the hidden suite must not
    depend on another module's files being deployed; tests/test_scaling_checks.py checks that
    FlopCounterMode counts the same FLOPs on both): pre-norm, dense causal attention, 2 heads."""

    def __init__(self, width: int, heads: int = 2) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.fc1, self.fc2 = nn.Linear(width, 2 * width), nn.Linear(2 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-1, -2) / (c // self.heads) ** 0.5
        causal = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        attention = scores.masked_fill(~causal, float("-inf")).softmax(-1) @ v
        x = x + self.proj(attention.transpose(1, 2).reshape(b, t, c))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class ZeroTransformer(nn.Module):
    """Module zero's given ddp.Transformer: two blocks and a width x width linear head."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.block1, self.block2, self.head = ZeroBlock(width), ZeroBlock(width), nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.block2(self.block1(x)))


def zero_transformer_config(width: int) -> TransformerConfig:
    """Module zero's Transformer(width): 2 blocks of 2 heads, an MLP 2 * width wide, a width x
    width linear head (its "vocabulary" is width)."""
    return TransformerConfig(num_layers=2, d_model=width, num_heads=2, num_kv_heads=2, d_ff=2 * width, vocab_size=width)


def counted_flops_per_token(
    cfg: TransformerConfig, seq_len: int, training: bool, recompute: bool = False, model: str = "tiny_gpt"
) -> int:
    """FLOPs per token that FlopCounterMode counts on a batch of 2 sequences of `seq_len`
    (model "tiny_gpt" or "zero"): forward, or forward and backward of the sum of the outputs."""
    torch.manual_seed(0)
    batch = 2
    if model == "tiny_gpt":
        net = tiny_gpt(cfg, seq_len, recompute)
        inputs = torch.randint(0, cfg.vocab_size, (batch, seq_len))
    else:
        net = ZeroTransformer(cfg.d_model)
        inputs = torch.randn(batch, seq_len, cfg.d_model)
    counter = FlopCounterMode(display=False)
    with counter:
        if training:
            net(inputs).sum().backward()
        else:
            with torch.no_grad():
                net(inputs)
    total = counter.get_total_flops()
    if total % (batch * seq_len):
        raise AssertionError(f"{total} FLOPs do not split evenly over {batch * seq_len} tokens")
    return total // (batch * seq_len)


def causal_flops_by_enumeration(cfg: TransformerConfig, seq_len: int) -> float:
    """Forward FLOPs per token with causal attention, counted position by position: query i
    scores and sums i + 1 keys (2 * 2 * heads * head_dim FLOPs per key)."""
    head_dim = cfg.head_dim or cfg.d_model // cfg.num_heads
    width = cfg.num_heads * head_dim
    projections = 2 * cfg.d_model * (2 * width + 2 * cfg.num_kv_heads * head_dim)
    mlp = 2 * (3 if cfg.gated_mlp else 2) * cfg.d_model * cfg.d_ff
    attention = sum(4 * width * (i + 1) for i in range(seq_len)) / seq_len
    return cfg.num_layers * (projections + mlp + attention) + 2 * cfg.d_model * cfg.vocab_size


def torch_matmul_weights(cfg: TransformerConfig) -> int:
    """Elements of TinyGPT's linear weights and token embedding (the tied head), from torch."""
    net = tiny_gpt(cfg, seq_len=4)
    linear = sum(m.weight.numel() for m in net.modules() if isinstance(m, nn.Linear))
    return linear + net.token_embedding.weight.numel()


def law(fit: dict[str, float], n: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    return fit["E"] + fit["A"] / n ** fit["alpha"] + fit["B"] / d ** fit["beta"]


def synthetic_points(truth: dict[str, float], noise: float, gen: torch.Generator):
    """N from 1e7 to 1e10 and D from 1e9 to 1e12 on a 7 x 7 log grid, loss = law * exp(noise * z)."""
    sizes = torch.logspace(7, 10, 7, dtype=torch.float64)
    tokens = torch.logspace(9, 12, 7, dtype=torch.float64)
    n, d = (t.flatten() for t in torch.meshgrid(sizes, tokens, indexing="ij"))
    z = torch.randn(n.shape, generator=gen, dtype=torch.float64)
    return n, d, law(truth, n, d) * torch.exp(noise * z)


def least_squares_fit(n: torch.Tensor, d: torch.Tensor, loss: torch.Tensor) -> dict[str, float]:
    """The naive fit: squared error of the raw loss (no log, no Huber), L-BFGS from the best 4
    of a small grid. On the Chinchilla points it lands near beta = 0.43, far from 0.366."""
    log_n, log_d = n.log(), d.log()

    def objective(theta: torch.Tensor) -> torch.Tensor:
        a, b, e, alpha, beta = (c[:, None] for c in theta.unbind(-1))
        terms = torch.stack([a - alpha * log_n, b - beta * log_d, e.expand(-1, log_n.numel())])
        return ((torch.logsumexp(terms, 0).exp() - loss) ** 2).sum(-1)

    grid = torch.tensor(list(itertools.product((0, 5, 10, 15, 20, 25), repeat=2)), dtype=torch.float64)
    grid = torch.cat([grid, torch.full((len(grid), 1), 0.5), torch.full((len(grid), 2), 0.5)], dim=1)
    with torch.no_grad():
        ranked = grid[objective(grid).argsort()[:4]]
    best = min((_minimise(objective, start) for start in ranked), key=lambda result: result[1])[0]
    a, b, e, alpha, beta = best.tolist()
    return {"E": math.exp(e), "A": math.exp(a), "B": math.exp(b), "alpha": alpha, "beta": beta}


def _minimise(objective, start: torch.Tensor) -> tuple[torch.Tensor, float]:
    """L-BFGS (strong Wolfe) from `start`: the end point and its objective."""
    theta = start.clone()[None].requires_grad_(True)
    optimizer = torch.optim.LBFGS([theta], max_iter=1000, tolerance_grad=1e-12, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        value = objective(theta).sum()
        value.backward()
        return value

    optimizer.step(closure)
    with torch.no_grad():
        return theta[0].detach(), objective(theta).item()


def brute_force_optimal(budget: float, fit: dict[str, float], points: int = 200_001) -> tuple[float, float]:
    """argmin over N on a log grid (1e3 to 1e20 parameters, steps of 0.02 %) of L(N, budget / (6 N))."""
    n = torch.logspace(3, 20, points, dtype=torch.float64)
    best = int(law(fit, n, budget / (6 * n)).argmin())
    if best in (0, points - 1):
        raise AssertionError(f"the brute-force optimum of {fit} at C = {budget:.3g} lies on the grid's edge")
    return n[best].item(), budget / (6 * n[best].item())


HUBER_DELTA = 1e-3


def huber_log_objective(theta: torch.Tensor, n: torch.Tensor, d: torch.Tensor, loss: torch.Tensor) -> torch.Tensor:
    """Chinchilla's approach 3, written here: sum_i Huber_1e-3(logsumexp(a - alpha log N_i,
    b - beta log D_i, e) - log loss_i), one value per row (a, b, e, alpha, beta) of theta."""
    a, b, e, alpha, beta = (c[:, None] for c in theta.unbind(-1))
    terms = torch.stack([a - alpha * n.log(), b - beta * d.log(), e.expand(-1, n.numel())])
    predicted = torch.logsumexp(terms, 0)
    target = loss.log().expand_as(predicted)
    return F.huber_loss(predicted, target, delta=HUBER_DELTA, reduction="none").sum(-1)


def as_theta(fit: dict[str, float]) -> torch.Tensor:
    """(a, b, e, alpha, beta) of a fit given as {"E", "A", "B", "alpha", "beta"}."""
    return torch.tensor(
        [math.log(fit["A"]), math.log(fit["B"]), math.log(fit["E"]), fit["alpha"], fit["beta"]], dtype=torch.float64
    )


def _approach_3_runs(n: torch.Tensor, d: torch.Tensor, loss: torch.Tensor, starts: int):
    """L-BFGS (strong Wolfe) on huber_log_objective from each of the `starts` best points of the
    Hoffmann et al. grid (6 x 6 x 5 x 5 x 5), best start first: (end point, objective) of each."""
    grid = torch.tensor(
        list(
            itertools.product(
                (0.0, 5.0, 10.0, 15.0, 20.0, 25.0), (0.0, 5.0, 10.0, 15.0, 20.0, 25.0),
                (-1.0, -0.5, 0.0, 0.5, 1.0), (0.0, 0.5, 1.0, 1.5, 2.0), (0.0, 0.5, 1.0, 1.5, 2.0),
            )
        ),
        dtype=torch.float64,
    )  # fmt: skip

    def objective(theta: torch.Tensor) -> torch.Tensor:
        return huber_log_objective(theta, n, d, loss) / HUBER_DELTA

    with torch.no_grad():
        ranked = grid[objective(grid).argsort()[:starts]]
    return [(theta, value * HUBER_DELTA) for theta, value in (_minimise(objective, start) for start in ranked)]


def runs_from_the_best_starts(n: torch.Tensor, d: torch.Tensor, loss: torch.Tensor, starts: int) -> list[float]:
    """The objective at the end of L-BFGS (strong Wolfe) from each of the `starts` best points of
    the Hoffmann et al. grid (6 x 6 x 5 x 5 x 5), best first."""
    return [value for _, value in _approach_3_runs(n, d, loss, starts)]


def approach_3_fit(n: torch.Tensor, d: torch.Tensor, loss: torch.Tensor, starts: int = 4) -> dict[str, float]:
    """fit_scaling_law's algorithm as its docstring prescribes it, written here: of the runs from
    the `starts` best grid points, the end point with the lowest objective, as a fit."""
    theta, _ = min(_approach_3_runs(n, d, loss, starts), key=lambda run: run[1])
    a, b, e, alpha, beta = theta.tolist()
    return {"E": math.exp(e), "A": math.exp(a), "B": math.exp(b), "alpha": alpha, "beta": beta}


def fit_diagnosis(fit: dict[str, float], n: torch.Tensor, d: torch.Tensor, loss: torch.Tensor) -> str:
    """What a wrong fit most likely did wrong, from the objective of approach 3 at its end point:
    not a minimum of it (its gradient is large), so another objective was minimised; or a
    minimum of it, but not the lowest one, so too few or the wrong starting points were used."""
    theta = as_theta(fit)[None].requires_grad_(True)
    (huber_log_objective(theta, n, d, loss).sum() / HUBER_DELTA).backward()
    if theta.grad.abs().max().item() > 1e-3:
        return (
            "your end point is not a minimum of approach 3's objective: fit log-loss (log L = logsumexp(a - alpha "
            "log N, b - beta log D, e)) with a Huber loss of delta 1e-3"
        )
    return (
        "your end point is a minimum of approach 3's objective, but not its lowest: start L-BFGS from the "
        "`starts` best points of the whole grid and keep the best end point"
    )
