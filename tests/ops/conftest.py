"""Shared pytest setup for tests/ops: puts this folder on sys.path (for
common.py / expected_failures.py) and sums the per-check counts that
test_opinfo.py and test_error_inputs.py record, also across pytest-xdist
workers."""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

_samples = {"passed": 0, "total": 0, "xfail_tests": 0}
_errors = {"passed": 0, "total": 0}


def pytest_runtest_logreport(report):
    if report.when != "call":
        return
    for name, value in report.user_properties:
        if name == "error_inputs":
            _errors["passed"] += value[0]
            _errors["total"] += value[1]
    if "test_opinfo.py" not in report.nodeid:
        return
    _samples["xfail_tests"] += hasattr(report, "wasxfail")
    for name, value in report.user_properties:
        if name == "opinfo_samples":
            passed, total = value
            _samples["passed"] += passed
            _samples["total"] += total


def pytest_terminal_summary(terminalreporter):
    if _errors["total"]:
        terminalreporter.write_line(
            f"OpInfo error inputs: {_errors['passed']}/{_errors['total']} raise the CPU's error "
            f"on the host (the rest are listed in expected_failures.py)")
    if _samples["total"]:
        terminalreporter.write_line(
            f"OpInfo checks (samples + in-place/out= variants): {_samples['passed']}/{_samples['total']} passed on openreg "
            f"(op/dtype pairs expected to fail: {_samples['xfail_tests']})")
