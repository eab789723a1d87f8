"""The conformance kit for backend authors: subclass `BackendContract`, override its `backend` fixture.

`mam.testing.pytest_plugin` adds the `fake_runner` fixture and the kit's report of what it did not test (one line
per backend and operation at the end of the run); it is opt-in: `pytest_plugins = ["mam.testing.pytest_plugin"]`
in your top conftest.py. docs/backends.md describes the kit.
A face, beside the CLI (tests/test_layers.py): it may import the plugin machinery and below; nothing in mam
imports it.
"""

import pytest

# The kit's checks are plain asserts: rewritten by pytest, a failing one shows the values it compared (the names
# a listing gave, the names it should have), not a bare AssertionError. Registered before the module is imported.
pytest.register_assert_rewrite("mam.testing.contract")

from mam.testing.contract import BackendContract  # noqa: E402 - after the registration above
from mam.testing.fake_runner import FakeRunner  # noqa: E402

__all__ = ["BackendContract", "FakeRunner"]
