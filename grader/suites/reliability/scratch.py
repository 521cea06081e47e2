"""Folders the hidden suite hands to the student's workers.

A worker may read only what existed when it was sandboxed (Landlock: grader/sandbox/landlock.py),
besides its own folders; a folder created later directly in an ancestor of the hidden suites
(/tmp, when the course itself lies under /tmp) is unreadable to it. So this base folder is made
when the suite is imported, before any worker starts, and every test's folder is made inside it.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

BASE = Path(tempfile.mkdtemp(prefix="reliability-suite-"))
atexit.register(shutil.rmtree, BASE, ignore_errors=True)


@contextmanager
def folder(prefix: str) -> Iterator[Path]:
    """A fresh folder inside BASE, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix=prefix, dir=BASE) as name:
        yield Path(name)
