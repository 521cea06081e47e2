"""A grading process that serves a whole test session: `python -m grader ARGS`, run in-process.

    python tests/grading_server.py        then, per line on stdin: a JSON list of ARGS

Each request runs `grader.cli.main(ARGS)` exactly as the command line would, with a fresh run
seed (unless GRADER_SEED pins it), and answers a line `GRADED <exit status>` on stdout. Started
by tests/conftest.py (twice: one for the solutions' full grading), it pays the interpreter,
torch, pytest and the zygote once instead of once per grading; each grading still gets workers
of its own.
"""

from __future__ import annotations

import json
import os
import random
import sys

import grader.testing
from grader.cli import main

ANSWER = "GRADED"


def serve() -> None:
    for line in sys.stdin:
        if "GRADER_SEED" not in os.environ:
            grader.testing.RUN_SEED = random.SystemRandom().randrange(2**31)
        try:
            code = main(json.loads(line))
        except SystemExit as exit_:  # argparse refusing the arguments
            code = exit_.code if isinstance(exit_.code, int) else 2
        sys.stdout.flush()
        sys.stderr.flush()
        print(f"{ANSWER} {code}", flush=True)


if __name__ == "__main__":
    serve()
