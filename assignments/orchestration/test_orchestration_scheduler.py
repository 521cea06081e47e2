"""Public tests for scheduler.py: run them while you work with

    pytest assignments/orchestration -k scheduler

Your functions run in a worker process, never inside pytest. The cluster is module cluster's
model (grader/models/cluster.py); jobs, queues, day traces, the checker of a schedule's events
and its metrics are given in grader/models/job_trace.py. The hidden suite checks place_gang
against a brute force over every placement, every placement of a day against the best on the
GPUs then free (priced with module cluster's simulator), day traces against every rule of
job_trace.check_events, small cases against the least total wait of any schedule, backfilling,
reclaiming and quotas on cases whose outcome the docstring fixes, and a day's mean wait and
utilization against the reference's. `make grade` gives the score.
"""

from __future__ import annotations

from grader.models.cluster import Cluster
from grader.models.job_trace import ClusterQueue, Job, check_events, leaf_of_node


def racks(nodes: int, per_leaf: int) -> Cluster:
    """DGX H100 nodes on a fat-tree whose leaves hold `per_leaf` nodes each."""
    return Cluster(nodes=nodes, gpus_per_node=8, nvlink_GBps=450.0, nics_per_node=8, nic_Gbps=400.0,
                   topology="fat_tree", leaf_down_ports=8 * per_leaf)  # fmt: skip


def test_place_gang_keeps_a_two_node_job_under_one_leaf(submission):
    """Leaves {0, 1} and {2, 3}; nodes 1 and 2 are free, and so is node 3: the job goes on 2 and
    3, under one leaf, not on 1 and 2 across the spine."""
    cluster = racks(4, 2)
    got = submission.function("place_gang")([0, 8, 8, 8], 2, 8, cluster)
    assert got == [2, 3], (
        f"expected nodes [2, 3] (one leaf: {leaf_of_node(cluster, 2)}), got {got}: the ring of nodes 1 and 2 "
        f"crosses the spine (see place_gang's docstring)"
    )


def test_place_gang_packs_a_small_pod_onto_a_busy_node(submission):
    cluster = racks(2, 2)
    got = submission.function("place_gang")([8, 4], 1, 4, cluster)
    assert got == [1], f"best fit: node 1 has just the 4 free GPUs the pod needs; expected [1], got {got}"


def test_place_gang_returns_none_when_no_node_holds_a_pod(submission):
    got = submission.function("place_gang")([4, 4], 1, 8, racks(2, 2))
    assert got is None, f"8 free GPUs in all, but no node has 8: expected None, got {got}"


def test_schedule_backfills_a_short_job_before_a_two_node_job(submission):
    """Job 0 holds node 0 until minute 60; job 1 needs both nodes, so it waits until 60; job 2
    ends at 52 on the free node, before job 1's shadow time: it starts at once."""
    cluster = racks(2, 2)
    queues = [ClusterQueue("team", 16)]
    jobs = [Job(0, 0, 60, 1, 8, "team"), Job(1, 1, 30, 2, 8, "team"), Job(2, 2, 50, 1, 8, "team")]
    events = submission.function("schedule")(jobs, queues, cluster)
    problems = check_events(events, jobs, queues, cluster)
    assert not problems, "\n".join(problems)
    starts = {e["job"]: e["time"] for e in events if e["event"] == "start"}
    assert starts == {0: 0, 1: 60, 2: 2}, f"expected starts {{0: 0, 1: 60, 2: 2}}, got {starts}"
    assert events[:2] == [
        {"time": 0, "event": "submit", "job": 0},
        {"time": 0, "event": "start", "job": 0, "nodes": events[1].get("nodes")},
    ], f"the first events are job 0's submit and start at minute 0, got {events[:2]}"
