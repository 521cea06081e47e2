"""JUnit XML: one <testsuite> per module, one <testcase> per test (for CI dashboards)."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from grader.results import ERROR, FAILED, SKIPPED, UNMEASURED, GradeReport


def junit_xml(report: GradeReport) -> str:
    root = ET.Element("testsuites", name=report.course, time=f"{report.duration_s:.3f}")
    for module in report.modules:
        counts = {s: sum(t.status == s for t in module.tests) for s in (FAILED, ERROR, SKIPPED, UNMEASURED)}
        suite = ET.SubElement(
            root,
            "testsuite",
            name=module.name,
            tests=str(len(module.tests)),
            failures=str(counts[FAILED]),
            errors=str(counts[ERROR] + counts[UNMEASURED]),  # no verdict: as a run that broke
            skipped=str(counts[SKIPPED]),
            time=f"{sum(t.duration_s for t in module.tests):.3f}",
        )
        properties = ET.SubElement(suite, "properties")
        for name, value in (("score", module.score), ("max_score", module.max_score)):
            ET.SubElement(properties, "property", name=name, value=repr(value))  # every digit
        for test in module.tests:
            case = ET.SubElement(
                suite,
                "testcase",
                classname=f"{module.name}.{test.suite}",
                name=test.name,
                time=f"{test.duration_s:.3f}",
            )
            if test.status in (FAILED, ERROR, UNMEASURED):
                tag = "failure" if test.status == FAILED else "error"
                ET.SubElement(case, tag, message=test.message.splitlines()[0] if test.message else "")
                case[-1].text = test.message
            elif test.status == SKIPPED:
                ET.SubElement(case, "skipped", message=test.message)
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True)
