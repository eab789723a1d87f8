"""What a new user ran into, checked as that user would check it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from conftest import Tmux, Workspace


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


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
@pytest.mark.tmux
def test_restore_shows_the_directory_of_a_spec_whose_directory_was_edited(ws: Workspace, tmux: Tmux,
                                                                           tmp_path: Path) -> None:
    # Only `cwd` was changed by hand: the user is told to read what restore would run, so where it would run
    # has to be on the screen too, not only in --json.
    work, elsewhere = tmp_path / "work", tmp_path / "elsewhere"
    work.mkdir()
    elsewhere.mkdir()
    server = tmux.name()
    assert ws.mam("spawn", "coder", "--server", server, "--command", "sleep 600", "--cwd", str(work)).returncode == 0
    tmux.run(server, "kill-server")
    text = ws.registry.read_text()
    ws.write_registry(text.replace(f'"cwd": "{work}", "env_names"', f'"cwd": "{elsewhere}", "env_names"'))
    for args in (("--dry-run",), ()):
        proc = ws.mam("restore", "--all", *args)
        assert proc.returncode == (0 if args else 1), (proc.stdout, proc.stderr)
        assert "untrusted" in proc.stdout and f"\n  cwd: {elsewhere}\n" in proc.stdout + "\n", proc.stdout


def test_spawn_of_a_kind_without_a_program_says_to_give_one(ws: Workspace) -> None:
    # `mam kinds` lists `generic`: `spawn --agent generic` must not call it an unknown kind.
    proc = ws.mam("spawn", "coder", "--agent", "generic")
    assert proc.returncode == 2 and "unknown agent kind" not in proc.stderr, proc.stderr
    assert proc.stderr.splitlines() == [
        "mam: --agent generic alone: mam has no program to run for that kind",
        "hint: give the program with --command CMD (with --agent generic, its screen is read as generic's)"]
    assert not ws.registry.exists()


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
@pytest.mark.tmux
@pytest.mark.parametrize("xdg", [True, False])
def test_demo_leaves_no_launch_spec_key_behind(ws: Workspace, xdg: bool) -> None:
    # README: the demo "removes everything it made"; its spawns sign their rows, which made the user's key.
    env = dict(ws.env)
    if not xdg:
        del env["XDG_CONFIG_HOME"]
    config = Path(env.get("XDG_CONFIG_HOME") or Path(env["HOME"]) / ".config")
    proc = ws.mam("demo", timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "restored: running again" in proc.stdout
    assert not (config / "mam" / "spec.key").exists()
