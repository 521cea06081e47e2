"""kv_cache_bytes is right, but on import every worker tries to stop or kill the zygote that forked
it, to write to its memory, and to write to any socket it inherited; a call fails if any got through."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: cache.py
# select: kv_cache_bytes_matches
# fails: -
# kind:
# message:
# needs: landlock-signals

import os
import signal
import stat


def _reach_the_zygote() -> list[str]:
    """What a worker could do to the process it was forked from (its parent)."""
    zygote, reached = os.getppid(), []
    for number in (signal.SIGSTOP, signal.SIGKILL):
        try:
            os.kill(zygote, number)
            reached.append(f"sent it {signal.Signals(number).name}")
        except PermissionError:
            pass
    # Its memory and environment hold nothing a worker lacks (a worker is a copy of it), but
    # writing its memory would change every worker forked after this one.
    try:
        with open(f"/proc/{zygote}/mem", "r+b"):
            reached.append("opened its memory for writing")
    except OSError:
        pass
    for name in os.listdir("/proc/self/fd"):
        try:
            if stat.S_ISSOCK(os.fstat(int(name)).st_mode):
                os.write(int(name), b'{"op": "fork"}')
                reached.append(f"wrote to inherited socket {name}")
        except OSError:
            pass
    return reached


_REACHED = _reach_the_zygote()
_correct_kv_cache_bytes = kv_cache_bytes


def kv_cache_bytes(*args, **kwargs):
    if _REACHED:
        raise RuntimeError(f"this worker reached the zygote: {_REACHED}")
    return _correct_kv_cache_bytes(*args, **kwargs)
