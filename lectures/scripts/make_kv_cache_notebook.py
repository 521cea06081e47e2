"""Generate the student notebook of module `kv_cache`.

    python lectures/scripts/make_kv_cache_notebook.py [--out PATH]

Writes assignments/kv_cache/kv_cache.ipynb (default) with no outputs and fixed cell ids, so that
running the script twice gives the same file. The notebook runs the student's own files through
grader.notebook (sandboxed worker processes, as the grader does); the project's tests execute it
with GRADER_SUBMISSION=solutions.
"""

from __future__ import annotations

from notebook_cells import Notebook

notebook = Notebook("kv_cache")
md, code = notebook.md, notebook.code

# fmt: off

md("intro", r"""
    # The KV cache, hands on

    This notebook runs **your own** files from this folder (`cache.py`, `generate.py`,
    `paged.py`) in worker processes, exactly as the grader does, and looks at what they do:
    the size of real models' caches, generation with and without your cache, the time per token
    as the context grows, and the block tables of a forked batch in your paged cache. The lecture
    is `lectures/05-kv-cache.md`.

    **Grading.** This notebook is not graded: `make grade` gives your score and
    `pytest assignments/kv_cache` runs the public tests.

    **How your code runs here.** The workers import your files once: **re-run the setup cell
    after every edit**. A cell that calls a function you have not written yet stops with a
    one-line `SubmissionError` naming it. Objects (a model, a cache) live in the worker: a
    *script* of steps builds them and calls their methods, and `Saved("name")` passes a kept
    object to a later step.
""")

code("imports", """
    import matplotlib.pyplot as plt
    import torch
    import torch.nn.functional as F
    from IPython import get_ipython
    from matplotlib.patches import Rectangle

    from grader.models.tiny_gpt import TinyGPT, TinyGPTConfig
    from grader.notebook import open_module
    from grader.sandbox import Saved, Step, SubmissionError


    def show_message_only(shell, etype, value, tb, tb_offset=None):
        shell.showtraceback((etype, value, tb), exception_only=True)


    get_ipython().set_custom_exc((SubmissionError,), show_message_only)
""")

code("setup", """
    # Re-running this cell starts fresh workers, which import your latest files.
    previous = globals().get("kv")
    if previous is not None:
        previous.close()
    kv = open_module("kv_cache")
    print("running your files from", kv.directory)

    CONFIG = dict(vocab_size=97, max_seq_len=1024, num_layers=2, d_model=64, num_heads=4, num_kv_heads=2)
    build = Step("build_model", (CONFIG, 0, "float32"), save_as="model", send_back=False)
""")

md("size-md", r"""
    ## 1. How big is the cache? (lecture section 2)

    `kv_cache_bytes` per token for published configurations, in 16-bit, and for a 4,096-token
    context at batch 32. Compare with the weights: Llama-2-7B is 13.5 GB in float16.
""")

code("size", """
    kv_cache_bytes = kv.function("kv_cache_bytes")
    models = {  # layers, KV heads, head dim
        "Llama-2-7B (MHA)": (32, 32, 128),
        "Llama-2-70B (GQA)": (80, 8, 128),
        "Mistral-7B (GQA)": (32, 8, 128),
        "Falcon-7B (MQA)": (32, 1, 64),
    }
    for name, (layers, heads, dim) in models.items():
        per_token = kv_cache_bytes(layers, heads, dim, 1, 1, torch.float16)
        batch = kv_cache_bytes(layers, heads, dim, 4096, 32, torch.float16)
        print(f"{name:20s} {per_token / 2**10:6.0f} KiB/token   {batch / 2**30:6.1f} GiB for 32 x 4096 tokens")
""")

md("generate-md", r"""
    ## 2. Your generate, with and without your cache (section 3)

    Greedy tokens must be identical; logits agree within float32 rounding. The last lines run
    the given model here, in the notebook, on the whole sequence: the grader's reference.
""")

code("generate", """
    prompt = torch.randint(0, 97, (2, 12), generator=torch.Generator().manual_seed(0))
    steps = [build, Step("generate", (Saved("model"), prompt, 10)),
             Step("generate", (Saved("model"), prompt, 10), {"use_cache": False})]
    _, (cached, cached_logits), (uncached, uncached_logits) = kv.script(steps).steps[0]
    print("cached:  ", cached[0].tolist())
    print("uncached:", uncached[0].tolist())
    print("same tokens:", torch.equal(cached, uncached),
          " largest logit difference:", (cached_logits - uncached_logits).abs().max().item())

    model = TinyGPT.from_seed(TinyGPTConfig(**CONFIG), 0)
    with torch.no_grad():
        print("reference first token:", model(prompt)[:, -1].argmax(-1).tolist(), "yours:", cached[:, 0].tolist())
""")

md("time-md", r"""
    ## 3. Time per token as the context grows (sections 1 and 4)

    One decode step's time = (generate 9 tokens - generate 1 token) / 8: the prefill cancels.
    Best of 3 runs each. Without the cache a step is a whole forward pass and grows with the
    context (quadratically, in the end); with it, a step is nearly flat on a CPU, where Python
    overhead dominates a model this small.
""")

code("time", """
    def seconds(context, new, use_cache):
        prompt = torch.randint(0, 97, (1, context), generator=torch.Generator().manual_seed(context))
        step = Step("generate", (Saved("model"), prompt, new), {"use_cache": use_cache}, send_back=False)
        return min(kv.script([build, step]).seconds for _ in range(3))

    contexts = [32, 128, 256, 512]
    per_token = {True: [], False: []}
    for use_cache in (True, False):
        for context in contexts:
            step = (seconds(context, 9, use_cache) - seconds(context, 1, use_cache)) / 8
            per_token[use_cache].append(max(step, 0.0) * 1e3)

    plt.figure(figsize=(6, 3.5))
    plt.plot(contexts, per_token[False], "o-", color="tab:red", label="use_cache=False")
    plt.plot(contexts, per_token[True], "o-", color="tab:blue", label="use_cache=True")
    plt.xlabel("context (tokens)")
    plt.ylabel("ms per decode step")
    plt.legend()
    plt.title("TinyGPT on one CPU thread")
    plt.show()
    print("speed-up at 512:", round(per_token[False][-1] / max(per_token[True][-1], 1e-6), 1), "x")
""")

md("paged-md", r"""
    ## 4. Block tables of a forked batch (sections 5 and 6)

    A 10-token prompt in blocks of 4 fills three blocks (4 + 4 + 2 positions, the last partly
    filled); it is forked into three samples that then decode 3, 1 and 5 tokens. Shared blocks
    are orange. The two full prompt blocks stay shared; the partly filled one is copied by the
    first two samples that write into it (copy-on-write), and the third, its only owner by then,
    writes in place.
""")

code("paged", """
    def ones(n):
        return torch.ones(n, 1, 1)

    steps = [Step("PagedKVCache", (12, 4, 1, 1, 1), save_as="cache", send_back=False),
             Step("cache.add_sequence", (0,)), Step("cache.append", (0, 0, ones(10), ones(10))),
             Step("cache.fork", (0, 1)), Step("cache.fork", (0, 2))]
    for seq, new in ((0, 3), (1, 1), (2, 5)):
        steps.append(Step("cache.append", (seq, 0, ones(new), ones(new))))
    steps += [Step("cache.block_table", (seq,)) for seq in (0, 1, 2)] + [Step("cache.num_free_blocks")]
    *_, t0, t1, t2, free = kv.script(steps).steps[0]
    tables = {0: t0, 1: t1, 2: t2}
    print(tables, "free blocks:", free)

    count = {}
    for table in tables.values():
        for block in table:
            count[block] = count.get(block, 0) + 1
    fig, ax = plt.subplots(figsize=(6, 2.4))
    for row, (seq, table) in enumerate(tables.items()):
        for i, block in enumerate(table):
            color = "tab:orange" if count[block] > 1 else "tab:blue"
            ax.add_patch(Rectangle((i, 2 - row), 0.9, 0.8, color=color))
            ax.text(i + 0.45, 2.4 - row, str(block), ha="center", va="center", color="white")
        ax.text(-0.2, 2.4 - row, f"seq {seq}", ha="right", va="center")
    ax.set_xlim(-1.2, 5)
    ax.set_ylim(-0.2, 3)
    ax.axis("off")
    plt.show()
""")

md("attention-md", r"""
    ## 5. Paged decode attention against SDPA (section 5)

    Three sequences of different lengths, one decode query each, through your block tables;
    the reference is `F.scaled_dot_product_attention(..., enable_gqa=True)` on the same keys.
""")

code("attention", """
    g = torch.Generator().manual_seed(1)
    lengths = [3, 9, 6]
    data = {s: (torch.randn(n, 2, 8, generator=g), torch.randn(n, 2, 8, generator=g)) for s, n in enumerate(lengths)}
    steps = [Step("PagedKVCache", (10, 4, 1, 2, 8), save_as="cache", send_back=False)]
    for seq, (k, v) in data.items():
        steps += [Step("cache.add_sequence", (seq,)), Step("cache.append", (seq, 0, k, v))]
    q = torch.randn(3, 4, 8, generator=g)
    steps.append(Step("paged_decode_attention", (q, Saved("cache"), [0, 1, 2], 0)))
    out = kv.script(steps).steps[0][-1]
    expected = torch.stack([
        F.scaled_dot_product_attention(q[s][:, None], k.transpose(0, 1), v.transpose(0, 1), enable_gqa=True)[:, 0]
        for s, (k, v) in data.items()
    ])
    print("largest difference from SDPA:", (out - expected).abs().max().item())
""")

md("next", r"""
    **Next steps.** `pytest assignments/kv_cache`, then `make grade`. The grader also runs
    random programs of `add_sequence` / `append` / `fork` / `free` against a dictionary model,
    with the pool running out of blocks on the way: try a few by hand here first (what must
    `num_free_blocks()` be after each step?).
""")

# fmt: on

if __name__ == "__main__":
    notebook.main(__doc__)
