"""Issue 30, point 6: links a clone can carry in `.mam/` never make mam write outside the workspace.

`.mam/agent-sessions.yaml -> ~/.bash_profile` once made spawn create that file and its `.lock`, and
`reconcile --apply` write a pane's last lines into it. A registry link is now followed only while it stays inside
the workspace, or when the user named the file ($MAM_REGISTRY); a `.mam` that leads outside is refused whole.
Every test runs with a private HOME and checks that not one byte under it changed."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from conftest import Tmux, Workspace

# A file of the user's that reads as a registry (mam would otherwise rewrite it): an agent still `running` on a
# server that is gone (reconcile --apply marks it) and one `stopped` (forget removes it).
ROWS = ('version: 1\nsessions:\n- {"name": "ghost", "server": "gone", "status": "running"}\n'
        '- {"name": "old", "server": "gone", "status": "stopped"}\n')
COMMANDS = {
    "spawn": ("spawn", "a1", "--agent", "claude", "--server", "live"),
    "reconcile-apply": ("reconcile", "--apply"),
    "forget": ("forget", "old"),
    "stop": ("stop", "ghost"),
    "status": ("status",),
}


def _tree(folder: Path) -> dict[str, tuple[int, bytes | str]]:
    """Every path under `folder` (links not followed) with its mode and bytes (a link: where it points)."""
    seen: dict[str, tuple[int, bytes | str]] = {}
    for path in sorted(folder.rglob("*")):
        info = path.lstat()
        body: bytes | str = os.readlink(path) if path.is_symlink() else path.read_bytes() if path.is_file() else b""
        seen[str(path.relative_to(folder))] = (info.st_mode, body)
    return seen


def _started(ws: Workspace) -> list[list[str]]:
    """The fake herdr's `agent start` calls: an agent mam started."""
    return [c["argv"] for c in ws.herdr.calls() if c["argv"][2:4] == ["agent", "start"]]


def _home(ws: Workspace) -> Path:
    return Path(ws.env["HOME"])


def _refused(proc: subprocess.CompletedProcess[str], start: str, code: int = 2) -> str:
    assert proc.returncode == code, (proc.returncode, proc.stderr[:500])
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr, proc.stderr[:500]
    first = proc.stderr.splitlines()[0]
    assert first.startswith(f"mam: {start}") and len(first) < 400, proc.stderr[:500]
    return proc.stderr


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("dangling", [False, True], ids=["existing", "dangling"])
def test_a_registry_linked_into_home_is_neither_read_nor_written(ws: Workspace, command: str,
                                                                 dangling: bool) -> None:
    victim = _home(ws) / ".bash_profile"
    if not dangling:
        victim.write_text(ROWS)
    ws.registry.parent.mkdir()
    ws.registry.symlink_to(victim)
    ws.herdr.start("live")
    before = _tree(_home(ws))
    proc = ws.mam(*COMMANDS[command])
    stderr = _refused(proc, f"{ws.registry}: a symbolic link leading outside the workspace (to '{victim}')")
    assert "neither reads nor writes through it" in stderr and "MAM_REGISTRY=" in stderr  # what to do
    assert _tree(_home(ws)) == before  # no .bash_profile made or changed, no .bash_profile.lock, no temporary
    assert ws.registry.is_symlink()  # the link is left for the user to look at
    assert _started(ws) == []  # and nothing was started


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_dot_mam_linked_outside_the_workspace_is_refused(ws: Workspace, command: str) -> None:
    somewhere = _home(ws) / "somewhere"
    somewhere.mkdir()
    (somewhere / "agent-sessions.yaml").write_text(ROWS)
    (ws.root / ".mam").symlink_to(somewhere)
    ws.herdr.start("live")
    before = _tree(_home(ws))
    proc = ws.mam(*COMMANDS[command])
    stderr = _refused(proc, f"{ws.root / '.mam'}: a symbolic link leading outside the workspace (to '{somewhere}')")
    assert "remove the link" in stderr
    assert _tree(_home(ws)) == before  # no locks/, logs/, reports/ or registry write in the link's target
    assert _started(ws) == []


def test_a_dangling_dot_mam_link_outside_is_refused_before_anything_is_made(ws: Workspace) -> None:
    (ws.root / ".mam").symlink_to(_home(ws) / "not-yet")
    ws.herdr.start("live")
    proc = ws.mam(*COMMANDS["spawn"])
    _refused(proc, f"{ws.root / '.mam'}: a symbolic link leading outside the workspace")
    assert _tree(_home(ws)) == {}


@pytest.mark.parametrize("command", ["spawn", "reconcile-apply", "forget", "stop"])
@pytest.mark.parametrize("dangling", [False, True], ids=["existing", "dangling"])
def test_a_registry_lock_linked_into_home_is_never_opened(ws: Workspace, command: str, dangling: bool) -> None:
    victim = _home(ws) / ".profile"
    if not dangling:
        victim.write_text("precious\n")
    ws.write_registry(ROWS)
    registry_before = ws.registry.read_bytes()
    (ws.registry.parent / "agent-sessions.yaml.lock").symlink_to(victim)
    ws.herdr.start("live")
    before = _tree(_home(ws))
    proc = ws.mam(*COMMANDS[command])
    why = f"{ws.registry}.lock: cannot open the registry lock: it is a symbolic link"
    # stop records its intent in the row before it closes anything, and says it closed nothing when it cannot
    start = "ghost on herdr server gone was not stopped: mam could not record the stop" if command == "stop" else why
    stderr = _refused(proc, start, code=1)
    assert why in stderr and "remove it" in stderr
    assert _tree(_home(ws)) == before and ws.registry.read_bytes() == registry_before
    assert _started(ws) == []


def test_a_registry_link_that_stays_inside_the_workspace_is_written_through(ws: Workspace) -> None:
    shared = ws.root / "team"
    shared.mkdir()
    target = shared / "sessions.yaml"
    target.write_text(ROWS)
    ws.registry.parent.mkdir()
    ws.registry.symlink_to(Path("..") / "team" / "sessions.yaml")  # relative, as a clone would carry it
    doc = ws.mam_json("reconcile", "--apply")
    assert doc["applied"] is True
    assert ws.registry.is_symlink() and '"status": "terminated"' in target.read_text()
    assert (shared / "sessions.yaml.lock").exists()  # locked next to its target, inside the workspace


def test_an_inside_link_that_runs_through_an_outside_one_is_refused(ws: Workspace) -> None:
    """The whole way counts, not the first hop: `.mam/agent-sessions.yaml -> ../up/x`, `up -> $HOME`."""
    (ws.root / "up").symlink_to(_home(ws))
    ws.registry.parent.mkdir()
    ws.registry.symlink_to(Path("..") / "up" / ".bash_profile")
    ws.herdr.start("live")
    proc = ws.mam(*COMMANDS["spawn"])
    _refused(proc, f"{ws.registry}: a symbolic link leading outside the workspace")
    assert _tree(_home(ws)) == {}


def test_a_dangling_link_inside_the_workspace_creates_its_target(ws: Workspace) -> None:
    target = ws.root / "state" / "sessions.yaml"
    target.parent.mkdir()
    ws.registry.parent.mkdir()
    ws.registry.symlink_to(target)
    ws.herdr.start("live")
    proc = ws.mam(*COMMANDS["spawn"])
    assert proc.returncode == 0, proc.stderr
    assert ws.registry.is_symlink() and '"name": "a1"' in target.read_text()


def test_the_registry_the_user_names_is_used_wherever_it_is(ws: Workspace, tmp_path: Path) -> None:
    """$MAM_REGISTRY is the user's own choice: followed through a link, created when missing, locked beside its
    target; the workspace's own registry (here a link a clone planted) is not looked at."""
    shared = tmp_path / "shared"
    shared.mkdir()
    target = shared / "team.yaml"
    named = shared / "link.yaml"
    named.symlink_to(target)  # dangling: the first write creates it
    ws.registry.parent.mkdir()
    ws.registry.symlink_to(_home(ws) / ".bash_profile")
    env = {**ws.env, "MAM_REGISTRY": str(named)}
    ws.herdr.start("live")
    proc = ws.mam(*COMMANDS["spawn"], env=env)
    assert proc.returncode == 0, proc.stderr
    assert named.is_symlink() and '"name": "a1"' in target.read_text()
    assert (shared / "team.yaml.lock").exists()
    assert _tree(_home(ws)) == {}
    doc = ws.mam_json("status", env=env)
    assert [s["name"] for s in doc["sessions"]] == ["a1"]


@pytest.mark.parametrize("value", ["relative/registry.yaml", "~/registry.yaml"])
def test_a_relative_mam_registry_is_refused(ws: Workspace, value: str) -> None:
    proc = ws.mam("status", env={**ws.env, "MAM_REGISTRY": value})
    _refused(proc, f"$MAM_REGISTRY='{value}': expected an absolute path")


def test_stop_all_never_closes_the_agents_of_a_registry_linked_from_outside(ws: Workspace, tmux: Tmux,
                                                                            tmp_path: Path) -> None:
    """Reading is refused too: a link to the registry of another of the user's projects would otherwise hand
    `stop --all` (and `restore --all`, whose rows that project's mam signed) that project's agents."""
    other = tmp_path / "other"
    other.mkdir()
    server = tmux.name()
    env_other = {**ws.env, "MAM_WORKSPACE": str(other)}
    proc = ws.mam("spawn", "theirs", "--command", "sleep 600", "--server", server, env=env_other, cwd=other)
    assert proc.returncode == 0, proc.stderr
    theirs = other / ".mam" / "agent-sessions.yaml"
    before = theirs.read_bytes()
    ws.registry.parent.mkdir()
    ws.registry.symlink_to(theirs)
    for args in (("stop", "--all", "--yes"), ("restore", "--all"), ("reconcile", "--apply")):
        _refused(ws.mam(*args), f"{ws.registry}: a symbolic link leading outside the workspace")
    assert "theirs" in tmux.run(server, "list-sessions", "-F", "#{session_name}").stdout
    assert theirs.read_bytes() == before
