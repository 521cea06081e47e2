"""The default kube-scheduler without coscheduling: every pod is bound on its own, as soon as a
node has room for it, the waiting jobs' pods taken in turn; a job runs once its last pod is bound.
Two gangs that each get part of the nodes hold them and wait for each other forever."""

# target: scheduler.py


def schedule(jobs, queues, cluster, backfill=True):
    arrivals = sorted(jobs, key=lambda job: (job.submit, job.id))
    free = [cluster.gpus_per_node] * cluster.nodes
    bound, ends, waiting, events, announced, index = {}, {}, [], [], set(), 0
    while True:
        times = list(ends.values()) + ([arrivals[index].submit] if index < len(arrivals) else [])
        if not times:
            return events  # nothing runs and nothing arrives: whoever still waits, waits forever
        now = min(times)
        for job in sorted((j for j in ends if ends[j] == now), key=lambda j: j.id):
            for node in bound.pop(job.id):
                free[node] += job.gpus_per_pod
            del ends[job]
            events.append({"time": now, "event": "finish", "job": job.id})
        while index < len(arrivals) and arrivals[index].submit == now:
            job = arrivals[index]
            waiting.append(job)
            bound[job.id] = [None] * job.pods
            events.append({"time": now, "event": "submit", "job": job.id})
            index += 1
        for pod in range(max((job.pods for job in waiting), default=0)):
            for job in waiting:
                if pod < job.pods and bound[job.id][pod] is None:
                    node = next((n for n in range(cluster.nodes) if free[n] >= job.gpus_per_pod), None)
                    if node is not None:
                        bound[job.id][pod] = node
                        free[node] -= job.gpus_per_pod
        for job in list(waiting):
            nodes = bound[job.id]
            if job.id not in announced and any(node is not None for node in nodes):
                announced.add(job.id)  # its bound pods' containers start and wait at the rendezvous
                events.append({"time": now, "event": "start", "job": job.id, "nodes": list(nodes)})
            if all(node is not None for node in nodes):
                ends[job] = now + job.duration
                waiting.remove(job)
