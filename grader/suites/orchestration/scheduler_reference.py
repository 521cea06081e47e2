"""What the scheduler's hidden tests compare against, found by brute force (not the reference's
algorithm): the best placement of a gang on a free set, by enumerating the leaf sets and the node
sets of the fewest nodes; the least total wait of a handful of jobs on a few nodes, by enumerating
every active schedule (each job starts at a submission or a finish, on every placement); and the
free GPUs before each start of a schedule, replayed from its events."""

from __future__ import annotations

from collections import Counter
from itertools import combinations, combinations_with_replacement

from grader.models.cluster import Cluster
from grader.models.job_trace import Job, leaf_of_node, ring_traffic


def placement_cost(cluster: Cluster, free: list[int], nodes: list[int]) -> tuple[int, int, int]:
    """(leaves spanned, nodes spanned, free GPUs of those nodes before the placement)."""
    used = set(nodes)
    return len({leaf_of_node(cluster, n) for n in used}), len(used), sum(free[n] for n in used)


def best_placement_cost(free: list[int], pods: int, gpus_per_pod: int, cluster: Cluster) -> tuple[int, int, int] | None:
    """The least placement_cost of any placement of the gang on `free` (None: none fits). For
    every set of leaves, the fewest nodes of theirs that hold the gang, and every node set of that
    size: an optimal placement is among them (its leaves' set gives no fewer nodes)."""
    slots = [f // gpus_per_pod for f in free]
    leaves = sorted({leaf_of_node(cluster, n) for n in range(cluster.nodes)})
    best = None
    for size in range(1, len(leaves) + 1):
        for chosen in combinations(leaves, size):
            members = [n for n in range(cluster.nodes) if leaf_of_node(cluster, n) in chosen and slots[n]]
            ranked = sorted((slots[n] for n in members), reverse=True)
            need = next((k for k in range(1, len(ranked) + 1) if sum(ranked[:k]) >= pods), None)
            if need is None:
                continue
            for nodes in combinations(members, need):
                if sum(slots[n] for n in nodes) >= pods:
                    cost = placement_cost(cluster, free, list(nodes))
                    best = cost if best is None or cost < best else best
    return best


def ring_bytes(cluster: Cluster, nodes: list[int], gpus_per_pod: int) -> tuple[float, float]:
    """(spine bytes, NIC bytes) of a 1 GiB ring all-reduce over the placement (module cluster's
    simulator, job_trace.ring_traffic)."""
    traffic = ring_traffic(cluster, nodes, gpus_per_pod)
    return traffic["spine"], traffic["nic"]


def a_placement_of_cost(free: list[int], pods: int, gpus_per_pod: int, cluster: Cluster, cost) -> list[int]:
    """Some placement of the gang whose placement_cost is `cost` (for a failure message)."""
    slots = [f // gpus_per_pod for f in free]
    for nodes in combinations(range(cluster.nodes), cost[1]):
        if sum(slots[n] for n in nodes) >= pods and placement_cost(cluster, free, list(nodes)) == cost:
            out, left = [], pods
            for n in nodes:
                out += [n] * min(slots[n], left)
                left -= min(slots[n], left)
            return sorted(out)
    raise AssertionError("no placement of that cost")


def free_before_each_start(events: list[dict], jobs: list[Job], cluster: Cluster):
    """(start event, free GPUs per node just before it) for every start of a valid schedule."""
    by_id = {job.id: job for job in jobs}
    free = [cluster.gpus_per_node] * cluster.nodes
    placed: dict[int, list[int]] = {}
    for event in events:
        job = by_id[event["job"]]
        if event["event"] == "start":
            yield event, list(free)
            for node in event["nodes"]:
                free[node] -= job.gpus_per_pod
            placed[job.id] = event["nodes"]
        elif event["event"] in ("finish", "preempt"):
            for node in placed.pop(job.id):
                free[node] += job.gpus_per_pod


def least_total_wait(jobs: list[Job], cluster: Cluster) -> int:
    """The least sum of waits (start - submit) of any schedule without preemption: every active
    schedule (a job starts only at a submission or a finish) on every placement, depth first with
    a bound. For a handful of jobs on a few nodes only."""
    gpn, n = cluster.gpus_per_node, cluster.nodes
    jobs = sorted(jobs, key=lambda j: j.id)
    best = [sum(60 * 24 * 365 for _ in jobs)]

    def placements(free: tuple[int, ...], job: Job):
        seen = set()
        for combo in combinations_with_replacement(range(n), job.pods):
            need = Counter(combo)
            if all(need[x] * job.gpus_per_pod <= free[x] for x in need) and combo not in seen:
                seen.add(combo)
                yield combo

    def at(now, free, running, waiting, cost, first=0):
        if cost >= best[0]:
            return
        for i in range(first, len(jobs)):
            if i in waiting:
                job = jobs[i]
                for combo in placements(free, job):
                    f2 = list(free)
                    for x in combo:
                        f2[x] -= job.gpus_per_pod
                    at(
                        now,
                        tuple(f2),
                        (*running, (now + job.duration, combo, job.gpus_per_pod)),
                        waiting - {i},
                        cost + now - job.submit,
                        i + 1,
                    )
        later = [end for end, _, _ in running] + [j.submit for j in jobs if j.submit > now]
        if not later:
            if not waiting:
                best[0] = min(best[0], cost)
            return
        nxt = min(later)
        if cost + sum(nxt - jobs[i].submit for i in waiting) >= best[0]:
            return
        f2, r2 = list(free), []
        for end, combo, g in running:
            if end <= nxt:
                for x in combo:
                    f2[x] += g
            else:
                r2.append((end, combo, g))
        arriving = {i for i, j in enumerate(jobs) if j.submit == nxt}
        at(nxt, tuple(f2), tuple(r2), waiting | arriving, cost)

    first = min(j.submit for j in jobs)
    at(first, tuple([gpn] * n), (), frozenset(i for i, j in enumerate(jobs) if j.submit == first), 0)
    return best[0]
