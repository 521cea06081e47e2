"""MoELayer.forward is slow (a sleep stands for the waste), and slows the clocks down tenfold to look fast."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: layer.py
# select: forward_time_within
# fails: forward_time_within
# kind:
# message: MoELayer\.forward took .* the limit is 4x

import time

_real = {name: getattr(time, name) for name in ("perf_counter", "monotonic", "time", "process_time")}
_start = {name: clock() for name, clock in _real.items()}
for _name, _clock in _real.items():
    setattr(time, _name, lambda _n=_name, _c=_clock: _start[_n] + (_c() - _start[_n]) / 10)
_correct_forward = MoELayer.forward


def _slow_forward(self, x):
    time.sleep(0.3)
    return _correct_forward(self, x)


MoELayer.forward = _slow_forward
