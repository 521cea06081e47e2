# Your working copy: replace every `raise NotImplementedError` with your implementation.
# (Generated from the course's reference by `python -m grader sync`.)
"""Which collective a hung job is stuck in, and which ranks are to blame, from the flight
recorder's dumps (lecture 14-reliability, section 2. Hangs: reading the flight recorder).

A hung collective says nothing by itself: every rank that entered it waits, until the watchdog's
timeout kills the job. torch's flight recorder (TORCH_FR_BUFFER_SIZE) keeps in every process a
ring buffer of the collectives it issued; dumped on the timeout, one dump per rank, the buffers
tell which collective the ranks disagree on. grader.models.flight_recorder records real ones
(record_dumps) and describes the format; torch's own analyzer is
`python -m torch.distributed.flight_recorder.fr_trace`.
"""

from __future__ import annotations

import ast
from collections import Counter

STATUSES = ("ok", "missing", "mismatched_op", "mismatched_size", "mismatched_dtype")


def diagnose(dumps: list[dict]) -> dict:
    """The first collective the ranks disagree on, from one flight-recorder dump per rank.

    `dumps`: one dump per rank of the world, in any order, as grader.models.flight_recorder
    returns them: dicts with "rank" (the global rank), "pg_config" ({group name: {"name",
    "desc", "ranks"}}, "ranks" a string such as "[0, 1]" of the group's global ranks: the groups
    this rank belongs to) and "entries" (the collectives this rank issued, oldest first). Of an
    entry, only these keys are read:
        "process_group"      (name, desc), e.g. ("0", "default_pg"), ("1", "pair_0_1")
        "collective_seq_id"  1, 2, 3, ...: the n-th collective this rank issued on that group
        "is_p2p"             entries with True (send, recv) are ignored
        "profiling_name"     e.g. "gloo:all_reduce", "gloo:broadcast"
        "input_sizes", "output_sizes"   e.g. [[1024]], [[64, 8]]
        "input_dtypes", "output_dtypes" e.g. ["Float"], ["Double"]
        "record_id"          0, 1, 2, ...: the entry's place in its rank's buffer, over all groups
                             (only to choose between groups, below)
    The buffers are taken to hold each rank's whole history (none wrapped around).

    Within a group, the collective of sequence id s is the s-th collective each member issued
    on it; a group's members are the ranks of its "ranks" in pg_config. Walking each group's
    collectives in order of s = 1, 2, ..., the first s where the members disagree is, checked
    in this order:
        "missing"           some members have no entry of s: suspects, those members;
        "mismatched_op"     the members' profiling_name differ;
        "mismatched_size"   their (input_sizes, output_sizes) differ;
        "mismatched_dtype"  their (input_dtypes, output_dtypes) differ;
    For the mismatches, the value most members hold is the expected one (a tie: the value of the
    lowest rank among the tied values' holders) and the suspects are the members that hold
    another. If several groups disagree somewhere, the one reported is the one whose first
    disagreement holds the entry with the smallest "record_id" of any dump (a tie: the smaller
    group name, compared as numbers).

    Returns {"status": one of STATUSES, "process_group": (name, desc) of the group as its
    entries write it, "seq": s, "op": the profiling_name most members that entered s hold (same
    tie rule), "ranks": the suspects' global ranks, sorted}. With no disagreement:
    {"status": "ok", "process_group": None, "seq": None, "op": None, "ranks": []}.
    Example: rank 3 of 4 skipped the world's 4th collective, an all_reduce, and the others
    hang in it: {"status": "missing", "process_group": ("0", "default_pg"), "seq": 4,
    "op": "gloo:all_reduce", "ranks": [3]}.

    Raises ValueError, naming the problem, for: an empty list; a dump that is not a dict or has
    no "entries" list, no "rank" or no "pg_config"; two dumps of the same rank; dumps whose
    default group ("default_pg") has a different number of ranks (different world sizes); ranks
    that are not exactly 0 .. world size - 1 (a dump missing).
    """
    raise NotImplementedError("implement diagnose (lectures/14-reliability.md, section 2)")


# (Write any helper functions you need here.)
