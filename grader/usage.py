"""The error a command raises when it cannot run as asked."""


class UsageError(Exception):
    """The command cannot run as asked; the message is the one-line reason (exit status 2)."""
