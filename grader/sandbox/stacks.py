"""Reading faulthandler's stack dumps: where was each rank when it hung or crashed?"""

from __future__ import annotations

import linecache
import re
from dataclasses import dataclass
from pathlib import Path

from grader.sandbox.given import GIVEN_PREFIX, given_spans

_THREAD = re.compile(r"^(Current thread|Thread) 0x[0-9a-f]+")
_FRAME = re.compile(r'^\s+File "(?P<file>.+)", line (?P<line>\d+) in (?P<function>\S+)')


@dataclass(frozen=True)
class Frame:
    file: str
    line: int
    function: str

    def source(self) -> str:
        return linecache.getline(self.file, self.line).strip()


# The grader's own wrappers around a worker's communication calls: a rank waiting in one is
# shown waiting where the wrapper was called from, in torch or in the student's code. File ->
# the wrappers' function names (None: every function of the file). The probes' wrappers
# (probes.py: a request's wait(), a process group's send, recv and collectives) sit between a
# student's `request.wait()` and gloo whenever a test counts messages or bytes.
_GRADER_WRAPPERS: dict[str, frozenset[str] | None] = {
    "grader/sandbox/commlog.py": None,
    "grader/sandbox/probes.py": frozenset({"send", "recv", "wait", "call"}),
}


def _is_wrapper(file: str, function: str) -> bool:
    path = file.replace("\\", "/")
    for suffix, functions in _GRADER_WRAPPERS.items():
        if path.endswith(suffix) and (functions is None or function in functions):
            return True
    return False


def parse_dump(text: str) -> list[tuple[bool, list[Frame]]]:
    """Threads in a dump: (is it the current thread, its frames innermost first), without the
    frames of the grader's wrappers."""
    threads: list[tuple[bool, list[Frame]]] = []
    for line in text.splitlines():
        thread = _THREAD.match(line)
        if thread:
            threads.append((thread.group(1) == "Current thread", []))
        elif (frame := _FRAME.match(line)) and threads and not _is_wrapper(frame["file"], frame["function"]):
            threads[-1][1].append(Frame(frame["file"], int(frame["line"]), frame["function"]))
    return [t for t in threads if t[1]]


def _in_submission(frame: Frame, directory: Path | None) -> bool:
    return directory is not None and Path(frame.file).resolve().is_relative_to(directory)


def _in_given_code(frame: Frame, directory: Path | None) -> bool:
    """Whether the frame runs a given definition the student left as it came: it is in the
    student's file (under its name and line) but is the course's code, not the student's."""
    if not _in_submission(frame, directory):
        return False
    spans = given_spans(directory.name, Path(frame.file))
    return any(first <= frame.line <= last for first, last in spans)


def waiting_frames(text: str, directory: Path | None) -> list[Frame]:
    """The frames (innermost first) of the thread that matters in a dump: the one running the
    student's code, else the current thread, else the first; [] for a dump without Python stacks."""
    threads = parse_dump(text)
    with_student = [t for t in threads if any(_in_submission(f, directory) for f in t[1])]
    current = [t for t in threads if t[0]]
    chosen = (with_student or current or threads)[:1]
    return chosen[0][1] if chosen else []


def where(text: str, directory: Path | None) -> str:
    """One line saying where a rank was, pointing at the student's own line when there is one."""
    frames = waiting_frames(text, directory)
    if not frames:
        return "no Python stack (the process did not answer the stack request)"
    innermost = frames[0]
    # The student's own innermost line: past the given helpers it went through (a counting
    # wrapper around a collective), else the innermost line of their files at all.
    mine = [f for f in frames if _in_submission(f, directory)]
    student = next((f for f in mine if not _in_given_code(f, directory)), mine[0] if mine else None)
    if student is None:
        return f"{Path(innermost.file).name}:{innermost.line} in {innermost.function}()"
    text = f"{Path(student.file).name}:{student.line} in {student.function}(): {student.source()}"
    if innermost != student:
        text += f"  [waiting in {innermost.function}() of {_short(innermost.file)}]"
    return text


def call_chain(text: str, directory: Path | None) -> list[str]:
    """Every frame of the student's files (and of the course's given code in them) in the
    thread that matters, outermost first, as `ring.py:176 in ring_step(): out = ring_attention(...)`:
    the calls that led to where the rank was. Empty when fewer than two such frames (the one
    line `where` gives says it all)."""
    frames = [f for f in reversed(waiting_frames(text, directory)) if _in_submission(f, directory) or _is_given(f)]
    if len(frames) < 2:
        return []
    return [_chain_line(frame, directory) for frame in frames]


def _chain_line(frame: Frame, directory: Path | None) -> str:
    given = "  (the course's given code)" if _in_given_code(frame, directory) else ""
    return f"{_shown_file(frame)}:{frame.line} in {frame.function}(): {frame.source()}".rstrip() + given


def _is_given(frame: Frame) -> bool:
    return frame.file.startswith(GIVEN_PREFIX)


def _shown_file(frame: Frame) -> str:
    if _is_given(frame):
        return f"{frame.file[len(GIVEN_PREFIX) : -1]} (the course's given code)"
    return Path(frame.file).name


def _short(path: str) -> str:
    parts = Path(path).parts
    if "site-packages" in parts:
        return "/".join(parts[parts.index("site-packages") + 1 :])
    return Path(path).name
