"""The kit's pytest plugin: `pytest_plugins = ["mam.testing.pytest_plugin"]` in your top conftest.py.

It adds the `fake_runner` fixture and the report of what the kit did not test (mam/testing/report.py). In the top
conftest.py it is loaded by pytest's main process too, which prints the report when pytest-xdist runs the tests.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from mam.testing.fake_runner import FakeRunner
from mam.testing.report import REPORT_PLUGIN, KitReport


def pytest_configure(config: pytest.Config) -> None:
    if not config.pluginmanager.has_plugin(REPORT_PLUGIN):
        config.pluginmanager.register(KitReport(), REPORT_PLUGIN)


@pytest.fixture
def fake_runner(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeRunner]:
    """Every `mam.calls.runner.run` call of the test goes to a FakeRunner instead of a real process."""
    runner = FakeRunner()
    monkeypatch.setattr("mam.calls.runner.run", runner)
    yield runner
