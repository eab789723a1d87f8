# The kit's fixtures and its report of what it did not test, also when pytest-xdist runs the tests.
pytest_plugins = ["mam.testing.pytest_plugin"]
