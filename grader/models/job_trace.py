"""Given code of module orchestration, part 2 (read it): training jobs and the queues they are
submitted to, a seeded trace of a cluster's day, the checker of a schedule's events, and the
metrics of a schedule. Trusted: the grader runs the same code.

    from grader.models.cluster import Cluster
    from grader.models.job_trace import check_events, default_queues, job_trace, mean_wait, utilization
    cluster = Cluster.h100_cluster(nodes=16, topology="fat_tree")   # 4 leaves of 4 DGX H100
    jobs = job_trace(seed=0, nodes=16)                              # a day of jobs
    queues = default_queues(cluster)                                # two teams, one cohort
    events = schedule(jobs, queues, cluster)                        # yours (scheduler.py)
    check_events(events, jobs, queues, cluster)                     # [] when nothing is wrong
    utilization(events, jobs, cluster), mean_wait(events, jobs)

Time is in whole minutes (ints), so every figure here is exact and the same on every machine.

A job is a gang: `pods` pods of `gpus_per_pod` GPUs each, all alike (an Indexed Job, a PyTorchJob,
a JobSet of one replicated job), that runs only when all of its pods run. A pod sits on one node;
which GPUs of the node it gets is the device plugin's business, so a placement names the node of
each pod and nothing more. Once started, a job runs `duration` minutes, unless it is preempted:
then it is stopped, its GPUs are freed at once, and it waits again (its work is lost: it runs its
whole duration when it starts again, as a job that restarts from its step 0 does).

A schedule is a list of events, plain dicts, in the order they happen:

    {"time": t, "event": "submit", "job": id}
    {"time": t, "event": "start", "job": id, "nodes": [node of pod 0, node of pod 1, ...]}
    {"time": t, "event": "preempt", "job": id, "by": id of the job that takes its GPUs}
    {"time": t, "event": "finish", "job": id}

Quotas are Kueue's (kueue.x-k8s.io/v1beta1 ClusterQueue), reduced to one resource, nvidia.com/gpu,
and one cohort that holds every queue: a queue may use its `nominal_quota`, and borrow the unused
quota of the others, at most `borrowing_limit` GPUs beyond its own (None: no limit but the
cohort's). The cohort's quota is the sum of the nominal quotas.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass

from grader.models.cluster import Cluster, simulate

EVENTS = ("submit", "start", "preempt", "finish")
POD_SIZES = (1, 2, 4, 8)  # GPUs per pod in the trace; an 8-GPU pod is a whole DGX H100


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class Job:
    """A training job: a gang of `pods` pods of `gpus_per_pod` GPUs, submitted at minute `submit`
    to the ClusterQueue named `queue`, running `duration` minutes once started. A higher
    `priority` is more important (a Kueue WorkloadPriorityClass value)."""

    id: int
    submit: int
    duration: int
    pods: int
    gpus_per_pod: int
    queue: str
    priority: int = 0

    def __post_init__(self) -> None:
        for name, low in (("id", 0), ("submit", 0), ("duration", 1), ("pods", 1), ("gpus_per_pod", 1)):
            value = getattr(self, name)
            if not _whole(value) or value < low:
                raise ValueError(f"Job.{name} must be an integer >= {low}, not {value!r}")
        if not _whole(self.priority):
            raise ValueError(f"Job.priority must be an integer, not {self.priority!r}")
        if not isinstance(self.queue, str) or not self.queue:
            raise ValueError(f"Job.queue must be a queue's name, not {self.queue!r}")

    @property
    def gpus(self) -> int:
        """GPUs the whole gang holds while it runs."""
        return self.pods * self.gpus_per_pod


@dataclass(frozen=True)
class ClusterQueue:
    """A Kueue ClusterQueue reduced to GPUs: `nominal_quota` GPUs of its own, and at most
    `borrowing_limit` GPUs more, borrowed from the cohort's unused quota (None: no limit)."""

    name: str
    nominal_quota: int
    borrowing_limit: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"ClusterQueue.name must be a non-empty string, not {self.name!r}")
        if not _whole(self.nominal_quota) or self.nominal_quota < 0:
            raise ValueError(f"ClusterQueue.nominal_quota must be an integer >= 0, not {self.nominal_quota!r}")
        if self.borrowing_limit is not None and (not _whole(self.borrowing_limit) or self.borrowing_limit < 0):
            raise ValueError(
                f"ClusterQueue.borrowing_limit must be None or an integer >= 0, not {self.borrowing_limit!r}"
            )

    def limit(self, cohort_quota: int) -> int:
        """The most GPUs this queue may use at once in a cohort of `cohort_quota` GPUs."""
        borrow = cohort_quota if self.borrowing_limit is None else self.borrowing_limit
        return min(self.nominal_quota + borrow, cohort_quota)


def leaf_of_node(cluster: Cluster, node: int) -> int:
    """The leaf switch a node hangs off: on a fat-tree every NIC of a node plugs into the same
    leaf (`leaf_down_ports // nics_per_node` nodes per leaf: 4 DGX H100 per leaf in
    Cluster.h100_cluster(..., topology="fat_tree")). On a rail-optimised cluster it names the
    scalable unit (rail 0's leaf of it): nodes of one unit share all their leaves."""
    if not _whole(node) or not 0 <= node < cluster.nodes:
        raise ValueError(f"node {node!r} is not in the cluster (0..{cluster.nodes - 1})")
    return cluster.leaf_of(node * cluster.gpus_per_node)


def default_queues(cluster: Cluster) -> list[ClusterQueue]:
    """The trace's two queues: "research" and "production", half of the cluster's GPUs each as
    nominal quota; research may borrow up to a quarter of the cluster, production any unused
    quota."""
    half = cluster.num_gpus // 2
    return [
        ClusterQueue("research", half, borrowing_limit=cluster.num_gpus // 4),
        ClusterQueue("production", cluster.num_gpus - half, borrowing_limit=None),
    ]


def job_trace(seed: int, nodes: int, hours: int = 24, load: float = 1.0, gpus_per_node: int = 8) -> list[Job]:
    """A seeded trace of jobs for a cluster of `nodes` nodes over `hours` hours, in submit order,
    ids 0, 1, 2, ... Sizes are those of a shared training cluster (Jeon et al. 2019, Philly; Hu
    et al. 2021, SenseTime's Helios): most jobs are small and short, most GPU-hours go to a few
    large ones. A job is one pod of 1, 2 or 4 GPUs (70 %), or 1, 2, 4 or up to a quarter of the
    cluster's nodes of whole-node pods (30 %); durations are log-uniform, 10 minutes to 4 hours
    for small jobs, 30 minutes to 12 hours for multi-node ones. Jobs go to "research" (60 %,
    priority 0) or "production" (40 %, priority 0, or 100 for one job in four). Arrivals are a
    Poisson process whose rate asks for `load` times the cluster's GPU-minutes. The same seed
    gives the same jobs on every machine (random.Random)."""
    if not _whole(nodes) or nodes < 1:
        raise ValueError(f"nodes must be an integer >= 1, not {nodes!r}")
    if not _whole(hours) or hours < 1:
        raise ValueError(f"hours must be an integer >= 1, not {hours!r}")
    if not isinstance(load, (int, float)) or not load > 0:
        raise ValueError(f"load must be a number > 0, not {load!r}")
    rng = random.Random(f"job_trace:{seed}")
    biggest = max(1, nodes // 4)
    shapes = []
    for _ in range(400):  # the mean GPU-minutes of a job, estimated on the same distribution
        shapes.append(_draw(rng, biggest, gpus_per_node))
    mean_gpu_minutes = sum(pods * gpus * minutes for pods, gpus, minutes in shapes) / len(shapes)
    rate = load * nodes * gpus_per_node / mean_gpu_minutes  # jobs per minute
    jobs, now = [], 0.0
    while True:
        now += rng.expovariate(rate)
        if now >= hours * 60:
            return jobs
        pods, gpus, minutes = _draw(rng, biggest, gpus_per_node)
        research = rng.random() < 0.6
        priority = 0 if research or rng.random() < 0.75 else 100
        queue = "research" if research else "production"
        jobs.append(Job(len(jobs), int(now), minutes, pods, gpus, queue, priority))


def _draw(rng: random.Random, biggest: int, gpus_per_node: int) -> tuple[int, int, int]:
    if rng.random() < 0.7:
        gpus = rng.choice([g for g in POD_SIZES[:3] if g <= gpus_per_node])
        return 1, gpus, round(10 * 24 ** rng.random())
    pods = rng.choice(sorted({min(n, biggest) for n in (1, 2, 4, biggest)}))
    return pods, gpus_per_node, round(30 * 24 ** rng.random())


# ---------------------------------------------------------------------------------------------
# Pricing a placement with module cluster's model


def placement_gpus(cluster: Cluster, nodes: list[int], gpus_per_pod: int) -> list[int]:
    """The GPU ids of a placement in ring order: the pods in the order given, each pod taking
    the next `gpus_per_pod` local GPUs of its node (pods of one node side by side)."""
    used: Counter[int] = Counter()
    gpus = []
    for node in nodes:
        first = node * cluster.gpus_per_node + used[node]
        gpus.extend(range(first, first + gpus_per_pod))
        used[node] += gpus_per_pod
    return gpus


def ring_traffic(cluster: Cluster, nodes: list[int], gpus_per_pod: int, nbytes: int = 2**30) -> dict:
    """What one ring all-reduce of `nbytes` over the job's GPUs costs on `cluster`, replayed by
    module cluster's simulator: the ring visits placement_gpus(...) in order and back to the
    first, GPU i sending 2 (p - 1) / p * nbytes to GPU i + 1 (lecture 1's ring, lecture 13's
    link classes). Returns {"nvlink": bytes, "nic": bytes, "spine": bytes, "seconds": makespan}.
    With the pods in node order, each node change crosses two NIC links and each leaf change two
    spine links: the fewer leaves and nodes a job spans, the less it puts on the network."""
    gpus = placement_gpus(cluster, sorted(nodes), gpus_per_pod)
    p = len(gpus)
    if p == 1:
        return {"nvlink": 0.0, "nic": 0.0, "spine": 0.0, "seconds": 0.0}
    # lecture 1's ring as two repeated steps: reduce-scatter (GPU i starts with chunk i and passes
    # on, reduced, what it received), then all-gather (GPU i starts with chunk i + 1, now whole)
    ring = [(gpus[i], gpus[(i + 1) % p]) for i in range(p)]
    steps = [
        (p - 1, [(src, dst, i, i + 1, "reduce") for i, (src, dst) in enumerate(ring)]),
        (p - 1, [(src, dst, (i + 1) % p, (i + 1) % p + 1, "copy") for i, (src, dst) in enumerate(ring)]),
    ]
    result = simulate(cluster, {"op": "all_reduce", "gpus": gpus, "nbytes": nbytes, "chunks": p, "steps": steps})
    return {**result.bytes_by_class(), "seconds": result.makespan}


# ---------------------------------------------------------------------------------------------
# Checking a schedule


def check_events(events: list[dict], jobs: list[Job], queues: list[ClusterQueue], cluster: Cluster) -> list[str]:
    """Replay a schedule's events and return every rule they break, as sentences (an empty list:
    none). The rules: events in time order, each a dict of the module docstring's shape; every job
    submitted once, at its submit time; a start only of a waiting job, with one node per pod
    (a gang starts whole: no pod left without a node), never more GPUs on a node than it has
    free (no GPU given twice), its queue within its limit (ClusterQueue.limit) and the cohort
    within the sum of nominal quotas; a finish exactly `duration` minutes after the job's last
    start; a preemption only of a running job, by a job that starts right after it at the same
    minute, of higher priority, from another queue, whose queue then stays within its own
    nominal quota (it reclaims what is its own), while the victim's queue uses more than its
    nominal quota (the victim runs on borrowed GPUs); and at the end every job finished (a job
    that never finishes is a deadlock, or a job forgotten)."""
    problems: list[str] = []
    by_id = {job.id: job for job in jobs}
    queue_of = {queue.name: queue for queue in queues}
    cohort = sum(queue.nominal_quota for queue in queues)
    free = [cluster.gpus_per_node] * cluster.nodes
    usage: Counter[str] = Counter()
    submitted: set[int] = set()
    running: dict[int, tuple[int, list[int]]] = {}  # job -> (start, nodes)
    finished: set[int] = set()
    reclaiming: dict[int, int] = {}  # preemptor -> minute it preempted, until it starts
    now = 0

    def note(index: int, text: str) -> None:
        problems.append(f"event {index} {events[index] if index < len(events) else ''}: {text}")

    def release(job: Job) -> None:
        nodes = running.pop(job.id)[1]  # only the pods that got a node hold GPUs
        for node in nodes:
            free[node] += job.gpus_per_pod
        usage[job.queue] -= len(nodes) * job.gpus_per_pod

    if not isinstance(events, list):
        return [f"a schedule is a list of events, not a {type(events).__name__}"]
    for index, event in enumerate(events):
        if not isinstance(event, dict) or event.get("event") not in EVENTS or not _whole(event.get("time")):
            note(index, f"an event is a dict with an int 'time' and an 'event' in {EVENTS}")
            continue
        kind, time, job = event["event"], event["time"], by_id.get(event.get("job"))
        if job is None:
            note(index, f"no job has id {event.get('job')!r}")
            continue
        if time < now:
            note(index, f"minute {time} comes after minute {now}: events must be in time order")
        now = max(now, time)
        for preemptor, minute in list(reclaiming.items()):
            if minute != time or not (kind == "preempt" or (kind == "start" and job.id == preemptor)):
                note(index, f"job {preemptor} preempted jobs at minute {minute} but did not start right after")
                del reclaiming[preemptor]
        if kind == "submit":
            if job.id in submitted:
                note(index, f"job {job.id} is submitted twice")
            elif time != job.submit:
                note(index, f"job {job.id} is submitted at minute {job.submit}, not {time}")
            submitted.add(job.id)
        elif kind == "start":
            if job.id not in submitted or job.id in running or job.id in finished:
                state = "running" if job.id in running else "finished" if job.id in finished else "not submitted yet"
                note(index, f"job {job.id} starts but is {state}")
                continue
            nodes = event.get("nodes")
            if (
                not isinstance(nodes, list)
                or len(nodes) != job.pods
                or not all(_whole(n) and 0 <= n < cluster.nodes for n in nodes)
            ):
                placed = sum(_whole(n) and 0 <= n < cluster.nodes for n in nodes) if isinstance(nodes, list) else 0
                note(
                    index,
                    f"partial gang: job {job.id} starts with {placed} of its {job.pods} pods on a node "
                    f"(nodes {nodes!r}); a gang starts whole or not at all",
                )
                nodes = [n for n in nodes if _whole(n) and 0 <= n < cluster.nodes] if isinstance(nodes, list) else []
            for node, pods in Counter(nodes).items():
                if pods * job.gpus_per_pod > free[node]:
                    note(
                        index,
                        f"job {job.id} puts {pods * job.gpus_per_pod} GPUs on node {node}, which has "
                        f"{free[node]} free: a GPU given twice",
                    )
                free[node] -= pods * job.gpus_per_pod
            usage[job.queue] += len(nodes) * job.gpus_per_pod
            queue = queue_of.get(job.queue)
            if queue is not None and usage[job.queue] > queue.limit(cohort):
                note(
                    index,
                    f"queue {job.queue!r} uses {usage[job.queue]} GPUs once job {job.id} starts, beyond its limit "
                    f"of {queue.limit(cohort)} (nominal {queue.nominal_quota} + borrowing limit)",
                )
            if sum(usage.values()) > cohort:
                note(index, f"the cohort uses {sum(usage.values())} GPUs, beyond its quota of {cohort}")
            if job.id in reclaiming:
                del reclaiming[job.id]
                if queue is not None and usage[job.queue] > queue.nominal_quota:
                    note(
                        index,
                        f"job {job.id} preempted other jobs but its queue {job.queue!r} then uses "
                        f"{usage[job.queue]} GPUs, beyond its nominal quota of {queue.nominal_quota}: "
                        f"only a queue that reclaims its own quota may preempt",
                    )
            running[job.id] = (time, nodes)
        elif kind == "finish":
            if job.id not in running:
                note(index, f"job {job.id} finishes but is not running")
                continue
            start = running[job.id][0]
            if time != start + job.duration:
                note(
                    index,
                    f"job {job.id} started at minute {start} and runs {job.duration}: it finishes at "
                    f"{start + job.duration}, not {time}",
                )
            release(job)
            finished.add(job.id)
        else:  # preempt
            by = by_id.get(event.get("by"))
            if job.id not in running:
                note(index, f"job {job.id} is preempted but is not running")
                continue
            if by is None or by.id in running or by.id not in submitted or by.id in finished:
                note(index, f"job {job.id} is preempted by {event.get('by')!r}, which is not a waiting job")
            else:
                victim_queue, by_queue = queue_of.get(job.queue), queue_of.get(by.queue)
                if by.priority <= job.priority:
                    note(
                        index,
                        f"job {job.id} (priority {job.priority}) is preempted by job {by.id} of priority "
                        f"{by.priority}: only a job of higher priority preempts",
                    )
                if by.queue == job.queue:
                    note(
                        index,
                        f"job {job.id} is preempted by job {by.id} of its own queue: only other queues "
                        f"reclaim their quota",
                    )
                if victim_queue is not None and usage[job.queue] <= victim_queue.nominal_quota:
                    note(
                        index,
                        f"job {job.id} is preempted while its queue {job.queue!r} uses {usage[job.queue]} "
                        f"GPUs, within its nominal quota of {victim_queue.nominal_quota}: it was not borrowing",
                    )
                if by_queue is not None and usage[by.queue] + by.gpus > by_queue.nominal_quota:
                    note(
                        index,
                        f"job {by.id} preempts, but its queue {by.queue!r} would use "
                        f"{usage[by.queue] + by.gpus} GPUs, beyond its nominal quota of {by_queue.nominal_quota}",
                    )
                reclaiming[by.id] = time
            release(job)
    for preemptor, minute in reclaiming.items():
        problems.append(f"job {preemptor} preempted jobs at minute {minute} but never started")
    never = sorted(job.id for job in jobs if job.id not in finished)
    if never:
        held = sorted(j for j in never if j in running)
        problems.append(
            f"{len(never)} job(s) never finished: {never[:10]}{' ...' if len(never) > 10 else ''}"
            + (f"; jobs {held[:10]} still hold GPUs at the end: a deadlock" if held else "")
        )
    return problems


# ---------------------------------------------------------------------------------------------
# Metrics of a schedule


def waits(events: list[dict], jobs: list[Job]) -> dict[int, int]:
    """Each finished job's wait: minutes from its submission to its finish, less its duration
    (time queued, and the work a preemption threw away)."""
    by_id = {job.id: job for job in jobs}
    return {
        e["job"]: e["time"] - by_id[e["job"]].submit - by_id[e["job"]].duration
        for e in events
        if e["event"] == "finish"
    }


def mean_wait(events: list[dict], jobs: list[Job]) -> float:
    """The mean of waits(...) over the jobs (0.0 for no job)."""
    got = waits(events, jobs)
    return sum(got.values()) / len(got) if got else 0.0


def busy_gpus(events: list[dict], jobs: list[Job]) -> list[tuple[int, int]]:
    """(minute, GPUs held from that minute on) at every minute the count changes."""
    by_id = {job.id: job for job in jobs}
    steps: list[tuple[int, int]] = []
    held = 0
    for e in events:
        if e["event"] == "start":
            held += by_id[e["job"]].gpus
        elif e["event"] in ("finish", "preempt"):
            held -= by_id[e["job"]].gpus
        else:
            continue
        if steps and steps[-1][0] == e["time"]:
            steps[-1] = (e["time"], held)
        else:
            steps.append((e["time"], held))
    return steps


def utilization(events: list[dict], jobs: list[Job], cluster: Cluster, end: int | None = None) -> float:
    """GPU-minutes held by running jobs over the cluster's GPU-minutes, from minute 0 to minute
    `end` (default: the last event's minute); 0.0 for an empty span."""
    steps = busy_gpus(events, jobs)
    end = (steps[-1][0] if steps else 0) if end is None else end
    if end <= 0:
        return 0.0
    held = 0
    for (minute, count), (later, _) in zip(steps, [*steps[1:], (end, 0)]):
        held += count * max(0, min(later, end) - minute)
    return held / (cluster.num_gpus * end)
