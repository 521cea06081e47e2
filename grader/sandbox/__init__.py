"""Running untrusted submissions: worker processes, worlds of ranks, and the proxy tests call.

The grader's process never imports a student's code. `Submission` proxies each call into a
worker process (or a world of N workers joined by torch.distributed); the worker returns outputs,
and the grader measures time and bytes sent from outside, then decides.
"""

from grader.sandbox.errors import SubmissionError
from grader.sandbox.pool import CallResult
from grader.sandbox.script import Saved, Step
from grader.sandbox.submission import Library, RemoteFunction, Submission

__all__ = ["CallResult", "Library", "RemoteFunction", "Saved", "Step", "Submission", "SubmissionError"]
