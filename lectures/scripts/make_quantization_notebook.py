"""Generate the student notebook of module `quantization`.

    python lectures/scripts/make_quantization_notebook.py [--out PATH]

Writes assignments/quantization/quantization.ipynb (default) with no outputs and fixed cell ids,
so that running the script twice gives the same file. The notebook runs the student's own files
through grader.notebook (a sandboxed worker process, as the grader does); the project's tests
execute it with GRADER_SUBMISSION=solutions.
"""

from __future__ import annotations

from notebook_cells import Notebook

notebook = Notebook("quantization")
md, code = notebook.md, notebook.code

# fmt: off

md("intro", r"""
    # Quantization, hands on: int8, int4, NF4, FP8

    This notebook runs **your own** code from this folder on a weight matrix with outliers, plots
    the error of each granularity and the SQNR of every scheme, counts the bytes your formats take,
    and checks your `QuantLinear`, your Triton kernel (in Triton's interpreter) and your
    distillation loss. Everything refers to the lecture, `lectures/06-quantization.md`.

    | file | functions | lecture section |
    | --- | --- | --- |
    | `integer.py` | `quantize`, `dequantize`, `pack_int4`, `unpack_int4` | 2, 3, 4 |
    | `nf4.py` | `quantize_nf4`, `dequantize_nf4` | 5 |
    | `fp8.py` | `quantize_fp8` | 6 |
    | `linear.py` | `w4a16_matmul`, `QuantLinear` | 7 |
    | `metrics.py` | `sqnr_db`, `distillation_loss` | 8, 9 |

    **Grading.** The notebook is not graded. `make grade` gives your score and
    `pytest assignments/quantization` runs the public tests alone.

    **How your code runs here.** The notebook never imports your files: like the grader, it runs
    them in a worker process. A plain function call ships the arguments there and brings the
    result back. `quantize` returns a `QuantizedTensor`, an object that cannot travel back, so
    we use a *script*: several steps run in the worker in one go, where `save_as="qt"` keeps a
    result there and `Saved("qt")` passes it to a later step (`qt.to_dict` reads its fields).
""")

code("imports", """
    import matplotlib.pyplot as plt
    import numpy as np
    import torch
    import torch.nn.functional as F
    from IPython import get_ipython

    from grader.notebook import open_module
    from grader.sandbox import SubmissionError
    from grader.sandbox.script import Saved, Step


    def show_message_only(shell, etype, value, tb, tb_offset=None):
        shell.showtraceback((etype, value, tb), exception_only=True)


    get_ipython().set_custom_exc((SubmissionError,), show_message_only)
""")

md("setup-md", r"""
    ## 0. Setup

    **Re-run this cell after every edit** to your files: it stops the old worker and starts a
    fresh one that imports your latest code.
""")

code("setup", """
    # Re-running this cell: stop the previous worker, so that the new one imports your latest files.
    previous = globals().get("quantization")
    if previous is not None:
        previous.close()
    quantization = open_module("quantization")
    print("running your files from", quantization.directory)


    def round_trip(x, **options):
        \"\"\"(QuantizedTensor.to_dict(), dequantize(qt)) from your code, in one call.\"\"\"
        steps = [
            Step("quantize", (x,), options, save_as="qt", send_back=False),
            Step("qt.to_dict"),
            Step("dequantize", (Saved("qt"),)),
        ]
        _, fields, x_hat = quantization.script(steps).steps[0]
        return fields, x_hat


    def sqnr(x, x_hat):
        return 10 * torch.log10(x.double().pow(2).sum() / (x.double() - x_hat.double()).pow(2).sum()).item()


    # The grader's weight: 256 x 512 Gaussian (std 0.02) with 8 outliers of 50 standard deviations.
    gen = torch.Generator().manual_seed(0)
    W = torch.randn(256, 512, generator=gen) * 0.02
    outliers = torch.randperm(W.numel(), generator=gen)[:8]
    W.view(-1)[outliers] = torch.sign(torch.randn(8, generator=gen))
""")

md("roundtrip-md", r"""
    ## 1. Scale, zero point and half a step (lecture section 2)

    A small example first: symmetric int8 on 8 values, then asymmetric int4 on values that are
    all positive. In asymmetric mode the range is widened to contain 0, and 0.0 comes back exactly.
""")

code("roundtrip", """
    x = torch.tensor([0.0, 0.31, -1.2, 2.54, 0.02, -0.7, 1.9, 0.0])
    fields, x_hat = round_trip(x, bits=8)
    print("int8 symmetric:  scale", fields["scale"].item(), "| integers", fields["data"].tolist())
    print("  largest error", (x_hat - x).abs().max().item(), "<= half a step", fields["scale"].item() / 2)

    y = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0])
    fields, y_hat = round_trip(y, bits=4, symmetric=False)
    print("int4 asymmetric: scale", round(fields["scale"].item(), 4), "| zero point", fields["zero_point"].item())
    print("  packed bytes", fields["data"].tolist(), "->", y_hat.tolist())
""")

md("hist-md", r"""
    ## 2. Error histograms per granularity (lecture section 3)

    int4 on the weight with outliers: one scale per tensor, per output channel, and per group of
    128 inputs. The histogram shows $\hat x - x$ for every weight (log scale). With one scale per
    tensor the step is huge, and almost every weight rounds to 0: its error is the weight itself.
""")

code("hist", """
    schemes = {
        "per tensor": dict(bits=4),
        "per channel": dict(bits=4, granularity="channel", axis=0),
        "per group of 128": dict(bits=4, granularity="group", group_size=128),
    }
    fig, ax = plt.subplots(figsize=(8, 4))
    bins = np.linspace(-0.08, 0.08, 81)
    for name, options in schemes.items():
        _, W_hat = round_trip(W, **options)
        ax.hist((W_hat - W).flatten().numpy(), bins=bins, histtype="step", linewidth=1.5,
                label=f"{name}: SQNR {sqnr(W, W_hat):.1f} dB")
    ax.set(yscale="log", xlabel="error x_hat - x", ylabel="weights", title="int4 errors on a weight with 8 outliers")
    ax.legend()
    plt.show()
""")

md("sqnr-md", r"""
    ## 3. SQNR of every scheme (lecture sections 3, 5, 6 and 8)

    Your `sqnr_db` against the formula, then the SQNR of each of your formats on the weight with
    outliers. Count the bits per weight beside each: int4 per group of 128 stores 4.25, NF4 with
    blocks of 64 stores 4.5.
""")

code("sqnr", """
    sqnr_db = quantization.function("sqnr_db")
    _, W_hat = round_trip(W, bits=8, granularity="channel")
    print(f"your sqnr_db: {sqnr_db(W, W_hat):.3f} dB, the formula: {sqnr(W, W_hat):.3f} dB")

    results = {}
    for name, options in {
        "int8 tensor": dict(bits=8),
        "int8 channel": dict(bits=8, granularity="channel"),
        "int4 tensor": dict(bits=4),
        "int4 channel": dict(bits=4, granularity="channel"),
        "int4 group 128": dict(bits=4, granularity="group", group_size=128),
    }.items():
        results[name] = sqnr_db(W, round_trip(W, **options)[1])
    codes, absmax = quantization.function("quantize_nf4")(W, 64)
    results["NF4 block 64"] = sqnr_db(W, quantization.function("dequantize_nf4")(codes, absmax, tuple(W.shape), 64))
    for fmt in ("e4m3", "e5m2"):
        data, scale = quantization.function("quantize_fp8")(W, fmt)
        results[f"FP8 {fmt}"] = sqnr_db(W, data.float() * scale)

    fig, ax = plt.subplots(figsize=(7, 3.8))
    ax.barh(list(results), list(results.values()))
    ax.invert_yaxis()
    ax.set(xlabel="SQNR (dB)", title="Your schemes on the weight with outliers")
    ax.grid(True, axis="x", alpha=0.3)
    plt.show()
""")

md("bytes-md", r"""
    ## 4. Bytes (lecture section 4)

    The grader counts the bytes of the tensors you return (`numel * element_size`). Packed int4
    takes half a byte per value; each group adds a float32 scale.
""")

code("bytes", """
    def nbytes(value):
        if isinstance(value, torch.Tensor):
            return value.numel() * value.element_size()
        if isinstance(value, (dict, list, tuple)):
            return sum(nbytes(v) for v in (value.values() if isinstance(value, dict) else value))
        return 0


    print(f"{'scheme':<16} {'bytes':>8} {'bits per weight':>16}")
    print(f"{'bf16':<16} {W.numel() * 2:>8,} {16:>16.2f}")
    for name, options in {
        "int8 channel": dict(bits=8, granularity="channel"),
        "int4 group 128": dict(bits=4, granularity="group", group_size=128),
    }.items():
        fields, _ = round_trip(W, **options)
        print(f"{name:<16} {nbytes(fields):>8,} {8 * nbytes(fields) / W.numel():>16.2f}")
    print(f"{'NF4 block 64':<16} {nbytes((codes, absmax)):>8,} {8 * nbytes((codes, absmax)) / W.numel():>16.2f}")
""")

md("linear-md", r"""
    ## 5. QuantLinear and the W4A16 kernel (lecture section 7)

    `QuantLinear` must equal dequantize-then-matmul. The Triton kernel runs here in Triton's
    interpreter (`TRITON_INTERPRET=1` is set in the worker), which is slow: keep shapes small.
""")

code("linear", """
    weight, bias, x = W[:64, :128], torch.randn(64), torch.randn(4, 128)
    steps = [
        Step("QuantLinear", (weight, bias), {"bits": 4, "group_size": 64}, save_as="layer", send_back=False),
        Step("layer.forward", (x,)),
        Step("layer.stored_tensors"),
        Step("quantize", (weight,), dict(bits=4, granularity="group", group_size=64), save_as="qt", send_back=False),
        Step("dequantize", (Saved("qt"),)),
    ]
    _, out, held, _, weight_hat = quantization.script(steps).steps[0]
    difference = (out - (x @ weight_hat.T + bias)).abs().max().item()
    print("forward vs x @ dequantize(W).T + b: largest difference", difference)
    print("QuantLinear holds", nbytes(held), "bytes; a float32 nn.Linear holds", (weight.numel() + 64) * 4)

    q = torch.randint(-8, 8, (48, 64))
    nibbles = (q & 0xF).reshape(-1, 2)
    packed = (nibbles[:, 0] | nibbles[:, 1] << 4).to(torch.uint8)
    scale = torch.rand(48, 2) * 0.1
    xs = torch.randn(5, 64)
    out = quantization.function("w4a16_matmul")(xs, packed, scale, 32)
    expected = xs @ (q.float() * scale.repeat_interleave(32, dim=1)).T
    print("w4a16_matmul vs dequantize-then-matmul: largest difference", (out - expected).abs().max().item())
""")

md("distill-md", r"""
    ## 6. Distillation loss (lecture section 9)

    Your `distillation_loss` against `F.kl_div` and `F.cross_entropy`, then the soft term
    alone as the temperature grows: with the $T^2$ factor it stays on the same scale.
""")

code("distill", """
    distillation_loss = quantization.function("distillation_loss")
    gen = torch.Generator().manual_seed(1)
    student, teacher = torch.randn(32, 10, generator=gen) * 3, torch.randn(32, 10, generator=gen) * 3
    labels = torch.randint(0, 10, (32,), generator=gen)
    T, alpha = 2.0, 0.5
    log_p_student, log_p_teacher = F.log_softmax(student / T, -1), F.log_softmax(teacher / T, -1)
    kl = F.kl_div(log_p_student, log_p_teacher, log_target=True, reduction="batchmean")
    expected = alpha * T**2 * kl + (1 - alpha) * F.cross_entropy(student, labels)
    print(f"yours {distillation_loss(student, teacher, labels, T, alpha).item():.5f}, expected {expected.item():.5f}")

    temperatures = [0.5, 1, 2, 4, 8, 16]
    soft = [distillation_loss(student, teacher, labels, t, 1.0).item() for t in temperatures]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(temperatures, soft, "o-")
    ax.set(xscale="log", xlabel="temperature T", ylabel="alpha = 1: T^2 KL", title="The soft term across temperatures")
    ax.grid(True, alpha=0.3)
    plt.show()
""")

code("close", """
    quantization.close()
""")

md("next", r"""
    **Next steps.** `pytest assignments/quantization`, then `make grade`. Things to try: the
    int8 per-tensor SQNR on `W` against per channel; how many outliers it takes before per
    channel int4 drops below 10 dB; NF4 with blocks of 32 and 256.
""")

# fmt: on

if __name__ == "__main__":
    notebook.main(__doc__)
