"""torch's own flight-recorder analyzer (torch.distributed.flight_recorder, the library behind
`python -m torch.distributed.flight_recorder.fr_trace DIR`) run on a list of dumps, its verdict
put in diagnose's terms, so that the hidden suite checks diagnose against the library.

How the analyzer is driven: fr_trace.main parses its command line (JobConfig), reads one file
per rank from a folder (loader.read_dir, the rank taken from each file's name after a common
prefix), and builds a database (builder.build_db) whose `collectives` hold one row per
collective it paired up across ranks, in the order it walked them. A row it could not pair
cleanly says why:
- `missing_ranks` (a set of ranks) when some ranks of the group never entered it ("Not all
  ranks joining collective");
- otherwise `pass_check` False with `mismatch_collectives` {rank: row of that rank's entry},
  each with `type_of_mismatch.state` a MatchState: COLLECTIVE_TYPE_MISMATCH,
  SIZE_OR_SYNTAX_MISMATCH, COLLECTIVE_DTYPE_MISMATCH (or COLLECTIVE_STATE_MISMATCH, which gloo
  never reaches: its entries stay "scheduled").
The analyzer compares every rank with the first dump it reads (here always rank 0's: read_dir
keeps the file system's order, sorted here), so its culprits are the ranks that differ from
rank 0, and it stops pairing a group's collectives at its first mismatch; a row's `group_id` is
the group's name and `pg_desc` "name:desc".
"""

from __future__ import annotations

import contextlib
import io
import logging
import tempfile

from torch.distributed.flight_recorder.components.builder import build_db
from torch.distributed.flight_recorder.components.config_manager import JobConfig
from torch.distributed.flight_recorder.components.loader import read_dir
from torch.distributed.flight_recorder.components.types import Collective, MatchState

from grader.models.flight_recorder import save_dumps

KINDS = {
    MatchState.COLLECTIVE_TYPE_MISMATCH: "mismatched_op",
    MatchState.SIZE_OR_SYNTAX_MISMATCH: "mismatched_size",
    MatchState.COLLECTIVE_DTYPE_MISMATCH: "mismatched_dtype",
    MatchState.COLLECTIVE_STATE_MISMATCH: "mismatched_state",
}


def analyze(dumps: list[dict]) -> list[dict]:
    """The analyzer's findings on `dumps`, first one first, each as
    {"status", "process_group" (the group's name), "seq", "record_id", "op", "ranks" (sorted)}
    with status "missing" or one of KINDS' values; [] when it paired every collective."""
    with tempfile.TemporaryDirectory() as folder:
        save_dumps(dumps, folder, prefix="rank_")
        args = JobConfig().parse_args([folder, "--prefix", "rank_"])
        # The analyzer reports through the "Flight Recorder" logger: silenced here (its findings
        # are read from the database it returns).
        logger = logging.getLogger("Flight Recorder")
        level = logger.level
        logger.setLevel(logging.CRITICAL)
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                details, version = read_dir(args)
                # The analyzer takes the first dump it reads as the reference (its culprits are
                # the ranks that differ from it), and read_dir keeps the folder's order, which
                # the file system chooses: rank 0 first, as fr_trace's users expect.
                details = dict(sorted(details.items(), key=lambda item: item[1]["rank"]))
                db = build_db(details, args, version)
        finally:
            logger.setLevel(level)
    return [finding for row in db.collectives if (finding := _finding(row)) is not None]


def first_finding(dumps: list[dict]) -> dict | None:
    """The first of analyze(dumps), or None when the analyzer found nothing wrong."""
    findings = analyze(dumps)
    return findings[0] if findings else None


def _finding(row: Collective) -> dict | None:
    common = {"process_group": row.group_id, "seq": row.collective_seq_id, "record_id": row.record_id}
    if row.missing_ranks:
        return {"status": "missing", **common, "op": row.collective_name, "ranks": sorted(row.missing_ranks)}
    if not row.pass_check and row.mismatch_collectives:
        kinds = {KINDS[other.type_of_mismatch.state] for other in row.mismatch_collectives.values()}
        # Several culprits of different kinds: the first of diagnose's order (op, size, dtype).
        status = min(kinds, key=list(KINDS.values()).index)
        return {"status": status, **common, "op": row.collective_name, "ranks": sorted(row.mismatch_collectives)}
    return None
