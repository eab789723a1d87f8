"""What a new user ran into, checked as that user would check it."""

from __future__ import annotations

import pytest

from conftest import Workspace


@pytest.mark.parametrize(("version", "supported"), [("0.45.1", True), ("0.44.1", True), ("0.43.1", False)])
def test_backends_says_whether_the_zellij_found_is_one_mam_is_tested_against(ws: Workspace, version: str,
                                                                             supported: bool) -> None:
    # docs/backends.md lists zellij 0.44.x and 0.45.x as tested: `mam backends` has to say so, not `-`.
    env = {**ws.env, "FAKE_ZELLIJ_VERSION": version}
    doc = ws.mam_json("backends", env=env)
    zellij = next(b for b in doc["backends"] if b["name"] == "zellij")
    assert (zellij["version"], zellij["supported"]) == (f"zellij {version}", supported)
    line = next(line for line in ws.mam("backends", env={**env, "COLUMNS": "200"}).stdout.splitlines()
                if line.split()[:1] == ["zellij"])
    assert f"zellij {version}  {'yes' if supported else 'no'}" in line
