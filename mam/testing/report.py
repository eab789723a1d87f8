"""The kit's report: what it did not test of each backend, one line per operation, at the end of the run.

A skip alone shows only with `pytest -rs`, so a half-tested backend would look green: each kit test that skips
notes why on its test item (as a user property, which pytest-xdist carries from its workers), and the kit's
pytest plugin prints the notes, whatever the `-r` options say.
"""

from __future__ import annotations

import pytest

PROPERTY = "mam_kit_untested"
BACKEND = "mam_kit_backend"  # on every kit test: a skip noted nowhere else (a fixture's) is reported under it
TITLE = "mam backend kit: not tested"
REPORT_PLUGIN = "mam-kit-report"  # its name in pytest's plugin manager: registered once


def note(node: pytest.Item, backend: str, subject: str, why: str) -> None:
    """Record that `subject` (an operation, or a check) of `backend` was not tested, and why."""
    node.user_properties.append((PROPERTY, f"{backend}\t{subject}\t{why}"))


class KitReport:
    """Collects the notes of every test report and prints them in a section of the terminal summary."""

    def __init__(self) -> None:
        self.lines: dict[tuple[str, str], str] = {}  # (backend, subject) -> why; the first reason wins

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        noted = False
        backend = None
        for name, value in report.user_properties:
            if name == PROPERTY and isinstance(value, str) and value.count("\t") >= 2:
                backend, subject, why = value.split("\t", 2)
                self.lines.setdefault((backend, subject), why)
                noted = True
            elif name == BACKEND and isinstance(value, str):
                backend = value
        if report.skipped and not noted and backend is not None:  # skipped by a fixture of the test class
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
            test = report.head_line or report.nodeid
            check = test.rsplit(".", 1)[-1].removeprefix("test_").replace("_", " ")
            self.lines.setdefault((backend, check), f"skipped: {reason.removeprefix('Skipped: ')}")

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not self.lines:
            return
        terminalreporter.section(TITLE)
        for (backend, subject), why in sorted(self.lines.items()):
            terminalreporter.write_line(f"{backend}: {subject}: {why}")
