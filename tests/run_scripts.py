"""Run Python scripts as `python SCRIPT ARGS...` would, each in a child forked from this process,
which imports matplotlib, numpy and torch once for all of them.

    python tests/run_scripts.py PLAN.json     PLAN: [{"script", "args", "log"}, ...]

Prints one JSON line per script, {"script", "returncode"}, in the plan's order; each script's
standard output and error go to its "log". Two children run at a time (the machine has two
cores); a child still running after TIMEOUT_S is killed and reported with returncode -9.
"""

from __future__ import annotations

import json
import os
import runpy
import signal
import sys
import time
import traceback

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot  # imported once, before the forks
import numpy  # noqa: F401
import torch  # noqa: F401

AT_ONCE = 2
TIMEOUT_S = 120.0


def _child(script: str, args: list[str], log: str) -> None:
    """In the forked child: become `python script args`, then exit with its status."""
    code = 1
    try:
        out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(out, 1)
        os.dup2(out, 2)
        sys.argv = [script, *args]
        sys.path.insert(0, os.path.dirname(os.path.abspath(script)))  # as `python script` puts it first
        runpy.run_path(script, run_name="__main__")
        code = 0
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def run(plan: list[dict]) -> dict[str, int]:
    """Each script's exit status (-9: killed at the timeout)."""
    waiting, running, status = list(plan), {}, {}
    while waiting or running:
        while waiting and len(running) < AT_ONCE:
            job = waiting.pop(0)
            pid = os.fork()
            if pid == 0:
                _child(job["script"], job["args"], job["log"])
            running[pid] = (job["script"], time.monotonic() + TIMEOUT_S)
        pid, wait_status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            for child, (_, deadline) in running.items():
                if time.monotonic() > deadline:
                    os.kill(child, signal.SIGKILL)
            time.sleep(0.05)
            continue
        script, _ = running.pop(pid)
        status[script] = os.waitstatus_to_exitcode(wait_status)
    return status


if __name__ == "__main__":
    with open(sys.argv[1]) as file:
        jobs = json.load(file)
    results = run(jobs)
    for job in jobs:
        print(json.dumps({"script": job["script"], "returncode": results[job["script"]]}))
