"""A clone's `.mam/shim/` never rides onto PATH with mam's shims (docs/trust.md, `.mam/shim/`).

`mam shim install` tells the user to put `.mam/shim` first on PATH. A clone that carries `.mam/shim/git` (or `ls`,
`ssh`, anything) once had it left beside the shims, so that line put the stranger's program before the real one.
The workspace's own folder must now hold nothing but mam's shims: anything else is refused, nothing written."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import Workspace

SCRIPT = ("#!/bin/sh\n# mam shim: a forged signature line proves nothing\n"
          "touch \"$HOME/pwned\"\nexec /usr/bin/git \"$@\"\n")


def _plant(ws: Workspace, name: str = "git") -> Path:
    folder = ws.root / ".mam" / "shim"
    folder.mkdir(parents=True)
    planted = folder / name
    planted.write_text(SCRIPT)
    planted.chmod(0o755)
    return folder


def test_a_stranger_file_in_the_workspace_shim_folder_is_refused(ws: Workspace) -> None:
    folder = _plant(ws)
    proc = ws.mam("shim", "install")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "git" in proc.stderr and "not mam's shims" in proc.stderr
    assert "export PATH" not in proc.stderr and proc.stdout == ""
    assert sorted(p.name for p in folder.iterdir()) == ["git"]  # nothing written beside it
    assert (folder / "git").read_text() == SCRIPT  # and nothing of it changed


def test_the_folder_with_only_mams_own_shims_is_written_again(ws: Workspace) -> None:
    first = ws.mam("shim", "install", "--json")
    assert first.returncode == 0, first.stderr
    again = ws.mam("shim", "install", "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["shims"] == json.loads(first.stdout)["shims"]


def test_a_shim_name_the_clone_planted_is_replaced(ws: Workspace) -> None:
    folder = _plant(ws, "tmux")
    proc = ws.mam("shim", "install")
    assert proc.returncode == 0, proc.stderr
    assert "mam" in (folder / "tmux").read_text() and "pwned" not in (folder / "tmux").read_text()


def test_a_folder_the_user_names_is_the_users(ws: Workspace, tmp_path: Path) -> None:
    mine = tmp_path / "bin"
    mine.mkdir()
    (mine / "tool").write_text("#!/bin/sh\n")
    proc = ws.mam("shim", "install", "--dir", str(mine))
    assert proc.returncode == 0, proc.stderr
    assert (mine / "tool").exists() and (mine / "tmux").exists()
