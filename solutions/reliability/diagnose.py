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
    ### BEGIN SOLUTION
    by_rank = _check(dumps)
    members = _members(by_rank)
    found = []
    for group, ranks in members.items():
        verdict = _first_disagreement(group, ranks, by_rank)
        if verdict is not None:
            found.append(verdict)
    if not found:
        return {"status": "ok", "process_group": None, "seq": None, "op": None, "ranks": []}
    # The disagreement issued first is the cause; later ones in other groups are often its
    # consequences (ranks that went on while others hung).
    first = min(found, key=lambda v: (v["record_id"], int(v["name"])))
    return {key: first[key] for key in ("status", "process_group", "seq", "op", "ranks")}
    ### END SOLUTION


### BEGIN SOLUTION
def _check(dumps: list[dict]) -> dict[int, dict]:
    """The dumps by rank, after checking they are one whole world's."""
    if not isinstance(dumps, list) or not dumps:
        raise ValueError("diagnose needs a non-empty list of dumps, one per rank")
    by_rank = {}
    sizes = set()
    for index, dump in enumerate(dumps):
        if not isinstance(dump, dict) or not isinstance(dump.get("entries"), list):
            raise ValueError(f"dump {index} has no 'entries' list: not a flight-recorder dump")
        if "rank" not in dump or "pg_config" not in dump:
            raise ValueError(f"dump {index} has no 'rank' or no 'pg_config'")
        if dump["rank"] in by_rank:
            raise ValueError(f"two dumps of rank {dump['rank']}")
        by_rank[dump["rank"]] = dump
        sizes |= {len(ast.literal_eval(g["ranks"])) for g in dump["pg_config"].values() if g["desc"] == "default_pg"}
    if len(sizes) > 1:
        raise ValueError(f"dumps of different world sizes: {sorted(sizes)}")
    world = sizes.pop() if sizes else len(by_rank)
    if sorted(by_rank) != list(range(world)):
        raise ValueError(f"expected one dump for each rank 0..{world - 1}, got ranks {sorted(by_rank)}")
    return by_rank


def _members(by_rank: dict[int, dict]) -> dict[str, list[int]]:
    """Each group's members, by group name, from the pg_config of the ranks in it."""
    members = {}
    for dump in by_rank.values():
        for name, group in dump["pg_config"].items():
            ranks = ast.literal_eval(group["ranks"])
            if ranks:  # gloo's own placeholder row has none
                members[name] = sorted(ranks)
    return members


def _first_disagreement(group: str, ranks: list[int], by_rank: dict[int, dict]) -> dict | None:
    # Each member's collectives on this group, by sequence id: the s-th one every member
    # issued must be the same collective, whatever the members did on other groups meanwhile.
    issued = {
        rank: {
            e["collective_seq_id"]: e
            for e in by_rank[rank]["entries"]
            if e["process_group"][0] == group and not e.get("is_p2p", False)
        }
        for rank in ranks
    }
    last = max((max(seqs, default=0) for seqs in issued.values()), default=0)
    for seq in range(1, last + 1):
        entries = {rank: issued[rank][seq] for rank in ranks if seq in issued[rank]}
        verdict = _compare(entries, ranks)
        if verdict is not None:
            status, suspects = verdict
            some = next(iter(entries.values()))
            return {
                "status": status,
                "process_group": tuple(some["process_group"]),
                "seq": seq,
                "op": _majority({r: e["profiling_name"] for r, e in entries.items()}),
                "ranks": suspects,
                "name": group,
                "record_id": min(e["record_id"] for e in entries.values()),
            }
    return None


def _compare(entries: dict[int, dict], ranks: list[int]) -> tuple[str, list[int]] | None:
    """(status, suspects) of one collective, or None when every member entered it alike."""
    absent = [rank for rank in ranks if rank not in entries]
    if absent:
        return "missing", absent
    checks = (
        ("mismatched_op", lambda e: e["profiling_name"]),
        ("mismatched_size", lambda e: (e["input_sizes"], e["output_sizes"])),
        ("mismatched_dtype", lambda e: (e["input_dtypes"], e["output_dtypes"])),
    )
    for status, value in checks:
        values = {rank: repr(value(e)) for rank, e in entries.items()}
        expected = _majority(values)
        odd = sorted(rank for rank, v in values.items() if v != expected)
        if odd:
            return status, odd
    return None


def _majority(values: dict[int, object]) -> object:
    """The value most ranks hold; a tie goes to the value of the lowest rank among them."""
    counts = Counter(values.values())
    top = max(counts.values())
    return next(values[rank] for rank in sorted(values) if counts[values[rank]] == top)


### END SOLUTION
