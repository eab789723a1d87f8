"""Opt-in pytest plugin of the kit: `pytest_plugins = ["mam.testing.pytest_plugin"]`."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from mam.testing.fake_runner import FakeRunner


@pytest.fixture
def fake_runner(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeRunner]:
    """Every `mam.runner.run` call of the test goes to a FakeRunner instead of a real process."""
    runner = FakeRunner()
    monkeypatch.setattr("mam.runner.run", runner)
    yield runner
