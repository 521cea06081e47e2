"""The website's Markdown pages made from the course's own sources: the home page (the syllabus
from course.toml), the lectures with links to the API entries of what they teach, the Getting
started page (with the grader's real output) and the instructors' page (README's sections).

Every page is generated into the MkDocs project's docs/ folder, which mirrors the repository
where it can: lectures/01-collectives.md stays lectures/01-collectives.md, so the lectures'
relative links to their figures keep working.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from grader.course import Course, Module
from grader.delivery.site_api import Entry, module_entries
from grader.usage import UsageError

TEMPLATES = Path(__file__).resolve().parent / "templates" / "site"
# README's sections that the instructors' page quotes whole, so it says what README says.
INSTRUCTOR_SECTIONS = ("For instructors", "For course runners and developers")


def slug(heading: str) -> str:
    """The id MkDocs gives a heading (Python-Markdown's toc slugify on its text, code marks
    dropped), so that links to lecture sections can be written before the site is built."""
    from markdown.extensions.toc import slugify

    return slugify(heading.replace("`", ""), "-")


@dataclass(frozen=True)
class Exercise:
    """A definition of a module that a student implements (or is given), and where it is taught."""

    entry: Entry
    section: str  # the lecture section's title, from course.toml
    link: str  # that section, from the site's root: lectures/01-collectives.md#2-ring-...


def exercises(course: Course, module: Module) -> list[Exercise]:
    """The module's definitions named in course.toml, and those its stubs leave to implement;
    in file order. A stub class course.toml does not name (attention's FlashAttentionTorch,
    behind the function it lists) is taught where course.toml says that file is."""
    # Reversed, so that the first function course.toml lists for a file gives the file's section.
    toml_section_of_file = {f.file: f.section for f in reversed(module.functions.values())}
    found = []
    for file, (_, entries) in module_entries(course, module).items():
        for entry in entries:
            listed = module.functions.get(entry.name)
            if listed is None and not entry.to_implement:
                continue
            section = listed.section if listed else toml_section_of_file.get(file)
            if section is None:
                raise UsageError(f"{module.name}/{file}: {entry.name} is a stub, but course.toml names no section")
            found.append(Exercise(entry, section, f"{module.lecture}#{slug(section)}"))
    missing = set(module.functions) - {e.entry.name for e in found}
    if missing:
        raise UsageError(f"course.toml names {sorted(missing)} in {module.name}, but its stubs do not define them")
    return found


def api_link(module: Module, entry: Entry, prefix: str = "") -> str:
    """A Markdown link to `entry`'s API anchor; `prefix` leads from the linking page to the root."""
    return f"[`{entry.name}`]({prefix}api/{module.name}.md#{entry.anchor})"


def _module_number(course: Course, module: Module) -> int:
    return list(course.modules).index(module.name) + 1


# ---- Home ---------------------------------------------------------------------------------------


def home_page(course: Course, readme: str) -> str:
    """The syllabus: modules in teaching order with what a student implements, the lecture
    section of each, the module's points and links to its lecture, notebook and API."""
    lines = [f"# {course.title}", "", _readme_intro(readme), ""]
    lines += [
        "New here? [Getting started](getting-started.md) has the two commands and how grading works. "
        "Teaching with it? See [Instructors](instructors.md).",
        "",
        "## Syllabus",
        "",
        "| # | module | points | pages |",
        "| --- | --- | --- | --- |",
    ]
    for module in course.modules.values():
        number = _module_number(course, module)
        lines.append(
            f"| {number} | [{module.title}](#{slug(f'{number}. {module.name}')}) | {module.points:g} "
            f"| {_module_links(module)} |"
        )
    for module in course.modules.values():
        lines += ["", *_module_syllabus(course, module)]
    return "\n".join(lines) + "\n"


def _module_links(module: Module) -> str:
    """Links from the home page to the module's lecture, notebook and API pages."""
    return f"[lecture]({module.lecture}) · [notebook](notebooks/{module.name}.md) · [API](api/{module.name}.md)"


def _readme_intro(readme: str) -> str:
    """README's first paragraph under its title: what the course is, said once."""
    after_title = readme.split("\n# ", 1)[1].split("\n", 1)[1]
    return after_title.strip().split("\n\n", 1)[0]


def _module_syllabus(course: Course, module: Module) -> list[str]:
    number = _module_number(course, module)
    found = exercises(course, module)
    files = ", ".join(f"`{file}`" for file in module.files)
    lines = [
        f"### {number}. {module.name}",
        "",
        f"**{module.title}.** {module.points:g} points; you edit {files} in `assignments/{module.name}/`. "
        f"{_module_links(module)}",
        "",
        "| you implement | file | lecture section |",
        "| --- | --- | --- |",
    ]
    for exercise in found:
        entry = exercise.entry
        if entry.to_implement:
            lines.append(f"| {api_link(module, entry)} | `{entry.file}` | [{exercise.section}]({exercise.link}) |")
    given = [api_link(module, e.entry) for e in found if not e.entry.to_implement]
    if given:
        lines += ["", f"Given (the course's code, which the grader uses): {', '.join(given)}."]
    return lines


# ---- Lectures -----------------------------------------------------------------------------------

FENCE = re.compile(r"^\s*(`{3,}|~{3,})")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def lecture_page(course: Course, module: Module, text: str) -> str:
    """The lecture with links to the API: a box under the title (notebook, API, what to
    implement), a line under each section that teaches a function, and every inline-code
    mention of one of the module's names outside code blocks (`ring_allreduce`, or
    `ring_allreduce(tensor)`) made a link to its API entry."""
    found = exercises(course, module)
    by_section: dict[str, list[Exercise]] = {}
    for exercise in found:
        by_section.setdefault(exercise.section, []).append(exercise)
    names = {e.name: e for _, entries in module_entries(course, module).values() for e in entries}
    mention = _mention_pattern(names)

    out: list[str] = []
    fence: str | None = None  # the opening fence while inside a code block
    seen_sections = set()
    for line in text.splitlines():
        opening = FENCE.match(line)
        if fence is not None:
            if opening and opening.group(1).startswith(fence):
                fence = None
            out.append(line)
            continue
        if opening:
            fence = opening.group(1)
            out.append(line)
            continue
        heading = HEADING.match(line)
        if not heading:
            out.append(mention.sub(lambda m: _mention_link(m, module, names), line) if mention else line)
            continue
        out.append(line)
        level, title = len(heading.group(1)), heading.group(2)
        if level == 1:
            out += ["", *_lecture_box(course, module, found)]
        elif title in by_section:
            seen_sections.add(title)
            links = ", ".join(api_link(module, e.entry, "../") for e in by_section[title])
            # attr_list: the class on the paragraph's last line styles it (site.css).
            out += ["", f"*Exercises of this section*: {links}.", "{ .exercise-links }", ""]
    missing = set(by_section) - seen_sections
    if missing:
        raise UsageError(f"{module.lecture} has no section titled {sorted(missing)} (course.toml names it)")
    return "\n".join(out) + "\n"


def _mention_pattern(names: dict[str, Entry]) -> re.Pattern | None:
    """Inline code that is exactly a name, or a call of it: `name` or `name(...)`, not already
    the text of a link (`[` before it)."""
    if not names:
        return None
    alternatives = "|".join(sorted((re.escape(n) for n in names), key=len, reverse=True))
    return re.compile(rf"(?<![`\[])`((?:{alternatives})(?:\([^`]*\))?)`(?!`)")


def _mention_link(match: re.Match, module: Module, names: dict[str, Entry]) -> str:
    code = match.group(1)
    entry = names[code.split("(", 1)[0]]
    return f"[`{code}`](../api/{module.name}.md#{entry.anchor})"


def _lecture_box(course: Course, module: Module, found: list[Exercise]) -> list[str]:
    implement = ", ".join(api_link(module, e.entry, "../") for e in found if e.entry.to_implement)
    return [
        f'!!! abstract "Module {_module_number(course, module)}: {module.name} ({module.points:g} points)"',
        "",
        f"    [notebook](../notebooks/{module.name}.md) · [API](../api/{module.name}.md) · "
        f"you implement {implement} in `assignments/{module.name}/`.",
        "",
    ]


# ---- Getting started and Instructors ------------------------------------------------------------


def getting_started_page(course: Course, stubs_scoreboard: str | None, partial_scoreboard: str | None) -> str:
    """templates/site/getting-started.md with the scoreboards the grader printed at build time
    (or, when the build ran nothing, a note saying where to see them)."""
    first = next(iter(course.modules.values()))
    not_run = (
        "*(This copy of the site was built without running the grader, `--no-execute`: "
        "`make grade` prints the real thing.)*"
    )
    text = (TEMPLATES / "getting-started.md").read_text()
    values = {
        "FIRST_MODULE": first.name,
        "FIRST_LECTURE": first.lecture,
        "PARTIAL_FILE": first.files[-1],  # the file site.py's partial grading takes from solutions/
        "STUBS_SCOREBOARD": _text_block(stubs_scoreboard) if stubs_scoreboard else not_run,
        "PARTIAL_SCOREBOARD": _text_block(partial_scoreboard) if partial_scoreboard else not_run,
    }
    for key, value in values.items():
        text = text.replace(f"@@{key}@@", value)
    leftover = re.search(r"@@[A-Z_]+@@", text)
    if leftover:
        raise UsageError(f"templates/site/getting-started.md has no value for {leftover.group(0)}")
    return text


def _text_block(text: str) -> str:
    return f"```text\n{text.rstrip()}\n```"


def instructors_page(readme: str) -> str:
    """README's instructor and course-runner sections, quoted whole under a short map of them."""
    sections = [_readme_section(readme, title) for title in INSTRUCTOR_SECTIONS]
    headings = [
        match.group(2)
        for section in sections
        for match in (HEADING.match(line) for line in section.splitlines())
        if match and len(match.group(1)) == 3
    ]
    contents = "\n".join(f"- [{h.replace('`', '')}](#{slug(h)})" for h in headings)
    intro = (TEMPLATES / "instructors.md").read_text().replace("@@CONTENTS@@", contents)
    return intro + "\n" + "\n\n".join(sections) + "\n"


def _readme_section(readme: str, title: str) -> str:
    """README's `## title` section, up to the next `## ` heading outside a code block."""
    lines = readme.splitlines()
    try:
        start = lines.index(f"## {title}")
    except ValueError:
        raise UsageError(f"README.md has no section '## {title}' for the instructors' page") from None
    section, fence = [lines[start]], None
    for line in lines[start + 1 :]:
        opening = FENCE.match(line)
        if fence is None and line.startswith("## "):
            break
        if opening and fence is None:
            fence = opening.group(1)
        elif opening and opening.group(1).startswith(fence):
            fence = None
        section.append(line)
    return "\n".join(section).rstrip()
