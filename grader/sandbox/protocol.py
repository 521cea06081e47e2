"""Messages between the grader and its workers.

Requests (grader -> worker) are pickles: the grader is trusted. Replies (worker -> grader) are
written with torch.save and read with torch.load(weights_only=True), torch's restricted unpickler,
so a submission can hand back tensors, numbers, strings and containers of them, but never an
object whose unpickling would run code in the grader.
"""

from __future__ import annotations

import io
import pickle
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

import numpy as np
import torch

GO = b"go"
REMOTE = "__kept_in_the_worker__"  # key of the reply standing for a value a session kept there


def send_request(conn: Connection, request: dict[str, Any]) -> None:
    conn.send_bytes(pickle.dumps(request, protocol=pickle.HIGHEST_PROTOCOL))


def receive_request(conn: Connection) -> dict[str, Any]:
    return pickle.loads(conn.recv_bytes())


def encode_reply(reply: Any) -> bytes:
    buffer = io.BytesIO()
    torch.save(reply, buffer)
    return buffer.getvalue()


def decode_reply(payload: bytes) -> Any:
    """Raises ValueError when the payload is not a plain, safe structure."""
    try:
        return torch.load(io.BytesIO(payload), weights_only=True)
    except Exception as error:  # any failure to decode is the worker's fault
        refused = [
            line.split(" was not")[0].strip() for line in str(error).splitlines() if "Unsupported global" in line
        ]
        detail = f" ({refused[0]})" if refused else ""
        raise ValueError(f"the worker's reply could not be read safely{detail}") from None


def framed_size(payload: bytes) -> int:
    """Bytes that Connection.send_bytes writes for `payload`: a 4-byte length, or 4 + 8 if huge."""
    return len(payload) + (4 if len(payload) <= 0x7FFFFFFF else 12)


def is_plain(value: Any) -> bool:
    """True for tensors, numbers, strings, None, and lists/tuples/dicts of them."""
    if value is None or isinstance(value, (bool, int, float, complex, str, bytes, torch.Tensor)):
        return True
    if isinstance(value, (list, tuple)):
        return all(is_plain(item) for item in value)
    if isinstance(value, dict):
        return all(isinstance(k, (str, int)) and is_plain(v) for k, v in value.items())
    return isinstance(value, (torch.dtype, torch.device, torch.Size))


def map_tensors(value: Any, function: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """A copy of `value` with `function` applied to every tensor inside it."""
    if isinstance(value, torch.Tensor):
        return function(value)
    if isinstance(value, (list, tuple)) and not isinstance(value, torch.Size):
        return _same_kind(value, [map_tensors(item, function) for item in value])
    if isinstance(value, dict):
        return {k: map_tensors(v, function) for k, v in value.items()}
    return value


def _same_kind(value: list | tuple, items: list[Any]) -> list | tuple:
    """`items` as a list or a tuple like `value`; a named tuple (torch's IncompatibleKeys, a
    student's own) as a plain tuple: its class could not be rebuilt from an iterable, and the
    grader's safe loader would refuse it anyway."""
    if isinstance(value, list):
        return items if type(value) is list else list(items)
    return tuple(items)


def to_grader(value: Any) -> Any:
    """Tensors detached from autograd and on the CPU, numpy scalars as Python numbers (torch's
    safe loader refuses numpy types), ready to be sent back."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (list, tuple)) and not isinstance(value, torch.Size):
        return _same_kind(value, [to_grader(item) for item in value])
    if isinstance(value, dict):
        return {k: to_grader(v) for k, v in value.items()}
    return map_tensors(value, lambda t: t.detach().cpu())
