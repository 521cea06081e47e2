"""allreduce_time is wrong, but looks its answers up in the hidden suite's table, read from the grader's folder."""

# target: cost_model.py
# select: allreduce_time_matches_hand_computed
# fails: allreduce_time_matches
# kind: exception
# message: PermissionError.*test_cost_model\.py
# needs: landlock

import importlib.util
import pathlib


def allreduce_time(algorithm, world_size, nbytes, alpha, beta):
    package = pathlib.Path(importlib.util.find_spec("grader").origin).parent
    source = (package / "suites" / "collectives" / "test_cost_model.py").read_text()
    scope = {}
    exec(source.split("@pytest.mark")[0].replace("from grader.testing import expect_exception", ""), scope)
    for name, p, expected in scope["HAND_COMPUTED"]:
        if (name, p) == (algorithm, world_size):
            return expected
    return 0.0
