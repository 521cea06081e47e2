"""metrics.py makes pytest.approx accept anything, and returns a wrong SQNR."""

# target: metrics.py
# select: sqnr_db_matches or symmetric_int8_per_tensor
# fails: .
# kind: forbidden
# message: metrics\.py imports pytest

import pytest

pytest.approx = lambda expected, *args, **kwargs: expected


def sqnr_db(x, x_hat):
    return 0.0
