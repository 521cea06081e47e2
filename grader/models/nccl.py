"""Given code of module cluster (read it): what NCCL itself does for a large all-reduce on DGX
H100 nodes, as a closed-form model, so that the course can set nccl-tests' published figures
beside a prediction. Trusted: no student writes it, and the simulator (cluster.py) is unchanged.

    from grader.models.cluster import Cluster
    from grader.models.nccl import nccl_all_reduce_busbw
    nccl_all_reduce_busbw(Cluster.h100_cluster(nodes=2), 8 << 30, "ring")     # 383.6 GB/s

Why a second model. The simulator replays the course's schedules, which put a barrier between
steps and, across nodes, cross through one NIC per ring. NCCL does three things they do not:

1. **Channels, one ring per NIC, pipelined.** NCCL splits the buffer over several channels, and
   each channel's ring leaves a node through a different NIC, so every NIC of a node carries a
   share. Each channel streams its part in small slices: while one slice crosses NVLink the
   previous one crosses the network, so the slowest resource sets the pace and the times do not
   add up (no barrier between "phases").
2. **A protocol.** Large buffers use the Simple protocol: data and a flag per chunk through
   buffers in GPU memory, copied by the GPU's SMs. It reaches a fraction of the line rate.
3. **NVLink SHARP (NVLS).** The third-generation NVSwitch of an HGX H100 board can add: a GPU
   reads the sum of one slice of all GPUs' buffers in one load (multimem.ld_reduce) and stores
   the result once to all GPUs (multimem.st), so no GPU passes partial sums to a neighbour.
   Across nodes NCCL joins NVLS with a tree over the rails ("NVLSTree").

Notation (all from the Cluster): g = gpus_per_node, n = nodes, P = g n GPUs, k = nics_per_node,
B_nv = nvlink_GBps per direction, B_nic = nic_Gbps / 8 per direction, N = bytes per GPU.
nccl-tests' bus bandwidth (its doc/PERFORMANCE.md; lecture 13, section 6) is
busbw = N / t * 2(P-1)/P, whatever algorithm ran.

**Ring** (NCCL_ALGO=RING). k channels, one per NIC, each a ring through all P GPUs that visits
the GPUs of one node in a row. Per node, a channel's ring makes g hops out of that node's GPUs:
g - 1 over NVLink and one over the network (n > 1), or all g over NVLink (n = 1). Every hop of
an all-reduce ring carries 2(P-1)/P of the channel's N/k bytes. Summed over the channels and
spread over the node's g GPUs and k NICs:

    NVLink bytes per GPU = 2(P-1)/P * N * (g-1)/g    (n > 1; the whole 2(P-1)/P * N when n = 1)
    network bytes per NIC = 2(P-1)/P * N / k          (n > 1)

Pipelined, t = latency + max(NVLink bytes / (eta_nv B_nv), network bytes / (eta_net B_nic)),
so for large N

    busbw = min(eta_nv B_nv * g/(g-1), k eta_net B_nic)    (n > 1)
    busbw = eta_nv B_nv                                   (n = 1)

On DGX H100: min(370 * 8/7, 8 * 48) = 384 GB/s across nodes, 370 GB/s inside one.

**NVLS** (NCCL_ALGO=NVLS on one node, NVLSTree across nodes). Inside a node each GPU owns 1/g of
the buffer: the switch reads that slice from all g GPUs and returns the sum (each GPU's link
sends its whole N out over the g reads, and takes N/g in), then the GPU stores the sum once and
the switch writes it to all g GPUs (N/g out, N in). Each NVLink direction carries N (g+1)/g: the
count an NCCL maintainer gives, algbw = link bandwidth * n/(n+1) (nccl-tests pull request #239).
Across nodes the g GPUs of a node each own a slice and all-reduce it with the same local rank
of the other nodes over their own NIC (one tree per rail; NCCL's double binary tree): on 2
nodes each NIC sends its N/g once and receives the other node's N/g; on more nodes an inner
node of one tree hears two children and sends to two, about 2 N/g each way (NCCL's own tuning
model halves NVLSTree's network bandwidth beyond two nodes for the same reason). So

    NVLink time = N (g+1)/g / (eta_nvls B_nv)
    network time = N / g * c / (eta_net B_nic * k/g)     c = 1 (n = 2), 2 (n > 2)

and t = latency + max of the two. On one DGX H100: algbw = 309.4 * 8/9 = 275 GB/s, busbw
= 275 * 14/8 = 481 GB/s, above the 450 GB/s line rate: busbw no longer counts bytes on a wire.

**Default.** NCCL's tuner times every algorithm with its own model and runs the fastest; this
model does the same with the times above ("nvls" or "ring", a tie going to "nvls"). At 8 GiB:
NVLS on one node and on two (NVLSTree), the ring on four and more.

**Constants** (the only numbers not in the Cluster):

- eta_nv = 370/450: the Simple protocol over NVLink. An NCCL maintainer (Sylvain Jeaugey,
  nccl-tests issue #212): "450GB/s is the line rate. With the protocol overhead (~20%) NCCL can
  get an effective NVLink bandwidth of 370GB/s". Users measure 365-370 GB/s with
  NCCL_ALGO=RING on 8 H100 (NCCL issue #1455).
- eta_net = 48/50: the Simple protocol through a ConnectX-7 at 400 Gb/s (50 GB/s). NCCL
  maintainers: "You should achieve around 48GB/s from each CX7 NIC at 400Gbps" (nccl-tests
  #319), "46-48GB/s per NIC" (#290), and 24 GB/s per 200 Gb/s NIC (#119).
- eta_nvls = 275 * 9/8 / 450 = 0.6875: the per-direction NVLink rate NVLS reaches, from the
  maintainer's expected algbw of about 275 GB/s on 8 H100 (#212) and the traffic count above.
  This one constant is fitted to a published figure (the single-node NVLS estimate); the test
  checks it against the users' measurements of the same setting and everything else. A user's
  5 to 8 GPU measurements (algbw 258 to 273 GB/s, NCCL issue #1455) fit the same rate within
  1 %, which says the n/(n+1) count, not a fixed cap, shapes NVLS.

**Latency** (small buffers), from the Cluster's fields only: a ring of 2(P-1) steps, 2n of them
through the network (alpha_net = cluster.latency between the first and the last node on rail 0:
nic_latency_s plus the switches crossed) and the rest over NVLink (nvlink_latency_s); NVLS two
NVLink latencies plus, across nodes, 2 ceil(log2 n) network latencies (up and down the tree).
These are wire latencies only: no kernel launch, no flag polling through memory, no LL or LL128
protocol (NCCL's choice for small buffers), so the model's small-message times are a floor,
several times below what nccl-tests prints (lecture 13, section 6, compares).

What the model leaves out: the LL and LL128 protocols, the number of channels NCCL really opens
(it uses more channels than NICs; the bound is the same), PCIe between GPU and NIC, adaptive
routing and congestion in the fabric, and the CollNet (InfiniBand SHARP) algorithms.
"""

from __future__ import annotations

import math

from grader.models.cluster import Cluster

ALGORITHMS = ("ring", "nvls", "default")

# The Simple protocol's share of the line rate (module docstring, "Constants", for the sources).
NVLINK_EFFICIENCY = 370.0 / 450.0  # nccl-tests #212 (maintainer): 370 GB/s of 450 with rings
NET_EFFICIENCY = 48.0 / 50.0  # nccl-tests #319 and #290 (maintainers): ~48 GB/s per 400 Gb/s NIC
NVLS_EFFICIENCY = 275.0 * 9 / 8 / 450.0  # nccl-tests #212: algbw ~275 GB/s on 8 GPUs, N(g+1)/g per link


def _check(cluster: Cluster, nbytes: int, algo: str) -> None:
    if not isinstance(cluster, Cluster):
        raise ValueError(f"cluster must be a Cluster, not {type(cluster).__name__}")
    if not isinstance(nbytes, int) or isinstance(nbytes, bool) or nbytes < 0:
        raise ValueError(f"nbytes must be an int >= 0, not {nbytes!r}")
    if algo not in ALGORITHMS:
        raise ValueError(f"algo must be one of {ALGORITHMS}, not {algo!r}")


def _network_latency(cluster: Cluster) -> float:
    """Seconds before a message from node 0 reaches the last node on rail 0 (the farthest two
    nodes of a ring over the nodes in order): the NIC plus every switch on the way."""
    return cluster.latency(0, (cluster.nodes - 1) * cluster.gpus_per_node)


def _ring_time(cluster: Cluster, nbytes: int) -> float:
    g, n, k = cluster.gpus_per_node, cluster.nodes, cluster.nics_per_node
    p = g * n
    factor = 2 * (p - 1) / p  # bytes each hop of an all-reduce ring carries, per byte of buffer
    nvlink_rate = NVLINK_EFFICIENCY * cluster.nvlink_bytes_per_s
    if n == 1:
        latency = 2 * (p - 1) * cluster.nvlink_latency_s
        return latency + factor * nbytes / nvlink_rate
    # g - 1 of the g hops a channel makes from a node's GPUs are NVLink, one is a NIC (k channels)
    nvlink = factor * nbytes * (g - 1) / g / nvlink_rate
    network = factor * nbytes / k / (NET_EFFICIENCY * cluster.nic_bytes_per_s)
    latency = (2 * (p - 1) - 2 * n) * cluster.nvlink_latency_s + 2 * n * _network_latency(cluster)
    return latency + max(nvlink, network)


def _nvls_time(cluster: Cluster, nbytes: int) -> float:
    g, n, k = cluster.gpus_per_node, cluster.nodes, cluster.nics_per_node
    # each NVLink direction carries N (g+1)/g: the switch reads every slice, writes every sum
    nvlink = nbytes * (g + 1) / g / (NVLS_EFFICIENCY * cluster.nvlink_bytes_per_s) if g > 1 else 0.0
    latency = 2 * cluster.nvlink_latency_s if g > 1 else 0.0
    if n == 1:
        return latency + nvlink
    # one tree per rail: a GPU's slice N/g through its share k/g of the node's NICs, once on two
    # nodes, about twice on more (an inner node of a binary tree hears two children, feeds two)
    per_nic = 1 if n == 2 else 2
    network = per_nic * nbytes / g / (NET_EFFICIENCY * cluster.nic_bytes_per_s * k / g)
    latency += 2 * math.ceil(math.log2(n)) * _network_latency(cluster)
    return latency + max(nvlink, network)


def nccl_default_algorithm(cluster: Cluster, nbytes: int) -> str:
    """What NCCL's tuner would run for an all-reduce of `nbytes` bytes per GPU over every GPU of
    `cluster`, by this model: "nvls" (NVLS in each node, a tree per rail across nodes) or
    "ring", whichever nccl_all_reduce_time says is faster (a tie goes to "nvls"). Raises
    ValueError for a cluster that is not a Cluster or nbytes that is not an int >= 0."""
    _check(cluster, nbytes, "default")
    return "nvls" if _nvls_time(cluster, nbytes) <= _ring_time(cluster, nbytes) else "ring"


def nccl_all_reduce_time(cluster: Cluster, nbytes: int, algo: str = "default") -> float:
    """Seconds of an NCCL all-reduce of `nbytes` bytes per GPU over every GPU of `cluster`, with
    `algo` "ring" (NCCL_ALGO=RING), "nvls" (NVLS, with a tree per rail across nodes: NCCL's
    NVLSTree) or "default" (the faster of the two, as NCCL's tuner picks), by the model of this
    file's docstring. One GPU: 0. Raises ValueError for a cluster that is not a Cluster,
    nbytes that is not an int >= 0, or another algo."""
    _check(cluster, nbytes, algo)
    if cluster.num_gpus == 1:
        return 0.0
    if algo == "default":
        algo = nccl_default_algorithm(cluster, nbytes)
    return _ring_time(cluster, nbytes) if algo == "ring" else _nvls_time(cluster, nbytes)


def nccl_all_reduce_busbw(cluster: Cluster, nbytes: int, algo: str = "default") -> float:
    """The bus bandwidth (GB/s, 1e9 bytes per second) nccl-tests' all_reduce_perf would print
    for `nbytes` bytes per GPU on every GPU of `cluster` with `algo` (nccl_all_reduce_time):
    busbw = nbytes / t * 2(P-1)/P for P GPUs, whatever the algorithm (so NVLS reads above the
    NVLink line rate). 0 for one GPU or an empty buffer. Raises ValueError as
    nccl_all_reduce_time does."""
    seconds = nccl_all_reduce_time(cluster, nbytes, algo)
    p = cluster.num_gpus
    if p == 1 or nbytes == 0:
        return 0.0
    return nbytes / seconds / 1e9 * 2 * (p - 1) / p
