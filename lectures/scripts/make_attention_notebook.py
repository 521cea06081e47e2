"""Generate the student notebook of module `attention`.

    python lectures/scripts/make_attention_notebook.py [--out PATH]

Writes assignments/attention/attention.ipynb (default) with no outputs and fixed cell ids, so
that running the script twice gives the same file. The notebook runs the student's own files
through grader.notebook (sandboxed worker processes, as the grader does); the project's tests
execute it with GRADER_SUBMISSION=solutions, in well under a minute.
"""

from __future__ import annotations

from notebook_cells import Notebook

notebook = Notebook("attention")
md, code = notebook.md, notebook.code

# fmt: off

md("intro", r"""
    # Attention, hands on: from the formula to FlashAttention

    This notebook runs **your own** code from this folder: it checks it against PyTorch's
    `scaled_dot_product_attention` (SDPA), measures how the memory and time of naive and tiled
    attention grow with the sequence length, runs your Triton kernel in the Triton interpreter,
    and compares the KV cache of MHA, GQA, MQA and MLA. Everything refers to the lecture,
    `lectures/03-attention.md`.

    | file | what you write | lecture section |
    | --- | --- | --- |
    | `reference.py` | `attention(q, k, v, causal=False, scale=None)` | 1 |
    | `flash_torch.py` | `flash_attention_torch(...)` and `FlashAttentionTorch` | 3 and 4 |
    | `flash_triton.py` | the Triton kernels and `FlashAttentionTriton` | 5 |
    | `mla.py` | `MultiHeadLatentAttention.forward` / `forward_absorbed`, `cache_bytes_per_token` | 6 |

    **Grading.** This notebook is not graded. `make grade` scores your work (public tests, the
    hidden suite and the performance checks); `pytest assignments/attention` runs the public
    tests alone.

    **How your code runs here.** As in the grader, your files are imported in a separate worker
    process, never in this kernel. `f(*args)` ships the arguments there and brings back the
    result; `f.run(args, measure=("largest",))` also returns what the worker measured, such as
    the largest tensor any operator produced. The worker sets `TRITON_INTERPRET=1`, so Triton
    kernels run on the CPU. A cell calling a function you have not written yet stops with a
    one-line `SubmissionError` naming it.
""")

code("imports", """
    import matplotlib.pyplot as plt
    import torch
    import torch.nn.functional as F
    from IPython import get_ipython

    from grader.notebook import open_module
    from grader.sandbox import Step, SubmissionError


    def show_message_only(shell, etype, value, tb, tb_offset=None):
        shell.showtraceback((etype, value, tb), exception_only=True)


    get_ipython().set_custom_exc((SubmissionError,), show_message_only)
""")

md("setup-md", r"""
    ## 0. Setup

    The worker imports your files once: **re-run the next cell after every edit** to start a
    fresh one.
""")

code("setup", """
    previous = globals().get("attention_module")
    if previous is not None:  # stop the old worker, so that the new one imports your latest files
        previous.close()
    attention_module = open_module("attention")
    print("running your files from", attention_module.directory)

    attention = attention_module.function("attention")
    flash_attention_torch = attention_module.function("flash_attention_torch")
    flash_attention_triton = attention_module.function("flash_attention_triton")
    forward_backward = attention_module.function("forward_backward")
    cache_bytes_per_token = attention_module.function("cache_bytes_per_token")


    def sdpa(q, k, v, causal):
        \"\"\"The reference, with the causal mask aligned to the end of the keys (lecture section 1).\"\"\"
        mask = torch.ones(q.shape[2], k.shape[2], dtype=torch.bool).tril(k.shape[2] - q.shape[2]) if causal else None
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=q.shape[1] != k.shape[1])


    def max_error(a, b):
        return (a.double() - b.double()).abs().max().item()
""")

md("check-md", r"""
    ## 1. Your functions against SDPA (sections 1, 3, 4)

    Grouped-query attention (8 query heads sharing 2 key/value heads) in the decode case: 5 new
    queries at the end of 77 keys, causal. 77 is not a multiple of the 64-key blocks. The last
    line checks the gradients, through the helper `forward_backward` of `reference.py`.
""")

code("check", """
    torch.manual_seed(0)
    q = torch.randn(1, 8, 5, 32, dtype=torch.float64)
    k, v = torch.randn(2, 1, 2, 77, 32, dtype=torch.float64)
    expected = sdpa(q, k, v, causal=True)

    print("attention             max error:", max_error(attention(q, k, v, causal=True), expected))
    out, lse = flash_attention_torch(q, k, v, causal=True)
    print("flash_attention_torch max error:", max_error(out, expected))

    grad_out = torch.randn_like(q)
    _, _, dq, dk, dv = forward_backward("flash_attention_torch", q, k, v, grad_out, True)
    qr, kr, vr = (t.clone().requires_grad_() for t in (q, k, v))
    sdpa(qr, kr, vr, causal=True).backward(grad_out)
    print("gradients             max error:", max(max_error(a, b.grad) for a, b in ((dq, qr), (dk, kr), (dv, vr))))
""")

md("scaling-md", r"""
    ## 2. Memory and time as the sequence grows (sections 2 and 3)

    For each length $N$ we run forward **and** backward of the naive `attention` and of your
    `flash_attention_torch` (one batch, 2 heads, $d = 32$), twice: once under the worker's
    *largest* probe (a `TorchDispatchMode` recording the size of every tensor an operator
    produces), once plainly to time it. The naive version's largest tensor is the score matrix,
    $2N^2$ elements; the tiled one should stay at the size of the inputs, $2Nd$.

    Do not read too much into the times on a CPU: a Python loop over tiles pays an overhead per
    tile that a GPU kernel does not, and a CPU has no small fast memory to exploit in the same
    way. The memory curve is the point; the GPU timings are what `make gpu-check` measures.
""")

code("scaling", """
    lengths = [128, 256, 512, 1024, 2048]
    figures = {"attention": [], "flash_attention_torch": []}
    for n in lengths:
        q, k, v, grad_out = torch.randn(4, 1, 2, n, 32)
        for name, rows in figures.items():
            probed = forward_backward.run((name, q, k, v, grad_out, True), measure=("largest",))
            timed = forward_backward.run((name, q, k, v, grad_out, True), return_result=False)
            rows.append((probed.measurements[0][0]["largest"], timed.seconds))
        print(f"N={n:5d}  largest tensor: naive {figures['attention'][-1][0]:>10,}  "
              f"tiled {figures['flash_attention_torch'][-1][0]:>8,}   "
              f"time: naive {figures['attention'][-1][1] * 1e3:7.1f} ms  "
              f"tiled {figures['flash_attention_torch'][-1][1] * 1e3:7.1f} ms")

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    for name, rows in figures.items():
        left.loglog(lengths, [r[0] for r in rows], "o-", label=name)
        right.loglog(lengths, [r[1] * 1e3 for r in rows], "o-", label=name)
    left.loglog(lengths, [2 * n * n for n in lengths], "--", color="gray", label="2 N^2 (the scores)")
    left.set(xlabel="sequence length N", ylabel="largest tensor (elements)", title="memory, forward + backward")
    right.set(xlabel="sequence length N", ylabel="ms (CPU, one worker thread)", title="time, forward + backward")
    left.legend(fontsize=8)
    right.legend(fontsize=8)
    fig.tight_layout()
""")

md("triton-md", r"""
    ## 3. Your Triton kernels in the interpreter (section 5)

    With `TRITON_INTERPRET=1` every program of the grid runs one after another in NumPy: slow,
    but exact enough to debug indexing and masks (and `print` works inside a kernel). Keep
    shapes tiny here; speed is only meaningful on a GPU.
""")

code("triton", """
    torch.manual_seed(1)
    q = torch.randn(1, 4, 20, 16)
    k, v = torch.randn(2, 1, 2, 33, 16)  # GQA 4/2, 20 queries at the end of 33 keys
    grad_out = torch.randn_like(q)
    out, lse, dq, dk, dv = forward_backward("flash_attention_triton", q, k, v, grad_out, True)
    print("forward max error:", max_error(out, sdpa(q, k, v, causal=True)))
    qr, kr, vr = (t.clone().requires_grad_() for t in (q, k, v))
    sdpa(qr, kr, vr, causal=True).backward(grad_out)
    print("backward max error:", max(max_error(a, b.grad) for a, b in ((dq, qr), (dk, kr), (dv, vr))))
""")

md("kv-md", r"""
    ## 4. What the KV cache holds (section 6)

    Bytes per token for a few real shapes, in bf16, and your MLA's two forwards side by side: the
    absorbed one never forms a key or a value, yet must give the same output.
""")

code("kv", """
    models = {  # (layers, heads, head_dim, kv heads)
        "Llama-2-7B (MHA)": (32, 32, 128, 32),
        "Llama-3-70B (GQA 8)": (80, 64, 128, 8),
        "DeepSeek-V2 shape": (60, 128, 128, 128),
    }
    for model, (layers, heads, head_dim, kv_heads) in models.items():
        row = {
            "mha": cache_bytes_per_token("mha", layers, heads, head_dim),
            "gqa": cache_bytes_per_token("gqa", layers, heads, head_dim, n_kv_heads=kv_heads),
            "mqa": cache_bytes_per_token("mqa", layers, heads, head_dim),
            "mla": cache_bytes_per_token("mla", layers, heads, head_dim, kv_latent_dim=512),
        }
        print(f"{model:22s}", "  ".join(f"{k}: {v / 2**10:8,.0f} KiB" for k, v in row.items()))

    x = torch.randn(1, 9, 64, dtype=torch.float64)
    steps = [
        Step("MultiHeadLatentAttention", (64, 4, 16, 8), save_as="mla", send_back=False),
        Step("mla.double", send_back=False),
        Step("mla.forward", (x,)),
        Step("mla.forward_absorbed", (x,)),
    ]
    naive, absorbed = attention_module.script(steps).steps[0][2:]
    print("MLA: naive vs absorbed max difference:", max_error(naive, absorbed))
""")

code("close", """
    attention_module.close()
""")

# fmt: on

if __name__ == "__main__":
    notebook.main(__doc__)
