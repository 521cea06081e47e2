"""Given code of module cluster (read it): a GPU cluster, collective schedules as data, a
flow-level network simulator that replays a schedule on the cluster's links, and the executor
that runs a schedule on real ranks. Trusted: the grader runs the same code.

    from grader.models.cluster import Cluster, simulate
    cluster = Cluster.h100_cluster(nodes=4)              # 4 DGX H100 nodes, rail-optimised
    result = simulate(cluster, schedule)
    result.makespan, result.bytes_by_class(), result.busiest_link

A GPU is named by its global id, node * gpus_per_node + local_rank.

A schedule is plain data (lists, tuples, ints, strings), so it can travel between processes:

    {"op": "all_reduce" | "all_to_all", "gpus": [g0, g1, ...], "nbytes": N, "chunks": C,
     "steps": [(repeat, [(src, dst, first, last, kind), ...]), ...]}

- `gpus`: the GPUs taking part; on real ranks, group rank i plays GPU gpus[i].
- The buffer of N bytes is cut into C chunks (on real ranks: `tensor_split` of the flattened
  tensor, sizes differing by at most one element; in the simulator: N / C bytes each).
  For all_to_all, N is the bytes each GPU sends and C = P * P for P GPUs: chunk s * P + d is the
  block GPU gpus[s] sends to GPU gpus[d]; GPU gpus[s] starts with blocks s*P .. s*P + P-1 and
  must end with every block x * P + d where gpus[d] is itself.
- A transfer (src, dst, first, last, kind) sends chunks first..last-1 (a range, last > first)
  from GPU src to GPU dst: kind "reduce" adds them into dst's copy, "copy" overwrites it.
  All transfers of a step read the buffers as they were when the step began and start together;
  the next step begins when every transfer of this one has arrived (a barrier).
- `repeat` k >= 1 runs the step k times in a row. The first time, each transfer sends the chunks
  it names; every later time, each transfer's src sends instead the chunk range it received in
  the time before (so every src of a repeated step receives exactly one transfer of it). This
  is how a ring is written in one step: "pass on what you just got".

The simulator is a flow-level model (a fluid model: no packets, no queues). Links, one per
direction:

    ("nvlink_out", gpu) ("nvlink_in", gpu)     GPU <-> NVSwitch, nvlink_GBps each
    ("nic_out", node, nic) ("nic_in", node, nic) NIC <-> its leaf switch, nic_Gbps / 8 each
    ("leaf_up", leaf) ("leaf_down", leaf)      leaf switch <-> the spine layer, the leaf's
                                               host-facing capacity / oversubscription

A transfer inside a node uses its src's nvlink_out and its dst's nvlink_in (NVSwitch itself does
not block). Between nodes, GPU l uses NIC l * nics_per_node // gpus_per_node (GPUDirect RDMA: no
PCIe or host memory in the way); a transfer between two leaves also crosses leaf_up and
leaf_down (the spine layer is one non-blocking stage and ECMP spreads flows perfectly: the
lecture says what real hashing does instead). Leaves:

    "rail"       rail-optimised: NIC k of each node of a pod of `leaf_down_ports` nodes plugs
                 into the pod's rail-k leaf; other rails and other pods through the spine
    "rail_only"  Wang et al. 2023: one switch per rail joins NIC k of every node and there is
                 no spine; a transfer between different rails of different nodes is refused
    "fat_tree"   top-of-rack: every NIC of leaf_down_ports // nics_per_node whole nodes plugs
                 into one leaf; other leaves through the spine

Time of a step: all transfers between the same (src, dst) form one message. Messages share
every link max-min fairly (progressive filling; rates are recomputed when a message finishes).
A message finishes at its path's latency plus the time its bytes take at its rates; a GPU posts
its messages one after another, each `message_s` after the last. The step lasts until its last
message finishes:

    step time = max over messages (latency + fluid transfer time) + message_s * (most messages one GPU posts - 1)

Latency of a path: nvlink_latency_s inside a node; between nodes nic_latency_s plus
switch_latency_s per switch crossed (1 under one leaf, 3 through the spine). The simulator
counts, it does not time: the same figures on every machine. A step whose repeats are all alike
is computed once, and every message of a step at once (numpy), so 16,384 GPUs take seconds.
A schedule of more than MAX_TRANSFERS transfers, or a step repeated more than
MAX_UNEQUAL_REPEATS times whose ranges differ in size (replayed one repetition at a time), is
refused.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.distributed as dist

KINDS = ("reduce", "copy")
OPS = ("all_reduce", "all_to_all")
TOPOLOGIES = ("rail", "rail_only", "fat_tree")
LINK_CLASSES = ("nvlink", "nic", "spine")  # spine: a leaf's uplinks (leaf_up and leaf_down)
# Bounds on what the grader replays (a submission's schedule is checked in the grader's process):
# halving-doubling on 16,384 GPUs lists 458,752 transfers.
MAX_TRANSFERS = 10_000_000
MAX_UNEQUAL_REPEATS = 100_000


class ScheduleError(ValueError):
    """A schedule that cannot run: malformed, or a transfer the cluster does not connect."""


@dataclass(frozen=True)
class Cluster:
    """A cluster of `nodes` identical servers of `gpus_per_node` GPUs (module docstring: links).

    nvlink_GBps: GB/s (1e9 bytes) one GPU sends (and receives) over NVLink, per direction.
    nic_Gbps: Gb/s (1e9 bits) of one NIC, per direction. oversubscription: a leaf's host-facing
    capacity over its capacity towards the spine (1.0: non-blocking). leaf_down_ports: NIC ports
    of one leaf switch facing hosts.
    """

    nodes: int
    gpus_per_node: int
    nvlink_GBps: float
    nics_per_node: int
    nic_Gbps: float
    topology: str = "rail"
    oversubscription: float = 1.0
    leaf_down_ports: int = 32
    nvlink_latency_s: float = 1e-6
    nic_latency_s: float = 4e-6
    switch_latency_s: float = 0.5e-6
    message_s: float = 0.5e-6

    def __post_init__(self) -> None:
        for name in ("nodes", "gpus_per_node", "nics_per_node", "leaf_down_ports"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"Cluster.{name} must be an integer >= 1, not {value!r}")
        for name in ("nvlink_GBps", "nic_Gbps", "oversubscription"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0 or math.isinf(value):
                raise ValueError(f"Cluster.{name} must be a finite number > 0, not {value!r}")
        for name in ("nvlink_latency_s", "nic_latency_s", "switch_latency_s", "message_s"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not value >= 0 or math.isinf(value):
                raise ValueError(f"Cluster.{name} must be a finite number >= 0, not {value!r}")
        if self.topology not in TOPOLOGIES:
            raise ValueError(f"Cluster.topology must be one of {TOPOLOGIES}, not {self.topology!r}")
        if self.nics_per_node > self.gpus_per_node:
            raise ValueError(f"{self.nics_per_node} NICs for {self.gpus_per_node} GPUs: at most one NIC per GPU")
        if self.topology == "fat_tree" and self.leaf_down_ports < self.nics_per_node:
            raise ValueError(
                f"a fat-tree leaf of {self.leaf_down_ports} ports cannot hold a node of {self.nics_per_node} NICs"
            )

    @classmethod
    def dgx_h100(cls) -> Cluster:
        """One NVIDIA DGX H100 (HGX H100 8-GPU board): 8 H100 SXM GPUs on four NVSwitch chips,
        900 GB/s of NVLink per GPU both directions together (450 GB/s each way), and 8
        ConnectX-7 NICs of 400 Gb/s for the compute fabric, one per GPU (NVIDIA DGX H100 user
        guide and datasheet; its two storage NICs are left out)."""
        return cls(nodes=1, gpus_per_node=8, nvlink_GBps=450.0, nics_per_node=8, nic_Gbps=400.0)

    @classmethod
    def h100_cluster(cls, nodes: int, topology: str = "rail", oversubscription: float = 1.0) -> Cluster:
        """`nodes` DGX H100 servers on a 400 Gb/s InfiniBand fabric of 64-port leaf switches,
        32 ports down and 32 up (NVIDIA's DGX SuperPOD reference architecture: rail-optimised
        scalable units of 32 nodes, non-blocking)."""
        node = cls.dgx_h100()
        return cls(
            nodes=nodes,
            gpus_per_node=node.gpus_per_node,
            nvlink_GBps=node.nvlink_GBps,
            nics_per_node=node.nics_per_node,
            nic_Gbps=node.nic_Gbps,
            topology=topology,
            oversubscription=oversubscription,
        )

    @property
    def num_gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def nic_bytes_per_s(self) -> float:
        return self.nic_Gbps * 1e9 / 8

    @property
    def nvlink_bytes_per_s(self) -> float:
        return self.nvlink_GBps * 1e9

    def node_of(self, gpu: int) -> int:
        return gpu // self.gpus_per_node

    def local_rank(self, gpu: int) -> int:
        return gpu % self.gpus_per_node

    def nic_of(self, gpu: int) -> int:
        """The NIC (0 .. nics_per_node - 1 within its node) that GPU `gpu` sends through."""
        return self.local_rank(gpu) * self.nics_per_node // self.gpus_per_node

    def leaf_of(self, gpu: int) -> int:
        """The leaf switch that GPU `gpu`'s NIC plugs into."""
        return int(_leaves(self, np.array([gpu]))[0])

    def path(self, src: int, dst: int) -> list[tuple]:
        """The links a transfer from GPU src to GPU dst crosses, in order (ScheduleError if none)."""
        links, _, _ = _paths(self, np.array([src]), np.array([dst]))
        return [self._link_name(int(i)) for i in links[0] if i >= 0]

    def latency(self, src: int, dst: int) -> float:
        """Seconds before the first byte of a message from src to dst arrives (no contention)."""
        return float(_paths(self, np.array([src]), np.array([dst]))[1][0])

    def bandwidth(self, src: int, dst: int) -> float:
        """Bytes per second of a lone message from src to dst: its slowest link's capacity."""
        links, _, _ = _paths(self, np.array([src]), np.array([dst]))
        capacity = _capacities(self)
        return float(min(capacity[i] for i in links[0] if i >= 0))

    # Link ids: [nvlink_out x G | nvlink_in x G | nic_out x NICs | nic_in x NICs | leaf_up x L | leaf_down x L]
    @property
    def num_leaves(self) -> int:
        return int(_leaves(self, np.arange(self.num_gpus)).max()) + 1

    def _link_name(self, link: int) -> tuple:
        g, nics = self.num_gpus, self.nodes * self.nics_per_node
        for name, size in (("nvlink_out", g), ("nvlink_in", g), ("nic_out", nics), ("nic_in", nics)):
            if link < size:
                return (name, link) if name.startswith("nvlink") else (name, *divmod(link, self.nics_per_node))
            link -= size
        return ("leaf_up", link) if link < self.num_leaves else ("leaf_down", link - self.num_leaves)


def link_class(link: tuple) -> str:
    """ "nvlink", "nic" or "spine" for a link name of Cluster.path."""
    return {"nvlink_out": "nvlink", "nvlink_in": "nvlink", "nic_out": "nic", "nic_in": "nic"}.get(link[0], "spine")


def _leaves(cluster: Cluster, gpus: np.ndarray) -> np.ndarray:
    node, nic = (
        gpus // cluster.gpus_per_node,
        (gpus % cluster.gpus_per_node) * cluster.nics_per_node // cluster.gpus_per_node,
    )
    if cluster.topology == "rail_only":
        return nic
    if cluster.topology == "rail":
        return (node // cluster.leaf_down_ports) * cluster.nics_per_node + nic
    return node // (cluster.leaf_down_ports // cluster.nics_per_node)


def _capacities(cluster: Cluster) -> np.ndarray:
    g, nics, leaves = cluster.num_gpus, cluster.nodes * cluster.nics_per_node, cluster.num_leaves
    per_leaf = cluster.leaf_down_ports * cluster.nic_bytes_per_s / cluster.oversubscription
    return np.concatenate(
        [
            np.full(2 * g, cluster.nvlink_bytes_per_s),
            np.full(2 * nics, cluster.nic_bytes_per_s),
            np.full(2 * leaves, per_leaf),
        ]
    )


def _paths(cluster: Cluster, src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per message: its link ids (4 columns, -1 unused), its latency, and its link classes used."""
    g = cluster.num_gpus
    bad = (src < 0) | (src >= g) | (dst < 0) | (dst >= g) | (src == dst)
    if bad.any():
        i = int(np.argmax(bad))
        raise ScheduleError(
            f"a transfer from GPU {int(src[i])} to GPU {int(dst[i])}: "
            f"GPUs are 0..{g - 1} and a GPU does not send to itself"
        )
    gpn, npn = cluster.gpus_per_node, cluster.nics_per_node
    nics, leaves = cluster.nodes * npn, cluster.num_leaves
    same_node = src // gpn == dst // gpn
    nic_src = (src // gpn) * npn + (src % gpn) * npn // gpn
    nic_dst = (dst // gpn) * npn + (dst % gpn) * npn // gpn
    leaf_src, leaf_dst = _leaves(cluster, src), _leaves(cluster, dst)
    spine = ~same_node & (leaf_src != leaf_dst)
    if cluster.topology == "rail_only" and spine.any():
        i = int(np.argmax(spine))
        raise ScheduleError(
            f"a transfer from GPU {int(src[i])} (rail {int(leaf_src[i])}) "
            f"to GPU {int(dst[i])} (rail {int(leaf_dst[i])}) "
            f"on another node: a rail-only cluster joins only the same rail across nodes; go through NVLink first"
        )
    links = np.full((len(src), 4), -1, dtype=np.int64)
    links[:, 0] = np.where(same_node, src, 2 * g + nic_src)  # in the order a byte crosses them
    links[:, 1] = np.where(spine, 2 * g + 2 * nics + leaf_src, -1)
    links[:, 2] = np.where(spine, 2 * g + 2 * nics + leaves + leaf_dst, -1)
    links[:, 3] = np.where(same_node, g + dst, 2 * g + nics + nic_dst)
    latency = np.where(
        same_node,
        cluster.nvlink_latency_s,
        cluster.nic_latency_s + cluster.switch_latency_s * np.where(spine, 3, 1),
    )
    return links, latency, spine


# ---------------------------------------------------------------------------------------------
# Checking a schedule


@dataclass(frozen=True)
class _Step:
    repeat: int
    src: np.ndarray
    dst: np.ndarray
    first: np.ndarray
    last: np.ndarray
    kinds: tuple[str, ...]


def check_schedule(schedule: object) -> tuple[dict, list[_Step]]:
    """The schedule's fields and its steps as arrays; ScheduleError (naming what is wrong) for a
    malformed schedule."""
    if not isinstance(schedule, dict):
        raise ScheduleError(
            f"a schedule is a dict with op, gpus, nbytes, chunks and steps, not a {type(schedule).__name__}"
        )
    missing = [key for key in ("op", "gpus", "nbytes", "chunks", "steps") if key not in schedule]
    if missing:
        raise ScheduleError(f"the schedule has no {', '.join(missing)} (keys: op, gpus, nbytes, chunks, steps)")
    op, gpus, nbytes, chunks, steps = (schedule[k] for k in ("op", "gpus", "nbytes", "chunks", "steps"))
    if op not in OPS:
        raise ScheduleError(f"schedule op {op!r}: one of {OPS}")
    if not isinstance(gpus, (list, tuple)) or not gpus or not all(_is_int(x) and x >= 0 for x in gpus):
        raise ScheduleError(f"schedule gpus {gpus!r}: a non-empty list of GPU ids >= 0")
    if len(set(gpus)) != len(gpus):
        raise ScheduleError(f"schedule gpus {list(gpus)} name a GPU twice")
    if not _is_int(nbytes) or nbytes < 0:
        raise ScheduleError(f"schedule nbytes {nbytes!r}: an integer >= 0")
    if not _is_int(chunks) or chunks < 1:
        raise ScheduleError(f"schedule chunks {chunks!r}: an integer >= 1")
    if op == "all_to_all" and chunks != len(gpus) ** 2:
        raise ScheduleError(f"an all_to_all of {len(gpus)} GPUs has {len(gpus) ** 2} chunks (blocks), not {chunks}")
    if not isinstance(steps, (list, tuple)):
        raise ScheduleError(f"schedule steps: a list of (repeat, transfers), not a {type(steps).__name__}")
    members = set(gpus)
    checked, total = [], 0
    for index, step in enumerate(steps):
        if not (isinstance(step, (list, tuple)) and len(step) == 2 and _is_int(step[0]) and step[0] >= 1):
            raise ScheduleError(f"step {index} is {_short(step)}: a step is (repeat >= 1, [transfers])")
        repeat, transfers = step
        if not isinstance(transfers, (list, tuple)) or not transfers:
            raise ScheduleError(f"step {index} has no transfers (a list of (src, dst, first, last, kind))")
        total += len(transfers)
        if total > MAX_TRANSFERS:
            raise ScheduleError(f"the schedule lists more than {MAX_TRANSFERS:,} transfers: too large to check")
        for t in transfers:
            ok = isinstance(t, (list, tuple)) and len(t) == 5 and all(_is_int(x) for x in t[:4]) and t[4] in KINDS
            if not ok:
                raise ScheduleError(
                    f"step {index}: transfer {_short(t)} is not (src, dst, first, last, 'reduce' | 'copy')"
                )
            src, dst, first, last, _ = t
            if src not in members or dst not in members or src == dst:
                raise ScheduleError(f"step {index}: transfer {tuple(t)} must join two different GPUs of {list(gpus)}")
            if not 0 <= first < last <= chunks:
                raise ScheduleError(
                    f"step {index}: transfer {tuple(t)} sends chunks {first}..{last - 1} of 0..{chunks - 1}"
                )
        arrays = [np.array([t[i] for t in transfers], dtype=np.int64) for i in range(4)]
        if repeat > 1:
            received = np.bincount(arrays[1], minlength=max(gpus) + 1)
            if (received[arrays[0]] != 1).any():
                gpu = int(arrays[0][np.argmax(received[arrays[0]] != 1)])
                raise ScheduleError(
                    f"step {index} repeats {repeat} times, "
                    f"but GPU {gpu} receives {int(received[gpu])} of its transfers: "
                    f"in a repeated step every sender passes on the one range it received"
                )
        checked.append(_Step(repeat, *arrays, tuple(t[4] for t in transfers)))
    return {"op": op, "gpus": list(gpus), "nbytes": nbytes, "chunks": chunks}, checked


def _is_int(x: object) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool)


def _short(x: object) -> str:
    text = repr(x)
    return text if len(text) < 80 else text[:77] + "..."


# ---------------------------------------------------------------------------------------------
# The simulator


@dataclass
class Simulation:
    """What `simulate` measured. Seconds and bytes, as floats."""

    makespan: float
    link_bytes: dict[tuple, float]  # every link that carried a byte -> bytes it carried
    steps: list[tuple[int, float]] = field(default_factory=list)  # (repeat, seconds of one repetition)
    _profile: list = field(default_factory=list, repr=False)

    @property
    def busiest_link(self) -> tuple[tuple, float] | None:
        """(link, bytes) of the link that carried the most bytes (None: nothing was sent)."""
        if not self.link_bytes:
            return None
        return max(self.link_bytes.items(), key=lambda item: (item[1], item[0]))

    def bytes_by_class(self) -> dict[str, float]:
        """Bytes carried, summed over the links of each class (nvlink, nic, spine)."""
        totals = dict.fromkeys(LINK_CLASSES, 0.0)
        for link, nbytes in self.link_bytes.items():
            totals[link_class(link)] += nbytes
        return totals

    def max_bytes_by_class(self) -> dict[str, float]:
        """The most bytes any one link of each class carried."""
        most = dict.fromkeys(LINK_CLASSES, 0.0)
        for link, nbytes in self.link_bytes.items():
            most[link_class(link)] = max(most[link_class(link)], nbytes)
        return most

    def makespan_for(self, nbytes: float) -> float:
        """The makespan of the same schedule with a buffer of `nbytes` instead: every message's
        bytes scale with the buffer, and its fluid time with them."""
        return sum(times * _step_time(latency, fluid, post, nbytes) for times, latency, fluid, post in self._profile)


def _step_time(latency: np.ndarray, fluid_per_byte: np.ndarray, posts: float, nbytes: float) -> float:
    return float((latency + fluid_per_byte * nbytes).max()) + posts


def simulate(cluster: Cluster, schedule: dict) -> Simulation:
    """Replay `schedule` on `cluster`'s links (module docstring) and measure it.

    Raises ScheduleError for a malformed schedule, a GPU the cluster does not have, or a
    transfer its topology does not connect.
    """
    header, steps = check_schedule(schedule)
    if max(header["gpus"]) >= cluster.num_gpus:
        raise ScheduleError(
            f"the schedule uses GPU {max(header['gpus'])}; "
            f"the cluster has {cluster.num_gpus} (0..{cluster.num_gpus - 1})"
        )
    capacity = _capacities(cluster)
    # the share of nbytes one chunk holds: a chunk of C, or an all_to_all block of N / P
    share = 1 / (len(header["gpus"]) if header["op"] == "all_to_all" else header["chunks"])
    link_bytes = np.zeros(len(capacity))
    profile, timeline = [], []
    for step in steps:
        for sizes, times in _repetitions(step):
            src, dst, chunks, posts = _messages(step.src, step.dst, sizes.astype(float))
            links, latency, _ = _paths(cluster, src, dst)
            per_byte = _fluid_seconds(links, chunks * share, capacity)  # seconds per byte of nbytes
            valid = links >= 0
            carried = np.broadcast_to((chunks * share * header["nbytes"])[:, None], links.shape)
            np.add.at(link_bytes, links[valid], carried[valid] * times)
            post = cluster.message_s * (posts - 1)
            profile.append((times, latency, per_byte, post))
            timeline.append((times, _step_time(latency, per_byte, post, header["nbytes"])))
    used = np.nonzero(link_bytes)[0]
    makespan = sum(times * seconds for times, seconds in timeline)
    return Simulation(
        makespan=makespan,
        link_bytes={cluster._link_name(int(i)): float(link_bytes[i]) for i in used},
        steps=timeline,
        _profile=profile,
    )


def _repetitions(step: _Step):
    """(chunks each transfer carries, how many repetitions in a row carry exactly these) for the
    repetitions of a step: a repetition sends what its src received the time before."""
    sizes = step.last - step.first
    if step.repeat == 1 or (sizes == sizes[0]).all():
        yield sizes, step.repeat
        return
    if step.repeat > MAX_UNEQUAL_REPEATS:
        raise ScheduleError(
            f"a step repeated {step.repeat:,} times whose transfers carry ranges of different sizes: "
            f"at most {MAX_UNEQUAL_REPEATS:,} repetitions are replayed one by one"
        )
    incoming = np.full(int(max(step.src.max(), step.dst.max())) + 1, -1)
    incoming[step.dst] = np.arange(len(step.dst))
    for _ in range(step.repeat):
        yield sizes, 1
        sizes = sizes[incoming[step.src]]


def _messages(src: np.ndarray, dst: np.ndarray, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Transfers merged per (src, dst): their src, dst, chunks carried, and the most messages one GPU posts."""
    pairs, inverse = np.unique(np.stack([src, dst], axis=1), axis=0, return_inverse=True)
    chunks = np.bincount(inverse.reshape(-1), weights=sizes, minlength=len(pairs))
    posts = int(np.bincount(pairs[:, 0]).max())
    return pairs[:, 0], pairs[:, 1], chunks, posts


def _fluid_seconds(links: np.ndarray, nbytes: np.ndarray, capacity: np.ndarray) -> np.ndarray:
    """When each message of `nbytes` finishes, all starting at 0, sharing links max-min fairly
    (progressive filling, recomputed each time a message finishes)."""
    remaining = nbytes.astype(float).copy()
    finish = np.zeros(len(nbytes))
    active = remaining > 0
    now = 0.0
    while active.any():
        rate = _max_min_rates(links, active, capacity)
        left = np.where(active, remaining / np.where(active, rate, 1.0), np.inf)
        dt = left.min()
        now += dt
        done = active & (left <= dt * (1 + 1e-9))
        remaining = np.where(active, remaining - rate * dt, remaining)
        finish[done] = now
        active &= ~done
    return finish


def _max_min_rates(links: np.ndarray, active: np.ndarray, capacity: np.ndarray) -> np.ndarray:
    """Max-min fair rates of the active messages (progressive filling): raise every unfrozen
    rate together; a link that fills freezes the messages crossing it."""
    rate = np.zeros(len(links))
    left = capacity.astype(float).copy()
    unfrozen = active.copy()
    valid = links >= 0
    while unfrozen.any():
        crossing = valid & unfrozen[:, None]
        counts = np.bincount(links[crossing], minlength=len(capacity))
        share = np.where(counts > 0, left / np.maximum(counts, 1), np.inf)
        level = share.min()
        full = share <= level * (1 + 1e-12)
        frozen = unfrozen & (full[np.where(valid, links, 0)] & valid).any(axis=1)
        rate[frozen] = level
        np.subtract.at(left, links[valid & frozen[:, None]], level)
        unfrozen &= ~frozen
    return rate


# ---------------------------------------------------------------------------------------------
# The executor: a schedule on real ranks


def run_schedule(schedule: dict, tensor: torch.Tensor, group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """Run `schedule` on real ranks with point-to-point messages (isend/irecv): group rank i
    plays GPU schedule["gpus"][i]; every rank of `group` calls it with the same schedule.

    all_reduce: `tensor` is this rank's buffer; returns the buffer after every step (equal to
    dist.all_reduce's sum when the schedule is right). all_to_all: `tensor` is this rank's
    input, P equal blocks in the order of the GPUs; returns the output as all_to_all_single
    would give it, block i from GPU gpus[i] (zeros where the schedule delivered nothing).
    Raises ScheduleError on every rank, before any message, for a malformed schedule.
    """
    header, steps = check_schedule(schedule)
    gpus, chunks = header["gpus"], header["chunks"]
    size = dist.get_world_size(group)
    if len(gpus) != size:
        raise ScheduleError(f"the schedule is for {len(gpus)} GPUs, the group has {size} ranks")
    me = gpus[dist.get_rank(group)]
    rank_of = {gpu: dist.get_global_rank(group, i) if group is not None else i for i, gpu in enumerate(gpus)}
    if header["op"] == "all_reduce":
        buffer = tensor.detach().flatten().clone()
        pieces = list(buffer.tensor_split(chunks))
    else:
        p = len(gpus)
        if tensor.numel() % p:
            raise ScheduleError(
                f"an all_to_all input of {tensor.numel()} elements does not split into {p} equal blocks"
            )
        pieces = [torch.zeros(tensor.numel() // p, dtype=tensor.dtype) for _ in range(chunks)]
        mine = gpus.index(me)
        for d, block in enumerate(tensor.detach().flatten().chunk(p)):
            pieces[mine * p + d] = block.clone()
    for step in steps:
        ranges: dict[int, tuple[int, int]] = {}  # what each GPU received the time before
        for time in range(step.repeat):
            ranges = _run_repetition(step, time, ranges, pieces, me, rank_of, group)
    if header["op"] == "all_reduce":
        return torch.cat(pieces).view_as(tensor)
    p = len(gpus)
    mine = gpus.index(me)
    return torch.cat([pieces[s * p + mine] for s in range(p)]).view_as(tensor)


def _run_repetition(step: _Step, time: int, ranges: dict, pieces: list, me: int, rank_of: dict, group) -> dict:
    """One repetition of a step on this GPU; returns the range each GPU received (for the next)."""
    sends, recvs, received = [], [], {}
    for index in range(len(step.src)):
        src, dst = int(step.src[index]), int(step.dst[index])
        first, last = (int(step.first[index]), int(step.last[index])) if time == 0 else ranges[src]
        received[dst] = (first, last)
        if src == me:
            data = torch.cat(pieces[first:last]).clone()  # the buffer as the step began
            sends.append(dist.P2POp(dist.isend, data, rank_of[dst], group, tag=index))
        if dst == me:
            buffer = torch.empty(sum(p.numel() for p in pieces[first:last]), dtype=pieces[0].dtype)
            recvs.append(
                (dist.P2POp(dist.irecv, buffer, rank_of[src], group, tag=index), first, last, step.kinds[index])
            )
    ops = sends + [op for op, *_ in recvs]
    for request in dist.batch_isend_irecv(ops) if ops else []:
        request.wait()
    for op, first, last, kind in recvs:
        offset = 0
        for c in range(first, last):
            part = op.tensor[offset : offset + pieces[c].numel()]
            pieces[c] = pieces[c] + part if kind == "reduce" else part.clone()
            offset += pieces[c].numel()
    return received
