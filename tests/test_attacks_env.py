"""Attack and accident cases of what mam reads from its surroundings: `.mam/config.yaml` and the registry as
special or huge files, the shim's guard variable, a `--cwd` that is not UTF-8, a planted `.mam/locks` link."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from conftest import Tmux, Workspace

needs_tmux = pytest.mark.skipif(not os.path.exists("/usr/bin/tmux"), reason="tmux not installed")
GUARD = "MAM_SHIM_GUARD"


def _refused(proc: subprocess.CompletedProcess[str], *words: str, code: int = 2) -> str:
    assert proc.returncode == code, (proc.returncode, proc.stderr[:500])
    assert "internal error" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr[:500]
    line = proc.stderr.splitlines()[0]
    assert line.startswith("mam: ") and len(line) < 400, proc.stderr[:500]
    for word in words:
        assert word in line, proc.stderr[:500]
    return line


# --- the config and the registry are read only as small regular files ---------------------------------------


def test_a_fifo_as_the_config_is_refused_without_blocking(ws: Workspace) -> None:
    (ws.root / ".mam").mkdir()
    config = ws.root / ".mam" / "config.yaml"
    os.mkfifo(config)
    proc = ws.mam("status", timeout=20)  # before: blocked in open() forever
    _refused(proc, str(config), "not a regular file")


def test_dev_zero_as_the_config_is_refused(ws: Workspace) -> None:
    (ws.root / ".mam").mkdir()
    (ws.root / ".mam" / "config.yaml").symlink_to("/dev/zero")
    proc = ws.mam("env", timeout=30)  # before: read until MemoryError
    _refused(proc, "config.yaml", "not a regular file")


def test_a_huge_config_is_refused_unread(ws: Workspace) -> None:
    (ws.root / ".mam").mkdir()
    config = ws.root / ".mam" / "config.yaml"
    with open(config, "wb") as handle:  # sparse: 2 MiB of nothing on disk, twice what a config may hold
        handle.truncate(2 << 20)
    proc = ws.mam("env", timeout=30)
    _refused(proc, str(config), "too large")
    assert config.stat().st_size == 2 << 20


def test_a_symlink_to_a_regular_config_is_still_read(ws: Workspace, tmp_path: Path) -> None:
    real = tmp_path / "shared-config.yaml"
    real.write_text("env:\n  scrub: [SECRET_TOKEN]\n")
    (ws.root / ".mam").mkdir()
    (ws.root / ".mam" / "config.yaml").symlink_to(real)
    doc = ws.mam_json("env", env={**ws.env, "SECRET_TOKEN": "x"})
    assert [r["name"] for r in doc["removed"]] == ["SECRET_TOKEN"]


def test_a_huge_registry_is_refused_with_its_bytes_untouched(ws: Workspace) -> None:
    ws.write_registry("")
    with open(ws.registry, "wb") as handle:  # sparse: 20 GB that a read would try to hold in memory
        handle.write(b"version: 1\nsessions: []\n")
        handle.truncate(20 * 10**9)
    before = ws.registry.stat()
    for args in (["status"], ["reconcile", "--apply"], ["forget", "ghost"]):
        proc = ws.mam(*args, timeout=30)
        _refused(proc, str(ws.registry), "too large")
    after = ws.registry.stat()
    assert (after.st_size, after.st_mtime_ns, after.st_ino) == (before.st_size, before.st_mtime_ns, before.st_ino)


# --- the shim's guard never reaches a server or an agent --------------------------------------------------


def test_env_shows_the_guard_removed_whatever_the_keep_rules(ws: Workspace) -> None:
    ws.write_config(f"env:\n  keep: [{GUARD}, 'MAM_*']\n")
    doc = ws.mam_json("env", env={**ws.env, GUARD: "1:2"})
    assert GUARD in [r["name"] for r in doc["removed"]]
    assert GUARD not in [k["name"] for k in doc["kept"]]


@needs_tmux
def test_bootstrap_and_spawn_never_hand_the_guard_to_tmux(ws: Workspace, tmux: Tmux) -> None:
    ws.write_config(f"env:\n  keep: [{GUARD}]\n")  # no keep rule brings it back
    server = tmux.name()
    env = {**ws.env, GUARD: "1:2"}
    proc = ws.mam("--backend", "tmux", "bootstrap", "--server", server, env=env)
    assert proc.returncode == 0, proc.stderr
    assert GUARD not in tmux.run(server, "show-environment", "-g").stdout
    proc = ws.mam("--backend", "tmux", "spawn", "coder", "--server", server, "--cwd", str(ws.root),
                  "--command", "sleep", "--", "600", env=env)
    assert proc.returncode == 0, proc.stderr
    assert GUARD not in tmux.pane_env(server, "=coder")
    assert GUARD not in tmux.run(server, "show-environment", "-g").stdout


@needs_tmux
def test_a_server_the_shim_lets_tmux_start_lacks_the_guard(ws: Workspace, tmux: Tmux) -> None:
    assert ws.mam("shim", "install").returncode == 0
    server = tmux.name()
    env = {**ws.env, "PATH": f"{ws.root / '.mam' / 'shim'}{os.pathsep}{ws.env['PATH']}", "MAM_SERVER": server,
           "MAM_NO_AUTOSTART": "1"}
    proc = subprocess.run(["tmux", "-f", "/dev/null", "new-session", "-d", "-s", "work", "sleep 600"], env=env,
                          capture_output=True, text=True, timeout=60, cwd=ws.root, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    assert GUARD not in tmux.run(server, "show-environment", "-g").stdout
    assert GUARD not in tmux.pane_env(server, "=work")


# --- a --cwd that is not UTF-8 ------------------------------------------------------------------------------


def test_a_cwd_that_is_not_utf8_is_refused_and_nothing_written(ws: Workspace, tmp_path: Path) -> None:
    bad = os.fsencode(tmp_path) + b"/bad\xff"
    os.mkdir(bad)  # it exists: the registry still cannot hold its name
    proc = ws.mam("spawn", "coder", "--agent", "claude", "--server", "team", "--cwd", os.fsdecode(bad))
    _refused(proc, "--cwd", "UTF-8")
    assert not ws.registry.exists()
    assert not ws.herdr.server_starts()


# --- a planted .mam/locks link ------------------------------------------------------------------------------


@needs_tmux
def test_a_symlinked_locks_folder_is_refused_and_nothing_started(ws: Workspace, tmux: Tmux,
                                                                 tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.mkdir()
    (ws.root / ".mam").mkdir()
    (ws.root / ".mam" / "locks").symlink_to(target)
    server = tmux.name()
    proc = ws.mam("--backend", "tmux", "bootstrap", "--server", server)
    _refused(proc, "locks", "symbolic link", code=1)
    assert list(target.iterdir()) == []
    assert server not in tmux.sockets()



def test_hide_values_hides_a_value_whole_or_in_the_pieces_a_cut_leaves() -> None:
    from mam.util.masking import hide_values

    token = "sk-ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
    cases = [
        ("invalid key sk-ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 here", "invalid key *** here"),
        ("status 3: MNOPQRSTUVWXYZ0123456789", "status 3: ***"),  # its end, after a cut
        ("key sk-ABCDEFGHI...", "key ***..."),  # its start, before one
    ]
    for text, hidden in cases:
        assert hide_values(text, [f"MY_TOKEN={token}"]) == hidden
    assert hide_values("error: line one", ["K=line one\nline two"]) == "error: ***"  # a multi-line value
    assert hide_values("exited with status 1", ["DEBUG=1"]) == "exited with status 1"  # too short to hide
    assert hide_values("abc=abc", ["X=abc"]) == "***=***"
    assert hide_values("no value", []) == "no value"
