"""Reliability: the reference's checkpoints beside torch.distributed.checkpoint (DCP).

Per size of a rank's state (2 ranks, eight float32 tensors cut by rows): how long a save holds
the training loop of train_and_checkpoint, for the reference's synchronous save_sharded, its
AsyncCheckpointer (a snapshot in memory, written by a thread) and DCP's synchronous dcp.save in
the same loop, medians of interleaved rounds in the same run; and the bytes each rank wrote
(its own rows and torch.save's framing of each tensor, fed views of the whole tensors).
"""

from __future__ import annotations

import itertools
import shutil

import torch
from rich.table import Table

from grader.course import Course
from grader.perf import Timing, interleaved_ratio
from grader.sandbox import Library, Submission, scratch
from grader.suites.reliability.checkpoint_reference import shards

WORLD_SIZE = 2
TENSORS = 8
COLUMNS = 16384
MIB_PER_RANK = [1, 4, 16, 48]  # a worker may write at most 64 MiB to a file


def _state(mib_per_rank: int) -> dict[str, torch.Tensor]:
    """TENSORS float32 tensors of COLUMNS columns, rows split evenly: mib_per_rank MiB a rank."""
    rows_per_rank = mib_per_rank * 2**20 // (4 * COLUMNS * TENSORS)
    return {f"t{i}": torch.full((rows_per_rank * WORLD_SIZE, COLUMNS), float(i)) for i in range(TENSORS)}


def table(course: Course) -> Table:
    reference = Submission(course.module("reliability"), course.root / "solutions" / "reliability")
    library = Library()
    train = reference.function("train_and_checkpoint")
    result = Table(title=f"reliability: how long a checkpoint holds training, {WORLD_SIZE} ranks")
    for column in ("state/rank", "written B/rank", "save_sharded ms", "async ms", "DCP save ms", "async / DCP"):
        result.add_column(column, justify="right")
    rounds = itertools.count()
    try:
        with scratch.folder("bench-") as folder:

            def hold(full: dict[str, torch.Tensor], mode: str) -> Timing:
                path = folder / f"{mode}{next(rounds)}"
                args = [(state, str(path), 3, [1], mode) for state in shards(full, WORLD_SIZE, views=False)]
                call = train.spmd(WORLD_SIZE, args)
                shutil.rmtree(path, ignore_errors=True)
                return Timing(max(rank["blocked_s"][0] for rank in call.outputs), call.contention)

            def dcp_hold(full: dict[str, torch.Tensor]) -> Timing:
                path = folder / f"dcp{next(rounds)}"
                call = library.spmd("grader.library:dcp_blocking_save", WORLD_SIZE, [(full, str(path), 3, 1)] * 2)
                shutil.rmtree(path, ignore_errors=True)
                return Timing(call.outputs[0], call.contention)

            for mib in MIB_PER_RANK:
                full = _state(mib)
                written = folder / "written"
                train.spmd(WORLD_SIZE, [(s, str(written), 2, [1], "sync") for s in shards(full, WORLD_SIZE)])
                per_rank = max(f.stat().st_size for f in (written / "step1").glob("__*_0.distcp"))
                shutil.rmtree(written)
                sync = interleaved_ratio(lambda f=full: hold(f, "sync"), lambda f=full: dcp_hold(f), rounds=3)
                async_ = interleaved_ratio(lambda f=full: hold(f, "async"), lambda f=full: dcp_hold(f), rounds=3)
                result.add_row(
                    f"{mib} MiB",
                    f"{per_rank:,}",
                    f"{sync.candidate_s * 1e3:.1f}",
                    f"{async_.candidate_s * 1e3:.1f}",
                    f"{async_.reference_s * 1e3:.1f}",
                    f"{async_.ratio:.2f}",
                )
    finally:
        reference.close()
        library.close()
    return result
