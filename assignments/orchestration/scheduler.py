# Your working copy: replace every `raise NotImplementedError` with your implementation.
# (Generated from the course's reference by `python -m grader sync`.)
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
    raise NotImplementedError("implement place_gang (lectures/15-orchestration.md, section 3)")


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
    raise NotImplementedError("implement schedule (lectures/15-orchestration.md, section 4)")


# (Write any helper functions you need here.)
