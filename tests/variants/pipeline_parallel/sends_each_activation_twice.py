"""run_schedule that sends every activation twice (and receives both copies): the gradients are
right, but the stage boundary carries twice the bytes it needs."""
# target: runtime.py

_run_once = _StageRunner.run


def _run_sending_activations_twice(self, kind, mb, chunk):
    _run_once(self, kind, mb, chunk)
    if kind in ("SEND_F", "RECV_F"):
        _run_once(self, kind, mb, chunk)


_StageRunner.run = _run_sending_activations_twice
