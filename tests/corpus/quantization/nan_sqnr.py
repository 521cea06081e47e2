"""sqnr_db returns NaN, which no comparison should take for a number."""

# target: metrics.py
# select: sqnr_db_matches or sqnr_db_and_distillation
# fails: sqnr_db
# kind:
# message: 20 dB|nan


def sqnr_db(x, x_hat):
    return float("nan")
