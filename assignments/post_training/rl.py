# Your working copy: replace every `raise NotImplementedError` with your implementation.
# (Generated from the course's reference by `python -m grader sync`.)
"""One GRPO step as a system: rollouts from the engine, rewards, advantages, the update on the
sharded trainer, and the weights back to the engine; on-policy or off-policy by one step
(lecture 16, sections 6 and 8).

Given here (read it): the toy task (toy_prompts, toy_reward, toy_model), the trainer
(FSDPTrainer: module zero's fully_shard layout of sync.fsdp_shard, Adam on the chunks), the
placement of one world (make_worker, RLWorker; make_engine for one process), the rollouts of the
whole batch on every rank (gather_rollouts) and the driver the grader calls (run_grpo).
You write generate_rollouts, grpo_step and train_grpo.

The world. trainer_ranks hold the policy as FSDP chunks (trainer rank at index i of the list
holds chunk i of every unit) and a frozen reference model (the initial weights, whole);
engine_ranks form len(engine_ranks) / tp engine replicas of tp ranks, engine_ranks[k] being
tensor-parallel rank k % tp of replica k // tp. The lists may be the same ranks (colocated) or
disjoint (disaggregated). The split of the work:
- generation: replica r generates the contiguous r-th share of the batch's prompts (all its
  group_size completions), and every rank receives the whole batch (gather_rollouts);
- training: data parallel over prompt groups: trainer index t of T trains the contiguous t-th
  share of the prompts (whole groups, so group normalisation needs no communication); its
  gradients are averaged over the trainer ranks (reduce-scatter into its chunks);
- weight sync: sync.sync_weights moves the updated chunks into the engine's layout.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
import torch.distributed as dist
from engine import Engine
from losses import completion_logprobs, group_advantages, grpo_loss
from sync import fsdp_shard, fsdp_units, sync_weights

from grader.models.tiny_gpt import TinyGPT, TinyGPTConfig

TOY_CONFIG = TinyGPTConfig(max_seq_len=32)
END_TOKEN = 0  # the toy task's end-of-completion token; prompts never contain it
PROMPT_LEN = 4
EMBEDDING_SCALE = 0.1
DTYPES = {"float32": torch.float32, "float64": torch.float64}


# ---------------------------------------------------------------------------- the toy task


def toy_prompts(seed: int, step: int, num_prompts: int, prompt_len: int = PROMPT_LEN) -> torch.Tensor:
    """The prompts of batch `step`: (num_prompts, prompt_len) token ids drawn uniformly from
    1..vocab_size - 1 (never END_TOKEN) with torch.Generator().manual_seed(1_000_003 * seed + step)."""
    generator = torch.Generator().manual_seed(1_000_003 * seed + step)
    return torch.randint(1, TOY_CONFIG.vocab_size, (num_prompts, prompt_len), generator=generator)


def toy_reward(prompt_ids: torch.Tensor, completion_ids: torch.Tensor, completion_mask: torch.Tensor) -> torch.Tensor:
    """The verifiable reward of each completion (float64, in [0, 1]): the number of its tokens
    that are masked in, not END_TOKEN and smaller than the mean of its prompt's tokens
    (token * P < the prompt's sum, in integers), over max_new_tokens (completion_ids.shape[1]);
    so ending early earns less. The policy of toy_model scores about 0.45 at first."""
    below = completion_ids * prompt_ids.shape[1] < prompt_ids.sum(1, keepdim=True)
    good = below & (completion_ids != END_TOKEN) & completion_mask.bool()
    return good.sum(1).to(torch.float64) / completion_ids.shape[1]


def toy_model(seed: int, dtype: str = "float64", config: TinyGPTConfig = TOY_CONFIG) -> TinyGPT:
    """The toy task's initial policy: TinyGPT.from_seed(config, seed) with its token embedding
    (the tied output head too) scaled by EMBEDDING_SCALE. At from_seed's N(0, 1) embeddings the
    logit of the input token is about d_model = 64 against a few units for the others, so the
    model copies its last token almost surely: a policy that never explores, which RL cannot
    improve. Scaled by 0.1 it samples widely."""
    model = TinyGPT.from_seed(config, seed, DTYPES[dtype])
    with torch.no_grad():
        model.token_embedding.weight.mul_(EMBEDDING_SCALE)
    return model


# ---------------------------------------------------------------------------- the trainer


class FSDPTrainer:
    """Trainer rank `index` of `count` (process group `group`, None for one rank): the policy as
    sync.fsdp_shard chunks (unit name -> 1-D tensor, `shards`), Adam(lr) on them (torch.optim.Adam's
    update with its default betas and eps, written out: elementwise, so Adam on the chunks is Adam
    on the whole model), and `reference`, a frozen whole copy of the initial model.

      model = trainer.gather()   every trainer rank: all_gather the chunks into a whole TinyGPT
                                 whose parameters are fresh leaves (requires_grad)
      trainer.step(model)        every trainer rank, after backward on `model`: reduce-scatter
                                 each unit's flat gradient (padded like the chunks) and divide it
                                 by count (the mean of the ranks' gradients), one Adam step on the
                                 chunks
    Simplified against module zero's fully_shard: the whole model is gathered at once (not one
    unit at a time), which a model of 100k parameters allows."""

    def __init__(self, model: TinyGPT, index: int, count: int, group=None, lr: float = 1e-2, order=None) -> None:
        self.config, self.index, self.count, self.group = model.config, index, count, group
        # order[j]: the trainer index of the group's rank j (a group numbers its members by
        # global rank, trainer_ranks may list them in any order).
        self.order = list(range(count)) if order is None else list(order)
        self.dtype = next(model.parameters()).dtype
        self.units = fsdp_units(model)
        self.shards = fsdp_shard(model, index, count)
        self.lr, self.steps = lr, 0
        self.moments = {unit: (torch.zeros_like(c), torch.zeros_like(c)) for unit, c in self.shards.items()}
        self.reference = copy.deepcopy(model).requires_grad_(False)

    def gather(self) -> TinyGPT:
        model = TinyGPT(self.config).to(self.dtype)
        parameters = dict(model.named_parameters())
        with torch.no_grad():
            for unit, members in self.units.items():
                chunk = self.shards[unit]
                if self.count > 1:
                    by_group_rank = torch.empty(self.count * chunk.numel(), dtype=self.dtype)
                    dist.all_gather_single(by_group_rank, chunk, group=self.group)
                    flat = torch.empty(self.count, chunk.numel(), dtype=self.dtype)
                    flat[self.order] = by_group_rank.view(self.count, -1)
                    flat = flat.reshape(-1)
                else:
                    flat = chunk
                offset = 0
                for name, shape in members:
                    parameters[name].copy_(flat[offset : offset + shape.numel()].view(shape))
                    offset += shape.numel()
        return model

    def step(self, model: TinyGPT) -> None:
        parameters = dict(model.named_parameters())
        self.steps += 1
        beta1, beta2, eps = 0.9, 0.999, 1e-8  # torch.optim.Adam's defaults, its formula below
        for unit, members in self.units.items():
            chunk = self.shards[unit]
            full = torch.zeros(chunk.numel() * self.count, dtype=self.dtype)
            offset = 0
            for name, shape in members:
                if parameters[name].grad is not None:
                    full[offset : offset + shape.numel()] = parameters[name].grad.reshape(-1)
                offset += shape.numel()
            if self.count > 1:
                grad = torch.empty_like(chunk)
                by_group_rank = full.view(self.count, -1)[self.order].reshape(-1)
                dist.reduce_scatter_single(grad, by_group_rank, group=self.group)
                grad /= self.count
            else:
                grad = full
            first, second = self.moments[unit]
            first.mul_(beta1).add_(grad, alpha=1 - beta1)
            second.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
            denominator = (second.sqrt() / (1 - beta2**self.steps) ** 0.5).add_(eps)
            chunk.addcdiv_(first, denominator, value=-self.lr / (1 - beta1**self.steps))

    def chunks(self) -> dict[str, torch.Tensor]:
        """A copy of the chunks (what sync.sync_weights takes)."""
        return {unit: chunk.clone() for unit, chunk in self.shards.items()}


# ---------------------------------------------------------------------------- the placement


@dataclass
class RLWorker:
    """What one rank of the world holds: its roles, the trainer (on trainer ranks, else None),
    the engine (on engine ranks, else None) and the placement."""

    rank: int
    world_size: int
    config: TinyGPTConfig
    trainer_ranks: list[int]
    engine_ranks: list[int]
    tp: int
    trainer: FSDPTrainer | None
    engine: Engine | None

    def state(self) -> dict:
        """{"chunks": the trainer's chunks (None off the trainer), "engine": the engine's weights
        by name (None off the engine)}: what the grader reads."""
        return {
            "chunks": self.trainer.chunks() if self.trainer is not None else None,
            "engine": dict(self.engine.weights) if self.engine is not None else None,
        }

    @property
    def replicas(self) -> int:
        return len(self.engine_ranks) // self.tp

    @property
    def replica(self) -> int | None:
        """This rank's engine replica (None on a rank that is not an engine rank)."""
        return self.engine_ranks.index(self.rank) // self.tp if self.rank in self.engine_ranks else None


def make_worker(
    seed: int,
    trainer_ranks: list[int],
    engine_ranks: list[int],
    tp: int,
    lr: float = 1e-2,
    dtype: str = "float64",
    config: TinyGPTConfig = TOY_CONFIG,
) -> RLWorker:
    """This rank's RLWorker, on every rank of the world (it creates the process groups, in the same
    order everywhere): toy_model(seed, dtype, config) as the policy, the reference and the
    engine's first weights; the engine ends completions at END_TOKEN. Without torch.distributed
    (one process), it first starts a world of one. Raises ValueError on a bad placement: an empty
    or repeated rank list, a rank outside the world, len(engine_ranks) not a multiple of tp, or a
    tp that does not divide the heads, the kv heads and the MLP width."""
    if not dist.is_initialized():
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    rank, world = dist.get_rank(), dist.get_world_size()
    trainer_ranks, engine_ranks = [int(r) for r in trainer_ranks], [int(r) for r in engine_ranks]
    for what, ranks in (("trainer_ranks", trainer_ranks), ("engine_ranks", engine_ranks)):
        if not ranks or len(set(ranks)) != len(ranks) or not all(0 <= r < world for r in ranks):
            raise ValueError(f"{what} must be distinct ranks of the world 0..{world - 1}, got {ranks}")
    width = config.mlp_ratio * config.d_model
    if tp < 1 or len(engine_ranks) % tp or config.num_heads % tp or config.num_kv_heads % tp or width % tp:
        raise ValueError(
            f"tp={tp} must be >= 1 and divide len(engine_ranks)={len(engine_ranks)}, the heads, the kv heads "
            f"and the MLP width {width}"
        )
    model = toy_model(seed, dtype, config)
    # Every rank creates every group, in the same order (dist.new_group's rule).
    trainer_group = dist.new_group(trainer_ranks) if len(trainer_ranks) > 1 else None
    replica_groups = [
        dist.new_group(engine_ranks[r * tp : (r + 1) * tp]) if tp > 1 else None for r in range(len(engine_ranks) // tp)
    ]
    trainer = engine = None
    if rank in trainer_ranks:
        order = [trainer_ranks.index(r) for r in sorted(trainer_ranks)]
        trainer = FSDPTrainer(model, trainer_ranks.index(rank), len(trainer_ranks), trainer_group, lr, order)
    if rank in engine_ranks:
        k = engine_ranks.index(rank)
        engine = Engine.from_model(model, k % tp, tp, replica_groups[k // tp], eos_token_id=END_TOKEN)
    return RLWorker(rank, world, config, trainer_ranks, engine_ranks, tp, trainer, engine)


def make_engine(seed: int, eos_token_id: int | None = END_TOKEN, max_batch: int = 8, dtype: str = "float64") -> Engine:
    """One engine of one rank (tp = 1) on toy_model(seed, dtype): what a single process samples with."""
    return Engine.from_model(toy_model(seed, dtype), eos_token_id=eos_token_id, max_batch=max_batch)


ROLLOUT_KEYS = ("prompt_ids", "completion_ids", "completion_mask", "logprobs")


def gather_rollouts(
    worker: RLWorker, prompts: torch.Tensor, group_size: int, max_new_tokens: int, temperature: float, seed: int
) -> dict:
    """The rollouts of the whole batch (generate_rollouts' dict for all of `prompts`) on every
    rank of the world: replica r of R generates prompts [r n / R, (r + 1) n / R) with
    first_prompt = r n / R, and its tensor-parallel rank 0 broadcasts them to the world. Raises
    ValueError when the number of prompts is not a multiple of the number of replicas."""
    n, replicas = prompts.shape[0], worker.replicas
    if n % replicas:
        raise ValueError(f"{n} prompts cannot be split evenly over {replicas} engine replicas")
    share = n // replicas
    mine = None
    if worker.engine is not None:
        r = worker.replica
        mine = generate_rollouts(
            worker.engine,
            prompts[r * share : (r + 1) * share],
            group_size,
            max_new_tokens,
            temperature,
            seed,
            r * share,
        )
    if worker.world_size == 1:
        return mine
    dtype = (
        worker.trainer.dtype if worker.trainer is not None else worker.engine.weights["token_embedding.weight"].dtype
    )
    rows = share * group_size
    parts = []
    for r in range(replicas):
        source = worker.engine_ranks[r * worker.tp]
        if worker.rank == source:
            tensors = [mine[key].contiguous() for key in ROLLOUT_KEYS]
        else:
            shapes = [(rows, prompts.shape[1]), (rows, max_new_tokens), (rows, max_new_tokens), (rows, max_new_tokens)]
            kinds = [torch.long, torch.long, torch.long, dtype]
            tensors = [torch.empty(s, dtype=k) for s, k in zip(shapes, kinds)]
        for tensor in tensors:
            dist.broadcast(tensor, source)
        parts.append(tensors)
    gathered = {key: torch.cat([part[i] for part in parts]) for i, key in enumerate(ROLLOUT_KEYS)}
    gathered["group_size"] = group_size
    return gathered


# ---------------------------------------------------------------------------- your functions


def generate_rollouts(
    engine: Engine,
    prompts: torch.Tensor,
    group_size: int,
    max_new_tokens: int,
    temperature: float,
    seed: int,
    first_prompt: int = 0,
) -> dict:
    """group_size completions of every prompt, sampled by `engine` (one replica; every rank of
    it calls this with the same arguments). prompts (n, P) holds token ids, prompts[i] being
    prompt first_prompt + i of the step's whole batch.

    Completion g of prompts[i] is request (first_prompt + i) * group_size + g of the batch, and
    it samples with the seed seed * 1_000_003 + that request index (engine.generate's `seeds`):
    so its tokens depend on the batch's seed and its place in the batch, not on which replica
    generates it nor on what else that replica generates. (One engine.generate call with all
    n * group_size requests, prompt-major, lets the engine batch them.)

    Returns a dict, rows in the same order (row i * group_size + g):
      "prompt_ids"       (n * group_size, P) long, prompts[i] repeated;
      "completion_ids"   (n * group_size, max_new_tokens) long: the sampled tokens; a completion
                         that ended early (engine.eos_token_id sampled, kept as its last token)
                         is padded after it with engine.eos_token_id;
      "completion_mask"  (n * group_size, max_new_tokens) long: 1 on the sampled tokens (the end
                         token included), 0 on the padding;
      "logprobs"         (n * group_size, max_new_tokens), the dtype engine.generate returns:
                         each sampled token's log-probability under the engine's weights at
                         temperature 1 (engine.generate's), 0.0 on the padding;
      "group_size"       group_size (an int).

    Raises ValueError when prompts is not 2-D with at least one prompt and one token, when
    group_size < 1 or when first_prompt < 0. (engine.generate itself refuses max_new_tokens < 1,
    temperature <= 0 and prompts that do not fit in max_seq_len.)"""
    raise NotImplementedError("implement generate_rollouts (lectures/16-post-training.md, section 6)")


def grpo_step(
    worker: RLWorker,
    rollouts: dict,
    epsilon: float = 0.2,
    beta: float = 0.04,
    normalisation: str = "sequence",
) -> dict[str, float]:
    """One GRPO update on the rollouts of a whole batch (gather_rollouts' dict, on every rank),
    then the new weights into the engine. Call it on every rank of the world.

    On a trainer rank (index t of T = len(worker.trainer_ranks)), for its share of the batch,
    the prompts [t n / T, (t + 1) n / T) with all their completions (n prompts in the batch):
      1. rewards: toy_reward of its rows; advantages: losses.group_advantages(rewards, group_size);
      2. the policy's per-token log-probabilities of the completion tokens, with gradient:
         model = worker.trainer.gather(), run on prompt + completion tokens; the logits at
         position j predict token j + 1, so the completion's tokens are predicted by positions
         P - 1 .. P + max_new_tokens - 2 (losses.completion_logprobs);
      3. the same log-probabilities under worker.trainer.reference (the frozen initial model),
         without gradient;
      4. losses.grpo_loss(logprobs, old_logprobs=rollouts["logprobs"] (the engine's, from when
         the completions were sampled), reference, advantages, completion_mask, epsilon, beta,
         normalisation) on its rows. The loss differentiated is the whole batch's: with
         "sequence" the shares are equal, so the mean of the trainer ranks' losses is the
         batch's mean; with "token" the batch's masked-token total replaces the rank's own
         (multiply the rank's loss by its masked-token count times T over the batch's count);
      5. backward, then worker.trainer.step(model) (gradients averaged over the trainer ranks,
         Adam on the chunks).
    Then on every rank: sync.sync_weights(worker.trainer.chunks() on trainer ranks else None,
    worker.config, worker.trainer_ranks, worker.engine_ranks, worker.tp), and on an engine rank
    worker.engine.load_weights(what it returned).

    Returns, on every rank, the batch's metrics (floats, from before the update):
      "mean_reward": the mean toy_reward over all n * group_size completions;
      "kl":          the mean over every masked completion token of the batch of the k3
                     estimator exp(ref - logp) - (ref - logp) - 1 (logp the policy's);
      "loss":        the whole batch's loss (the value whose gradient the step applied).
    Raises ValueError, before any communication, when n is not a multiple of T."""
    raise NotImplementedError("implement grpo_step (lectures/16-post-training.md, section 6)")


def train_grpo(
    worker: RLWorker,
    steps: int,
    num_prompts: int,
    group_size: int,
    max_new_tokens: int,
    temperature: float = 1.0,
    seed: int = 0,
    off_policy: bool = False,
    epsilon: float = 0.2,
    beta: float = 0.04,
    normalisation: str = "sequence",
) -> list[dict[str, float]]:
    """`steps` GRPO steps on the toy task, on every rank of the world; returns grpo_step's
    metrics of each step, in order.

    Batch b (b = 0, 1, ...) is gather_rollouts(worker, toy_prompts(seed, b, num_prompts),
    group_size, max_new_tokens, temperature, seed + b), and step k trains batch k with grpo_step
    (epsilon, beta, normalisation).
      off_policy=False: step k generates batch k with the engine's current weights (those of
          step k's policy) and trains on it: on-policy.
      off_policy=True (off by one step, as asynchronous RL systems run): batch k + 1 is
          generated before step k trains, with the weights step k starts from; so step k >= 1
          trains on a batch sampled with the weights from before step k - 1's update, and its
          old_logprobs are the engine's from generation time, which the importance ratio
          exp(logp - old) corrects. Batch 0 is generated before step 0 (step 0 is on-policy).
    Raises ValueError when steps < 1."""
    raise NotImplementedError("implement train_grpo (lectures/16-post-training.md, section 8)")


# ---------------------------------------------------------------------------- the grader's driver


def run_grpo(
    seed: int,
    trainer_ranks: list[int],
    engine_ranks: list[int],
    tp: int,
    steps: int,
    num_prompts: int,
    group_size: int,
    max_new_tokens: int,
    temperature: float = 1.0,
    off_policy: bool = False,
    lr: float = 1e-2,
    epsilon: float = 0.2,
    beta: float = 0.04,
    normalisation: str = "sequence",
    dtype: str = "float64",
) -> dict:
    """make_worker, then train_grpo; returns this rank's {"metrics": train_grpo's list,
    "chunks": the trainer's chunks after the last step (None off the trainer), "engine": the
    engine's weights by name (None off the engine)}."""
    worker = make_worker(seed, trainer_ranks, engine_ranks, tp, lr, dtype)
    metrics = train_grpo(
        worker,
        steps,
        num_prompts,
        group_size,
        max_new_tokens,
        temperature,
        seed,
        off_policy,
        epsilon,
        beta,
        normalisation,
    )
    return {"metrics": metrics, **worker.state()}
