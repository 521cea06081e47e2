"""Delivery channels beyond `grade`: each is one `python -m grader COMMAND`, in its own module.

A command module defines `HELP` (one line), `add_arguments(parser)` and `run(course, options) -> int`,
raising grader.usage.UsageError with a one-line reason when it cannot run as asked.
"""

COMMANDS = {
    "nbgrader": "grader.delivery.nbgrader_course",
    "release": "grader.delivery.release",
    "gradescope": "grader.delivery.gradescope_bundle",
    "batch": "grader.delivery.batch",
    "mutants": "grader.delivery.mutants",
    "public-coverage": "grader.delivery.public_coverage",
    "site": "grader.delivery.site",
}
