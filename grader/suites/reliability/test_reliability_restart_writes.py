"""Hidden suite: train_with_restarts' checkpoints are whole or absent: "completely or not at all
(written aside, then renamed)". A worker killed inside torch.save leaves whatever file it was
writing; if that file already bears a checkpoint's name, the restarted run takes it for the last
complete checkpoint. Killing the writer at the right microsecond is luck, so the grader watches
instead: the kernel's inotify reports every write to a file of the checkpoint folder under the
name the file has at that moment, and a rename into a name apart from it. No byte may be written
to a file while it is named step_NNNNNN.pt; it may only arrive there whole, by a rename (or a
hard link). A world of 2 ranks already joined (no torchrun: test_reliability_restart.py runs the
real thing), 4 steps, a checkpoint every 2.
"""

from __future__ import annotations

import ctypes
import os
import re
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest

from grader.sandbox import scratch as worker_folders

STEPS, EVERY = 4, 2
CHECKPOINT = re.compile(r"step_\d{6}\.pt")
# inotify(7): the events watched, by their bits in <sys/inotify.h>.
IN_MODIFY, IN_CLOSE_WRITE, IN_MOVED_TO, IN_CREATE = 0x2, 0x8, 0x80, 0x100
IN_NONBLOCK, IN_CLOEXEC = os.O_NONBLOCK, os.O_CLOEXEC
EVENTS = {IN_MODIFY: "written", IN_CLOSE_WRITE: "closed after writing", IN_MOVED_TO: "renamed in", IN_CREATE: "created"}
HEADER = struct.Struct("iIII")  # wd, mask, cookie, len; then the name, len bytes padded with NULs


@pytest.fixture
def folder() -> Iterator[Path]:
    """A folder the workers can write (grader/sandbox/scratch.py), removed after the test."""
    with worker_folders.folder("restart-writes-") as path:
        yield path


class FolderEvents:
    """The kernel's record (inotify) of what happens to the files of one folder, from any
    process: [(file name, what)], in order."""

    def __init__(self, path: Path) -> None:
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.fd = self.libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        mask = IN_MODIFY | IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE
        if self.libc.inotify_add_watch(self.fd, os.fsencode(path), mask) < 0:
            os.close(self.fd)
            raise OSError(ctypes.get_errno(), f"inotify_add_watch {path}")

    def read(self) -> list[tuple[str, str]]:
        """Every event so far (the kernel queues them while the workers run)."""
        events, data = [], b""
        while True:
            try:
                data += os.read(self.fd, 1 << 16)
            except BlockingIOError:
                break
        offset = 0
        while offset + HEADER.size <= len(data):
            _, mask, _, length = HEADER.unpack_from(data, offset)
            name = data[offset + HEADER.size : offset + HEADER.size + length].rstrip(b"\0").decode(errors="replace")
            events += [(name, what) for bit, what in EVENTS.items() if mask & bit]
            offset += HEADER.size + length
        return events

    def close(self) -> None:
        os.close(self.fd)


@pytest.mark.points(3)
def test_a_checkpoint_file_is_never_written_under_its_own_name(submission, folder):
    """2 ranks, 4 steps, a checkpoint every 2: step_000002.pt and step_000004.pt must appear, and
    no write may reach a file while it bears either name (a worker killed then would leave a
    partial file that a restart loads as the latest checkpoint)."""
    watch = FolderEvents(folder)
    try:
        submission.function("train_with_restarts").spmd(2, [(str(folder), STEPS, EVERY)] * 2)
        events = watch.read()
    finally:
        watch.close()
    names = sorted(path.name for path in folder.iterdir() if CHECKPOINT.fullmatch(path.name))
    expected = [f"step_{step:06d}.pt" for step in range(EVERY, STEPS + 1, EVERY)]
    assert names == expected, f"expected the checkpoints {expected} in the folder, found {names}"
    written = ("written", "closed after writing")
    in_place = sorted({name for name, what in events if CHECKPOINT.fullmatch(name) and what in written})
    shown = [f"{name}: {what}" for name, what in events if CHECKPOINT.fullmatch(name)][:8]
    assert not in_place, (
        f"{in_place} were written under their own names (what the kernel saw happen to them: {shown}): a worker "
        "killed during that torch.save leaves a partial file with a checkpoint's name, which the restarted run "
        "loads as the last complete checkpoint. Write each checkpoint aside (a name that is not step_NNNNNN.pt), "
        "then os.replace it to its name: whole or absent (train_with_restarts' docstring)"
    )
