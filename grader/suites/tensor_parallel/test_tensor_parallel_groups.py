"""Hidden suite: tensor parallelism within process groups. In a gloo world of 4 ranks, ranks
{1, 3} run one instance as a tensor-parallel group of 2 (Group((1, 3)): global rank 1 is its rank
0, rank 3 its rank 1) while ranks {0, 2} run another instance with other data (Group((0, 2))),
at the same time. Each instance must match the one-process reference of its own data: the region
operators by their definitions (test_tensor_parallel_regions.expected), the block (TP and SP)
against reference.Block (torch's SDPA), the embedding and the loss against F.embedding and
F.cross_entropy. A submission that communicates over the world group mixes the two instances'
data; one that takes its shard by the global rank takes the wrong one (or none). The bytes each
rank sends are held to what torch.distributed's own collectives of the same plan send in the
same layout of groups (reference.library_collectives in a trusted world). Below them: the same
checks of values in a world of 5 whose groups of 3 and 2 ({0, 2, 3} and {1, 4}: neither
contiguous nor strided) run at once.
"""

from __future__ import annotations

import pytest
import torch

from grader.sandbox import Group, Step
from grader.suites.tensor_parallel.reference import (
    BlockCase,
    assemble_grads,
    block_reference,
    chunk,
    collective_plan,
    counted,
    describe_calls,
    expected_collectives,
    make_state,
)
from grader.suites.tensor_parallel.test_tensor_parallel_perf import BYTES_SLACK_PER_CALL
from grader.suites.tensor_parallel.test_tensor_parallel_regions import OPERATORS, check, inputs
from grader.suites.tensor_parallel.test_tensor_parallel_vocab import check_embedding, embedding_data, loss_reference
from grader.testing import assert_matches, generator

GROUPS = ((1, 3), (0, 2))  # the instance under test first; both are checked
WORLD = 4
# The first call that uses a group in a world creates it through the FileStore: a few hundred
# bytes per member that a world without groups does not send (measured: about 250).
GROUP_SETUP_SLACK = 512
TOL = (1e-10, 1e-10)


def members(rank: int) -> tuple[int, ...]:
    """The global ranks of the group `rank` belongs to."""
    return next(g for g in GROUPS if rank in g)


def instance_name(group: tuple[int, ...]) -> str:
    return f"the instance on ranks {set(group)} (Group({group}))"


@pytest.mark.points(3)
def test_region_operators_within_two_groups_of_a_world_of_4(submission):
    """The five operators one after another (one call) in each group of 2, each group with its own
    data; values and collectives as on a world of 2."""
    data = {group: {op: inputs(op, 2, "groups", group) for op in OPERATORS} for group in GROUPS}
    steps = [
        [
            Step("region_step", (op, data[members(r)][op][0][g], data[members(r)][op][1][g], Group(members(r))))
            for op in OPERATORS
        ]
        for r in range(WORLD)
        for g in [members(r).index(r)]
    ]
    ranks = submission.script_spmd(WORLD, steps).steps
    for group in GROUPS:
        for i, op in enumerate(OPERATORS):
            try:
                check(op, 2, [ranks[r][i] for r in group], *data[group][op])
            except AssertionError as error:
                raise AssertionError(
                    f"{instance_name(group)}, group rank = position in the group: {error}. Communicate within "
                    f"`group` (group=group on every collective) and index by dist.get_rank(group)"
                ) from None


BLOCK_CASES = [BlockCase(2, 4, 2, False), BlockCase(2, 4, 2, True)]
RUNS: dict[tuple, tuple] = {}


def run_block_in_groups(submission, case: BlockCase):
    """Each rank's block_step result in the layout of GROUPS, and each instance's reference."""
    key = (id(submission), case)
    if key not in RUNS:
        sp, args, references = case.sequence_parallel, [None] * WORLD, {}
        for group in GROUPS:
            gen = generator("tp-groups-block", case.id, group)
            state = make_state(*case.sizes, case.id, group)
            x = torch.randn(case.seq, case.batch, case.hidden, generator=gen, dtype=torch.float64)
            grad_output = torch.randn(case.seq, case.batch, case.hidden, generator=gen, dtype=torch.float64)
            for g, r in enumerate(group):
                mine = (chunk(x, 2, g), chunk(grad_output, 2, g)) if sp else (x, grad_output)
                args[r] = (*case.sizes, state, *mine, sp, Group(group))
            references[group] = block_reference(*case.sizes, state, x, grad_output)
        RUNS[key] = submission.function("block_step").spmd(WORLD, args), references
    return RUNS[key]


def check_block(where: str, case, group, got: list, reference: dict, wanted: dict) -> None:
    """A ParallelBlock's outputs, input gradients (each rank's sequence chunk under sequence
    parallelism), parameter gradients rebuilt from the group's shards, and the collectives of
    each phase on every rank of `group`, against one process's `reference`."""
    sp = case.sequence_parallel
    for key in ("output", "grad_input"):
        for g, r in enumerate(group):
            want = chunk(reference[key], len(group), g) if sp else reference[key]
            assert_matches(got[g][key], want, f"{where}: global rank {r} (group rank {g})'s {key}", *TOL)
    try:
        grads = assemble_grads([o["grads"] for o in got], case.heads, case.kv_heads, sp)
    except KeyError as missing:
        raise AssertionError(f"{where}: no gradient for parameter {missing}") from None
    for name, want in reference["grads"].items():
        assert_matches(grads[name], want, f"{where}: gradient of {name}, rebuilt from the group's shards", *TOL)
    for g, r in enumerate(group):
        for phase in ("forward", "backward"):
            assert counted(got[g][phase]) == wanted[phase], (
                f"{where}: global rank {r}'s {phase} made {describe_calls(got[g][phase])}; expected "
                f"{describe_calls([k for k, n in wanted[phase].items() for _ in range(n)])}"
            )


@pytest.mark.points(3)
@pytest.mark.parametrize("case", BLOCK_CASES, ids=[c.id.replace("world=2", "groups=2x2") for c in BLOCK_CASES])
def test_parallel_block_within_two_groups_matches_one_process(submission, case):
    result, references = run_block_in_groups(submission, case)
    sp = case.sequence_parallel
    wanted = expected_collectives(case)
    for group in GROUPS:
        where = f"ParallelBlock, {'sp' if sp else 'tp'}, {instance_name(group)}"
        check_block(where, case, group, [result.outputs[r] for r in group], references[group], wanted)


@pytest.mark.perf
@pytest.mark.points(2)
@pytest.mark.parametrize("case", BLOCK_CASES, ids=[c.id.replace("world=2", "groups=2x2") for c in BLOCK_CASES])
def test_parallel_block_within_two_groups_sends_no_more_than_the_library(submission, library, case, record_property):
    """Bytes per rank (the kernel's count) against torch.distributed's collectives of the block's
    plan run by a trusted world of 4 in the same two groups, plus gloo's framing per call and the
    groups' one-time setup."""
    result, _ = run_block_in_groups(submission, case)
    plan, numel = collective_plan(case), case.seq * case.batch * case.hidden
    baseline = library.spmd(
        "grader.suites.tensor_parallel.reference:library_collectives",
        WORLD,
        [(plan, numel, Group(members(r))) for r in range(WORLD)],
    )
    library_bytes = max(baseline.bytes_sent)
    allowed = library_bytes * 1.001 + BYTES_SLACK_PER_CALL * len(plan) + GROUP_SETUP_SLACK
    sent = result.bytes_sent
    record_property("bytes_sent_per_rank", sent)
    record_property("library_bytes_per_rank", baseline.bytes_sent)
    record_property("bytes_allowed", int(allowed))
    if not any(sent):
        pytest.skip("no bytes were counted: the collectives did not go through sockets (NCCL over NVLink/PCIe)")
    worst = max(range(WORLD), key=sent.__getitem__)
    assert sent[worst] <= allowed, (
        f"ParallelBlock, {case.id} in groups {GROUPS} of a world of 4: rank {worst} sent {sent[worst]:,} bytes; "
        f"torch.distributed's {len(plan)} collectives of the layer within its group of 2 send {library_bytes:,} "
        f"({int(allowed):,} allowed). A collective over the whole world sends more: pass group=group"
    )


@pytest.mark.points(3)
def test_vocab_embedding_and_loss_within_two_groups(submission):
    """The embedding (a vocabulary of 8 over each group of 2) and the loss on 3-D logits with
    ignored positions, one call, each group with its own data; against F.embedding and
    F.cross_entropy(reduction="none", ignore_index=-100)."""
    data = {}
    for group in GROUPS:
        gen = generator("tp-groups-loss", group)
        logits = 3 * torch.randn(4, 3, 10, generator=gen, dtype=torch.float64)
        targets = torch.randint(0, 10, (4, 3), generator=gen)
        targets[0, 0], targets[1, 2] = 9, -100
        grad_loss = torch.rand(4, 3, generator=gen, dtype=torch.float64)
        data[group] = (embedding_data(2, 8, 3, "groups", group), (logits, targets, grad_loss))
    steps = []
    for r in range(WORLD):
        group = members(r)
        (weight, ids, grad_embedding), (logits, targets, grad_loss) = data[group]
        shard = logits.chunk(2, dim=-1)[group.index(r)].contiguous()
        steps.append(
            [
                Step("embedding_step", (8, weight, ids, grad_embedding, Group(group))),
                Step("cross_entropy_step", (shard, targets, grad_loss), {"group": Group(group)}),
            ]
        )
    ranks = submission.script_spmd(WORLD, steps).steps
    for group in GROUPS:
        (weight, ids, grad_embedding), (logits, targets, grad_loss) = data[group]
        where = instance_name(group)
        check_embedding([ranks[r][0] for r in group], weight, ids, grad_embedding, f"VocabParallelEmbedding, {where}")
        losses, grad = loss_reference(logits, targets, grad_loss)
        for g, r in enumerate(group):
            got = ranks[r][1]
            what = f"vocab_parallel_cross_entropy, {where}, global rank {r} (group rank {g})"
            assert_matches(got["loss"], losses, f"{what}: losses (F.cross_entropy, reduction='none')", *TOL)
            assert_matches(got["grad"], grad.chunk(2, dim=-1)[g], f"{what}: gradient of its shard", *TOL)


# ------------------------------------------------------------------ groups of different sizes

# A world of 5: ranks {0, 2, 3} run one instance as a tensor-parallel group of 3 while ranks
# {1, 4} run another as a group of 2, at once. Neither group is ranks 0..p-1, a contiguous block
# or evenly strided: a group rank taken as global // p, global % p or global * p // world is
# wrong in one of them (in the world-of-4 layout above, global // 2 gives the group ranks).
# p = 3 is not a power of two; the vocabularies split over their own group only (9 and 15 over
# 3 ranks, 10 over 2), so a size taken from the wrong group does not split.
UNEVEN_WORLD = 5
UNEVEN_GROUPS = ((0, 2, 3), (1, 4))  # global ranks; group rank i is the i-th
UNEVEN_BLOCKS = {
    # GQA with two key/value heads per rank on the group of 3 (query head i reads kv head i // 2)
    3: (BlockCase(3, 12, 6, False, hidden=24, ffn_hidden=30, seq=6, batch=2),
        BlockCase(3, 12, 6, True, hidden=24, ffn_hidden=30, seq=6, batch=2)),
    2: (BlockCase(2, 6, 2, False, hidden=18, ffn_hidden=10, seq=6, batch=1),
        BlockCase(2, 6, 2, True, hidden=18, ffn_hidden=10, seq=6, batch=1)),
}  # fmt: skip
UNEVEN_VOCAB = {3: (9, 15), 2: (10, 8)}  # the embedding's and the loss's vocabularies per group size


def uneven_members(rank: int) -> tuple[int, ...]:
    return next(g for g in UNEVEN_GROUPS if rank in g)


def uneven_name(group: tuple[int, ...]) -> str:
    other = UNEVEN_GROUPS[1 - UNEVEN_GROUPS.index(group)]
    return f"the instance on the group {list(group)} of a world of 5 (ranks {list(other)} ran another)"


def uneven_hint(error: AssertionError, group: tuple[int, ...]) -> AssertionError:
    return AssertionError(
        f"{uneven_name(group)}, group rank = position among the group's sorted global ranks: {error}. Take "
        f"p = dist.get_world_size(group) and r = dist.get_rank(group); no layout of the groups can be assumed"
    )


@pytest.mark.points(2)
def test_region_operators_within_groups_of_3_and_2_of_a_world_of_5(submission):
    """The five operators one after another (one call) in a group of 3 and a group of 2, each
    with its own data; values and collectives as on a world of its size."""
    data = {g: {op: inputs(op, len(g), "uneven-groups", g) for op in OPERATORS} for g in UNEVEN_GROUPS}
    steps = [
        [Step("region_step", (op, data[group][op][0][g], data[group][op][1][g], Group(group))) for op in OPERATORS]
        for r in range(UNEVEN_WORLD)
        for group in [uneven_members(r)]
        for g in [group.index(r)]
    ]
    ranks = submission.script_spmd(UNEVEN_WORLD, steps).steps
    for group in UNEVEN_GROUPS:
        for i, op in enumerate(OPERATORS):
            try:
                check(op, len(group), [ranks[r][i] for r in group], *data[group][op])
            except AssertionError as error:
                raise uneven_hint(error, group) from None


@pytest.mark.points(3)
def test_parallel_block_within_groups_of_3_and_2_of_a_world_of_5_matches_one_process(submission):
    """The block, TP then SP (one call), in a group of 3 (12 heads, 6 key/value heads: two per
    rank) and a group of 2 (6 heads, 2 key/value heads), each against reference.Block on its data."""
    steps, references = [None] * UNEVEN_WORLD, {}
    for group in UNEVEN_GROUPS:
        p = len(group)
        for case in UNEVEN_BLOCKS[p]:
            gen = generator("tp-uneven-groups-block", case.id, group)
            state = make_state(*case.sizes, case.id, group)
            x = torch.randn(case.seq, case.batch, case.hidden, generator=gen, dtype=torch.float64)
            grad_output = torch.randn(case.seq, case.batch, case.hidden, generator=gen, dtype=torch.float64)
            references[group, case] = block_reference(*case.sizes, state, x, grad_output)
            for g, r in enumerate(group):
                mine = (chunk(x, p, g), chunk(grad_output, p, g)) if case.sequence_parallel else (x, grad_output)
                step = Step("block_step", (*case.sizes, state, *mine, case.sequence_parallel, Group(group)))
                steps[r] = [*(steps[r] or []), step]
    ranks = submission.script_spmd(UNEVEN_WORLD, steps).steps
    for group in UNEVEN_GROUPS:
        p = len(group)
        for index, case in enumerate(UNEVEN_BLOCKS[p]):
            sp, reference, wanted = case.sequence_parallel, references[group, case], expected_collectives(case)
            where = (
                f"ParallelBlock, {'sp' if sp else 'tp'}, hidden={case.hidden}, heads={case.heads}, "
                f"kv_heads={case.kv_heads}, {uneven_name(group)}"
            )
            check_block(where, case, group, [ranks[r][index] for r in group], reference, wanted)


@pytest.mark.points(2)
def test_vocab_embedding_and_loss_within_groups_of_3_and_2_of_a_world_of_5(submission):
    """The embedding (9 rows over the group of 3, 10 over the group of 2) and the loss on 3-D
    logits with ignored positions (vocabularies of 15 and 8), one call, each group its own data."""
    data = {}
    for group in UNEVEN_GROUPS:
        vocab, classes = UNEVEN_VOCAB[len(group)]
        gen = generator("tp-uneven-groups-loss", group)
        logits = 3 * torch.randn(3, 2, classes, generator=gen, dtype=torch.float64)
        targets = torch.randint(0, classes, (3, 2), generator=gen)
        targets[0, 0], targets[0, 1], targets[2, 1] = classes - 1, 0, -100  # both ends, one ignored
        grad_loss = torch.rand(3, 2, generator=gen, dtype=torch.float64)
        data[group] = (embedding_data(len(group), vocab, 3, "uneven-groups", group), (logits, targets, grad_loss))
    steps = []
    for r in range(UNEVEN_WORLD):
        group = uneven_members(r)
        (weight, ids, grad_embedding), (logits, targets, grad_loss) = data[group]
        shard = logits.chunk(len(group), dim=-1)[group.index(r)].contiguous()
        steps.append(
            [
                Step("embedding_step", (weight.shape[0], weight, ids, grad_embedding, Group(group))),
                Step("cross_entropy_step", (shard, targets, grad_loss), {"group": Group(group)}),
            ]
        )
    ranks = submission.script_spmd(UNEVEN_WORLD, steps).steps
    for group in UNEVEN_GROUPS:
        p = len(group)
        (weight, ids, grad_embedding), (logits, targets, grad_loss) = data[group]
        try:
            check_embedding(
                [ranks[r][0] for r in group],
                weight,
                ids,
                grad_embedding,
                f"VocabParallelEmbedding({weight.shape[0]}, 3) over {p} ranks",
            )
        except AssertionError as error:
            raise uneven_hint(error, group) from None
        losses, grad = loss_reference(logits, targets, grad_loss)
        for g, r in enumerate(group):
            got = ranks[r][1]
            what = (
                f"vocab_parallel_cross_entropy, a vocabulary of {logits.shape[-1]} over {p} ranks, "
                f"{uneven_name(group)}, global rank {r} (group rank {g})"
            )
            assert_matches(got["loss"], losses, f"{what}: losses (F.cross_entropy, reduction='none')", *TOL)
            assert_matches(got["grad"], grad.chunk(p, dim=-1)[g], f"{what}: gradient of its shard", *TOL)
