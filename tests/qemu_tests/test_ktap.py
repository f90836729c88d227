"""JUnit XML -> KTAP conversion of the QEMU harness."""

from __future__ import annotations

import pytest

from qemu_tests.ktap import parse_junit, to_ktap

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" errors="1" failures="1" skipped="1" tests="5">
<testcase classname="tests.kernel.test_hang" name="test_hang_times_out" time="3.1"/>
<testcase classname="tests.kernel.test_isolation" name="test_foreign_va" time="0.2">
  <failure message="assert -14 == 0 # oops">trace</failure></testcase>
<testcase classname="tests.kernel.test_isolation" name="test_handle" time="0.1">
  <skipped message="no device"/></testcase>
<testcase classname="tests.conformance.test_bo.TestCreate" name="test_zero[4096]" time="0.1"/>
<testcase classname="tests.conformance.test_bo.TestCreate" name="test_bad" time="0.1">
  <error message="fixture broke"/></testcase>
</testsuite></testsuites>"""


def test_groups_cases_by_module_in_order() -> None:
    suites = parse_junit(JUNIT)
    assert [s.name for s in suites] == [
        "tests.kernel.test_hang",
        "tests.kernel.test_isolation",
        "tests.conformance.test_bo",
    ]
    assert [c.outcome for c in suites[1].cases] == ["fail", "skip"]
    assert suites[2].cases[0].name == "TestCreate.test_zero[4096]"
    assert suites[2].cases[1].failed


def test_ktap_text() -> None:
    text = to_ktap(parse_junit(JUNIT))
    lines = text.splitlines()
    assert lines[:2] == ["KTAP version 1", "1..3"]
    assert "ok 1 tests.kernel.test_hang" in lines
    assert "not ok 2 tests.kernel.test_isolation" in lines
    assert "    not ok 1 test_foreign_va" in lines
    assert "    # assert -14 == 0 oops" in lines  # '#' is stripped from diagnostics
    assert "    ok 2 test_handle # SKIP no device" in lines
    assert "not ok 3 tests.conformance.test_bo" in lines
    assert text.endswith("\n")


def test_bad_xml_is_an_error() -> None:
    with pytest.raises(ValueError, match="bad JUnit XML"):
        parse_junit("<testsuites>")
