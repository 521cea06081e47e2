"""Generate the student notebook of module `moe`.

    python lectures/scripts/make_moe_notebook.py [--out PATH]

Writes assignments/moe/moe.ipynb (default) with no outputs and fixed cell ids, so that running
the script twice gives the same file. Sections 1 to 5 run the student's files through
grader.notebook (sandboxed workers, as the grader does); section 6 imports layer.py into the
notebook itself to train a tiny MoE. The project's tests execute it with
GRADER_SUBMISSION=solutions; it runs in well under a minute.
"""

from __future__ import annotations

from notebook_cells import Notebook

notebook = Notebook("moe")
md, code = notebook.md, notebook.code

# fmt: off

md("intro", r"""
    # Mixture-of-Experts, hands on

    In this notebook you run **your own** code from this folder: route a few tokens, watch
    dispatch drop the overflow, count the operations of your `MoELayer`, run it expert-parallel
    on 2 processes, and finally train a tiny MoE and see what the load-balancing loss does to
    the experts' load. Everything refers to the lecture, `lectures/04-mixture-of-experts.md`.

    | file | what | lecture section |
    | --- | --- | --- |
    | `routing.py` | `topk_route`, `expert_capacity` | 2, 3 |
    | `routing.py` | `dispatch`, `combine`, `load_balancing_loss`, `router_z_loss` | 3, 4 |
    | `layer.py` | `swiglu_experts`, `MoELayer.forward`, `MoELayer.shared_experts` | 5 |
    | `expert_parallel.py` | `expert_parallel_forward` | 6 |

    **Grading.** This notebook is not graded. `make grade` gives your score;
    `pytest assignments/moe` runs the public tests alone.

    **How your code runs here.** Sections 1 to 5 never import your files into this notebook:
    like the grader, they start worker processes that do, send them arguments and get results
    back. A stateful object such as an `MoELayer` lives in the worker and is driven by a *script*
    of steps (`Step("MoELayer", args, save_as="layer")`, then `Step("layer.forward", (x,))`).
    Section 6 trains a model, which needs many small calls, so it imports `layer.py` directly.
    A cell that needs a function you have not written yet stops with a one-line message naming it.
""")

code("imports", """
    import sys

    import matplotlib.pyplot as plt
    import numpy as np
    import torch
    import torch.nn.functional as F
    from IPython import get_ipython

    from grader.notebook import module_folder, open_module
    from grader.sandbox import Saved, Step, SubmissionError


    def show_message_only(shell, etype, value, tb, tb_offset=None):
        shell.showtraceback((etype, value, tb), exception_only=True)


    get_ipython().set_custom_exc((SubmissionError,), show_message_only)
""")

md("setup-md", r"""
    ## 0. Setup

    `open_module("moe")` runs the files of this folder in worker processes. They import your files
    **once**: re-run this cell after every edit.
""")

code("setup", """
    previous = globals().get("moe")
    if previous is not None:  # re-running this cell: stop the old workers first
        previous.close()
    moe = open_module("moe")
    print("running your files from", moe.directory)

    topk_route = moe.function("topk_route")
    expert_capacity = moe.function("expert_capacity")
    dispatch = moe.function("dispatch")
    combine = moe.function("combine")
    load_balancing_loss = moe.function("load_balancing_loss")
    router_z_loss = moe.function("router_z_loss")
""")

md("route-md", r"""
    ## 1. Top-k gating (lecture section 2)

    Four tokens, four experts. Softmax over all experts, keep the two most probable, renormalise.
    The last token has three equal logits: the lower indices win, which `torch.topk` does not
    promise.
""")

code("route", """
    logits = torch.tensor(
        [
            [2.0, 0.5, 1.0, -1.0],
            [0.0, 0.0, 3.0, 2.9],
            [1.0, 1.0, 1.0, 1.0],
            [0.0, 2.0, 2.0, 2.0],
        ]
    )
    weights, ids = topk_route(logits, 2)
    for t in range(len(logits)):
        print(f"token {t}: experts {ids[t].tolist()} weights {[round(w, 3) for w in weights[t].tolist()]}")
    print("torch.topk on the last token:", torch.topk(logits[3], 2).indices.tolist())
""")

md("dispatch-md", r"""
    ## 2. Capacity, dispatch and combine (lecture section 3)

    Twelve tokens with a router that prefers expert 0. With capacity factor 1.0 each of the 4
    experts has $\lceil 12 \cdot 2 / 4 \rceil = 6$ slots. First choices are served before second
    choices; a slot of -1 means the choice was dropped.
""")

code("dispatch", """
    torch.manual_seed(0)
    T, E, K = 12, 4, 2
    skewed = torch.randn(T, E) + torch.tensor([2.0, 0.5, 0.0, 0.0])
    weights, ids = topk_route(skewed, K)
    capacity = expert_capacity(T, E, K, 1.0)
    x = torch.arange(T, dtype=torch.float32).unsqueeze(1).repeat(1, 3)  # token t is the row [t, t, t]
    buffers, slots = dispatch(x, ids, E, capacity)

    print("capacity:", capacity)
    print(f"{'token':>5} {'experts':>10} {'slots':>10}")
    for t in range(T):
        print(f"{t:>5} {ids[t].tolist()!s:>10} {slots[t].tolist()!s:>10}")
    print("\\ntokens in each expert's buffer (first column; unused slots are 0):")
    for e in range(E):
        print(f"  expert {e}: {buffers[e, :, 0].int().tolist()}")

    # With identity experts, combine gives back x times the weight of the kept choices.
    y = combine(buffers, ids, weights, slots)
    kept_weight = (weights * (slots >= 0)).sum(dim=1)
    torch.testing.assert_close(y, x * kept_weight.unsqueeze(1))
    print("\\nweight kept per token:", [round(w, 2) for w in kept_weight.tolist()])
""")

md("losses-md", r"""
    ## 3. The auxiliary losses (lecture section 4)

    The balancing loss is $k$ for a perfectly even router and grows as the router concentrates;
    the z-loss grows with the size of the logits.
""")

code("losses", """
    even = torch.zeros(64, 8)
    collapsed = torch.zeros(64, 8)
    collapsed[:, :2] = 5.0  # every token prefers experts 0 and 1
    for name, logits in [("even", even), ("collapsed", collapsed)]:
        _, ids = topk_route(logits, 2)
        print(
            f"{name:>9}: balancing loss {load_balancing_loss(logits, ids, 8).item():.3f}, "
            f"z-loss {router_z_loss(logits).item():.2f}"
        )
""")

md("layer-md", r"""
    ## 4. Your MoELayer in a worker, and its operation count (lecture sections 5 and 7)

    The layer is built in the worker and kept there as `"layer"`. The `ops` probe counts the aten
    operations a step runs (a `TorchDispatchMode` in the worker). The grader requires the same
    count for $T$ and $8T$ tokens: a loop over tokens would add operations with every token.
""")

code("layer", """
    steps = [
        Step("MoELayer", (32, 64, 8, 2, 1.25, 1), save_as="layer", send_back=False),
        Step("layer.forward", (torch.randn(64, 32),), measure=("ops",)),
        Step("layer.forward", (torch.randn(512, 32),), send_back=False, measure=("ops",)),
    ]
    result = moe.script(steps)
    y, aux = result.steps[0][1]
    print("output", tuple(y.shape), "| tokens per expert", aux["tokens_per_expert"].tolist())
    print(f"balancing loss {aux['load_balancing_loss'].item():.3f}, z-loss {aux['router_z_loss'].item():.3f}")
    ops = [figures["ops"] for figures in result.measurements[0][1:]]
    print(f"aten operations: {ops[0]} for 64 tokens, {ops[1]} for 512 tokens")
""")

md("ep-md", r"""
    ## 5. Expert parallelism on 2 ranks (lecture section 6)

    Two workers joined by gloo, 4 experts (2 per rank), uneven batches. Each rank builds the same
    layer from the same weights, keeps its experts with `shard_experts`, and runs your
    `expert_parallel_forward`. The result must equal the whole layer on all tokens; the bytes each
    rank sent (counted by the kernel, from outside) should be close to the rows it had to send.
""")

code("ep", """
    torch.manual_seed(0)
    D, E, K = 64, 4, 2
    params = {
        "router.weight": torch.randn(E, D) / 4,
        "w_gate": torch.randn(E, D, 128) / D**0.5,
        "w_up": torch.randn(E, D, 128) / D**0.5,
        "w_down": torch.randn(E, 128, D) / 128**0.5,
    }
    xs = [torch.randn(300, D), torch.randn(200, D)]
    build = [
        Step("MoELayer", (D, 128, E, K), save_as="layer", send_back=False),
        Step("layer.load_state_dict", (params,), send_back=False),
    ]
    whole, _ = moe.script([*build, Step("layer.forward", (torch.cat(xs),))]).steps[0][-1]
    ep = moe.script_spmd(
        2,
        [
            [
                *build,
                Step("shard_experts", (Saved("layer"),), save_as="shard", send_back=False),
                Step("expert_parallel_forward", (Saved("shard"), x)),
            ]
            for x in xs
        ],
    )
    owners = [topk_route(x @ params["router.weight"].t(), K)[1] // (E // 2) for x in xs]
    for rank, (got, part) in enumerate(zip([steps[-1] for steps in ep.steps], whole.split([300, 200]))):
        torch.testing.assert_close(got, part, rtol=1e-5, atol=1e-5)
        out, back = int((owners[rank] != rank).sum()), int((owners[1 - rank] == rank).sum())
        print(
            f"rank {rank}: matches the whole layer; sent {ep.bytes_sent[rank]:,} bytes; payload: "
            f"{out} rows out + {back} rows back = {(out + back) * D * 4:,} bytes"
        )
""")

md("train-md", r"""
    ## 6. Training a tiny MoE, with and without the balancing loss (lecture section 4)

    A synthetic task: every token comes from one of 8 clusters, and the target is a different
    nonlinear function of the token for each cluster, so 8 experts have something to specialise
    in. All clusters share an offset, so a fresh router sees them as alike. We train your
    `MoELayer` (8 experts, top-2, dropless) for 200 steps of 256 tokens with Adam, once on the
    regression loss alone and once with $0.3\,\mathcal{L}_{bal}$ added (deliberately strong for
    such a short run), and record the share of choices each expert receives.

    This section imports `layer.py` into the notebook, so it needs `MoELayer` and all of
    `routing.py` to work; it takes a few seconds.
""")

code("train", """
    sys.path.insert(0, str(module_folder("moe")))
    from layer import MoELayer  # your file, imported into the notebook for training

    torch.set_num_threads(1)  # tiny matrices: one thread is faster than several that must synchronise
    D, CLUSTERS, STEPS, BATCH = 16, 8, 200, 256
    task = torch.Generator().manual_seed(0)
    centers = 3 * torch.randn(CLUSTERS, D, generator=task) + 2.0
    maps = torch.randn(CLUSTERS, D, D, generator=task) / D**0.5


    def batch(gen):
        cluster = torch.randint(0, CLUSTERS, (BATCH,), generator=gen)
        x = centers[cluster] + torch.randn(BATCH, D, generator=gen)
        return x, torch.tanh(torch.einsum("nd,nde->ne", x, maps[cluster]))


    def train(balance_coef):
        torch.manual_seed(0)  # the same initial layer for both runs
        layer = MoELayer(D, 32, 8, 2)
        optimizer = torch.optim.Adam(layer.parameters(), lr=1e-2)
        gen = torch.Generator().manual_seed(1)  # the same batches for both runs
        loads, losses = [], []
        for _ in range(STEPS):
            x, target = batch(gen)
            y, aux = layer(x)
            mse = F.mse_loss(y, target)
            optimizer.zero_grad()
            (mse + balance_coef * aux["load_balancing_loss"]).backward()
            optimizer.step()
            loads.append((aux["tokens_per_expert"] / (2 * BATCH)).numpy())
            losses.append(mse.item())
        return np.array(loads), losses


    runs = {coef: train(coef) for coef in (0.0, 0.3)}
    for coef, (loads, losses) in runs.items():
        print(
            f"balance coef {coef}: final mse {np.mean(losses[-20:]):.4f}, "
            f"final share per expert {np.round(loads[-20:].mean(axis=0).astype(float), 3).tolist()}"
        )
""")

code("plot", """
    fig, (ax_share, ax_max) = plt.subplots(1, 2, figsize=(12, 4))
    width = 0.4
    for i, (coef, (loads, _)) in enumerate(runs.items()):
        ax_share.bar(np.arange(8) + (i - 0.5) * width, loads[-20:].mean(axis=0), width, label=f"balance coef {coef}")
        ax_max.plot(loads.max(axis=1), label=f"balance coef {coef}")
    for ax in (ax_share, ax_max):
        ax.axhline(1 / 8, color="gray", ls=":", label="even share 1/8")
        ax.legend()
    ax_share.set(xlabel="expert", ylabel="share of choices (last 20 steps)", title="Expert load at the end")
    ax_max.set(xlabel="step", ylabel="share of the busiest expert", title="Busiest expert during training")
    plt.show()
""")

md("train-discussion", r"""
    Without the balancing loss some experts end up with twice their share and others with
    nearly nothing: a dead expert is wasted memory, and with expert parallelism the busiest rank
    sets everyone's pace. With it, the shares stay close to $1/8$. Things to try: the z-loss
    (print `aux["router_z_loss"]` over training), a capacity factor of 1.0 and the share of dropped
    choices in each run, or `num_shared_experts=1`.
""")

code("close", """
    moe.close()
""")

# fmt: on

if __name__ == "__main__":
    notebook.main(__doc__)
