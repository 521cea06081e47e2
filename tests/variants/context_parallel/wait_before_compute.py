"""A ring that waits for the next block as soon as it posts its transfer, before computing on the
block it holds: right results and the same bytes, but no transfer overlaps a matmul."""
# target: ring.py

_reference_exchange = _Ring.exchange


def _exchange_and_wait(self, send, receive, tag=0):
    for request in _reference_exchange(self, send, receive, tag):
        request.wait()
    return []


_Ring.exchange = _exchange_and_wait
