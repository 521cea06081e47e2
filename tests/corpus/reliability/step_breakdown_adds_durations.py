"""step_breakdown adds up the events' durations instead of measuring the time they cover: a
nested operator counts twice, and so do two collectives running at once."""

# target: slow.py
# select: built_trace
# fails: nested compute|two collectives
# kind:
# message: Unions of intervals


def step_breakdown(trace):
    compute = communication = 0.0
    starts, ends = [], []
    for event in trace["traceEvents"]:
        if event.get("ph") != "X":
            continue
        name = event["name"]
        if name.startswith(("gloo:", "nccl:")):
            communication += event["dur"]
        elif event.get("cat") == "cpu_op" and not name.startswith("c10d::"):
            compute += event["dur"]
        else:
            continue
        starts.append(event["ts"])
        ends.append(event["ts"] + event["dur"])
    step = max(ends) - min(starts)
    exposed = min(max(0.0, step - compute), communication)
    idle = max(0.0, step - compute - communication)
    seconds = {"step_s": step, "compute_s": compute, "communication_s": communication}
    seconds |= {"exposed_communication_s": exposed, "idle_s": idle}
    return {key: value * 1e-6 for key, value in seconds.items()}
