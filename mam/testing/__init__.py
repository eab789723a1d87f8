"""The conformance kit for backend authors: subclass `BackendContract`, override its `backend` fixture.

`mam.testing.pytest_plugin` adds the `fake_runner` fixture and the kit's report of what it did not test (one line
per backend and operation at the end of the run); it is opt-in: `pytest_plugins = ["mam.testing.pytest_plugin"]`
in your top conftest.py. docs/backends.md describes the kit.
A face, beside the CLI (tests/test_layers.py): it may import the plugin machinery and below; nothing in mam
imports it.
"""

from mam.testing.contract import BackendContract
from mam.testing.fake_runner import FakeRunner

__all__ = ["BackendContract", "FakeRunner"]
