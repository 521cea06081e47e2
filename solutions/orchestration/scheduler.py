"""Scheduling training jobs on a GPU cluster: gangs placed on the topology, quotas, preemption and
backfilling (lecture 15-orchestration, sections 3 and 4).

The cluster is module cluster's model (grader/models/cluster.py): `cluster.nodes` nodes of
`cluster.gpus_per_node` GPUs, each node one NVLink domain, hanging off leaf switches
(`leaf_of_node(cluster, node)`; a fat-tree of Cluster.h100_cluster(n, topology="fat_tree") puts 4
DGX H100 under each leaf), leaves joined by the spine. Jobs, queues, the trace, the checker of a
schedule and its metrics are given in grader/models/job_trace.py (read its docstring: the events a
schedule lists, and what a preempted job loses).
"""

from __future__ import annotations

from collections import Counter

from grader.models.cluster import Cluster
from grader.models.job_trace import ClusterQueue, Job, leaf_of_node


def place_gang(free_gpus: list[int], pods: int, gpus_per_pod: int, cluster: Cluster) -> list[int] | None:
    """Place a gang of `pods` pods of `gpus_per_pod` GPUs each on the free GPUs of `cluster`, all
    of them or none: the node of each pod, as a list of `pods` node ids in ascending order (pods
    of one node side by side), or None when the gang does not fit. `free_gpus[n]` is the number
    of free GPUs of node n; a pod sits on one node, and a node holds at most
    `free_gpus[n] // gpus_per_pod` of the gang's pods.

    The placement spans the fewest leaf switches (`leaf_of_node`) that can hold the gang, and,
    among those, the fewest nodes: a job that fits in one node stays inside its NVLink domain, a
    job that fits under one leaf never sends a byte over the spine. The course prices it with
    module cluster's simulator (job_trace.ring_traffic): a ring all-reduce over the pods in node
    order crosses two NIC links per node change and two spine links per leaf change. Among those,
    it is a best fit: the nodes it uses have the fewest free GPUs in all (before the gang is
    placed), so small jobs pack onto nodes already in use and whole nodes stay free for the large
    ones. Between placements that still tie, which one you return is yours to choose.

    Raises ValueError when free_gpus is not a list of cluster.nodes integers each in
    0 .. cluster.gpus_per_node, pods is not an integer >= 1, or gpus_per_pod is not an integer in
    1 .. cluster.gpus_per_node (bool is not an integer here).
    """
    ### BEGIN SOLUTION
    _check_free(free_gpus, cluster)
    if not _whole(pods) or pods < 1:
        raise ValueError(f"pods must be an integer >= 1, not {pods!r}")
    if not _whole(gpus_per_pod) or not 1 <= gpus_per_pod <= cluster.gpus_per_node:
        raise ValueError(f"gpus_per_pod must be an integer in 1 .. {cluster.gpus_per_node}, not {gpus_per_pod!r}")
    slots = [free // gpus_per_pod for free in free_gpus]
    if sum(slots) < pods:
        return None
    nodes_of_leaf: dict[int, list[int]] = {}
    for node in range(cluster.nodes):
        if slots[node]:
            nodes_of_leaf.setdefault(leaf_of_node(cluster, node), []).append(node)
    # best[c] = (leaves, nodes, free GPUs of the nodes used, chosen nodes) covering c pods
    # (c capped at `pods`); cost compared lexicographically: leaves, then nodes, then best fit.
    best: dict[int, tuple[int, int, int, tuple[int, ...]]] = {0: (0, 0, 0, ())}
    for nodes in nodes_of_leaf.values():
        within = _cover_within_leaf(nodes, slots, free_gpus, pods)
        merged = dict(best)
        for covered, (leaves, used, spare, chosen) in best.items():
            for extra, (n, f, picked) in within.items():
                key = min(pods, covered + extra)
                cost = (leaves + 1, used + n, spare + f, chosen + picked)
                if key not in merged or cost[:3] < merged[key][:3]:
                    merged[key] = cost
        best = merged
    if pods not in best:
        return None
    placement, left = [], pods
    for node in sorted(best[pods][3], key=lambda n: (-slots[n], n)):
        take = min(slots[node], left)
        placement += [node] * take
        left -= take
    return sorted(placement)
    ### END SOLUTION


def schedule(jobs: list[Job], queues: list[ClusterQueue], cluster: Cluster, backfill: bool = True) -> list[dict]:
    """Run the cluster over the whole trace `jobs` (in any order) and return what happened, as
    the list of events of job_trace's module docstring: submit, start (with the node of each
    pod), preempt (with the job that takes the GPUs) and finish, in the order they happen. Every
    job is submitted to the ClusterQueue its `queue` names; all `queues` form one cohort.

    The clock: time goes from event to event in whole minutes. At each minute at which a job
    finishes or is submitted: first every running job whose start + duration is that minute
    finishes (in job id order), then every job submitted at that minute is submitted (in job
    id order), then one scheduling pass runs. The run ends when every job has finished.

    A scheduling pass takes the waiting jobs, as they are when it begins, in the order of
    priority (highest first), then submit minute, then job id, and looks at each in turn.
    Quota (Kueue): job J of queue q may start only when usage[q] + J.gpus <= q.limit(cohort)
    (ClusterQueue.limit: its nominal quota plus what it may borrow), where usage[q] counts the
    GPUs of q's running jobs. The nominal quotas share out the cluster's GPUs, so the cohort's
    quota is the cluster and a queue borrows what others leave idle.

    1. Until some job is the head: J starts if the quota lets it and place_gang(free GPUs,
       J.pods, J.gpus_per_pod, cluster) places it. Otherwise, when J fits in its queue's
       nominal quota (usage[q] + J.gpus <= q.nominal_quota), it reclaims it (Kueue's
       reclaimWithinCohort: LowerPriority): the candidates are the running jobs of other
       queues with a lower priority than J's, taken lowest priority first, then latest start
       first, then highest id first; skipping any candidate whose queue no longer uses more
       than its nominal quota (it borrows nothing any more), take them away one at a time
       until place_gang places J on the GPUs then free. If that happens, those jobs are
       preempted, in the order taken, and J starts on that placement; if the candidates run
       out first, nobody is preempted.
    2. The first job that does not start in step 1 is the head of the line. With
       backfill=False the pass ends there (first come, first served). With backfill=True it
       gets a reservation (EASY backfilling, Lifka 1995): its shadow time is the first end
       time (start + duration) of the running jobs at which, once every running job that ends
       by then has ended, the quota lets it start and place_gang places it on the GPUs then
       free; that placement is its reservation.
    3. After the head, a job K starts only if the quota lets it, place_gang(free GPUs, K)
       places it, and it cannot delay the head: either K ends by the shadow time
       (now + K.duration <= shadow time), or K leaves the reservation whole: on every node its
       placement takes no more than the GPUs free at the shadow time that the reservation does
       not use, and, when K is of the head's queue, its GPUs fit in what the head's queue's
       limit leaves at the shadow time beside the head (both less what the jobs that started
       this way before K in the pass took).

    Preempted jobs wait again from the next pass on, with their first submit minute (they keep
    their place in line) and run their whole duration when they start again.

    Raises ValueError when queues is not a non-empty list of ClusterQueue with distinct names
    whose nominal quotas add up to cluster.num_gpus, jobs is not a list of Job with distinct
    ids, or a job names no queue of `queues` or can never run: more GPUs per pod than a node
    has, a gang that does not fit the empty cluster, or more GPUs than its queue's limit.
    """
    ### BEGIN SOLUTION
    queue_of, cohort = _check_queues(queues, cluster)
    _check_jobs(jobs, queue_of, cohort, cluster)
    limit = {name: queue.limit(cohort) for name, queue in queue_of.items()}
    arrivals = sorted(jobs, key=lambda job: (job.submit, job.id))
    free = [cluster.gpus_per_node] * cluster.nodes
    usage: Counter[str] = Counter()
    running: dict[int, tuple[Job, int, list[int]]] = {}  # id -> (job, start, nodes)
    waiting: list[Job] = []
    events: list[dict] = []
    next_arrival = 0

    def start(job: Job, nodes: list[int], now: int) -> None:
        for node in nodes:
            free[node] -= job.gpus_per_pod
        usage[job.queue] += job.gpus
        running[job.id] = (job, now, nodes)
        waiting.remove(job)
        events.append({"time": now, "event": "start", "job": job.id, "nodes": list(nodes)})

    def stop(job_id: int) -> Job:
        job, _, nodes = running.pop(job_id)
        for node in nodes:
            free[node] += job.gpus_per_pod
        usage[job.queue] -= job.gpus
        return job

    while next_arrival < len(arrivals) or running:
        ends = [start_ + job.duration for job, start_, _ in running.values()]
        now = min(ends + ([arrivals[next_arrival].submit] if next_arrival < len(arrivals) else []))
        for job_id in sorted(j for j, (job, s, _) in running.items() if s + job.duration == now):
            stop(job_id)
            events.append({"time": now, "event": "finish", "job": job_id})
        while next_arrival < len(arrivals) and arrivals[next_arrival].submit == now:
            job = arrivals[next_arrival]
            waiting.append(job)
            events.append({"time": now, "event": "submit", "job": job.id})
            next_arrival += 1

        # one scheduling pass
        head = reservation = None  # the head, and (shadow time, spare GPUs per node, spare quota)
        for job in sorted(waiting, key=lambda j: (-j.priority, j.submit, j.id)):
            fits_quota = usage[job.queue] + job.gpus <= limit[job.queue]
            if head is None:
                nodes = place_gang(free, job.pods, job.gpus_per_pod, cluster) if fits_quota else None
                if nodes is None and usage[job.queue] + job.gpus <= queue_of[job.queue].nominal_quota:
                    victims, nodes = _reclaim(job, running, usage, free, queue_of, cluster)
                    for victim in victims:
                        waiting.append(stop(victim))
                        events.append({"time": now, "event": "preempt", "job": victim, "by": job.id})
                if nodes is not None:
                    start(job, nodes, now)
                    continue
                if not backfill:
                    break
                head, reservation = job, _reserve(job, running, free, usage, limit, cluster)
                continue
            shadow, spare, quota_left = reservation
            nodes = place_gang(free, job.pods, job.gpus_per_pod, cluster) if fits_quota else None
            if nodes is None:
                continue
            takes = Counter({node: pods * job.gpus_per_pod for node, pods in Counter(nodes).items()})
            same_queue = job.queue == head.queue
            if now + job.duration <= shadow:
                start(job, nodes, now)
            elif all(gpus <= spare[node] for node, gpus in takes.items()) and (
                not same_queue or job.gpus <= quota_left
            ):
                spare.subtract(takes)
                reservation = (shadow, spare, quota_left - job.gpus if same_queue else quota_left)
                start(job, nodes, now)
        # preempted jobs rejoined `waiting` during the pass; the next pass sees them in line
    return events
    ### END SOLUTION


### BEGIN SOLUTION
def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_free(free_gpus: object, cluster: Cluster) -> None:
    if (
        not isinstance(free_gpus, list)
        or len(free_gpus) != cluster.nodes
        or not all(_whole(f) and 0 <= f <= cluster.gpus_per_node for f in free_gpus)
    ):
        raise ValueError(
            f"free_gpus must be a list of {cluster.nodes} integers in 0 .. {cluster.gpus_per_node} "
            f"(one per node), not {free_gpus!r}"
        )


def _cover_within_leaf(
    nodes: list[int], slots: list[int], free_gpus: list[int], pods: int
) -> dict[int, tuple[int, int, tuple[int, ...]]]:
    """For each number of pods c (capped at `pods`) that some nodes of one leaf can hold: the
    fewest of its nodes that hold c, with the fewest free GPUs among them (best fit)."""
    best: dict[int, tuple[int, int, tuple[int, ...]]] = {0: (0, 0, ())}
    for node in nodes:
        merged = dict(best)
        for covered, (n, f, chosen) in best.items():
            key = min(pods, covered + slots[node])
            cost = (n + 1, f + free_gpus[node], (*chosen, node))
            if key not in merged or cost[:2] < merged[key][:2]:
                merged[key] = cost
        best = merged
    del best[0]
    return best


def _reclaim(job, running, usage, free, queue_of, cluster) -> tuple[list[int], list[int] | None]:
    """The running jobs `job` preempts to reclaim its queue's nominal quota, and its placement
    then; ([], None) when the lower-priority borrowed jobs do not make room."""
    candidates = sorted(
        (other for other in running.values() if other[0].queue != job.queue and other[0].priority < job.priority),
        key=lambda r: (r[0].priority, -r[1], -r[0].id),
    )
    used, spare, victims = Counter(usage), list(free), []
    for other, _, nodes in candidates:
        if used[other.queue] <= queue_of[other.queue].nominal_quota:
            continue  # its queue is no longer borrowing: what it runs on is its own
        used[other.queue] -= other.gpus
        for node in nodes:
            spare[node] += other.gpus_per_pod
        victims.append(other.id)
        placement = place_gang(spare, job.pods, job.gpus_per_pod, cluster)
        if placement is not None:
            return victims, placement
    return [], None


def _reserve(job, running, free, usage, limit, cluster) -> tuple[int, Counter, int]:
    """The head's shadow time, the GPUs per node free then that its reservation leaves, and what
    its queue's limit leaves beside it then."""
    later, used = list(free), Counter(usage)
    for end in sorted({s + other.duration for other, s, _ in running.values()}):
        for other, s, nodes in running.values():
            if s + other.duration == end:
                used[other.queue] -= other.gpus
                for node in nodes:
                    later[node] += other.gpus_per_pod
        if used[job.queue] + job.gpus > limit[job.queue]:
            continue
        placement = place_gang(later, job.pods, job.gpus_per_pod, cluster)
        if placement is not None:
            spare = Counter(dict(enumerate(later)))
            spare.subtract({node: pods * job.gpus_per_pod for node, pods in Counter(placement).items()})
            return end, spare, limit[job.queue] - used[job.queue] - job.gpus
    raise AssertionError("unreachable: a checked job fits the empty cluster and its queue's limit")


def _check_queues(queues: object, cluster: Cluster) -> tuple[dict[str, ClusterQueue], int]:
    if not isinstance(queues, list) or not queues or not all(isinstance(q, ClusterQueue) for q in queues):
        raise ValueError(f"queues must be a non-empty list of ClusterQueue, not {queues!r}")
    names = [queue.name for queue in queues]
    if len(set(names)) != len(names):
        raise ValueError(f"two queues share a name: {names}")
    cohort = sum(queue.nominal_quota for queue in queues)
    if cohort != cluster.num_gpus:
        raise ValueError(
            f"the nominal quotas add up to {cohort} GPUs; they must share out the cluster's {cluster.num_gpus}"
        )
    return {queue.name: queue for queue in queues}, cohort


def _check_jobs(jobs: object, queue_of: dict[str, ClusterQueue], cohort: int, cluster: Cluster) -> None:
    if not isinstance(jobs, list) or not all(isinstance(job, Job) for job in jobs):
        raise ValueError(f"jobs must be a list of Job, not {type(jobs).__name__}")
    ids = [job.id for job in jobs]
    if len(set(ids)) != len(ids):
        raise ValueError(f"two jobs share an id: {sorted(i for i, n in Counter(ids).items() if n > 1)}")
    for job in jobs:
        if job.queue not in queue_of:
            raise ValueError(f"job {job.id} is submitted to queue {job.queue!r}, which is not one of {list(queue_of)}")
        if job.gpus_per_pod > cluster.gpus_per_node:
            raise ValueError(
                f"job {job.id} asks {job.gpus_per_pod} GPUs per pod; a node has {cluster.gpus_per_node}: "
                f"it can never run"
            )
        if job.pods > cluster.nodes * (cluster.gpus_per_node // job.gpus_per_pod):
            raise ValueError(f"job {job.id}'s {job.pods} pods of {job.gpus_per_pod} GPUs do not fit the empty cluster")
        if job.gpus > queue_of[job.queue].limit(cohort):
            raise ValueError(
                f"job {job.id} needs {job.gpus} GPUs; queue {job.queue!r} may use at most "
                f"{queue_of[job.queue].limit(cohort)}: it can never run"
            )


### END SOLUTION
