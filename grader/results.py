"""One result model for every report format (terminal, Gradescope, JUnit, Classroom, JSON)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from grader.perf import ON_THIS_SYSTEM
from grader.points import dyadic_shares

PASSED, FAILED, ERROR, SKIPPED = "passed", "failed", "error", "skipped"
# A timed check on a machine too busy to judge it (grader/perf.py): graded, worth no points, and
# the student is told to rerun.
UNMEASURED = "unmeasured"


@dataclass
class TestResult:
    """The verdict of one graded test. Hidden tests carry a name and a message, never source."""

    __test__ = False  # not a pytest test class, despite its name

    module: str
    name: str  # e.g. "test_ring_allreduce_matches_all_reduce[world=3-float32]"
    suite: str  # "public" or "hidden"
    status: str  # passed, failed, error, skipped, unmeasured
    weight: float = 1.0
    max_score: float = 0.0
    message: str = ""
    duration_s: float = 0.0
    measurements: dict[str, Any] = field(default_factory=dict)
    function: str = ""  # the student's function this test needs implemented, when known
    kind: str = ""  # the SubmissionError kind when the submission failed (timeout, crash, ...)

    @property
    def score(self) -> float:
        return self.max_score if self.status == PASSED else 0.0


@dataclass
class ModuleResult:
    name: str
    title: str
    points: float
    tests: list[TestResult] = field(default_factory=list)
    unwritten: list[str] | None = None  # the student's functions whose body is still the stub

    @property
    def graded(self) -> list[TestResult]:
        return [t for t in self.tests if t.status != SKIPPED]

    @property
    def score(self) -> float:
        return sum(t.score for t in self.graded)

    @property
    def max_score(self) -> float:
        return self.points if self.graded else 0.0

    def assign_points(self) -> None:
        """Share the module's points among its graded tests, in proportion to their weights, on
        a dyadic grid (grader/points.py): the shares add up to the points exactly."""
        graded = self.graded
        for test in self.tests:
            test.max_score = 0.0
        for test, share in zip(graded, dyadic_shares(self.points, [t.weight for t in graded])):
            test.max_score = share

    def unmeasured(self) -> list[TestResult]:
        """Checks that gave no verdict: timed ones on a busy machine (rerun them), and checks of
        bytes on a system that does not count them (`uncounted`)."""
        return [t for t in self.tests if t.status == UNMEASURED]

    def uncounted(self) -> list[TestResult]:
        """Checks this system cannot measure or run (grader/system), such as bytes sent on macOS:
        grade on Linux for them."""
        return [t for t in self.unmeasured() if ON_THIS_SYSTEM in t.message]

    def to_implement(self) -> list[str]:
        """Functions still raising NotImplementedError: those whose source is still the stub, in
        the syllabus's order (`unwritten`, read by the runner), then any other that a failure
        named (a method of a class, in order of first failure)."""
        names = [t.function for t in self.tests if t.kind == "not_implemented" and t.function]
        return list(dict.fromkeys([*(self.unwritten or []), *names]))


@dataclass
class GradeReport:
    course: str
    submission: str
    device: str
    modules: list[ModuleResult] = field(default_factory=list)
    duration_s: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def score(self) -> float:
        return sum(m.score for m in self.modules)

    @property
    def max_score(self) -> float:
        return sum(m.max_score for m in self.modules)

    @property
    def tests(self) -> list[TestResult]:
        return [t for m in self.modules for t in m.tests]

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["score"], data["max_score"] = self.score, self.max_score
        for module, module_data in zip(self.modules, data["modules"]):
            module_data["score"], module_data["max_score"] = module.score, module.max_score
            for test, test_data in zip(module.tests, module_data["tests"]):
                test_data["score"] = test.score
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GradeReport:
        modules = []
        for module in data["modules"]:
            tests = [TestResult(**{k: v for k, v in t.items() if k != "score"}) for t in module["tests"]]
            modules.append(ModuleResult(module["name"], module["title"], module["points"], tests))
        return cls(
            data["course"],
            data["submission"],
            data["device"],
            modules,
            data.get("duration_s", 0.0),
            data.get("notes", []),
        )
