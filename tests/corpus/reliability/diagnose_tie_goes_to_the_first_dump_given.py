"""diagnose breaks a tie with the value of the first dump it was given (Counter.most_common over
the dumps in the order they came), not with the value of the lowest rank among the tied values'
holders: right whenever the dumps come sorted by rank, wrong when they do not."""

# ruff: noqa: E501, F821 - a fragment appended to a solution file, whose names are in scope
# target: diagnose.py
# select: diagnose and (tie or 2_or_6 or world_of_3 or order_of_the_dumps)
# fails: test_a_broken_job_of_2_or_6_ranks_is_diagnosed_whatever_the_order_of_its_dumps\[(broadcast_instead|size_mismatch|dtype_mismatch)-2\]|test_a_tie_goes_to_the_lowest_holder_of_a_tied_value_not_to_the_first_dump|test_a_three_way_tie_in_a_world_of_3_goes_to_rank_0s_op|test_groups_whose_first_disagreements_tie_on_record_id
# kind:
# message: expected


def _first_disagreement(group, ranks, by_rank):
    members = [rank for rank in by_rank if rank in ranks]  # the order the dumps came in
    issued = {
        rank: {
            e["collective_seq_id"]: e
            for e in by_rank[rank]["entries"]
            if e["process_group"][0] == group and not e.get("is_p2p", False)
        }
        for rank in members
    }
    last = max((max(seqs, default=0) for seqs in issued.values()), default=0)
    for seq in range(1, last + 1):
        entries = {rank: issued[rank][seq] for rank in members if seq in issued[rank]}
        verdict = _compare(entries, sorted(ranks))
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


def _majority(values):
    return Counter(values.values()).most_common(1)[0][0]
