"""A zigzag ring that computes every block whole with the causal mask instead of only its visible
half: right results, but every rank does the FLOPs of the non-causal ring, p times rank 0's share
of the causal work."""
# target: ring.py

_reference_plan = _Ring.plan


def _plan_everything(self, source):
    if self.causal and self.layout == "zigzag":
        return slice(None), slice(None), True
    return _reference_plan(self, source)


_Ring.plan = _plan_everything
