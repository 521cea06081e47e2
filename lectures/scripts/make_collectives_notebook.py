"""Generate the student notebook of module `collectives`.

    python lectures/scripts/make_collectives_notebook.py [--out PATH]

Writes assignments/collectives/collectives.ipynb (default) with no outputs and fixed cell ids, so
that running the script twice gives the same file. The notebook runs the student's own files
through grader.notebook (sandboxed worker processes, as the grader does); the project's tests
execute it with GRADER_SUBMISSION=solutions.
"""

from __future__ import annotations

from notebook_cells import Notebook

notebook = Notebook("collectives")
md, code = notebook.md, notebook.code

# fmt: off

# ---------------------------------------------------------------------------------------------
# Introduction and setup
# ---------------------------------------------------------------------------------------------

md("intro", r"""
    # Collectives, hands on: ring allreduce and the α-β model

    In this notebook you run **your own** code from this folder on a small world of 4 processes,
    check it against `torch.distributed`, count the bytes it puts on the wire, time it against
    gloo's `all_reduce`, and then use your cost model to reason about a thousand GPUs.
    Everything refers to the lecture, `lectures/01-collectives.md`.

    | file | function | lecture section |
    | --- | --- | --- |
    | `ring.py` | `ring_reduce_scatter(tensor, group=None)` | 2. Ring allreduce |
    | `ring.py` | `ring_allgather(shard, group=None)` | 2. Ring allreduce |
    | `ring.py` | `ring_allreduce(tensor, group=None)` | 2, and 3 for the bytes |
    | `cost_model.py` | `allreduce_time(algorithm, world_size, nbytes, alpha, beta)` | 4. α-β model |

    **Grading.** This notebook is not graded; it is a place to look at what your code does.
    Your score comes from `make grade` at the root of the repository, and
    `pytest assignments/collectives` runs the public tests alone, which is quicker while you
    debug. The grader checks results on worlds of 2, 3 and 4 ranks over several shapes and
    dtypes, the bytes each rank sends, and the time of `ring_allreduce` against gloo's own
    `all_reduce` (lecture section 7 lists everything).

    **How your code runs here.** The notebook never imports `ring.py` itself. Exactly like the
    grader, it starts worker processes, one per rank, joined by a gloo process group on this
    machine. A call ships one tuple of arguments to each rank, runs your function on all ranks at
    once, and brings back what every rank returned, together with what the grader measured from
    the outside: the wall time and the bytes each rank wrote to its sockets. When a call
    succeeds, whatever your code printed appears below the cell, prefixed with `[rank r]`.

    **Order.** Sections 1 and 2 need `ring.py`, section 3 needs `ring_allreduce` and
    `allreduce_time`, section 4 only `allreduce_time`. A cell that calls a function you have not
    written yet stops with a one-line `SubmissionError` that names it; run the cells one by one
    (Shift+Enter) to skip ahead.
""")

code("imports", """
    import matplotlib.pyplot as plt
    import numpy as np
    import torch
    from IPython import get_ipython
    from matplotlib.ticker import LogLocator, NullFormatter, ScalarFormatter

    from grader.notebook import open_library, open_module
    from grader.sandbox import SubmissionError


    # A failure inside your code comes back as a SubmissionError whose message is written for you:
    # what to implement, or your own traceback from the worker. Show that message without the
    # grader's frames around it (%tb still shows the full traceback if you want it).
    def show_message_only(shell, etype, value, tb, tb_offset=None):
        shell.showtraceback((etype, value, tb), exception_only=True)


    get_ipython().set_custom_exc((SubmissionError,), show_message_only)
""")

md("setup-md", r"""
    ## 0. Setup

    `open_module("collectives")` runs the files of this folder (`ring.py`, `cost_model.py`);
    `open_library()` runs the real `torch.distributed` in the same kind of workers, as a
    reference. The workers import your files **once**, so **re-run the next cell after every edit
    to `ring.py` or `cost_model.py`**: it stops the old workers and starts fresh ones. (It also
    forgets a function that hung; see section 5.)
""")

code("setup", """
    # Re-running this cell: stop the previous workers, so that the new ones import your latest files.
    for previous in (globals().get("collectives"), globals().get("library")):
        if previous is not None:
            previous.close()

    collectives = open_module("collectives")  # your files
    library = open_library()  # gloo's own collectives, for comparison
    print("running your files from", collectives.directory)

    ring_allreduce = collectives.function("ring_allreduce")
    ring_reduce_scatter = collectives.function("ring_reduce_scatter")
    ring_allgather = collectives.function("ring_allgather")
    allreduce_time = collectives.function("allreduce_time")

    P = 4  # ranks in our local world
""")

# ---------------------------------------------------------------------------------------------
# 1. Correctness
# ---------------------------------------------------------------------------------------------

md("allreduce-md", r"""
    ## 1. Your ring on 4 ranks (lecture section 2)

    `f.spmd(world_size, args_per_rank)` calls `f` on every rank at the same time, rank `r` with
    the tuple `args_per_rank[r]`. In the result, `outputs[r]` is what rank `r` returned, and with
    `return_args=True`, `args[r][0]` is rank `r`'s first argument *after* the call, which is how
    we can see an in-place update. Arguments travel to the workers as copies: the tensors in the
    notebook are never modified, and the returned tensor and the argument come back as two
    separate copies, so we compare their values.

    The inputs have $7 \times 143 = 1001$ elements, not a multiple of 4, so the chunks are uneven
    (251, 250, 250, 250). Floating-point sums depend on the order of the additions, so the result
    is compared with a tolerance; but every rank must hold the *same bits*, because the
    all-gather copies finished chunks instead of adding them again.
""")

code("allreduce", """
    torch.manual_seed(0)  # the same inputs on every run
    inputs = [torch.randn(7, 143) for _ in range(P)]
    expected = torch.stack(inputs).sum(dim=0)

    result = ring_allreduce.spmd(P, [(x,) for x in inputs], return_args=True)

    for r in range(P):
        out, after = result.outputs[r], result.args[r][0]
        torch.testing.assert_close(out, expected)  # equal up to rounding
        assert torch.equal(after, out), f"rank {r}: the caller's tensor was not updated in place"
        assert torch.equal(out, result.outputs[0]), f"rank {r} does not hold the same bits as rank 0"
    error = max((out - expected).abs().max().item() for out in result.outputs)
    print(f"every rank holds the sum, in place, bit for bit the same; largest error {error:.1e}")
    print("bytes sent per rank:", result.bytes_sent, "(section 2 explains them)")
""")

md("order-md", r"""
    **The order of additions is part of the result.** gloo adds in its own order, so in float32
    its sum and yours typically differ in the last bits. Integer addition is associative, so with
    int64 every order gives the same answer exactly.
""")

code("order", """
    def compare_with_gloo(tensors):
        mine = ring_allreduce.spmd(P, [(x,) for x in tensors]).outputs[0]
        gloo = library.spmd("grader.library:all_reduce", P, [(x,) for x in tensors]).outputs[0]
        return torch.equal(mine, gloo), (mine - gloo).abs().max().item()


    same, difference = compare_with_gloo(inputs)
    print(f"float32: same bits as gloo: {same}, largest difference {difference:.1e}")
    same, difference = compare_with_gloo([torch.randint(-1000, 1000, (1001,)) for _ in range(P)])
    print(f"int64:   same bits as gloo: {same}, largest difference {difference}")
""")

md("noncontig-md", r"""
    **Non-contiguous inputs.** A transposed view is not contiguous: `flatten()` of it is a *copy*,
    so in-place updates of its chunks would never reach the caller's tensor, and `send`/`recv`
    refuse it outright. Your `ring_allreduce` must still update it (lecture section 2, "The
    course's functions").
""")

code("noncontig", """
    views = [x.t() for x in inputs]  # shape (143, 7), strides (1, 143)
    result = ring_allreduce.spmd(P, [(v,) for v in views], return_args=True)

    after = result.args[0][0]
    print("contiguous:", views[0].is_contiguous(), "| shape after the call:", tuple(after.shape))
    torch.testing.assert_close(after, expected.t())
    print("the transposed tensors were summed in place")
""")

md("reduce-scatter-md", r"""
    **Reduce-scatter.** Rank $r$ returns chunk $r$ of `sum.flatten().tensor_split(p)`, as a new
    1-D tensor, and leaves its input alone.
""")

code("reduce-scatter", """
    result = ring_reduce_scatter.spmd(P, [(x,) for x in inputs], return_args=True)

    expected_chunks = expected.flatten().tensor_split(P)
    for r in range(P):
        torch.testing.assert_close(result.outputs[r], expected_chunks[r])
        assert torch.equal(result.args[r][0], inputs[r]), f"rank {r}: the input was modified"
    print("chunk lengths per rank:", [len(out) for out in result.outputs], "(inputs unchanged)")
""")

md("allgather-md", r"""
    **All-gather with uneven shards.** Shards cut by `tensor_split` differ in length by one, and
    some are empty when there are fewer elements than ranks. No rank knows the others' lengths in
    advance, yet every receive needs its size: circulate the lengths first.
""")

code("allgather", """
    for n in (10, 3):  # 10 elements: shards of 3, 3, 2, 2; 3 elements: 1, 1, 1, 0
        full = torch.arange(1, n + 1, dtype=torch.float32)
        shards = full.tensor_split(P)
        result = ring_allgather.spmd(P, [(s,) for s in shards])
        for r in range(P):
            assert torch.equal(result.outputs[r], full), f"rank {r} got {result.outputs[r]}"
        print(f"shards of {[len(s) for s in shards]} -> every rank has {result.outputs[0].tolist()}")
""")

# ---------------------------------------------------------------------------------------------
# 2. Bytes
# ---------------------------------------------------------------------------------------------

md("bytes-md", r"""
    ## 2. Bytes on the wire (lecture section 3)

    No allreduce can make its busiest rank send fewer than $\frac{2(p-1)}{p} N$ bytes, and the
    ring reaches that bound. The grader checks it from its own process: before and after your
    call it reads each worker's `wchar` counter in `/proc/<pid>/io`, the bytes the process passed
    to `write`-type system calls, which is how gloo sends over TCP. `result.bytes_sent[r]` is that
    difference, less what the rank printed and its reply to the grader.

    One tensor of $n = 2^{20}$ float32 elements, $N = 4$ MiB, on 4 ranks:
""")

code("bytes", """
    n = 2**20
    N = 4 * n  # bytes per rank (float32)
    data = [(torch.randn(n),) for _ in range(P)]

    # return_result=False: the sum is not shipped back to the notebook; we only want the counts.
    ring = ring_allreduce.spmd(P, data, return_result=False)
    gloo = library.spmd("grader.library:all_reduce", P, data, return_result=False)

    bound = 2 * (P - 1) / P * N
    print(f"lower bound 2(p-1)/p * N = {bound:,.0f} bytes\\n")
    print(f"{'rank':>4} {'your ring':>12} {'excess':>7} {'gloo':>12} {'excess':>7}")
    for r in range(P):
        mine, theirs = ring.bytes_sent[r], gloo.bytes_sent[r]
        print(f"{r:>4} {mine:>12,} {mine - bound:>7,.0f} {theirs:>12,} {theirs - bound:>7,.0f}")

    messages = 2 * (P - 1)  # the ring's messages per rank: p-1 in each phase
    print(f"\\nyour excess per message: {(ring.bytes_sent[0] - bound) / messages:.0f} bytes")
""")

md("bytes-discussion", r"""
    Both sit less than 2 KB above the bound, out of 6 MiB. The excess is not data: gloo puts a
    small header in front of every message on its TCP connection, on the order of a hundred
    bytes (the last line divides your excess by the ring's $2(p-1) = 6$ messages per rank).
    gloo's own `all_reduce` shows about twice the excess: the same headers on more, smaller
    messages. The grader allows this slack, plus up to an element or two for uneven chunks.
    Sending whole tensors, float32 copies of bfloat16 data or an extra round would instead add
    megabytes here.
""")

# ---------------------------------------------------------------------------------------------
# 3. Time
# ---------------------------------------------------------------------------------------------

md("time-md", r"""
    ## 3. Time against message size, and α and β of this machine (lecture sections 4 and 6)

    `result.seconds` is measured by the grader, from the moment it tells all ranks to start to
    the last rank's reply. Below we time 7 calls per size, for your ring and for gloo in turn,
    with `return_result=False` so that shipping the result back is not timed, and keep the
    fastest: other programs on the machine can only ever *add* time, so the fastest call is the
    best estimate of what the machine can do. (The grader's timing check instead compares the
    *medians* of your ring and gloo, run in turn so that both see the same load.) As in
    nccl-tests, we also report the **bus bandwidth** $\frac{2(p-1)}{p} N / t$: the rate at which
    each rank's link moves an allreduce's unavoidable bytes, comparable across $p$.

    Keep in mind what the "network" is here: 4 processes sharing this machine's CPU cores, talking
    over loopback TCP. A "link" is a memory copy through the kernel, and the fixed cost of a call
    includes Python, gloo and the grader's own pipes to the workers. The numbers are this
    machine's, not a GPU cluster's; the *shape* of the curve is the point.
""")

code("time-measure", """
    def measure(args, repeats=7):
        \"\"\"Fastest seconds of your ring and of gloo on the same inputs, over `repeats` calls each.

        The two take turns, so that both see the same background load. The first round is a
        warm-up and is not counted.
        \"\"\"
        ring, gloo = [], []
        for _ in range(repeats + 1):
            ring.append(ring_allreduce.spmd(P, args, return_result=False).seconds)
            gloo.append(library.spmd("grader.library:all_reduce", P, args, return_result=False).seconds)
        return min(ring[1:]), min(gloo[1:])


    def bus_bandwidth(nbytes, seconds):
        return 2 * (P - 1) / P * np.asarray(nbytes) / np.asarray(seconds)


    elements = [4**k for k in range(5, 11)]  # 1 Ki .. 1 Mi float32 elements
    nbytes = np.array([4.0 * e for e in elements])  # 4 KiB .. 4 MiB
    ring_s, gloo_s = [], []
    for e in elements:
        ring_fastest, gloo_fastest = measure([(torch.randn(e),) for _ in range(P)])
        ring_s.append(ring_fastest)
        gloo_s.append(gloo_fastest)

    print(f"{'bytes':>9} {'ring ms':>8} {'gloo ms':>8} {'ring GB/s':>10} {'gloo GB/s':>10}  (bus bandwidth)")
    for b, tr, tg in zip(nbytes, ring_s, gloo_s):
        ring_bw, gloo_bw = bus_bandwidth(b, tr) / 1e9, bus_bandwidth(b, tg) / 1e9
        print(f"{b:>9,.0f} {tr * 1e3:>8.2f} {tg * 1e3:>8.2f} {ring_bw:>10.3f} {gloo_bw:>10.3f}")
""")

md("fit-md", r"""
    **Fitting α and β.** The ring's model is $t = 2(p-1)\,\alpha + \frac{2(p-1)}{p} N \beta$:
    linear in the two unknowns, so a least-squares fit over the six sizes gives both. Dividing
    each equation by its measured time makes the fit minimise *relative* errors, so that the
    4 KiB point counts as much as the 4 MiB one. The fit uses the lecture's formula; the cell
    then checks that **your** `allreduce_time("ring", ...)` gives the same curve, and the plot
    draws your function's prediction.
""")

code("fit", """
    assert len(ring_s) == len(nbytes), "run the measurement cell above first (it needs ring_allreduce)"
    t = np.array(ring_s)
    A = np.column_stack([np.full_like(nbytes, 2 * (P - 1)), 2 * (P - 1) / P * nbytes])
    coef, *_ = np.linalg.lstsq(A / t[:, None], np.ones_like(t), rcond=None)
    # Noise can push a coefficient slightly below zero, and allreduce_time rejects negative values.
    alpha, beta = (float(c) for c in np.maximum(coef, 1e-15))
    print(f"alpha ≈ {alpha * 1e6:.0f} µs per message, 1/beta ≈ {1 / beta / 1e9:.2f} GB/s")

    # float(b): your function gets plain Python numbers, not numpy scalars.
    predicted = np.array([allreduce_time("ring", P, float(b), alpha, beta) for b in nbytes])
    agrees = np.allclose(predicted, A @ [alpha, beta], rtol=1e-9)
    print("your allreduce_time('ring', ...) agrees with the lecture's formula:", agrees)
    print(f"your ring took {ring_s[-1] / gloo_s[-1]:.2f}x gloo's time at {nbytes[-1] / 2**20:.0f} MiB")
""")

code("plot-time", """
    fig, (ax_time, ax_bw) = plt.subplots(1, 2, figsize=(12, 4.2))
    panels = [
        (ax_time, lambda s: np.asarray(s) * 1e3, "time per allreduce (ms)"),
        (ax_bw, lambda s: bus_bandwidth(nbytes, s) / 1e9, "bus bandwidth 2(p-1)/p · N / t (GB/s)"),
    ]
    for ax, scale, ylabel in panels:
        ax.plot(nbytes, scale(ring_s), "o-", label="your ring_allreduce")
        ax.plot(nbytes, scale(gloo_s), "s-", label="gloo all_reduce")
        ax.plot(nbytes, scale(predicted), "k--", label="α-β fit (your allreduce_time)")
        ax.set(xscale="log", yscale="log", xlabel="message size N per rank (bytes)", ylabel=ylabel)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize="small")
    # The times span about one decade: label ticks 1, 2, 3, 5, 10, ... with plain numbers.
    ax_time.yaxis.set_major_locator(LogLocator(subs=(1, 2, 3, 5)))
    ax_time.yaxis.set_major_formatter(ScalarFormatter())
    ax_time.yaxis.set_minor_formatter(NullFormatter())
    fig.suptitle(f"Allreduce on {P} local ranks: α ≈ {alpha * 1e6:.0f} µs, 1/β ≈ {1 / beta / 1e9:.2f} GB/s")
    plt.show()
""")

md("time-discussion", r"""
    **Reading the plot.** Small messages are *latency-bound*: the time hardly changes with $N$,
    since the $2(p-1)\alpha$ term dominates, and the bus bandwidth grows in proportion to $N$.
    Large messages are *bandwidth-bound*: the time grows linearly and the bus bandwidth levels off
    towards $1/\beta$. The two terms are equal at $N = p\,\alpha/\beta$. If the points jump
    around, other programs are using the CPU; run the measurement cell again.

    Things to try:

    * Where is the crossover $N = p\,\alpha/\beta$ for the values you fitted? With NCCL on
      NVLink, $\alpha$ is a few µs and $1/\beta$ hundreds of GB/s: where is it there?
    * The grader's timing check runs 16 MiB on 4 ranks and compares your median time with gloo's
      in the same run (lecture section 7). How close to gloo are you at 4 MiB? Extra copies,
      `torch.cat` at every step, or one blocking message at a time are the usual culprits.
""")

# ---------------------------------------------------------------------------------------------
# 4. Cost model at scale
# ---------------------------------------------------------------------------------------------

md("model-md", r"""
    ## 4. Your cost model at scale (lecture section 4)

    `allreduce_time` is a plain function, so `allreduce_time(...)` runs it in a single worker and
    returns its value. First, the lecture's worked example with InfiniBand-like links
    ($\alpha = 5\ \mu s$, $1/\beta = 50$ GB/s): your numbers should match the lecture's table to
    the last digit shown.
""")

code("model-table", """
    ALPHA_IB, BETA_IB = 5e-6, 1 / 50e9  # illustrative, lecture section 6
    ALGORITHMS = ("ring", "recursive_doubling", "rabenseifner")
    KiB, MiB = 2**10, 2**20

    print(f"{'':>20}" + "".join(f"{name:>20}" for name in ALGORITHMS))
    for p, size in [(1024, 64 * KiB), (1024, 256 * MiB), (6, 64 * KiB), (6, 256 * MiB)]:
        micros = [allreduce_time(name, p, size, ALPHA_IB, BETA_IB) * 1e6 for name in ALGORITHMS]
        label = f"p = {p}, n = " + (f"{size // MiB} MiB" if size >= MiB else f"{size // KiB} KiB")
        print(f"{label:>20}" + "".join(f"{m:>17.1f} µs" for m in micros))
""")

md("model-sweep-md", r"""
    **1024 ranks, every message size.** Small messages are latency-bound: what counts is the
    number of steps, $\log_2 p$ for recursive doubling, $2\log_2 p$ for Rabenseifner and $2(p-1)$
    for the ring. Large messages are bandwidth-bound: the ring and Rabenseifner both reach the
    lower bound $\frac{2(p-1)}{p} n\beta$, while recursive doubling sends the whole vector at every
    step. The cell finds, by bisection on your function, the size at which Rabenseifner takes
    over from recursive doubling, and compares it with the lecture's formula
    $n^* = \frac{\log_2 p}{\log_2 p - 2(p-1)/p} \cdot \frac{\alpha}{\beta}$.
""")

code("model-sweep", """
    def crossover(p, low=1.0, high=2.0**40):
        \"\"\"The size, to within a byte, above which Rabenseifner beats recursive doubling.\"\"\"
        while high - low > 1:
            middle = (low + high) / 2
            rabenseifner = allreduce_time("rabenseifner", p, middle, ALPHA_IB, BETA_IB)
            doubling = allreduce_time("recursive_doubling", p, middle, ALPHA_IB, BETA_IB)
            low, high = (low, middle) if rabenseifner < doubling else (middle, high)
        return high


    p = 1024
    formula = np.log2(p) / (np.log2(p) - 2 * (p - 1) / p) * ALPHA_IB / BETA_IB
    found = crossover(p)
    print(f"crossover: {found:,.0f} bytes with your function, {formula:,.0f} bytes from the formula")

    sizes = 2.0 ** np.arange(8, 33)  # 256 B .. 4 GiB
    times = {}
    for name in ALGORITHMS:
        times[name] = np.array([allreduce_time(name, p, float(s), ALPHA_IB, BETA_IB) for s in sizes])

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name in ALGORITHMS:
        ax.plot(sizes, times[name] * 1e6, label=name)
    ax.axvline(found, color="gray", linestyle=":", label="crossover (recursive doubling = Rabenseifner)")
    ax.set(xscale="log", yscale="log", xlabel="message size n per rank (bytes)", ylabel="predicted time (µs)")
    ax.set_title(f"Your allreduce_time, p = {p}, α = 5 µs, 1/β = 50 GB/s")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    plt.show()
""")

md("model-ranks-md", r"""
    **Growing the world.** Now fix the message, 64 MiB of gradients, and vary $p$. The ring's
    latency term grows linearly with $p$, while its bandwidth term soon levels off at
    $2neta$. Recursive doubling and Rabenseifner are at their best on powers of two: one rank
    more, and the extra rank must be folded in and out, two full-vector messages which at this
    size cost about as much as all of Rabenseifner's other steps together.
""")

code("model-ranks", """
    ranks = np.arange(2, 129)
    size = 64 * MiB
    times = {}
    for name in ALGORITHMS:
        times[name] = np.array([allreduce_time(name, int(q), size, ALPHA_IB, BETA_IB) for q in ranks])

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name in ALGORITHMS:
        ax.plot(ranks, times[name] * 1e3, label=name)
    ax.set(xlabel="ranks p", ylabel="predicted time (ms)", ylim=(0, None))
    ax.set_title("Your allreduce_time, n = 64 MiB, α = 5 µs, 1/β = 50 GB/s")
    ax.grid(True, alpha=0.3)
    ax.legend()
    plt.show()
""")

md("model-questions", r"""
    Things to try with your model:

    * At $p = 1024$, how large must a message be before the ring's time is within 10% of
      Rabenseifner's? What does that say about running a flat ring across 1000 GPUs?
    * Redo the sweep with NVLink-like values ($\alpha = 2\ \mu s$, $1/\beta = 400$ GB/s) and
      $p = 8$. Which algorithm would you pick for a 25 MiB gradient bucket?
    * Lecture section 6, hierarchical allreduce: with $G = 8$ GPUs per node and $M = 128$ nodes,
      add the three phases from your function (ring inside the node on $N$, ring across nodes on
      $N/G$, with the right $\alpha$ and $\beta$ for each) and compare with one flat ring of 1024
      ranks at InfiniBand speed.
""")

# ---------------------------------------------------------------------------------------------
# 5. Hangs
# ---------------------------------------------------------------------------------------------

md("deadlock", r"""
    ## 5. What a deadlock looks like (lecture sections 2 and 5)

    If every rank starts a step with a blocking `dist.send` to its right neighbour, every rank
    waits for a receive that its neighbour never posts, because the neighbour is waiting in its
    own `send`. Nothing crashes; the call just never returns. The grader gives each call a time
    limit (30 s for this module, from `course.toml`). When it runs out, it asks every rank for
    its Python stack (with `faulthandler`), kills the workers and reports where each rank was,
    pointing at *your* line:

    ```text
    SubmissionError: ring_allreduce did not finish within 30 s; where each rank was:
      rank 0: ring.py:41 in ring_allreduce(): dist.send(chunks[send_index], right)  [waiting in ...]
      rank 1: ring.py:41 in ring_allreduce(): dist.send(chunks[send_index], right)  [waiting in ...]
      rank 2: ring.py:41 in ring_allreduce(): dist.send(chunks[send_index], right)  [waiting in ...]
      rank 3: ring.py:41 in ring_allreduce(): dist.send(chunks[send_index], right)  [waiting in ...]
    ```

    How to read it:

    * **Every rank on the same `send` (or the same `recv`)**: the cycle of waits of section 2.
      Post both operations before waiting on either, with `dist.batch_isend_irecv` or
      `isend`/`irecv` followed by `wait()`.
    * **One rank somewhere else**: divergent control flow. That rank skipped a step, returned
      early, or computed a different number of steps or a different message size than its
      neighbours. A receive posted with the wrong size also waits forever.
    * **A rank that raised an exception**: the report shows its traceback first, then the ranks
      left waiting on it.

    Practical notes for this notebook:

    * `open_module("collectives", time_limit_s=5)` in the setup cell makes a hang fail after 5 s
      instead of 30 (do not go lower than the calls need, for example for 4 MiB).
    * After a hang, that function is not run again at the same world size; the next call says
      `not run: ring_allreduce hung at world size 4 earlier in this run (see the first
      failure)`. Fix the code, then re-run the setup cell.
    * `print(..., flush=True)` inside your functions: after a call that succeeds, each line comes
      back prefixed with `[rank r]`, and a hang report ends with the last lines each rank printed.
      (Without `flush=True` the lines of a rank that hangs may still sit in its buffer; output
      of a call that raised an exception is not shown, only the traceback.)
""")

# ---------------------------------------------------------------------------------------------
# 6. Closing
# ---------------------------------------------------------------------------------------------

md("close-md", r"""
    ## 6. Clean up

    Stop the worker processes (re-running the setup cell starts new ones).
""")

code("close", """
    collectives.close()
    library.close()
""")

md("next", r"""
    **Next steps.**

    * `pytest assignments/collectives` for the public tests, then `make grade` for your score.
      The grader also tries 2 and 3 ranks, empty tensors and tensors smaller than $p$, bfloat16,
      float64 and int64: try a few of those here first, by changing `P` or the inputs of
      section 1.
    * Read lecture section 6 (NVLink, InfiniBand, hierarchical allreduce, double binary trees)
      with your plots of section 4 at hand.
""")


# fmt: on

if __name__ == "__main__":
    notebook.main(__doc__)
