"""JUnit XML (pytest's ``--junitxml``) to KTAP, the kernel's test-result format.

KTAP (Documentation/dev-tools/ktap.rst): one suite per test module, each a
nested KTAP block of its test cases, so kernel-CI parsers (kunit.py,
LAVA, KernelCI) read the guest results like a KUnit run.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Case:
    name: str
    outcome: str  # "pass", "fail", "error", "skip"
    message: str = ""
    seconds: float = field(default=0.0, compare=False)  # the JUnit case's time

    @property
    def failed(self) -> bool:
        return self.outcome in ("fail", "error")


@dataclass
class Suite:
    name: str
    cases: list[Case] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return any(c.failed for c in self.cases)


def _suite_name(classname: str) -> str:
    """``tests.kernel.test_hang.TestX`` -> ``tests.kernel.test_hang``: one suite per test module."""
    parts = classname.split(".")
    for i, p in enumerate(parts):
        if p.startswith("test_") or p == "tests" and i == len(parts) - 1:
            return ".".join(parts[: i + 1])
    return classname or "pytest"


def _case_name(classname: str, suite: str, name: str) -> str:
    rest = classname[len(suite) :].lstrip(".")
    return f"{rest}.{name}" if rest else name


def parse_junit(text: str) -> list[Suite]:
    """Group pytest's JUnit test cases by module, keeping their order."""
    try:
        root = ET.fromstring(text)
    except ET.ParseError as e:
        raise ValueError(f"bad JUnit XML: {e}") from None
    suites: dict[str, Suite] = {}
    for tc in root.iter("testcase"):
        classname = tc.get("classname", "")
        sname = _suite_name(classname)
        outcome, message = "pass", ""
        for child in tc:
            if child.tag in ("failure", "error", "skipped"):
                outcome = {"failure": "fail", "error": "error", "skipped": "skip"}[child.tag]
                message = child.get("message", "") or (child.text or "")
                break
        try:
            seconds = float(tc.get("time", "0") or 0)
        except ValueError:
            seconds = 0.0
        case = Case(_case_name(classname, sname, tc.get("name", "?")), outcome, message, seconds)
        suites.setdefault(sname, Suite(sname)).cases.append(case)
    return list(suites.values())


def _clean(text: str) -> str:
    """KTAP names and directives are single-line and must not contain '#'."""
    return re.sub(r"\s+", " ", text.replace("#", "")).strip()


def to_ktap(suites: list[Suite]) -> str:
    lines = ["KTAP version 1", f"1..{len(suites)}"]
    for i, s in enumerate(suites, 1):
        lines += ["    KTAP version 1", f"    # Subtest: {_clean(s.name)}", f"    1..{len(s.cases)}"]
        for j, c in enumerate(s.cases, 1):
            if c.failed:
                lines.append(f"    # {_clean(c.message)[:200]}" if c.message else "    # failed")
                lines.append(f"    not ok {j} {_clean(c.name)}")
            elif c.outcome == "skip":
                lines.append(f"    ok {j} {_clean(c.name)} # SKIP {_clean(c.message)[:200]}")
            else:
                lines.append(f"    ok {j} {_clean(c.name)}")
        all_skipped = s.cases and all(c.outcome == "skip" for c in s.cases)
        status = "not ok" if s.failed else "ok"
        lines.append(f"{status} {i} {_clean(s.name)}" + (" # SKIP" if all_skipped else ""))
    return "\n".join(lines) + "\n"
