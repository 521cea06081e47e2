"""Trusted references of the zero suite: single-process training on the whole batch, written
here (never imported from a submission), and the counting rules the checks use."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from grader.testing import generator

WIDTH, STEPS, ROWS_PER_RANK = 16, 5, 4


class MLP(nn.Module):
    """The same architecture as the given ddp.MLP (parameters are loaded from a state dict)."""

    def __init__(self, variant: str) -> None:
        super().__init__()
        self.inp, self.hidden, self.out = (nn.Linear(WIDTH, WIDTH) for _ in range(3))
        if variant == "frozen":
            self.inp.bias.requires_grad_(False)
        if variant == "tied":
            self.out.weight = self.inp.weight
        if variant == "unused":
            self.spare = nn.Linear(WIDTH, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.tanh(self.hidden(torch.tanh(self.inp(x)))))


class Block(nn.Module):
    """The same architecture as the given ddp.Block (pre-norm, causal attention, 2 heads)."""

    def __init__(self, heads: int = 2) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH)
        self.qkv, self.proj = nn.Linear(WIDTH, 3 * WIDTH), nn.Linear(WIDTH, WIDTH)
        self.fc1, self.fc2 = nn.Linear(WIDTH, 2 * WIDTH), nn.Linear(2 * WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # torch's own attention
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class Transformer(nn.Module):
    """The same architecture as the given ddp.Transformer: two Blocks and a linear head."""

    def __init__(self) -> None:
        super().__init__()
        self.block1, self.block2, self.head = Block(), Block(), nn.Linear(WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.block2(self.block1(x)))


def make_model(variant: str) -> nn.Module:
    """The given ddp.make_model's models."""
    if variant == "transformer":
        return Transformer()
    if variant == "deep":
        return nn.Sequential(*(module for _ in range(32) for module in (nn.Linear(WIDTH, WIDTH), nn.Tanh())))
    return MLP(variant)


def make_state(variant: str, *salt: object) -> dict[str, torch.Tensor]:
    """A random initial state dict of make_model(variant)."""
    torch.manual_seed(int(torch.randint(0, 2**31, (1,), generator=generator("zero-state", variant, *salt))))
    return {k: v.detach().clone() for k, v in make_model(variant).state_dict().items()}


def make_data(
    world_size: int, *salt: object, seq: int | None = None, steps: int = STEPS
) -> tuple[torch.Tensor, torch.Tensor]:
    """inputs, targets of shape (steps, world_size * ROWS_PER_RANK, WIDTH), or with a sequence
    dimension (steps, world_size * ROWS_PER_RANK, seq, WIDTH) for the transformer."""
    gen = generator("zero-data", world_size, seq, *salt)
    shape = (steps, world_size * ROWS_PER_RANK, *([seq] if seq else []), WIDTH)
    return torch.randn(shape, generator=gen), torch.randn(shape, generator=gen)


def in_float64(*values):
    """Training-equality checks run in float64: AdamW divides by sqrt(v), which turns the
    float32 rounding of a different summation order into visible differences where v is tiny."""
    return [{k: t.double() for k, t in v.items()} if isinstance(v, dict) else v.double() for v in values]


def rank_slice(batch: torch.Tensor, rank: int) -> torch.Tensor:
    """This rank's rows of every step's batch."""
    return batch[:, rank * ROWS_PER_RANK : (rank + 1) * ROWS_PER_RANK].contiguous()


def make_optimizer(name: str, params: list[nn.Parameter], lr: float) -> torch.optim.Optimizer:
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=0.9)
    return torch.optim.AdamW(params, lr=lr, weight_decay=0.01)


def train_single_process(
    variant: str, state: dict[str, torch.Tensor], optimizer: str, lr: float, inputs: torch.Tensor, targets: torch.Tensor
) -> dict[str, torch.Tensor]:
    """One process, the whole batch each step: what data parallelism must reproduce. A
    parameter that gets no gradient is given a zero one (the DDP spec: unused contributes zeros)."""
    model = make_model(variant).to(inputs.dtype)
    model.load_state_dict(state)
    trainable = [p for p in model.parameters() if p.requires_grad]
    opt = make_optimizer(optimizer, trainable, lr)
    for x, y in zip(inputs, targets):
        opt.zero_grad(set_to_none=True)
        F.mse_loss(model(x), y).backward()
        for p in trainable:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        opt.step()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def greedy_buckets(variant: str, bucket_cap_mb: float | None) -> list[int]:
    """Elements per bucket under the DDP docstring's rule: trainable parameters in reverse
    order, a bucket closed when the next parameter would take it over the cap (None or inf: one
    bucket)."""
    cap = float("inf") if bucket_cap_mb is None else bucket_cap_mb * 2**20
    buckets: list[int] = []
    size = 0
    for p in [p for p in MLP(variant).parameters() if p.requires_grad][::-1]:
        if not buckets or size + 4 * p.numel() > cap:
            buckets.append(0)
            size = 0
        buckets[-1] += p.numel()
        size += 4 * p.numel()
    return buckets


def train_zero_redundancy(
    state: dict[str, torch.Tensor], lr: float, inputs: torch.Tensor, targets: torch.Tensor
) -> dict[str, object]:
    """PyTorch's own ZeRO stage 1 (torch.distributed.optim.ZeroRedundancyOptimizer over AdamW) on
    this rank's slices, run in a trusted world: its parameters and this rank's state bytes."""
    import torch.distributed as dist
    from torch.distributed.optim import ZeroRedundancyOptimizer

    model = MLP("plain").to(inputs.dtype)
    model.load_state_dict(state)
    opt = ZeroRedundancyOptimizer(model.parameters(), torch.optim.AdamW, lr=lr, weight_decay=0.01)
    for x, y in zip(inputs, targets):
        opt.zero_grad(set_to_none=True)
        F.mse_loss(model(x), y).backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= dist.get_world_size()
        opt.step()
    local = opt.optim.state.values()
    state_bytes = sum(v.numel() * v.element_size() for s in local for v in s.values() if isinstance(v, torch.Tensor))
    return {"state": {k: v.detach().clone() for k, v in model.state_dict().items()}, "state_bytes": state_bytes}


def train_torch_ddp(
    variant: str,
    state: dict[str, torch.Tensor],
    optimizer: str,
    lr: float,
    inputs: torch.Tensor,
    targets: torch.Tensor,
    bucket_cap_mb: float,
) -> dict[str, object]:
    """What the given train_ddp does, with torch.nn.parallel.DistributedDataParallel, in a
    trusted world: the final parameters of this rank."""
    from torch.nn.parallel import DistributedDataParallel

    model = make_model(variant).to(inputs.dtype)
    model.load_state_dict(state)
    ddp = DistributedDataParallel(model, bucket_cap_mb=bucket_cap_mb, find_unused_parameters=variant == "unused")
    opt = make_optimizer(optimizer, [p for p in model.parameters() if p.requires_grad], lr)
    for x, y in zip(inputs, targets):
        opt.zero_grad(set_to_none=True)
        F.mse_loss(ddp(x), y).backward()
        opt.step()
    return {"state": {k: v.detach().clone() for k, v in model.state_dict().items()}}


def mixed_precision_gradients(
    low: nn.Module, x: torch.Tensor, y: torch.Tensor, world_size: int = 1
) -> list[torch.Tensor]:
    """One step's gradients under the mixed-precision recipe, by parameter: `low` (the model in
    its compute dtype) runs forward and backward on each rank's rows of x cast to that dtype (the
    loss taken in y's dtype, fp32, on the output cast up, as the given train_fsdp does); each
    rank's gradient is cast to y's dtype (fp32), summed over ranks and divided by world_size.
    world_size=1: the whole batch."""
    dtype = next(low.parameters()).dtype
    total: list[torch.Tensor] = []
    for rows_x, rows_y in zip(x.chunk(world_size), y.chunk(world_size)):
        low.zero_grad(set_to_none=True)
        F.mse_loss(low(rows_x.to(dtype)).to(y.dtype), rows_y).backward()
        grads = [p.grad.to(y.dtype) for p in low.parameters()]
        total = [t + g for t, g in zip(total, grads)] if total else grads
    return [t / world_size for t in total]


def train_mixed_precision(
    variant: str,
    state: dict[str, torch.Tensor],
    optimizer: str,
    lr: float,
    inputs: torch.Tensor,
    targets: torch.Tensor,
    compute_dtype: torch.dtype,
    world_size: int = 1,
) -> dict[str, object]:
    """One process, the mixed-precision recipe of the ZeRO paper: an fp32 master copy of the
    model (the state's dtype), stepped by the optimizer; each step a compute_dtype copy of the
    master runs forward and backward and its gradients, cast to fp32, are the master's. With
    world_size=1 on the whole batch; with world_size=p rank by rank, the ranks' fp32 gradients
    averaged, as p ranks of fully_shard(compute_dtype) get them. Returns the final "state" and the
    first step's gradients, "grads", by parameter name."""
    master = make_model(variant).to(inputs.dtype)
    master.load_state_dict(state)
    low = make_model(variant).to(compute_dtype)
    opt = make_optimizer(optimizer, list(master.parameters()), lr)
    first: dict[str, torch.Tensor] = {}
    for x, y in zip(inputs, targets):
        low.load_state_dict(master.state_dict())  # the master rounded to compute_dtype
        grads = mixed_precision_gradients(low, x, y, world_size)
        for p, g in zip(master.parameters(), grads):
            p.grad = g
        first = first or {name: p.grad.clone() for name, p in master.named_parameters()}
        opt.step()
    return {"state": {k: v.detach().clone() for k, v in master.state_dict().items()}, "grads": first}


def train_torch_in_group(
    ddp_start: dict[str, torch.Tensor],
    state: dict[str, torch.Tensor],
    inputs: torch.Tensor,
    targets: torch.Tensor,
    lr: float,
    bucket_cap_mb: float,
    group,
) -> list[dict[str, object]]:
    """What the zero suite's group test runs on each rank, with torch's own data parallelism
    over `group`, in a trusted world: DistributedDataParallel(process_group=group) from
    `ddp_start` (AdamW), ZeroRedundancyOptimizer(process_group=group) over AdamW with gradients
    all-reduced in the group (stage 1), twice, standing for stages 1 and 2, and FSDP2's
    fully_shard on a DeviceMesh of the group per layer (SGD), each on the plain MLP from `state`.
    Returns each one's final parameters, in that order."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.optim import ZeroRedundancyOptimizer
    from torch.nn.parallel import DistributedDataParallel

    def train(model: nn.Module, opt, reduce=None) -> None:
        for x, y in zip(inputs, targets):
            opt.zero_grad(set_to_none=True)
            F.mse_loss(model(x), y).backward()
            for p in reduce or ():
                dist.all_reduce(p.grad, group=group)
                p.grad /= dist.get_world_size(group)
            opt.step()

    results = []
    model = MLP("plain").to(inputs.dtype)
    model.load_state_dict(ddp_start)
    train(
        DistributedDataParallel(model, bucket_cap_mb=bucket_cap_mb, process_group=group),
        make_optimizer("adamw", list(model.parameters()), lr),
    )
    results.append({k: v.detach().clone() for k, v in model.state_dict().items()})
    for _ in range(2):
        model = MLP("plain").to(inputs.dtype)
        model.load_state_dict(state)
        opt = ZeroRedundancyOptimizer(
            model.parameters(), torch.optim.AdamW, process_group=group, lr=lr, weight_decay=0.01
        )
        train(model, opt, list(model.parameters()))
        results.append({k: v.detach().clone() for k, v in model.state_dict().items()})
    model = MLP("plain").to(inputs.dtype)
    model.load_state_dict(state)
    mesh = DeviceMesh.from_group(group, "cpu")
    for layer in model.children():
        fully_shard(layer, mesh=mesh)
    train(model, make_optimizer("sgd", list(model.parameters()), lr))
    results.append({k: v.full_tensor().detach().clone() for k, v in model.state_dict().items()})
    return results
