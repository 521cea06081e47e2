"""Hidden suite: diagnose on real flight-recorder dumps of gloo jobs (grader.models.flight_recorder:
a rank that skips a collective, calls another, sends another size or dtype, a subgroup member
that skips), each verdict checked against the docstring's and against torch's own analyzer
(torch.distributed.flight_recorder, fr_trace: the library reference; grader/suites/reliability/
fr_reference.py puts its findings in diagnose's terms); dumps edited from real ones for what the
jobs do not reach (8 ranks, an empty buffer, ties, a disagreement in two groups, a wrong
majority at rank 0); real jobs of 2 ranks (every mismatch a tie) and 6 (not a power of two) and
a world of 3 made from 4 dumps, each with the dumps out of rank order, ties among values whose
lowest holder is not rank 0 nor the first dump, groups tied on record_id; and the refusals."""

from __future__ import annotations

import copy
from functools import cache

import pytest

from grader.models.flight_recorder import JOBS, record_dumps
from grader.suites.reliability.fr_reference import first_finding
from grader.testing import expect_exception

WORLD = ("0", "default_pg")
PAIR_0_1 = ("1", "pair_0_1")

# What each job's dumps must be diagnosed as (grader/models/flight_recorder.py's docstring).
EXPECTED = {
    "healthy": {"status": "ok", "process_group": None, "seq": None, "op": None, "ranks": []},
    "skip_all_reduce": {"status": "missing", "process_group": WORLD, "seq": 4, "op": "gloo:all_reduce", "ranks": [3]},
    "broadcast_instead": {
        "status": "mismatched_op", "process_group": WORLD, "seq": 4, "op": "gloo:all_reduce", "ranks": [3]
    },
    "size_mismatch": {
        "status": "mismatched_size", "process_group": WORLD, "seq": 4, "op": "gloo:all_reduce", "ranks": [3]
    },
    "dtype_mismatch": {
        "status": "mismatched_dtype", "process_group": WORLD, "seq": 4, "op": "gloo:all_reduce", "ranks": [3]
    },
    "subgroup_skip": {"status": "missing", "process_group": PAIR_0_1, "seq": 2, "op": "gloo:all_reduce", "ranks": [1]},
}  # fmt: skip
BROKEN = [job for job in JOBS if job != "healthy"]


@cache
def dumps_of(job: str, world_size: int = 4) -> tuple[dict, ...]:
    """Each job is recorded once per grading session (about 0.1 s each once torch is loaded)."""
    return tuple(record_dumps(job, world_size))


def fresh(submission, job: str, world_size: int = 4) -> list[dict]:
    """A copy to edit or to send: the recorded dumps stay as recorded. A diagnose that is still
    the stub is called first with no dump, so that it says "not implemented" before the first
    job is recorded (which starts the recorder's process: seconds)."""
    if submission.still_the_stub("diagnose"):
        submission.function("diagnose")([])
    return copy.deepcopy(list(dumps_of(job, world_size)))


def normalized(verdict: object) -> object:
    """The verdict with process_group as a tuple and ranks as a list (a list or tuple returned
    for either is accepted)."""
    if not isinstance(verdict, dict):
        return verdict
    out = dict(verdict)
    if isinstance(out.get("process_group"), list):
        out["process_group"] = tuple(out["process_group"])
    if isinstance(out.get("ranks"), tuple):
        out["ranks"] = list(out["ranks"])
    return out


def check(got: object, want: dict, what: str) -> None:
    got = normalized(got)
    assert isinstance(got, dict), f"{what}: diagnose returns a dict, got {got!r}"
    wrong = {key: got.get(key, "<absent>") for key in want if got.get(key, "<absent>") != want[key]}
    assert not wrong, (
        f"{what}: expected {want}, got {got}; wrong: {wrong}. See diagnose's docstring: the first sequence id where "
        "a group's members disagree, checked missing, op, sizes, dtypes in that order; suspects are the ranks "
        "absent or outside the majority (a tie: the value of the lowest rank among the tied values' holders, "
        "whatever the order of the dumps)"
    )


def entry(dumps: list[dict], rank: int, group: str, seq: int) -> dict:
    return next(e for e in dumps[rank]["entries"] if e["process_group"][0] == group and e["collective_seq_id"] == seq)


# ----------------------------------------------------------------------------- real jobs


@pytest.mark.points(1.5)
@pytest.mark.parametrize("job", BROKEN)
def test_a_broken_job_is_diagnosed_at_its_first_disagreement(submission, job):
    got = submission.function("diagnose")(fresh(submission, job))
    check(got, EXPECTED[job], f"job {job!r} (4 ranks; grader/models/flight_recorder.py's docstring says what it does)")


@pytest.mark.points(1)
@pytest.mark.parametrize("job", BROKEN)
def test_the_verdict_agrees_with_torchs_flight_recorder_analyzer(submission, job):
    """torch.distributed.flight_recorder's analyzer on the same dumps: same group, sequence id,
    kind of disagreement and suspects (its culprits: the ranks that differ from rank 0)."""
    library = first_finding(fresh(submission, job))
    assert library is not None, f"torch's analyzer found nothing wrong in job {job!r}: the suite's reference is off"
    got = normalized(submission.function("diagnose")(fresh(submission, job)))
    assert isinstance(got, dict), f"diagnose returns a dict, got {got!r}"
    mine = {
        "status": got.get("status"),
        "process_group": (got.get("process_group") or (None,))[0],
        "seq": got.get("seq"),
        "ranks": got.get("ranks"),
    }
    theirs = {key: library[key] for key in mine}
    assert mine == theirs, (
        f"job {job!r}: torch's flight-recorder analyzer (python -m torch.distributed.flight_recorder.fr_trace) "
        f"reports {theirs} (group by name), diagnose returned {got}"
    )


@pytest.mark.points(2)
def test_a_healthy_job_is_ok(submission):
    """All-reduces of three shapes, a broadcast, all-reduces on two pair groups: all matched."""
    healthy = fresh(submission, "healthy")
    assert first_finding(healthy) is None, "torch's analyzer finds the healthy job broken: reference off"
    got = submission.function("diagnose")(fresh(submission, "healthy"))
    check(got, EXPECTED["healthy"], "job 'healthy' (every rank issued the same collectives on every group)")


@pytest.mark.points(3)
def test_a_skip_in_a_subgroup_names_the_subgroup_not_the_world(submission):
    """Rank 1 skips the 2nd all_reduce of pair {0, 1} and goes on to the world's next collective:
    the world's 4 collectives all match; the pair's seq 2 lacks rank 1."""
    got = normalized(submission.function("diagnose")(fresh(submission, "subgroup_skip")))
    assert isinstance(got, dict) and got.get("process_group") == PAIR_0_1, (
        f"job 'subgroup_skip': expected the pair group {PAIR_0_1} (the entries' process_group), got "
        f"{got.get('process_group') if isinstance(got, dict) else got!r}: sequence ids count per group, so compare "
        "each group's entries on their own"
    )
    check(got, EXPECTED["subgroup_skip"], "job 'subgroup_skip'")


@pytest.mark.points(2)
def test_the_skipping_rank_of_a_world_of_8_is_named(submission):
    """A real job of 8 ranks: rank 7 skips the world's 4th collective."""
    want = dict(EXPECTED["skip_all_reduce"], ranks=[7])
    got = submission.function("diagnose")(fresh(submission, "skip_all_reduce", 8))
    check(got, want, "job 'skip_all_reduce' on 8 ranks")


@pytest.mark.points(1)
def test_the_order_of_the_dumps_does_not_matter(submission):
    dumps = fresh(submission, "size_mismatch")[::-1]
    check(submission.function("diagnose")(dumps), EXPECTED["size_mismatch"], "job 'size_mismatch', dumps rank 3 first")


# ----------------------------------------------------------------------------- edited dumps


@pytest.mark.points(2)
def test_a_rank_whose_buffer_holds_nothing_is_missing_from_the_first_collective(submission):
    """Rank 2's buffer is empty (it never reached its first collective): world seq 1 lacks it,
    and so does pair {2, 3}'s seq 1 later; the world's comes first."""
    dumps = fresh(submission, "healthy")
    dumps[2]["entries"] = []
    want = {"status": "missing", "process_group": WORLD, "seq": 1, "op": "gloo:all_reduce", "ranks": [2]}
    check(submission.function("diagnose")(dumps), want, "healthy dumps with rank 2's entries emptied")


@pytest.mark.points(1)
def test_a_group_that_no_member_used_is_no_disagreement(submission):
    """The healthy job, with a group {1, 2} that ranks 1 and 2 created but never used (in
    their pg_config, in no entry): nothing disagrees on it, so the job is still ok."""
    dumps = fresh(submission, "healthy")
    name = str(1 + max(int(group) for dump in dumps for group in dump["pg_config"]))
    for rank in (1, 2):
        dumps[rank]["pg_config"][name] = {"name": name, "desc": "unused_pair_1_2", "ranks": "[1, 2]"}
    check(submission.function("diagnose")(dumps), EXPECTED["healthy"], f"healthy dumps with an unused group {name!r}")


@pytest.mark.points(2)
def test_the_majority_decides_even_against_rank_0(submission):
    """Rank 0 is the odd one (the analyzer, which compares with rank 0, would blame 1, 2, 3)."""
    dumps = fresh(submission, "healthy")
    for name in ("input_sizes", "output_sizes"):
        entry(dumps, 0, "0", 2)[name] = [[64, 4]]
    want = {"status": "mismatched_size", "process_group": WORLD, "seq": 2, "op": "gloo:all_reduce", "ranks": [0]}
    check(submission.function("diagnose")(dumps), want, "healthy dumps, rank 0's world seq 2 all_reduce of [64, 4]")


@pytest.mark.points(1)
def test_a_tie_goes_to_the_value_of_the_lowest_rank(submission):
    """Ranks 0, 1 broadcast at world seq 2 and ranks 2, 3 all_reduce: 2 against 2, rank 0's
    value is the expected one."""
    dumps = fresh(submission, "healthy")
    for rank in (0, 1):
        entry(dumps, rank, "0", 2)["profiling_name"] = "gloo:broadcast"
    want = {"status": "mismatched_op", "process_group": WORLD, "seq": 2, "op": "gloo:broadcast", "ranks": [2, 3]}
    check(submission.function("diagnose")(dumps), want, "healthy dumps, ranks 0 and 1 broadcasting at world seq 2")


@pytest.mark.points(1)
def test_an_op_mismatch_wins_over_a_size_mismatch_in_the_same_collective(submission):
    dumps = fresh(submission, "healthy")
    entry(dumps, 1, "0", 4)["profiling_name"] = "gloo:reduce_scatter"
    entry(dumps, 2, "0", 4)["input_sizes"] = [[7]]
    want = {"status": "mismatched_op", "process_group": WORLD, "seq": 4, "op": "gloo:all_reduce", "ranks": [1]}
    check(submission.function("diagnose")(dumps), want, "world seq 4: rank 1 another op, rank 2 another size")


@pytest.mark.points(2)
def test_of_two_disagreeing_groups_the_one_issued_first_is_reported(submission):
    """Pair {2, 3}'s seq 1 (record_id 3) differs in dtype, the world's seq 5 (record_id 6) in
    size: the pair's is reported."""
    dumps = fresh(submission, "healthy")
    entry(dumps, 3, "2", 1)["input_dtypes"] = ["Double"]
    entry(dumps, 1, "0", 5)["input_sizes"] = [[2]]
    want = {"status": "mismatched_dtype", "process_group": ("2", "pair_2_3"), "seq": 1, "op": "gloo:all_reduce",
            "ranks": [3]}  # fmt: skip
    check(submission.function("diagnose")(dumps), want, "healthy dumps edited in pair {2, 3}'s seq 1 and world seq 5")


@pytest.mark.points(1)
def test_a_rank_that_issued_one_more_collective_makes_the_others_missing(submission):
    """Rank 3 alone issued a world seq 6: ranks 0, 1, 2 never entered it."""
    dumps = fresh(submission, "healthy")
    extra = copy.deepcopy(entry(dumps, 3, "0", 5))
    extra.update(collective_seq_id=6, record_id=extra["record_id"] + 1)
    dumps[3]["entries"].append(extra)
    want = {"status": "missing", "process_group": WORLD, "seq": 6, "op": "gloo:all_reduce", "ranks": [0, 1, 2]}
    check(submission.function("diagnose")(dumps), want, "healthy dumps, rank 3 with one more world all_reduce")


# ----------------------------------------------------------------------------- other worlds, dumps out of order

# A fixed order that is not the ranks' (nor their reverse) for each world the recorder runs: a
# diagnose that reads "the lowest rank" as "the first dump it was given" is caught.
SHUFFLED = {2: [1, 0], 6: [3, 5, 0, 4, 1, 2]}


def shuffled(dumps: list[dict], order: list[int]) -> list[dict]:
    return [dumps[rank] for rank in order]


@pytest.mark.points(0.5)
@pytest.mark.parametrize("world_size", [2, 6])
@pytest.mark.parametrize("job", BROKEN)
def test_a_broken_job_of_2_or_6_ranks_is_diagnosed_whatever_the_order_of_its_dumps(submission, job, world_size):
    """Real jobs of 2 ranks (the pair {0, 1} has the world's members; every mismatch is 1 against
    1, a tie that rank 0's value wins) and of 6 (a size that is not a power of two), the dumps
    handed over in the order SHUFFLED gives, not by rank."""
    last = world_size - 1
    want = dict(EXPECTED[job], ranks=[1] if job == "subgroup_skip" else [last])
    order = SHUFFLED[world_size]
    got = submission.function("diagnose")(shuffled(fresh(submission, job, world_size), order))
    check(got, want, f"job {job!r} on {world_size} ranks, dumps given in the order of ranks {order}")


@pytest.mark.points(2)
def test_a_tie_goes_to_the_lowest_holder_of_a_tied_value_not_to_the_first_dump(submission):
    """World of 6, world seq 2 (an all_reduce of [64, 8] on every rank) edited: ranks 2 and 5
    keep [64, 8], ranks 3 and 4 send [64, 4], rank 0 [64, 1] and rank 1 [64, 2]. Two values tie
    with 2 holders each; the lowest rank among their holders is 2, so [64, 8] is expected and
    ranks 0, 1, 3, 4 are the suspects (rank 0's own value is held by no one else: it is not
    among the tied). The dumps come in the order of ranks 4, 0, 3, 5, 1, 2."""
    dumps = fresh(submission, "healthy", 6)
    for rank, shape in ((0, [64, 1]), (1, [64, 2]), (3, [64, 4]), (4, [64, 4])):
        for name in ("input_sizes", "output_sizes"):
            entry(dumps, rank, "0", 2)[name] = [shape]
    want = {"status": "mismatched_size", "process_group": WORLD, "seq": 2, "op": "gloo:all_reduce",
            "ranks": [0, 1, 3, 4]}  # fmt: skip
    got = submission.function("diagnose")(shuffled(dumps, [4, 0, 3, 5, 1, 2]))
    check(got, want, "6 ranks, world seq 2's sizes [64, 1], [64, 2], [64, 8], [64, 4], [64, 4], [64, 8] by rank")


def world_of_3(dumps: list[dict]) -> list[dict]:
    """A world of 3 made from the healthy job's 4 dumps: rank 3 gone, the world's members
    [0, 1, 2], rank 2 without the pair {2, 3} (its pg_config row and its entries), its other
    entries renumbered 0, 1, 2, ... as its buffer would hold them."""
    dumps = dumps[:3]
    for dump in dumps:
        dump["pg_config"]["0"]["ranks"] = "[0, 1, 2]"
    rank2 = dumps[2]
    rank2["pg_config"].pop("2")
    rank2["entries"] = [e for e in rank2["entries"] if e["process_group"][0] != "2"]
    for record_id, e in enumerate(rank2["entries"]):
        e["record_id"] = record_id
    return dumps


@pytest.mark.points(1.5)
def test_a_three_way_tie_in_a_world_of_3_goes_to_rank_0s_op(submission):
    """A world of 3 (not a power of two; world_of_3): at world seq 2 rank 0 all_reduces, rank 1
    broadcasts and rank 2 all_gathers: three values with one holder each, so rank 0's is
    expected and ranks 1 and 2 are the suspects; the dumps come rank 2 first."""
    dumps = world_of_3(fresh(submission, "healthy"))
    entry(dumps, 1, "0", 2)["profiling_name"] = "gloo:broadcast"
    entry(dumps, 2, "0", 2)["profiling_name"] = "gloo:all_gather"
    want = {"status": "mismatched_op", "process_group": WORLD, "seq": 2, "op": "gloo:all_reduce", "ranks": [1, 2]}
    got = submission.function("diagnose")(shuffled(dumps, [2, 0, 1]))
    check(got, want, "3 ranks, world seq 2: all_reduce, broadcast, all_gather by rank, dumps in the order 2, 0, 1")


@pytest.mark.points(1)
def test_a_world_of_3_with_a_missing_rank_names_it(submission):
    """The world of 3 with rank 1's world seq 5 (its last entry) removed: seq 5 lacks rank 1."""
    dumps = world_of_3(fresh(submission, "healthy"))
    dumps[1]["entries"].remove(entry(dumps, 1, "0", 5))
    want = {"status": "missing", "process_group": WORLD, "seq": 5, "op": "gloo:all_reduce", "ranks": [1]}
    check(submission.function("diagnose")(shuffled(dumps, [1, 2, 0])), want, "3 ranks, rank 1 without world seq 5")


def renamed_group(dumps: list[dict], old: str, new: str) -> None:
    """Group `old` called `new` in every dump (pg_config and entries), its row put first."""
    for dump in dumps:
        if old in dump["pg_config"]:
            row = dict(dump["pg_config"].pop(old), name=new)
            dump["pg_config"] = {new: row, **dump["pg_config"]}
        for e in dump["entries"]:
            if e["process_group"][0] == old:
                e["process_group"] = (new, e["process_group"][1])


@pytest.mark.points(1)
def test_groups_whose_first_disagreements_tie_on_record_id_go_to_the_smaller_name_as_a_number(submission):
    """Pairs renamed "9" ({0, 1}) and "10" ({2, 3}); both disagree at their seq 1, record_id 3
    in every dump: "9" < "10" as numbers (as strings "10" would come first)."""
    dumps = fresh(submission, "healthy")
    renamed_group(dumps, "1", "9")
    renamed_group(dumps, "2", "10")
    entry(dumps, 1, "9", 1)["input_dtypes"] = ["Double"]
    entry(dumps, 3, "10", 1)["input_sizes"] = [[7]]
    want = {"status": "mismatched_dtype", "process_group": ("9", "pair_0_1"), "seq": 1, "op": "gloo:all_reduce",
            "ranks": [1]}  # fmt: skip
    got = submission.function("diagnose")(shuffled(dumps, [3, 2, 1, 0]))
    check(got, want, 'pairs named "9" and "10", both disagreeing at record_id 3')


@pytest.mark.points(1)
def test_a_disagreement_is_as_early_as_the_earliest_of_its_entries_in_any_dump(submission):
    """Both pairs disagree at their seq 1. Rank 1 recorded world seq 4 before its pair's seq 1
    (record_ids 3 and 4 swapped), so pair {0, 1}'s disagreement holds record_ids 3 (rank 0)
    and 4 (rank 1), pair {2, 3}'s 3 and 3: the smallest of any dump ties at 3, and the tie
    goes to group "1" (by the largest, {2, 3} would come first)."""
    dumps = fresh(submission, "healthy")
    world_4, pair_1 = entry(dumps, 1, "0", 4), entry(dumps, 1, "1", 1)
    world_4["record_id"], pair_1["record_id"] = pair_1["record_id"], world_4["record_id"]
    dumps[1]["entries"].sort(key=lambda e: e["record_id"])
    pair_1["input_dtypes"] = ["Double"]
    entry(dumps, 3, "2", 1)["input_sizes"] = [[7]]
    want = {"status": "mismatched_dtype", "process_group": PAIR_0_1, "seq": 1, "op": "gloo:all_reduce", "ranks": [1]}
    got = submission.function("diagnose")(shuffled(dumps, [2, 0, 3, 1]))
    check(got, want, "both pairs disagreeing at seq 1, rank 1's entry of it recorded after world seq 4")


# ----------------------------------------------------------------------------- refusals


def without(submission, key: str) -> list[dict]:
    dumps = fresh(submission, "healthy")
    del dumps[1][key]
    return dumps


def other_world_size(submission, size: int = 8) -> list[dict]:
    dumps = fresh(submission, "healthy")
    dumps[2]["pg_config"]["0"]["ranks"] = str(list(range(size)))
    return dumps


def duplicate_rank(submission) -> list[dict]:
    dumps = fresh(submission, "healthy")
    dumps[3]["rank"] = 2
    return dumps


def every_rank_and_a_duplicate(submission) -> list[dict]:
    """All four dumps and a second one of rank 3: every rank is there, and one twice."""
    dumps = fresh(submission, "healthy")
    return [*dumps, copy.deepcopy(dumps[3])]


REFUSALS = [
    (lambda submission: [], "an empty list"),
    (every_rank_and_a_duplicate, "every rank and a second dump of rank 3"),
    (lambda submission: without(submission, "entries"), "a dump without entries"),
    (lambda submission: without(submission, "rank"), "a dump without its rank"),
    (duplicate_rank, "two dumps of rank 2"),
    (other_world_size, "a dump of a world of 8 among dumps of 4"),
    # one world size of two agrees with the ranks present: only comparing the sizes refuses it
    (lambda submission: other_world_size(submission, 5), "a dump of a world of 5 among dumps of 4"),
    (lambda submission: fresh(submission, "healthy")[:3], "rank 3's dump missing"),
]


@pytest.mark.points(0.5)
@pytest.mark.parametrize(("make", "why"), REFUSALS, ids=[why for _, why in REFUSALS])
def test_bad_dumps_raise_value_error(submission, make, why):
    expect_exception("ValueError", lambda: submission.function("diagnose")(make(submission)))
