"""Hidden suite: the training-job scheduler (scheduler.py). place_gang against a brute force over
every leaf set and node set (fewest leaves, then nodes, then best fit), priced by module cluster's
simulator; schedule's events replayed by the given checker (job_trace.check_events: no partial
gang, no GPU given twice, no queue beyond its limit, preemptions only of borrowed lower-priority
jobs, every job finished: no deadlock) on day traces of clusters whose leaves differ in size;
every placement of a day against the best on the GPUs then free; small cases against the least
total wait of any schedule (brute force); backfilling, reservations, reclaiming and quotas on
cases whose outcome the docstring fixes; a day's mean wait and utilization against the
reference's. Graded by counts, never by time."""

from __future__ import annotations

import random

import pytest

from grader.models.cluster import Cluster
from grader.models.job_trace import (
    ClusterQueue,
    Job,
    check_events,
    default_queues,
    job_trace,
    mean_wait,
    utilization,
    waits,
)
from grader.suites.orchestration import scheduler_reference as ref
from grader.testing import RUN_SEED, expect_exception

WHERE = "see schedule's docstring in scheduler.py"
# The reference's mean wait (minutes) and utilization over the day on these traces (default
# queues, fat-tree of 4 nodes per leaf); tests/test_orchestration_checks.py proves both bounds both
# ways (the reference passes, first come first served without backfilling fails).
DAY_TRACES = {(8, 0): (224.4, 0.800), (12, 0): (145.5, 0.835), (16, 0): (123.9, 0.842), (16, 1): (75.4, 0.837)}
WAIT_SLACK = 1.25  # the summed mean waits may be 25 % above the reference's
UTILIZATION_SLACK = 0.03  # the mean utilization may be 3 points below the reference's


def racks(nodes: int, per_leaf: int) -> Cluster:
    """DGX H100 nodes on a fat-tree whose leaves hold `per_leaf` nodes (the last may hold fewer)."""
    return Cluster(nodes=nodes, gpus_per_node=8, nvlink_GBps=450.0, nics_per_node=8, nic_Gbps=400.0,
                   topology="fat_tree", leaf_down_ports=8 * per_leaf)  # fmt: skip


def one_queue(cluster: Cluster) -> list[ClusterQueue]:
    return [ClusterQueue("q", cluster.num_gpus)]


def starts(events: list[dict]) -> dict[int, int]:
    """job -> minute of its last start."""
    return {e["job"]: e["time"] for e in events if e["event"] == "start"}


def assert_valid(events, jobs, queues, cluster, case: str) -> None:
    problems = check_events(events, jobs, queues, cluster)
    # the first few, and the jobs that never finished (a deadlock), which check_events says last
    shown = "\n  ".join(problems[:5] + (problems[-1:] if len(problems) > 5 else []))
    assert not problems, f"{case}: {len(problems)} rule(s) broken ({WHERE} and job_trace.check_events):\n  {shown}"


def random_free(rng: random.Random, cluster: Cluster) -> list[int]:
    return [rng.choice([0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 8, 8]) for _ in range(cluster.nodes)]


# ------------------------------------------------------------------------------ place_gang


@pytest.mark.points(3)
def test_place_gang_spans_the_fewest_leaves_then_nodes_then_the_best_fit(submission):
    rng = random.Random(f"{RUN_SEED}:place")
    place = submission.function("place_gang")
    # fixed cases (a free leaf beside a free node of another; a half-busy node to pack onto;
    # a job that must span leaves, then as few as possible), then random ones
    cases = [(racks(4, 2), [0, 8, 8, 8], 2, 8), (racks(6, 2), [8, 4, 8, 2, 8, 6], 1, 4),
             (racks(6, 2), [8, 0, 8, 8, 0, 8], 3, 8), (racks(9, 3), [8, 8, 4, 4, 4, 4, 8, 0, 8], 3, 4)]  # fmt: skip
    for cluster in (racks(10, 4), racks(6, 2), racks(9, 3), Cluster.h100_cluster(12, topology="fat_tree")):
        for _ in range(25):
            free = random_free(rng, cluster)
            cases.append((cluster, free, rng.choice([1, 2, 3, 5, 8, 12]), rng.choice([1, 2, 3, 4, 8])))
    checked = 0
    for cluster, free, pods, gpus_per_pod in cases:
        want = ref.best_placement_cost(free, pods, gpus_per_pod, cluster)
        got = place(free, pods, gpus_per_pod, cluster)
        case = f"place_gang({free}, pods={pods}, gpus_per_pod={gpus_per_pod}) on {cluster.nodes} nodes, " \
               f"leaves of {cluster.leaf_down_ports // 8}"  # fmt: skip
        if want is None:
            assert got is None, f"{case}: the gang does not fit (no node set holds it), expected None, got {got}"
            continue
        assert isinstance(got, list) and len(got) == pods, f"{case}: expected a list of {pods} nodes, got {got!r}"
        assert got == sorted(got), f"{case}: the nodes must be in ascending order, got {got}"
        for node in set(got):
            assert 0 <= node < cluster.nodes and got.count(node) * gpus_per_pod <= free[node], (
                f"{case}: {got.count(node)} pods on node {node}, which has {free[node]} free GPUs"
            )
        cost = ref.placement_cost(cluster, free, got)
        assert cost == want, (
            f"{case}: got {got}, spanning {cost[0]} leaves and {cost[1]} nodes with {cost[2]} free GPUs; "
            f"expected {want[0]} leaves, then {want[1]} nodes, then {want[2]} free GPUs (best fit), e.g. "
            f"{ref.a_placement_of_cost(free, pods, gpus_per_pod, cluster, want)} (see place_gang's docstring)"
        )
        checked += 1
    assert checked > 40


@pytest.mark.points(2)
def test_place_gang_returns_none_when_free_gpus_are_scattered_over_nodes(submission):
    place = submission.function("place_gang")
    cluster = racks(4, 2)
    cases = [  # (free, pods, gpus_per_pod, fits)
        ([4, 4, 4, 4], 1, 8, False),  # 16 free GPUs, but no node holds a whole-node pod
        ([4, 4, 4, 4], 2, 8, False),
        ([7, 7, 7, 7], 4, 2, True),  # 3 pods of 2 per node: one node's worth is 3 pods
        ([3, 3, 3, 3], 5, 2, False),  # 12 free GPUs, 4 pods of 2 at most
        ([8, 0, 0, 8], 2, 8, True),  # across the two leaves: it still fits
        ([0, 0, 0, 0], 1, 1, False),
    ]
    for free, pods, gpus_per_pod, fits in cases:
        got = place(free, pods, gpus_per_pod, cluster)
        case = f"place_gang({free}, pods={pods}, gpus_per_pod={gpus_per_pod}) on 4 nodes"
        if fits:
            assert isinstance(got, list) and len(got) == pods, f"{case}: the gang fits, got {got!r}"
        else:
            assert got is None, f"{case}: a pod sits on one node, so the gang does not fit; expected None, got {got!r}"


@pytest.mark.points(2)
def test_place_gang_refuses_bad_input_with_value_error(submission):
    place = submission.function("place_gang")
    cluster = racks(4, 2)
    for free, pods, gpus_per_pod in (
        ([8, 8, 8], 1, 8),  # one node short
        ([8, 8, 8, 9], 1, 8),  # more free GPUs than a node has
        ([8, 8, -1, 8], 1, 8),
        ([8, 8, 8.0, 8], 1, 8),
        ((8, 8, 8, 8), 1, 8),  # a tuple, not a list
        ([8, 8, 8, 8], 0, 8),
        ([8, 8, 8, 8], True, 8),
        ([8, 8, 8, 8], 1, 0),
        ([8, 8, 8, 8], 1, 9),
        ([8, 8, 8, 8], 1, 2.0),
    ):
        expect_exception("ValueError", lambda f=free, n=pods, g=gpus_per_pod: place(f, n, g, cluster))


@pytest.mark.points(3)
def test_every_placement_of_a_day_costs_the_fewest_spine_and_nic_bytes_on_the_gpus_then_free(submission):
    """Priced with module cluster's simulator: a 1 GiB ring all-reduce over the placement."""
    schedule = submission.function("schedule")
    for nodes, seed in ((12, 0), (10, 3)):
        cluster = Cluster.h100_cluster(nodes, topology="fat_tree")
        queues = default_queues(cluster)
        jobs = job_trace(seed, nodes)
        events = schedule(jobs, queues, cluster)
        assert_valid(events, jobs, queues, cluster, f"job_trace({seed}, {nodes})")
        by_id = {job.id: job for job in jobs}
        for event, free in ref.free_before_each_start(events, jobs, cluster):
            job = by_id[event["job"]]
            want = ref.best_placement_cost(free, job.pods, job.gpus_per_pod, cluster)
            got = ref.placement_cost(cluster, free, event["nodes"])
            if got[:2] != want[:2]:
                best = ref.a_placement_of_cost(free, job.pods, job.gpus_per_pod, cluster, want)
                got_bytes = ref.ring_bytes(cluster, event["nodes"], job.gpus_per_pod)
                best_bytes = ref.ring_bytes(cluster, best, job.gpus_per_pod)
                raise AssertionError(
                    f"job_trace({seed}, {nodes}), minute {event['time']}: job {job.id} ({job.pods} pods of "
                    f"{job.gpus_per_pod} GPUs) starts on nodes {event['nodes']} ({got[0]} leaves, {got[1]} nodes): "
                    f"its ring puts {got_bytes[0] / 2**30:.1f} GiB on the spine and {got_bytes[1] / 2**30:.1f} "
                    f"GiB on NICs per GiB all-reduced; on the free GPUs {free} the placement {best} puts "
                    f"{best_bytes[0] / 2**30:.1f} and {best_bytes[1] / 2**30:.1f} (fewest leaves, then nodes: "
                    f"see place_gang's docstring)"
                )


# ------------------------------------------------------------------------------ schedule


@pytest.mark.points(3)
def test_day_traces_keep_every_gang_whole_every_quota_and_finish_every_job(submission):
    """Clusters whose last leaf holds fewer nodes; the jobs handed over shuffled."""
    schedule = submission.function("schedule")
    rng = random.Random(f"{RUN_SEED}:day")
    for nodes in (6, 10):
        seed = rng.randrange(1000)
        cluster = Cluster.h100_cluster(nodes, topology="fat_tree")
        queues = default_queues(cluster)
        jobs = job_trace(seed, nodes, load=1.2)
        shuffled = rng.sample(jobs, len(jobs))
        events = schedule(shuffled, queues, cluster)
        assert_valid(events, jobs, queues, cluster, f"schedule(job_trace({seed}, {nodes}, load=1.2) shuffled)")


@pytest.mark.points(2)
def test_two_gangs_racing_for_the_same_nodes_start_one_after_the_other(submission):
    """Two jobs of 3 whole-node pods on 4 free nodes: placed pod by pod, each would hold 2 nodes
    and wait forever for its third: the cluster deadlocks. As gangs, one runs, then the other;
    a 5-minute job fills the fourth node meanwhile."""
    cluster = racks(4, 4)
    jobs = [Job(0, 0, 10, 3, 8, "q"), Job(1, 0, 10, 3, 8, "q"), Job(2, 0, 5, 1, 8, "q")]
    events = submission.function("schedule")(jobs, one_queue(cluster), cluster)
    assert_valid(events, jobs, one_queue(cluster), cluster, "two gangs of 3 whole nodes on 4 nodes")
    got = starts(events)
    assert got == {0: 0, 2: 0, 1: 10}, (
        f"expected job 0 to start at minute 0, job 2 at 0 (it ends by job 1's shadow time) and job 1 at 10; "
        f"got starts {got} ({WHERE})"
    )


@pytest.mark.points(3)
def test_total_wait_of_small_cases_equals_the_least_of_any_schedule(submission):
    """Brute force over every schedule in which each job starts at a submission or a finish."""
    schedule = submission.function("schedule")
    cases = {
        "a short job in the hole before a 2-node job": (
            racks(2, 2), [Job(0, 0, 60, 1, 8, "q"), Job(1, 1, 30, 2, 8, "q"), Job(2, 2, 50, 1, 8, "q")]),
        "two half-node jobs packed on one node": (
            racks(2, 2), [Job(0, 0, 100, 1, 4, "q"), Job(1, 1, 100, 1, 4, "q"), Job(2, 2, 100, 1, 8, "q")]),
        "two 3-node gangs and a short job on 4 nodes": (
            racks(4, 4), [Job(0, 0, 10, 3, 8, "q"), Job(1, 0, 10, 3, 8, "q"), Job(2, 0, 5, 1, 8, "q")]),
    }  # fmt: skip
    for name, (cluster, jobs) in cases.items():
        events = schedule(jobs, one_queue(cluster), cluster)
        assert_valid(events, jobs, one_queue(cluster), cluster, name)
        got, best = sum(waits(events, jobs).values()), ref.least_total_wait(jobs, cluster)
        assert got <= best, (
            f"{name}: the jobs wait {got} minutes in all (starts {starts(events)}); the least any schedule "
            f"achieves is {best} (backfill the holes, pack small pods onto busy nodes: {WHERE})"
        )


@pytest.mark.points(2)
def test_backfilling_never_delays_the_heads_reservation(submission):
    """Job 1 needs both nodes at minute 50 (its shadow time); job 2 would run past it on a node
    the reservation needs, so it waits, though a node is free at minute 2."""
    cluster = racks(2, 2)
    jobs = [Job(0, 0, 50, 1, 8, "q"), Job(1, 1, 50, 2, 8, "q"), Job(2, 2, 100, 1, 8, "q")]
    events = submission.function("schedule")(jobs, one_queue(cluster), cluster)
    assert_valid(events, jobs, one_queue(cluster), cluster, "a long job behind the head")
    got = starts(events)
    assert got == {0: 0, 1: 50, 2: 100}, (
        f"expected starts {{0: 0, 1: 50, 2: 100}}: job 2 ends after job 1's shadow time (50) on GPUs its "
        f"reservation needs, so it must not backfill; got {got} ({WHERE}, step 3)"
    )


@pytest.mark.points(2)
def test_a_long_job_backfills_on_gpus_the_reservation_leaves_free(submission):
    """Node A runs a long half-node job, node B a 50-minute whole-node job; the head (a whole
    node) is reserved node B at minute 50. A half-node job running 100 minutes fits on A's free
    half, which the reservation does not need: it starts at once. With backfill=False it waits
    for the head."""
    cluster = racks(2, 2)
    jobs = [Job(0, 0, 1000, 1, 4, "q"), Job(1, 0, 50, 1, 8, "q"), Job(2, 1, 40, 1, 8, "q"), Job(3, 2, 100, 1, 4, "q")]
    schedule = submission.function("schedule")
    got = starts(schedule(jobs, one_queue(cluster), cluster))
    assert got == {0: 0, 1: 0, 2: 50, 3: 2}, (
        f"expected starts {{0: 0, 1: 0, 2: 50, 3: 2}} (job 3 takes GPUs free at the shadow time that the "
        f"head's reservation leaves); got {got} ({WHERE}, step 3)"
    )
    fifo = starts(schedule(jobs, one_queue(cluster), cluster, backfill=False))
    assert fifo == {0: 0, 1: 0, 2: 50, 3: 50}, (
        f"with backfill=False no job passes the head: expected starts {{0: 0, 1: 0, 2: 50, 3: 50}}, got {fifo} "
        f"({WHERE}, step 2)"
    )


@pytest.mark.points(2)
def test_a_backfilled_job_takes_no_more_gpus_of_a_node_than_the_reservation_leaves_there(submission):
    """Two nodes; the head (2 pods of 6 GPUs, one per node) is reserved both nodes at minute 50,
    which leaves 2 GPUs spare on each. Job 3 (a 4-GPU pod running 100 minutes) fits now on the
    node with 4 free GPUs, but at the shadow time it would hold 4 of that node's GPUs where only
    2 are spare: it must wait, once with all jobs in one queue (the head's quota leaves room for
    it) and once with job 3 in another queue (quota is no excuse)."""
    cluster = racks(2, 2)
    schedule = submission.function("schedule")
    for queue_of_3, queues in (("q", one_queue(cluster)), ("b", [ClusterQueue("q", 8), ClusterQueue("b", 8)])):
        jobs = [Job(0, 0, 50, 1, 8, "q"), Job(1, 0, 50, 1, 4, "q"), Job(2, 1, 10, 2, 6, "q"),
                Job(3, 2, 100, 1, 4, queue_of_3)]  # fmt: skip
        events = schedule(jobs, queues, cluster)
        case = f"a 4-GPU pod of queue {queue_of_3!r} beside a reservation that leaves 2 GPUs per node"
        assert_valid(events, jobs, queues, cluster, case)
        got = starts(events)
        assert got == {0: 0, 1: 0, 2: 50, 3: 60}, (
            f"{case}: expected starts {{0: 0, 1: 0, 2: 50, 3: 60}}: job 3 would hold 4 GPUs of a node on which "
            f"the head's reservation leaves 2 at its shadow time (50), so it must not backfill; got {got} "
            f"({WHERE}, step 3)"
        )


@pytest.mark.points(2)
def test_a_head_of_more_pods_than_a_node_has_gpus_gets_its_reservation(submission):
    """The head is 12 pods of 1 GPU (more pods than a node has GPUs): at minute 50 it fits on
    node 0's 8 free GPUs and node 1's 4, all of them. Job 3 (4 GPUs, 60 minutes) would run past
    the shadow time on GPUs the reservation needs: it waits; job 4 (4 GPUs, 40 minutes) ends by
    the shadow time: it starts at once."""
    cluster = racks(2, 2)
    jobs = [Job(0, 0, 50, 1, 8, "q"), Job(1, 0, 100, 1, 4, "q"), Job(2, 1, 10, 12, 1, "q"),
            Job(3, 2, 60, 1, 4, "q"), Job(4, 3, 40, 1, 4, "q")]  # fmt: skip
    events = submission.function("schedule")(jobs, one_queue(cluster), cluster)
    assert_valid(events, jobs, one_queue(cluster), cluster, "a head of 12 one-GPU pods")
    got = starts(events)
    assert got == {0: 0, 1: 0, 4: 3, 2: 50, 3: 60}, (
        f"expected starts {{0: 0, 1: 0, 4: 3, 2: 50, 3: 60}}: the head (job 2, 12 pods of 1 GPU) is reserved "
        f"every GPU free at minute 50; job 4 ends by then and backfills, job 3 does not; got {got} "
        f"({WHERE}, steps 2 and 3)"
    )


@pytest.mark.points(2)
def test_the_shadow_time_waits_for_the_heads_quota_not_only_for_free_gpus(submission):
    """Queue a may use 8 GPUs (no borrowing) and runs job 0 until minute 100; the head (job 3, a
    whole node of a) finds a whole node free at minute 20 already, but its quota lets it start
    only at 100: that is its shadow time. Job 4 (a whole node of b, 50 minutes) ends by then: it
    backfills at once on the free node."""
    cluster = racks(3, 3)
    queues = [ClusterQueue("a", 8, borrowing_limit=0), ClusterQueue("b", 16)]
    jobs = [Job(0, 0, 100, 1, 8, "a"), Job(1, 0, 20, 1, 4, "b"), Job(2, 0, 200, 1, 4, "b"),
            Job(3, 1, 10, 1, 8, "a"), Job(4, 2, 50, 1, 8, "b")]  # fmt: skip
    events = submission.function("schedule")(jobs, queues, cluster)
    assert_valid(events, jobs, queues, cluster, "a head held back by its queue's limit")
    got = starts(events)
    assert got == {0: 0, 1: 0, 2: 0, 4: 2, 3: 100}, (
        f"expected starts {{0: 0, 1: 0, 2: 0, 4: 2, 3: 100}}: the head's shadow time is the first end time at "
        f"which its quota AND the free GPUs let it start (100, when job 0 ends, not 20), and job 4 ends by it; "
        f"got {got} ({WHERE}, step 2)"
    )


def _borrowing_cluster(priority: int) -> tuple[Cluster, list[ClusterQueue], list[Job]]:
    """4 nodes; queues a and b own 16 GPUs each; a's four whole-node jobs borrow b's idle
    half; then b submits a 2-node job of `priority`."""
    cluster = racks(4, 4)
    queues = [ClusterQueue("a", 16), ClusterQueue("b", 16)]
    jobs = [Job(i, i, 100, 1, 8, "a") for i in range(4)] + [Job(4, 10, 50, 2, 8, "b", priority)]
    return cluster, queues, jobs


@pytest.mark.points(3)
def test_a_higher_priority_job_reclaims_its_quota_from_the_latest_borrowed_jobs(submission):
    cluster, queues, jobs = _borrowing_cluster(priority=100)
    events = submission.function("schedule")(jobs, queues, cluster)
    assert_valid(events, jobs, queues, cluster, "queue b reclaims its nominal quota")
    preempted = [(e["time"], e["job"], e["by"]) for e in events if e["event"] == "preempt"]
    assert preempted == [(10, 3, 4), (10, 2, 4)], (
        f"expected job 4 (priority 100, within b's nominal quota) to preempt at minute 10 the borrowed jobs "
        f"of a latest started first, 3 then 2, and no other; got preemptions (minute, job, by) {preempted} "
        f"({WHERE}, step 1)"
    )
    got = starts(events)
    assert got[4] == 10 and got[2] == got[3] == 60, (
        f"expected job 4 to start at 10 and the preempted jobs 2 and 3 to start again when it ends, at 60 "
        f"(they keep their place in line); got last starts {got}"
    )
    by_id = {job.id: job for job in jobs}
    finish = {e["job"]: e["time"] for e in events if e["event"] == "finish"}
    assert finish[3] == 60 + by_id[3].duration, (
        f"a preempted job runs its whole duration again: job 3 restarts at 60 and must finish at 160, not {finish[3]}"
    )


@pytest.mark.points(2)
def test_no_preemption_by_equal_priority_nor_of_jobs_within_their_nominal_quota(submission):
    schedule = submission.function("schedule")
    cluster, queues, jobs = _borrowing_cluster(priority=0)
    events = schedule(jobs, queues, cluster)
    assert_valid(events, jobs, queues, cluster, "an equal-priority job of the lending queue")
    got = starts(events)
    assert not any(e["event"] == "preempt" for e in events) and got[4] == 101, (
        f"job 4 has the borrowers' priority: nobody is preempted and it starts once two of a's jobs have ended, "
        f"at 101; "
        f"got starts {got} and preemptions {[e for e in events if e['event'] == 'preempt']} ({WHERE})"
    )
    # a's two jobs use exactly its nominal quota, b's two jobs borrow nothing either: a priority
    # 100 job of a would go beyond a's nominal quota, so it may not reclaim, and it waits
    cluster = racks(4, 4)
    queues = [ClusterQueue("a", 16), ClusterQueue("b", 16)]
    jobs = [Job(0, 0, 100, 1, 8, "a"), Job(1, 0, 100, 1, 8, "a"), Job(2, 0, 60, 1, 8, "b"),
            Job(3, 0, 80, 1, 8, "b"), Job(4, 5, 10, 1, 8, "a", 100)]  # fmt: skip
    events = schedule(jobs, queues, cluster)
    assert_valid(events, jobs, queues, cluster, "a high-priority job beyond its queue's nominal quota")
    got = starts(events)
    assert not any(e["event"] == "preempt" for e in events) and got[4] == 60, (
        f"job 4 would take queue a beyond its nominal quota, and b borrows nothing: no preemption, it starts "
        f"when job 2 ends at 60; got starts {got} ({WHERE}, step 1)"
    )


@pytest.mark.points(2)
def test_reclaiming_stops_taking_from_a_queue_once_it_borrows_nothing(submission):
    """Queue a (4 GPUs nominal) runs three 4-GPU jobs: two packed on node 0, the latest on node 1,
    borrowing 8 GPUs. Job 3 of b (priority 100, 2 pods of 6 GPUs: within b's nominal 12) needs 6
    free GPUs on both nodes. Preempting job 2 brings a back to its nominal quota and frees node 1
    only; jobs 0 and 1 are then a's own: the candidates run out and nobody is preempted."""
    cluster = racks(2, 2)
    queues = [ClusterQueue("a", 4), ClusterQueue("b", 12)]
    jobs = [Job(0, 0, 100, 1, 4, "a"), Job(1, 1, 100, 1, 4, "a"), Job(2, 2, 100, 1, 4, "a"),
            Job(3, 3, 10, 2, 6, "b", 100)]  # fmt: skip
    events = submission.function("schedule")(jobs, queues, cluster)
    assert_valid(events, jobs, queues, cluster, "a reclaim that runs out of borrowed jobs")
    preempted = [(e["time"], e["job"], e["by"]) for e in events if e["event"] == "preempt"]
    got = starts(events)
    assert preempted == [] and got[3] == 102, (
        f"expected no preemption (after job 2, queue a borrows nothing, so jobs 0 and 1 are skipped and "
        f"job 3 still does not fit) and job 3 to start at 102, when node 1 is free again; got preemptions "
        f"(minute, job, by) {preempted} and starts {got} ({WHERE}, step 1)"
    )


@pytest.mark.points(2)
def test_a_queue_at_its_borrowing_limit_waits_while_another_queue_starts(submission):
    """Queue a: 8 GPUs nominal, may borrow 8; b: 24. Three whole-node jobs of a: the third waits
    for a's quota though a node is free; b's job, submitted later, takes that node."""
    cluster = racks(4, 4)
    queues = [ClusterQueue("a", 8, borrowing_limit=8), ClusterQueue("b", 24)]
    jobs = [Job(0, 0, 30, 1, 8, "a"), Job(1, 0, 40, 1, 8, "a"), Job(2, 0, 20, 1, 8, "a"), Job(3, 1, 10, 1, 8, "b")]
    events = submission.function("schedule")(jobs, queues, cluster)
    assert_valid(events, jobs, queues, cluster, "a queue at its borrowing limit")
    got = starts(events)
    assert got == {0: 0, 1: 0, 3: 1, 2: 30}, (
        f"expected starts {{0: 0, 1: 0, 3: 1, 2: 30}}: job 2 would put a at 24 GPUs, beyond 8 nominal + 8 "
        f"borrowed, so it waits until job 0 ends; job 3 of b passes it; got {got} ({WHERE})"
    )


def _day_figures(submission) -> tuple[list[tuple[float, float]], str]:
    """(mean wait, utilization over the day) of each DAY_TRACES trace, and a table of them."""
    schedule = submission.function("schedule")
    figures, rows = [], []
    for (nodes, seed), (ref_wait, ref_utilization) in DAY_TRACES.items():
        cluster = Cluster.h100_cluster(nodes, topology="fat_tree")
        queues = default_queues(cluster)
        jobs = job_trace(seed, nodes)
        events = schedule(jobs, queues, cluster)
        assert_valid(events, jobs, queues, cluster, f"job_trace({seed}, {nodes})")
        wait, used = mean_wait(events, jobs), utilization(events, jobs, cluster, end=24 * 60)
        figures.append((wait, used))
        rows.append(f"job_trace({seed}, {nodes}) on {nodes} nodes: mean wait {wait:.1f} min (reference "
                    f"{ref_wait}), utilization over the day {used:.3f} (reference {ref_utilization})")  # fmt: skip
    return figures, "\n  ".join(rows)


@pytest.mark.points(2)
def test_a_days_mean_wait_is_near_the_references(submission):
    figures, table = _day_figures(submission)
    total, ref_total = sum(w for w, _ in figures), sum(w for w, _ in DAY_TRACES.values())
    assert total <= WAIT_SLACK * ref_total, (
        f"the mean waits of the {len(figures)} days add up to {total:.1f} minutes, more than {WAIT_SLACK} x the "
        f"reference's {ref_total:.1f} (backfill: a job that cannot delay the head starts at once):\n  {table}"
    )


@pytest.mark.points(2)
def test_a_days_utilization_is_near_the_references(submission):
    figures, table = _day_figures(submission)
    mean = sum(u for _, u in figures) / len(figures)
    ref_mean = sum(u for _, u in DAY_TRACES.values()) / len(DAY_TRACES)
    assert mean >= ref_mean - UTILIZATION_SLACK, (
        f"the GPUs are busy {mean:.3f} of the day on average, below the reference's {ref_mean:.3f} - "
        f"{UTILIZATION_SLACK} (idle GPUs while jobs wait: backfill the holes):\n  {table}"
    )


@pytest.mark.points(2)
def test_schedule_refuses_bad_input_with_value_error(submission):
    schedule = submission.function("schedule")
    cluster = racks(4, 4)
    queues = [ClusterQueue("a", 16), ClusterQueue("b", 16)]
    ok = [Job(0, 0, 10, 1, 8, "a")]
    for jobs, qs in (
        (ok, []),  # no queue
        (ok, [ClusterQueue("a", 16), ClusterQueue("a", 16)]),  # two queues named a
        (ok, [ClusterQueue("a", 16), ClusterQueue("b", 8)]),  # quotas of 24 GPUs for a cluster of 32
        (ok, ("a", 32)),
        ([Job(0, 0, 10, 1, 8, "a"), Job(0, 5, 10, 1, 8, "b")], queues),  # two jobs with id 0
        ([Job(0, 0, 10, 1, 8, "c")], queues),  # no queue c
        ([Job(0, 0, 10, 5, 8, "a")], [ClusterQueue("a", 32)]),  # 5 whole nodes on 4
        ([Job(0, 0, 10, 1, 16, "a")], queues),  # a pod larger than a node
        # 9 pods of 3 GPUs: 27 of the 32 GPUs, but a node holds 2 such pods: 8 at most
        ([Job(0, 0, 10, 9, 3, "a")], [ClusterQueue("a", 32)]),
        ([Job(0, 0, 10, 3, 8, "a")], [ClusterQueue("a", 8, borrowing_limit=8), ClusterQueue("b", 24)]),
        ([(0, 0, 10, 1, 8, "a")], queues),  # not a Job
    ):
        expect_exception("ValueError", lambda j=jobs, q=qs: schedule(j, q, cluster))
