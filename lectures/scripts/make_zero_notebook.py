"""Generate the student notebook of module `zero`.

    python lectures/scripts/make_zero_notebook.py [--out PATH]

Writes assignments/zero/zero.ipynb (default) with no outputs and fixed cell ids, so that running
the script twice gives the same file. Every section runs the student's files through
grader.notebook (sandboxed workers, 2-rank gloo worlds, as the grader does). The project's tests
execute it with GRADER_SUBMISSION=solutions; it runs in well under a minute.
"""

from __future__ import annotations

from notebook_cells import Notebook

notebook = Notebook("zero")
md, code = notebook.md, notebook.code

# fmt: off

md("intro", r"""
    # Data parallelism, ZeRO and activation checkpointing, hands on

    In this notebook you run **your own** code from this folder: the ZeRO memory formula beside
    the optimizer state your `ShardedOptimizer` really keeps, your `DDP` training on 2 processes
    and a timeline of its all-reduces against backward, the parameters `fully_shard` keeps
    between layers, and what `checkpointed_forward` saves for backward.
    Everything refers to the lecture, `lectures/02-data-parallel-and-zero.md`.

    | file | what | lecture section |
    | --- | --- | --- |
    | `memory.py` | `zero_memory_per_rank` | 3 |
    | `ddp.py` | `DDP` | 2 |
    | `sharded.py` | `ShardedOptimizer` | 4 |
    | `fsdp.py` | `fully_shard` | 5 |
    | `checkpoint.py` | `checkpointed_forward` | 6 |

    **Grading.** This notebook is not graded. `make grade` gives your score;
    `pytest assignments/zero` runs the public tests alone.

    **How your code runs here.** Your files are imported by worker processes, never by this
    notebook; distributed code runs on a world of 2 workers joined by gloo. The given helpers
    (`train_ddp`, `train_sharded`, `train_fsdp`, `saved_bytes_and_grads`) build the model in the worker, train
    it and send back numbers. A cell that needs a function you have not written yet stops with a
    one-line message naming it.
""")

code("imports", """
    import matplotlib.pyplot as plt
    import torch
    from IPython import get_ipython

    from grader.notebook import open_module
    from grader.sandbox import Step, SubmissionError


    def show_message_only(shell, etype, value, tb, tb_offset=None):
        shell.showtraceback((etype, value, tb), exception_only=True)


    get_ipython().set_custom_exc((SubmissionError,), show_message_only)
""")

md("setup-md", r"""
    ## 0. Setup

    `open_module("zero")` runs the files of this folder in worker processes. They import your
    files **once**: re-run this cell after every edit.
""")

code("setup", """
    previous = globals().get("zero")
    if previous is not None:  # re-running this cell: stop the old workers first
        previous.close()
    zero = open_module("zero")
    print("running your files from", zero.directory)
    zero_memory_per_rank = zero.function("zero_memory_per_rank")

    torch.manual_seed(0)
    WIDTH, STEPS, ROWS = 16, 3, 4
    state = {
        f"{layer}.{kind}": torch.randn(WIDTH, WIDTH) / 4 if kind == "weight" else torch.zeros(WIDTH)
        for layer in ("inp", "hidden", "out")
        for kind in ("weight", "bias")
    }


    def batches(world_size):
        inputs, targets = torch.randn(2, STEPS, world_size * ROWS, WIDTH)
        rows = [slice(r * ROWS, (r + 1) * ROWS) for r in range(world_size)]
        return [(inputs[:, part], targets[:, part]) for part in rows]
""")

md("memory-md", r"""
    ## 1. Memory per rank: the formula and what your ShardedOptimizer keeps (sections 3 and 4)

    First the paper's example (7.5B parameters, 64 ranks). Then the small MLP of the grader,
    trained with AdamW through your `ShardedOptimizer` on 2 and 4 ranks: the bytes of optimizer
    state each rank holds, beside the formula's optimizer term ($K = 8$ bytes per parameter for
    fp32 Adam's two moments). The measured shares are uneven because a rank owns whole tensors.
""")

code("memory", """
    for stage in range(4):
        print(f"stage {stage}: {zero_memory_per_rank(7.5e9, 64, stage) / 1e9:6.2f} GB per rank")

    num_params = sum(v.numel() for v in state.values())
    worlds, measured = [2, 4], {}
    for p in worlds:
        result = zero.script_spmd(
            p, [[Step("train_sharded", (state, "adamw", 2, 0.01, x, y))] for x, y in batches(p)]
        )
        measured[p] = [rank[-1]["state_bytes"] for rank in result.steps]
        print(f"p={p}: state bytes per rank {measured[p]}, formula K*psi/p = {8 * num_params / p:.0f}")

    fig, ax = plt.subplots(figsize=(6, 3.5))
    for p in worlds:
        ax.scatter([p] * p, measured[p], color="tab:blue", label="measured, each rank" if p == 2 else None)
    ax.plot([1, 2, 4], [8 * num_params / p for p in (1, 2, 4)], "o--", color="tab:orange", label="formula 8 psi / p")
    ax.set(xlabel="ranks p", ylabel="optimizer-state bytes per rank", title="ZeRO stage 2, AdamW, tiny MLP")
    ax.legend()
    plt.show()
""")

md("ddp-md", r"""
    ## 2. DDP on 2 ranks: same result as one process, communication during backward (section 2)

    Rank 1 starts from different weights: your constructor's broadcast must fix that. The given
    `train_ddp` counts the `dist.all_reduce` calls per step, and how many had started when
    `loss.backward()` returned: with overlap, all buckets but none of the waiting.
""")

code("ddp", """
    data = batches(2)
    starts = [state, {k: v + 1 for k, v in state.items()}]
    result = zero.script_spmd(
        2, [[Step("train_ddp", ("plain", s, "sgd", 0.05, x, y, 0.0015))] for s, (x, y) in zip(starts, data)]
    )
    ranks = [steps[-1] for steps in result.steps]
    same = all(torch.equal(ranks[0]["state"][k], ranks[1]["state"][k]) for k in state)
    print("ranks hold the same parameters after training:", same)
    print("all_reduce calls per step:", ranks[0]["calls"], "elements per step:", ranks[0]["elements"])
    print("calls started before backward returned:", ranks[0]["calls_before_backward_returned"])
""")

md("timeline-md", r"""
    ### A timeline: communication during backward

    The given `train_ddp` also records, from the start of each backward, when every gradient was
    accumulated, when each `dist.all_reduce` was started, when `loss.backward()` returned and when
    `finish_gradient_synchronization()` returned. Here the "deep" model (8 layers, 16 parameters)
    with buckets of about 2 KB, so that there are several: with overlap, the bucket all-reduces
    start while gradients are still arriving, and only the last one is waited for after backward.
""")

code("timeline", """
    data = batches(2)
    deep = {k: v.detach().clone() for k, v in torch.nn.Sequential(
        *(m for _ in range(8) for m in (torch.nn.Linear(WIDTH, WIDTH), torch.nn.Tanh()))
    ).state_dict().items()}
    result = zero.script_spmd(
        2, [[Step("train_ddp", ("deep", deep, "sgd", 0.05, x, y, 0.002))] for x, y in data]
    )
    fig, ax = plt.subplots(figsize=(7, 2.8))
    for rank, steps in enumerate(result.steps):
        run, step = steps[-1], STEPS - 1  # the last step: warm
        backward, synced = 1e3 * run["backward_end_s"][step], 1e3 * run["synchronized_s"][step]
        ready = [1e3 * t for t in run["grad_ready_s"][step]]
        started = [1e3 * t for t in run["allreduce_start_s"][step]]
        first = rank == 0  # label each kind of mark once
        ax.barh(rank, backward, color="tab:blue", alpha=0.3, label="backward" if first else None)
        ax.barh(rank, synced - backward, left=backward, color="tab:red", alpha=0.3,
                label="waiting after backward" if first else None)
        ax.plot(ready, [rank + 0.2] * len(ready), "k|", label="gradient ready" if first else None)
        ax.plot(started, [rank - 0.2] * len(started), "rv", label="all_reduce started" if first else None)
    ax.set(yticks=[0, 1], yticklabels=["rank 0", "rank 1"], xlabel="ms from the start of backward",
           title="DDP: bucket all-reduces start during backward")
    ax.legend(fontsize=7, loc="upper right")
    plt.show()
""")

md("fsdp-md", r"""
    ## 3. ZeRO-3: what fully_shard keeps, and memory per stage (sections 4 and 5)

    Your `fully_shard` trains the MLP on 2 and 4 ranks through the given `train_fsdp`, which counts
    the bytes of every storage alive at each layer boundary (minus the plain model's
    activations). Beside it, the same AdamW training with your `ShardedOptimizer` at stages 1
    and 2: bytes of optimizer state and of gradients a rank holds. Everything is float32 here,
    the model has `num_params` parameters: the full parameters are `4 * num_params` bytes.
""")

code("fsdp", """
    print(f"the model: {4 * num_params} bytes of parameters, {4 * num_params} of gradients, "
          f"{8 * num_params} of AdamW state")
    for p in worlds:
        data = batches(p)
        fsdp = zero.script_spmd(p, [[Step("train_fsdp", ("plain", state, "adamw", 0.01, x, y))] for x, y in data])
        resident = max(max(max(step) for step in rank[-1]["resident_bytes"]) for rank in fsdp.steps)
        after = max(max(rank[-1]["after_backward_bytes"]) for rank in fsdp.steps)
        print(f"p={p}: ZeRO-3 parameters between layers <= {resident} bytes per rank "
              f"(1/p of the model: {4 * num_params / p:.0f}); after backward (shards + their gradients) {after}")
        for stage in (1, 2):
            sharded = zero.script_spmd(
                p, [[Step("train_sharded", (state, "adamw", stage, 0.01, x, y))] for x, y in data]
            )
            ranks = [r[-1] for r in sharded.steps]
            print(f"      ZeRO-{stage}: optimizer state per rank {[r['state_bytes'] for r in ranks]}, "
                  f"gradients per rank {[r['grad_bytes'] for r in ranks]}")
""")

md("ckpt-md", r"""
    ## 4. Activation checkpointing: bytes saved for backward (section 6)

    16 blocks, batch 4, width 8, float64: one block output is 256 bytes. The plain forward saves
    17 of them (the input and every tanh output); with $s$ segments only $s$ are saved.
""")

code("ckpt", """
    x = torch.randn(4, 8, dtype=torch.float64)
    segments = [1, 2, 4, 8, 16]
    steps = [Step("saved_bytes_and_grads", (16, 8, 0, x, s)) for s in [None, *segments]]
    plain, *checkpointed = [r["saved_bytes"] for r in zero.script(steps).steps[0]]
    print("plain forward:", plain, "bytes")
    for s, saved in zip(segments, checkpointed):
        print(f"{s:>2} segments: {saved:>5} bytes saved; backward also holds one segment: ~{(16 // s) * 256} bytes")
""")

code("close", """
    zero.close()
""")

# fmt: on

if __name__ == "__main__":
    notebook.main(__doc__)
