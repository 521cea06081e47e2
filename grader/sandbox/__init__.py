"""Running untrusted submissions: worker processes, worlds of ranks, and the proxy tests call.

The grader's process never imports a student's code. `Submission` proxies each call into a
worker process (or a world of N workers joined by torch.distributed); the worker returns outputs,
and the grader measures time and bytes sent from outside, then decides.
"""

from grader.sandbox.errors import SubmissionError
from grader.sandbox.submission import CallResult, Library, RemoteFunction, Submission

__all__ = ["CallResult", "Library", "RemoteFunction", "Submission", "SubmissionError"]
