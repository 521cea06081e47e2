"""Reclaiming quota preempts the borrowed jobs that started first (they have run longest),
instead of the latest started: Kueue's order, and the docstring's, throws away the least work."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: scheduler.py
# select: reclaims_its_quota or no_preemption_by_equal
# fails: test_a_higher_priority_job_reclaims_its_quota_from_the_latest_borrowed_jobs
# kind:
# message: latest started first, 3 then 2


def _reclaim(job, running, usage, free, queue_of, cluster):
    candidates = sorted(
        (other for other in running.values() if other[0].queue != job.queue and other[0].priority < job.priority),
        key=lambda r: (r[0].priority, r[1], r[0].id),  # earliest start first
    )
    used, spare, victims = Counter(usage), list(free), []
    for other, _, nodes in candidates:
        if used[other.queue] <= queue_of[other.queue].nominal_quota:
            continue
        used[other.queue] -= other.gpus
        for node in nodes:
            spare[node] += other.gpus_per_pod
        victims.append(other.id)
        placement = place_gang(spare, job.pods, job.gpus_per_pod, cluster)
        if placement is not None:
            return victims, placement
    return [], None
