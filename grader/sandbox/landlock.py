"""Hiding folders from a worker with Landlock (Linux 5.13+), so a submission cannot read them.

A worker runs as the same user as the grader, so file permissions cannot keep it out of the
hidden suites (grader/suites/) or the reference solutions. Landlock lets an unprivileged process
give up rights for itself and its children, irreversibly: the worker gives up reading files
anywhere except where a rule allows it, and the rules allow everything but the hidden folders.

Where the kernel offers Landlock ABI 6 or later, the worker also loses the right to send signals
outside its own domain: a submission cannot kill or interrupt the grader (or another rank).

Landlock rules only grant (beneath a folder, recursively), so "everything but D" is built from
the siblings of every folder on the path from / to D. Listing folders stays allowed everywhere
(names are no secret); reading a file beneath D is refused with PermissionError. Files created
later directly in one of D's ancestors are unreadable too; workers write in their own
temporary folder, which is not one of them.
"""

from __future__ import annotations

import ctypes
import os
import platform
from collections.abc import Iterable
from pathlib import Path

_SYSCALLS = {"x86_64": (444, 445, 446), "aarch64": (444, 445, 446)}
_READ_FILE = 1 << 2
_READ_DIR = 1 << 3
_REFER = 1 << 13  # ABI 2+: link or rename a file into another folder
_RULE_PATH_BENEATH = 1
_CREATE_RULESET_VERSION = 1
_PR_SET_NO_NEW_PRIVS = 38
_SCOPE_SIGNAL = 1 << 1
_SCOPED_ABI = 6  # the first ABI with scoped signals


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64)]


class _ScopedRulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _libc() -> ctypes.CDLL | None:
    if platform.system() != "Linux" or platform.machine() not in _SYSCALLS:
        return None
    return ctypes.CDLL(None, use_errno=True)


def landlock_abi() -> int:
    """The Landlock ABI version this kernel offers to unprivileged processes (0: none)."""
    libc = _libc()
    if libc is None:
        return 0
    create, _, _ = _SYSCALLS[platform.machine()]
    return max(0, libc.syscall(create, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION)))


def landlock_available() -> bool:
    """True when this kernel offers Landlock to unprivileged processes."""
    return landlock_abi() >= 1


def signals_scoped() -> bool:
    """True when hide_folders also keeps the process from signalling outside its domain."""
    return landlock_abi() >= _SCOPED_ABI


def readable_roots(hidden: Iterable[Path]) -> list[tuple[Path, bool]]:
    """(path, is_folder) for every entry that, with all beneath it, makes up the whole file
    tree minus the `hidden` folders: the siblings of each folder on the way down to them."""
    hidden = [Path(h).resolve() for h in hidden]
    on_the_way = {parent for h in hidden for parent in (h, *h.parents)}
    roots: list[tuple[Path, bool]] = []
    for folder in sorted(on_the_way - set(hidden)):
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            path = Path(entry.path)
            if path in on_the_way:
                continue
            try:
                roots.append((path, entry.is_dir(follow_symlinks=False)))
            except OSError:
                continue
    return roots


def hide_folders(hidden: Iterable[Path]) -> bool:
    """Refuse this process (and its future children) reading files beneath `hidden`, and, where
    the kernel can, signalling processes outside this one's Landlock domain. Returns False,
    changing nothing, where Landlock is not available."""
    hidden = [h for h in (Path(p).resolve() for p in hidden) if h.is_dir()]
    libc, abi = _libc(), landlock_abi()
    if not hidden or libc is None or abi < 1:
        return False
    create, add_rule, restrict = _SYSCALLS[platform.machine()]
    # From ABI 2 on, a ruleset refuses every rename or link into another folder (EXDEV) unless it
    # handles REFER and grants it: Triton's cache, pip and atomic saves all rename that way. REFER
    # is granted beneath the readable folders only, and Landlock never lets a file move to where
    # it would be less restricted, so nothing leaves a hidden folder by a rename.
    refer = _REFER if abi >= 2 else 0
    handled = _READ_FILE | _READ_DIR | refer
    if abi >= _SCOPED_ABI:
        attr: ctypes.Structure = _ScopedRulesetAttr(handled, 0, _SCOPE_SIGNAL)
    else:
        attr = _RulesetAttr(handled)
    ruleset = libc.syscall(create, ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)), ctypes.c_uint32(0))
    if ruleset < 0:
        return False
    try:
        _allow(libc, add_rule, ruleset, Path("/"), _READ_DIR)
        for path, is_folder in readable_roots(hidden):
            _allow(libc, add_rule, ruleset, path, _READ_FILE | _READ_DIR | refer if is_folder else _READ_FILE)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            return False
        return libc.syscall(restrict, ctypes.c_int(ruleset), ctypes.c_uint32(0)) == 0
    finally:
        os.close(ruleset)


def _allow(libc: ctypes.CDLL, add_rule: int, ruleset: int, path: Path, access: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return
    try:
        rule = _PathBeneathAttr(access, fd)
        libc.syscall(
            add_rule, ctypes.c_int(ruleset), ctypes.c_int(_RULE_PATH_BENEATH), ctypes.byref(rule), ctypes.c_uint32(0)
        )
    finally:
        os.close(fd)
