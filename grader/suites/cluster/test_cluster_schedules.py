"""Hidden suite: the schedules, run for real and replayed in the simulator.

Run for real: the given executor (grader.models.cluster.run_schedule, through the given
collective_step) runs each schedule on worlds of 4, 5, 6 and 8 gloo ranks, and the result is
compared with the library's collective on the same inputs (torch.distributed.all_reduce,
torch.distributed.all_to_all_single), for sizes that divide into the chunks, sizes that do not,
fewer elements than chunks, float64 and float32. The schedules that take a list of GPUs get GPU
ids that are not 0..p-1 (one rail across nodes, a node other than node 0, out of order), so a
schedule that takes an id for a position, or assumes ids start at 0, fails; the ones that take
a cluster run on two or three "nodes" of 2 or 4 GPUs.

Replayed: the simulator counts the bytes on every link. Each schedule's figures equal those of
the suite's own schedule (reference.py) on clusters of 2 to 1,024 GPUs (3 nodes of 3 and a node
of 6 among them), and over GPU lists that are not 0..p-1 (rails, a node other than node 0,
unordered, 3, 5, 6 and 7 GPUs); the closed forms of the docstrings are checked on their own,
so that a failure says which promise broke: 2(p-1)/p N per GPU for a ring, 2(g-1)/g N on
NVLink and 2(n-1)/n N/g on the network for the hierarchical all-reduce (the flat ring puts g
times more on its busiest NIC), a latency that grows with log p for a tree and with p for a
ring, the farthest partner first for halving-doubling.
"""

from __future__ import annotations

import math

import pytest
import torch

from grader.models.cluster import Cluster, ScheduleError, simulate
from grader.sandbox import Group, Step, SubmissionError
from grader.suites.cluster import reference
from grader.testing import assert_matches, expect_exception, generator


def small_cluster(nodes: int, gpus_per_node: int, **kw) -> Cluster:
    return Cluster(nodes=nodes, gpus_per_node=gpus_per_node, nvlink_GBps=450.0, nics_per_node=gpus_per_node,
                   nic_Gbps=400.0, **kw)  # fmt: skip


# 2 nodes of 2 and of 4 GPUs, and 3 nodes of 2: a ring of 3 nodes runs the wrong way round
# or starts from the wrong chunk visibly, where with 2 nodes k + 1 and k - 1 are the same node
WORLDS = {4: small_cluster(2, 2), 6: small_cluster(3, 2), 8: small_cluster(2, 4)}
# The GPU lists of the schedules that take one, as GPU ids of nodes of 8 (the executor lets
# group rank i play GPU gpus[i], whatever its id): never 0..p-1, so an id taken for a position,
# or ids assumed to start at 0, shows. 4: rail 3 of 4 nodes, out of order; 5: scattered over
# nodes, an odd count; 6: part of node 1, out of order; 8: all of node 1, out of order.
ORDERS = {
    4: [19, 3, 27, 11],
    5: [21, 4, 13, 30, 9],
    6: [12, 9, 15, 8, 14, 10],
    8: [13, 9, 12, 8, 15, 11, 14, 10],
}
SHAPES = [((7, 3), torch.float64), ((4, 4), torch.float64), ((3,), torch.float64), ((2, 5), torch.float32)]
ALLREDUCE = {
    "ring_allreduce_schedule": lambda p: (ORDERS[p], 0),
    "hierarchical_allreduce_schedule": lambda p: (WORLDS[p], 0),
    "double_binary_tree_allreduce_schedule": lambda p: (ORDERS[p], 0),
    "recursive_halving_doubling_allreduce_schedule": lambda p: (ORDERS[p], 0),
}


def run_cases(submission, p: int, name: str, inputs: list[list[torch.Tensor]]) -> list:
    """Every case's per-rank results, in one world call (inputs[case][rank])."""
    args = ALLREDUCE[name](p) if name in ALLREDUCE else (WORLDS[p], 0)
    steps = [
        [Step("collective_step", (name, (args[0], t.numel() * t.element_size()), t)) for t in case] for case in inputs
    ]
    per_rank = submission.script_spmd(p, [[case[r] for case in steps] for r in range(p)]).steps
    return [[per_rank[r][i] for r in range(p)] for i in range(len(inputs))]


# 5 ranks only for the two schedules of any p that take a GPU list (hierarchical needs a
# cluster, halving-doubling a power of two)
REAL_CASES = [(p, name) for p in (4, 6, 8) for name in ALLREDUCE if p != 6 or "halving" not in name] + [
    (5, "ring_allreduce_schedule"),
    (5, "double_binary_tree_allreduce_schedule"),
]


@pytest.mark.points(4)
@pytest.mark.parametrize(("p", "name"), REAL_CASES, ids=[f"{p}-{name}" for p, name in REAL_CASES])
def test_schedule_run_on_real_ranks_equals_dist_all_reduce(submission, library, name, p):
    """The executor's result on every rank equals torch.distributed.all_reduce of the same
    inputs, and every rank ends with the same bits (each chunk summed once, then copied).
    Halving-doubling runs on 4 and 8 ranks (6 is not a power of two); the GPU lists are ORDERS'
    ids, never 0..p-1."""
    inputs = [
        [
            torch.randn(*shape, generator=generator("cluster", name, p, i, r), dtype=torch.float64).to(dtype)
            for r in range(p)
        ]
        for i, (shape, dtype) in enumerate(SHAPES)
    ]
    results = run_cases(submission, p, name, inputs)
    for (shape, dtype), case, got in zip(SHAPES, inputs, results):
        expected = library.spmd("grader.library:all_reduce", p, [(t.clone(),) for t in case]).outputs
        tol = (1e-12, 1e-12) if dtype == torch.float64 else (1e-5, 1e-6)
        if name == "hierarchical_allreduce_schedule":
            gpus = f"{WORLDS[p].nodes} nodes of {WORLDS[p].gpus_per_node}"
        else:  # a GPU's place is its position in the list; chunks are 0..p-1 whatever the ids
            gpus = f"GPUs {ORDERS[p]}, group rank i playing the i-th"
        where = f"{name} on {p} ranks ({gpus}), a {tuple(shape)} {str(dtype)[6:]} buffer"
        for rank in range(p):
            assert_matches(
                got[rank], expected[rank], f"{where}: rank {rank} after the schedule vs dist.all_reduce", *tol
            )
            assert torch.equal(got[rank], got[0]), (
                f"{where}: rank {rank} ends with other bits than rank 0: each chunk must be summed once and then "
                f"copied (a 'copy' transfer), not summed again on every GPU in another order"
            )


@pytest.mark.points(2)
def test_schedules_run_in_two_subgroups_at_once_equal_their_own_sums(submission):
    """A world of 4 split into the groups {0, 2} and {1, 3}: each runs a ring of 2 GPUs (group
    ranks 0 and 1) on its own data at the same time; each must end with its own group's sum."""
    gen = generator("cluster-subgroups")
    tensors = [torch.randn(5, generator=gen, dtype=torch.float64) for _ in range(4)]
    pairs = {0: (0, 2), 2: (0, 2), 1: (1, 3), 3: (1, 3)}
    args = [("ring_allreduce_schedule", ([0, 1], 40), tensors[r], Group(pairs[r])) for r in range(4)]
    got = submission.function("collective_step").spmd(4, args).outputs
    for rank, pair in pairs.items():
        want = tensors[pair[0]] + tensors[pair[1]]
        assert_matches(got[rank], want, f"rank {rank} in group {pair}: its group's sum (not the world's)", 1e-12, 1e-12)


@pytest.mark.points(4)
@pytest.mark.parametrize("p", [4, 6, 8])
def test_hierarchical_alltoall_run_on_real_ranks_equals_all_to_all_single(submission, library, p):
    """Block i of every rank's output is block `rank` of rank i's input, as
    torch.distributed.all_to_all_single gives it (equal splits), in float64 and float32."""
    inputs = [
        [
            torch.randn(p * k, generator=generator("cluster-a2a", p, k, r), dtype=torch.float64).to(dtype)
            for r in range(p)
        ]
        for k, dtype in ((3, torch.float64), (1, torch.float64), (2, torch.float32))
    ]
    results = run_cases(submission, p, "hierarchical_alltoall_schedule", inputs)
    for case, got in zip(inputs, results):
        expected = library.spmd("grader.library:all_to_all_single", p, [(t.clone(),) for t in case]).outputs
        for rank in range(p):
            assert torch.equal(got[rank], expected[rank]), (
                f"hierarchical_alltoall_schedule on {p} ranks, {case[0].numel()} {str(case[0].dtype)[6:]} elements per "
                f"rank: rank {rank} got {got[rank].tolist()}, dist.all_to_all_single gives {expected[rank].tolist()}"
            )


# --- replayed in the simulator --------------------------------------------------------------

# 3 nodes of 3 and a node of 6: no power of two anywhere (chunk groups of 3 GPUs, rings of 3 nodes)
CLUSTERS = [small_cluster(1, 2), small_cluster(2, 1), small_cluster(1, 8), small_cluster(2, 2), small_cluster(3, 4),
            small_cluster(4, 8), small_cluster(16, 8), small_cluster(5, 2, topology="fat_tree", leaf_down_ports=4),
            small_cluster(3, 3), small_cluster(1, 6), Cluster.h100_cluster(128)]  # fmt: skip


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) < 200 else text[:197] + "..."


def schedules_of(submission, name: str, cases: list[tuple]) -> list[dict]:
    return submission.script([Step(name, args) for args in cases]).steps[0]


def same_figures(got: dict, want: dict, cluster: Cluster, what: str) -> None:
    mine, right = simulate(cluster, got), simulate(cluster, want)
    for link, nbytes in right.link_bytes.items():
        assert math.isclose(mine.link_bytes.get(link, 0.0), nbytes, rel_tol=1e-9), (
            f"{what}: link {link} carried {mine.link_bytes.get(link, 0.0):.0f} bytes, expected {nbytes:.0f}"
        )
    extra = sorted(set(mine.link_bytes) - set(right.link_bytes))
    assert not extra, f"{what}: links {extra[:4]} carried bytes; the schedule of the docstring never uses them"
    assert math.isclose(mine.makespan, right.makespan, rel_tol=1e-9), (
        f"{what}: simulated makespan {mine.makespan:.6g} s, expected {right.makespan:.6g} s (same messages, same steps)"
    )


def every_gpu(build):
    return lambda c, nbytes: ((list(range(c.num_gpus)), nbytes), build(list(range(c.num_gpus)), nbytes))


def whole_cluster(build):
    return lambda c, nbytes: ((c, nbytes), build(c, nbytes))


FIGURE_CASES = {
    "ring_allreduce_schedule": every_gpu(reference.ring),
    "hierarchical_allreduce_schedule": whole_cluster(reference.hierarchical),
    "double_binary_tree_allreduce_schedule": every_gpu(reference.double_binary_tree),
    "hierarchical_alltoall_schedule": whole_cluster(reference.hierarchical_alltoall),
}


@pytest.mark.points(6)
@pytest.mark.parametrize("name", list(FIGURE_CASES))
def test_simulated_bytes_on_every_link_and_makespan_equal_the_docstrings_schedule(submission, name):
    clusters = [c for c in CLUSTERS if name != "hierarchical_alltoall_schedule" or c.num_gpus <= 64]
    cases = [FIGURE_CASES[name](c, c.num_gpus * 3 << 10) for c in clusters]
    got = schedules_of(submission, name, [args for args, _ in cases])
    for cluster, schedule, (_, want) in zip(clusters, got, cases):
        same_figures(schedule, want, cluster, f"{name} on {cluster.nodes} nodes of {cluster.gpus_per_node}")


@pytest.mark.points(4)
def test_halving_doubling_simulated_bytes_and_makespan_equal_the_docstrings_schedule(submission):
    """Farthest partner first: on 2 nodes of 8 the first step sends N/2 through every NIC; a
    schedule that starts with the nearest partner sends N/16 there and fails."""
    nbytes = 1 << 24
    schedule = submission.function("recursive_halving_doubling_allreduce_schedule")(list(range(16)), nbytes)
    nic = simulate(small_cluster(2, 8), schedule).link_bytes.get(("nic_out", 0, 0), 0.0)
    assert nic == nbytes, (
        f"16 GPUs on 2 nodes of 8: GPU 0's NIC sent {nic:.0f} bytes, expected N = {nbytes} (N/2 in the first halving "
        f"step to the partner at distance p/2 = 8, N/2 back in the last doubling step): pair i with i XOR p/2^(k+1)"
    )
    clusters = [c for c in CLUSTERS if not c.num_gpus & (c.num_gpus - 1)]
    got = schedules_of(submission, "recursive_halving_doubling_allreduce_schedule",
                       [(list(range(c.num_gpus)), 3 << 20) for c in clusters])  # fmt: skip
    for cluster, schedule in zip(clusters, got):
        want = reference.halving_doubling(list(range(cluster.num_gpus)), 3 << 20)
        same_figures(
            schedule, want, cluster, f"recursive_halving_doubling_allreduce_schedule on {cluster.num_gpus} GPUs"
        )


# GPU lists on 4 rail-optimised nodes of 8 (GPU ids 0..31) that are not 0..p-1: a rail across
# nodes, a node other than node 0, unordered and scattered lists, counts that are not a power of
# two. Only the powers of two go to halving-doubling.
ANY_GPUS_CLUSTER = small_cluster(4, 8)
ANY_GPUS = [
    ([3, 11, 19, 27], "rail 3 across 4 nodes"),
    (list(range(8, 16)), "node 1"),
    ([17, 16], "two GPUs of node 2, the higher id first"),
    ([27, 19, 11, 3], "rail 3 backwards"),
    ([21, 4, 30, 9, 16, 2, 27, 12], "8 GPUs scattered over the nodes, unordered"),
    ([31 - 2 * k for k in range(16)], "the odd ids 31, 29, ..., 1"),
    ([9, 1, 17], "3 GPUs, rail 1 out of order"),
    ([21, 4, 13, 30, 9], "5 scattered GPUs"),
    ([14, 8, 31, 2, 20, 25], "6 scattered GPUs"),
    ([16, 18, 20, 22, 17, 19, 21], "7 GPUs of node 2"),
]
GPU_LIST_SCHEDULES = {
    "ring_allreduce_schedule": reference.ring,
    "double_binary_tree_allreduce_schedule": reference.double_binary_tree,
    "recursive_halving_doubling_allreduce_schedule": reference.halving_doubling,
}


@pytest.mark.points(4)
@pytest.mark.parametrize("name", list(GPU_LIST_SCHEDULES))
def test_schedules_over_any_gpu_ids_equal_the_docstrings_schedule_on_those_gpus(submission, name):
    """ranks need not be 0..p-1 (the docstrings): gpus is `ranks` as given, in order, every
    transfer joins two of them, and the bytes on every link and the makespan equal those of the
    suite's schedule over the same list, where position i of the list, never the id, is the
    GPU's place in the ring, the trees or the halving pairs."""
    cases = [(gpus, why) for gpus, why in ANY_GPUS if "halving" not in name or not len(gpus) & (len(gpus) - 1)]
    nbytes = 3 * 5 * 7 << 10  # whole bytes per chunk for every count
    got = schedules_of(submission, name, [(gpus, nbytes) for gpus, _ in cases])
    cluster = ANY_GPUS_CLUSTER
    for (gpus, why), schedule in zip(cases, got):
        what = f"{name}({gpus}, {nbytes}) ({why}) on 4 nodes of 8"
        hint = "a GPU's place is its position i in ranks, never its id; chunks are numbered by position"
        assert isinstance(schedule, dict) and schedule.get("gpus") == gpus, (
            f"{what}: expected gpus = ranks as given, {gpus}; got {_short(schedule)}"
        )
        try:
            simulate(cluster, schedule)
        except ScheduleError as error:
            pytest.fail(f"{what}: the simulator refuses the schedule: {error} ({hint})")
        same_figures(schedule, GPU_LIST_SCHEDULES[name](gpus, nbytes), cluster, f"{what}; {hint}")


@pytest.mark.points(6)
@pytest.mark.parametrize(("nodes", "g"), [(2, 2), (4, 8), (3, 4), (3, 6), (16, 8), (128, 8)])
def test_hierarchical_sends_n_over_g_per_gpu_on_the_network_and_the_flat_ring_g_times_more(submission, nodes, g):
    """Per GPU: 2(g-1)/g N on NVLink and 2(n-1)/n N/g through its NIC; nothing on the spine
    within a pod. The flat ring over the same cluster puts g times more bytes on its busiest NIC."""
    cluster = small_cluster(nodes, g) if nodes < 100 else Cluster.h100_cluster(nodes)
    nbytes = g * nodes * 3 << 10
    hierarchical, flat = (
        schedules_of(submission, "hierarchical_allreduce_schedule", [(cluster, nbytes)])[0],
        submission.function("ring_allreduce_schedule")(list(range(cluster.num_gpus)), nbytes),
    )
    result = simulate(cluster, hierarchical)
    n = nodes
    for gpu in (0, cluster.num_gpus - 1):
        nvlink = result.link_bytes.get(("nvlink_out", gpu), 0.0)
        assert math.isclose(nvlink, 2 * (g - 1) / g * nbytes), (
            f"{n} nodes of {g}: GPU {gpu} sent {nvlink:.0f} bytes over NVLink, expected 2(g-1)/g * N = "
            f"{2 * (g - 1) / g * nbytes:.0f} (reduce-scatter and all-gather of chunk groups inside the node)"
        )
        nic = result.link_bytes.get(("nic_out", gpu // g, gpu % g), 0.0)
        assert math.isclose(nic, 2 * (n - 1) / n * nbytes / g), (
            f"{n} nodes of {g}: GPU {gpu}'s NIC sent {nic:.0f} bytes, expected 2(n-1)/n * N/g = "
            f"{2 * (n - 1) / n * nbytes / g:.0f}: only the chunk group the GPU holds after the node's reduce-scatter "
            f"crosses the network"
        )
    pods = math.ceil(n / cluster.leaf_down_ports)
    if pods == 1:
        assert result.bytes_by_class()["spine"] == 0, f"{n} nodes in one pod: the rail rings never cross the spine"
    busiest_flat = simulate(cluster, flat).max_bytes_by_class()["nic"]
    busiest = result.max_bytes_by_class()["nic"]
    assert math.isclose(busiest_flat, g * busiest * (n * g - 1) / (n * g) * n / (n - 1)), (
        f"the flat ring's busiest NIC carries {busiest_flat:.0f} bytes against the hierarchical's {busiest:.0f}: "
        f"expected about g = {g} times more"
    )


@pytest.mark.points(4)
def test_tree_latency_grows_with_log_p_and_the_ring_latency_with_p(submission):
    """At N = 0 only latencies remain: the tree takes 2 floor(log2 p) steps, the ring 2(p-1)."""
    scales = [8, 24, 64, 1024]
    clusters = {p: Cluster.h100_cluster(p // 8) for p in scales}
    trees = schedules_of(submission, "double_binary_tree_allreduce_schedule", [(list(range(p)), 0) for p in scales])
    rings = schedules_of(submission, "ring_allreduce_schedule", [(list(range(p)), 0) for p in scales])
    for p, tree, ring in zip(scales, trees, rings):
        cluster = clusters[p]
        steps = 2 * (p.bit_length() - 1)
        ring_steps = sum(repeat for repeat, _ in ring["steps"])
        tree_steps = sum(repeat for repeat, _ in tree["steps"])
        assert tree_steps == steps, (
            f"double_binary_tree on {p} GPUs: {tree_steps} steps, expected 2 floor(log2 p) = {steps}"
        )
        assert ring_steps == 2 * (p - 1), f"ring on {p} GPUs: {ring_steps} steps, expected 2(p-1) = {2 * (p - 1)}"
        tree_time, ring_time = simulate(cluster, tree).makespan, simulate(cluster, ring).makespan
        alpha = cluster.nic_latency_s + 3 * cluster.switch_latency_s if p > 8 else cluster.nvlink_latency_s
        assert tree_time <= steps * (alpha + cluster.message_s) * (1 + 1e-9), (
            f"double_binary_tree on {p} GPUs at N = 0: {tree_time:.3g} s, at most {steps} latencies expected"
        )
        assert ring_time >= 2 * (p - 1) * cluster.nvlink_latency_s, f"ring on {p} GPUs at N = 0: {ring_time:.3g} s"


@pytest.mark.points(3)
def test_one_gpu_and_an_empty_buffer_need_no_transfer(submission):
    """One GPU: no steps; every schedule of N = 0 is still a valid schedule (its steps cost latency only)."""
    for name in ("ring_allreduce_schedule", "double_binary_tree_allreduce_schedule",
                 "recursive_halving_doubling_allreduce_schedule"):  # fmt: skip
        schedule = submission.function(name)([3], 64)
        assert schedule["steps"] == [] and schedule["gpus"] == [3], (
            f"{name}([3], 64): expected no steps, got {schedule}"
        )
    one = small_cluster(1, 1)
    for name in ("hierarchical_allreduce_schedule", "hierarchical_alltoall_schedule"):
        schedule = submission.function(name)(one, 64)
        assert schedule["steps"] == [], f"{name} on one GPU: expected no steps, got {schedule['steps']}"
    single_node = small_cluster(1, 4)
    got = submission.function("hierarchical_allreduce_schedule")(single_node, 0)
    assert simulate(single_node, got).bytes_by_class()["nic"] == 0, (
        "one node: the hierarchical all-reduce never uses a NIC"
    )


REFUSALS = [
    ("ring_allreduce_schedule", ([0, 1, 1, 2], 64), "a GPU named twice"),
    ("ring_allreduce_schedule", ([], 64), "no GPU"),
    ("ring_allreduce_schedule", ([0, 1], -1), "nbytes < 0"),
    ("ring_allreduce_schedule", ([0, -1], 64), "a negative GPU id"),
    ("double_binary_tree_allreduce_schedule", ([2, 2], 64), "a GPU named twice"),
    ("double_binary_tree_allreduce_schedule", ([0, 1], 1.5), "nbytes not an integer"),
    ("ring_allreduce_schedule", ([0, 1], 64.0), "nbytes a float, though whole"),
    ("recursive_halving_doubling_allreduce_schedule", (list(range(6)), 64), "6 GPUs"),
    ("recursive_halving_doubling_allreduce_schedule", (list(range(12)), 64), "12 GPUs"),
    ("recursive_halving_doubling_allreduce_schedule", ([0, 1, 2, 0], 64), "a GPU named twice"),
    ("recursive_halving_doubling_allreduce_schedule", ([0, 1], -1), "nbytes < 0"),
    ("recursive_halving_doubling_allreduce_schedule", ([], 64), "no GPU"),
    ("double_binary_tree_allreduce_schedule", ([0, 1], -1), "nbytes < 0"),
    ("hierarchical_allreduce_schedule", (small_cluster(2, 2), -8), "nbytes < 0"),
    ("hierarchical_allreduce_schedule", ({"nodes": 2, "gpus_per_node": 2}, 64), "a dict, not a Cluster"),
    ("hierarchical_alltoall_schedule", (small_cluster(2, 2), -8), "nbytes < 0"),
    ("hierarchical_alltoall_schedule", (4, 64), "an int, not a Cluster"),
]


@pytest.mark.points(3)
@pytest.mark.parametrize(("name", "args", "why"), REFUSALS, ids=[f"{n}-{w}" for n, _, w in REFUSALS])
def test_bad_input_raises_value_error(submission, name, args, why):
    expect_exception("ValueError", lambda: submission.function(name)(*args))


def test_the_executor_refuses_a_schedule_for_another_world(submission):
    """A schedule of 8 GPUs run on 4 ranks: ScheduleError (a ValueError) on every rank, not a hang."""
    schedule_args = (list(range(8)), 64)
    with pytest.raises(SubmissionError) as caught:
        submission.function("collective_step").spmd(4, [("ring_allreduce_schedule", schedule_args, torch.ones(8))] * 4)
    if caught.value.kind != "exception":
        raise caught.value  # not implemented, a crash, a hang: that reason, not this check's
    assert "ScheduleError" in caught.value.message, (
        f"a ring of 8 GPUs run on 4 ranks: expected ScheduleError from the executor, got {caught.value.message}"
    )
