"""Failures of a call into a submission, each with a message written for the student."""

from __future__ import annotations


class SubmissionError(Exception):
    """A call into the submission failed. `kind` is one of:

    not_implemented, import, missing, exception, forbidden (a refused library call, or code
    that reaches into the grader or changes its functions), exit, crash (killed by a signal, or
    writing past the file-size limit), timeout, memory, thread (returned while a thread it
    started still runs), bad_return, start (the workers could not be started at all).
    """

    def __init__(self, kind: str, function: str, message: str, exception_type: str = "") -> None:
        super().__init__(message)
        self.kind = kind
        self.function = function
        self.exception_type = exception_type  # for kind "exception": e.g. "ValueError"
        self.printed: list[str] = []  # what each rank printed during the failed call
        self.step: int | None = None  # which step of a script failed, when one did

    @property
    def message(self) -> str:
        return str(self)

    def reworded(self, message: str, function: str | None = None) -> SubmissionError:
        """The same failure (kind, output, step) told with another message."""
        named = self.function if function is None else function
        error = SubmissionError(self.kind, named, message, self.exception_type)
        error.printed, error.step = self.printed, self.step
        return error
