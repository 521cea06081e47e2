"""Folders the grader (a hidden suite, a public test, a benchmark) hands to a student's workers,
for them to write into and read back: checkpoints, logs, dumps.

A worker may read only what existed when it was sandboxed (Landlock: landlock.py), besides its
own folders; a folder created later directly in an ancestor of the hidden suites (/tmp, when the
course itself lies under /tmp) is unreadable to it. So BASE is made when this module is
imported: import it at the top of the test file, before any worker starts, and make every folder
handed to workers with `folder`, inside BASE. BASE is removed when the process exits.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

BASE = Path(tempfile.mkdtemp(prefix="grader-scratch-"))


def remove() -> None:
    """Remove BASE and everything in it: at exit, and from the pytest plugin before the quick
    exit of a student's `pytest assignments/<module>` (os._exit skips atexit)."""
    shutil.rmtree(BASE, ignore_errors=True)


atexit.register(remove)


@contextmanager
def folder(prefix: str) -> Iterator[Path]:
    """A fresh folder inside BASE, readable and writable by the workers, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix=prefix, dir=BASE) as name:
        yield Path(name)
