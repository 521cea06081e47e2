"""The syllabus (course.toml): modules, the files a student edits, functions, points, limits."""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

COURSE_ROOT = Path(__file__).resolve().parent.parent


class CourseError(Exception):
    """course.toml is missing or malformed, or names something that does not exist."""


@dataclass(frozen=True)
class Function:
    """One function a student implements, or a helper the course gives (`given`) that tests call."""

    name: str
    file: str  # file name inside the module folder, e.g. "ring.py"
    section: str  # the lecture section that teaches it
    forbidden: tuple[str, ...] = ()  # dotted names refused while it runs
    given: str = ""  # for the course's own helpers the tests call: what it does ("" = the student writes it)


@dataclass(frozen=True)
class Module:
    """One module of the course: lecture, student files, functions, points and limits."""

    name: str
    title: str
    lecture: str
    points: float
    files: tuple[str, ...]
    functions: dict[str, Function]
    time_limit_s: float
    memory_limit_mb: int
    # Earlier modules whose answers this module's given code contains (serving's given paged
    # cache is kv_cache's): publish this module only after their deadlines.
    reveals: tuple[str, ...] = ()

    def function(self, name: str) -> Function:
        try:
            return self.functions[name]
        except KeyError:
            raise CourseError(f"module {self.name!r} has no function {name!r} in course.toml") from None


@dataclass(frozen=True)
class Course:
    """The whole syllabus, in teaching order."""

    title: str
    root: Path
    modules: dict[str, Module] = field(default_factory=dict)
    hidden_visibility: str = "visible"

    def module(self, name: str) -> Module:
        try:
            return self.modules[name]
        except KeyError:
            known = ", ".join(self.modules) or "none"
            raise CourseError(f"unknown module {name!r} (modules: {known})") from None

    def public_tests(self, module: str) -> Path:
        return self.root / "assignments" / module

    def hidden_suite(self, module: str) -> Path:
        return self.root / "grader" / "suites" / module


def load_course(root: Path = COURSE_ROOT) -> Course:
    """Read `root/course.toml` into a Course."""
    path = root / "course.toml"
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise CourseError(f"no course.toml in {root}") from None
    except tomllib.TOMLDecodeError as error:
        raise CourseError(f"{path}: {error}") from None

    defaults = data.get("defaults", {})
    forbidden_sets: dict[str, list[str]] = data.get("forbidden", {})
    modules = {}
    for entry in data.get("modules", []):
        functions = {}
        for name, spec in entry.get("functions", {}).items():
            forbidden: list[str] = []
            for set_name in spec.get("forbid", []):
                if set_name not in forbidden_sets:
                    raise CourseError(f"function {name!r} forbids unknown set {set_name!r}")
                forbidden += forbidden_sets[set_name]
            functions[name] = Function(name, spec["file"], spec["section"], tuple(forbidden), spec.get("given", ""))
        module = Module(
            name=entry["name"],
            title=entry["title"],
            lecture=entry["lecture"],
            points=float(entry["points"]),
            files=tuple(entry["files"]),
            functions=functions,
            time_limit_s=float(entry.get("time_limit_s", defaults.get("time_limit_s", 30))),
            memory_limit_mb=int(entry.get("memory_limit_mb", defaults.get("memory_limit_mb", 4096))),
            reveals=tuple(entry.get("reveals", [])),
        )
        unknown = [name for name in module.reveals if name not in modules]
        if unknown:
            raise CourseError(f"module {module.name!r} reveals {unknown}: name modules listed before it")
        modules[module.name] = module
    return Course(
        title=data["course"]["title"],
        root=root,
        modules=modules,
        hidden_visibility=defaults.get("hidden_visibility", "visible"),
    )


def load_solution(module: str, file: str, solutions: Path = COURSE_ROOT / "solutions") -> ModuleType:
    """solutions/<module>/<file> imported under a name of its own, with its folder on sys.path
    while it loads (the files of a module import each other) and registered in sys.modules
    (dataclasses look their module up while it loads). The project's tests and
    `make bench` use it."""
    folder = str(solutions / module)
    sys.path.insert(0, folder)
    try:
        spec = importlib.util.spec_from_file_location(f"solution_{module}_{Path(file).stem}", Path(folder) / file)
        loaded = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = loaded
        spec.loader.exec_module(loaded)
        return loaded
    finally:
        sys.path.remove(folder)
