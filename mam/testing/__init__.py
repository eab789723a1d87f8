"""The conformance kit for backend authors: subclass `BackendContract`, override its `backend` fixture.

`mam.testing.pytest_plugin` adds the `fake_runner` fixture; it is opt-in:
`pytest_plugins = ["mam.testing.pytest_plugin"]` in your conftest.py.
"""

from mam.testing.contract import BackendContract
from mam.testing.fake_runner import FakeRunner

__all__ = ["BackendContract", "FakeRunner"]
